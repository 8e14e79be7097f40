"""`gym webui`: the whole workflow in a browser (Gradio), reading and writing the same gym.toml as the CLI.

One module per tab (config, data, train, evaluate, chat, deploy); each calls the functions the commands
call. Gradio is imported only by :mod:`gym.webui.app`, which only `gym webui` imports.
"""
