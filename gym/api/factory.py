"""The serving app from what the user named: `gym serve`, the Space and in-process clients build it here.

One factory means the command line, a generated Space and a training-free run's local policy serve a
model through the same resolution (folder, ``builtin:NAME``, gym.toml, Hub id, GGUF file), the same
engine and the same routes.
"""

from __future__ import annotations

from typing import Any

APP_OPTIONS = ("system_prompt", "tool_parser", "max_request_bytes", "fetch_remote_images", "image_fetch")


def build_serving_app(model: str, backend: str = "transformers", api_key: str | None = None,
                      served_model_name: str | None = None, **options: Any) -> Any:  # fmt: skip
    """Resolve, load and wrap ``model`` in the OpenAI app; ``options`` go to the app (:data:`APP_OPTIONS`)
    or to the engine (``max_batch_size``, ``device``, ...)."""
    from gym.api.app import create_app
    from gym.engine.backend import create_backend
    from gym.engine.loading import resolve_source

    app_options = {key: options.pop(key) for key in APP_OPTIONS if key in options}
    if backend == "llamacpp":  # a GGUF file, not a transformers folder
        from gym.engine.llamacpp_backend import resolve_gguf_source

        source = resolve_gguf_source(model, served_model_name)
    else:
        source = resolve_source(model, served_model_name)
    engine = create_backend(backend, source, **{k: v for k, v in options.items() if v is not None})
    return create_app(engine, api_key=api_key, **app_options)
