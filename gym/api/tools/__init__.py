"""Tool calling: tools rendered through the model's own chat template, tool calls parsed back out.

:mod:`gym.api.tools.parsers` holds the registry of output formats (``hermes`` for Qwen2.5/Qwen3's
``<tool_call>`` JSON blocks, ``llama3_json`` for Llama 3.x's bare JSON calls);
:mod:`gym.api.tools.stream` turns a stream of text into content and ``tool_calls`` deltas.
"""
