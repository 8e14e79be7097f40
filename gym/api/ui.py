"""The Space's app: the OpenAI routes of :mod:`gym.api.app` plus a Gradio chat mounted at ``/``.

The chat calls the same backend in-process (no HTTP hop, no second implementation), so whatever the
API streams is what the page shows. ``space_template/app.py`` only calls :func:`create_space_app`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gym.engine.backend import SamplingParams

TEMPERATURE, MAX_TOKENS = 0.7, 256  # the chat's defaults; its Settings accordion changes them per message


def chat_function(backend: Any, max_tokens: int = MAX_TOKENS, system_prompt: str | None = None):
    """A Gradio ChatInterface callback streaming the model's reply through ``backend``.

    ``system_prompt`` (a training-free experience library) is merged in exactly as the API does it.
    ``temperature`` and ``max_new_tokens`` come from the chat's settings, so the page can give the answer
    the API gives to the same messages at temperature 0.
    """

    async def respond(
        message: str | dict[str, Any],
        history: list[dict[str, Any]],
        temperature: float = TEMPERATURE,
        max_new_tokens: int = max_tokens,
    ):
        messages = [{"role": turn["role"], "content": _text(turn["content"])} for turn in history]
        images: list[Any] = []
        if isinstance(message, dict):  # the multimodal chat of a VL model: {"text", "files"}
            try:
                images = _uploaded_images(message.get("files") or [])
            except ValueError as error:  # the sentence the page shows, not a traceback
                import gradio as gr

                raise gr.Error(str(error)) from None
            message = "<image>" * len(images) + str(message.get("text") or "")
        messages.append({"role": "user", "content": message})
        if system_prompt:
            from gym.train.experiences import with_experiences

            messages = with_experiences(messages, system_prompt)
        import asyncio

        prompt = await asyncio.to_thread(backend.encode_chat, messages)  # keep the event loop free
        length = backend.check_images(prompt, images) if images else len(prompt)
        room = max(1, min(int(max_new_tokens), backend.context_length - length))
        reply = ""
        extra = {"images": images} if images else {}
        params = SamplingParams(max_tokens=room, temperature=float(temperature), top_p=0.95)
        async for chunk in backend.generate(prompt, params, **extra):
            reply += chunk.text
            yield reply

    return respond


def _uploaded_images(files: list[Any]) -> list[Any]:
    """Images uploaded in the multimodal chat (file paths or Gradio file dicts), as RGB PIL images.

    ValueError names the first upload that is not a readable image."""
    from gym.api.images import open_upload
    from gym.engine.vision import ImageRequestError

    images = []
    for path in [f.get("path") if isinstance(f, dict) else f for f in files]:
        if path:
            try:
                images.append(open_upload(str(path)))
            except ImageRequestError as error:
                raise ValueError(f"{error}: attach another") from None
    return images


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


def mount_chat(
    app: Any, backend: Any, title: str, system_prompt: str | None = None, api_key: str | None = None
) -> Any:
    """Mount the chat at ``/``. With ``api_key`` the chat follows the API's rule: it asks for the same
    key (any user name, the key as password) before it answers, so a keyed Space is not open by its page."""
    import hmac

    import gradio as gr

    settings = [
        gr.Slider(0.0, 2.0, value=TEMPERATURE, step=0.05, label="Temperature", elem_id="chat-temperature"),
        gr.Slider(1, 2048, value=MAX_TOKENS, step=1, label="Max new tokens", elem_id="chat-max-tokens"),
    ]
    demo = gr.ChatInterface(
        chat_function(backend, system_prompt=system_prompt),
        title=title,
        api_name="chat",
        multimodal=bool(getattr(backend, "accepts_images", False)),  # image upload for VL models
        additional_inputs=settings,
        additional_inputs_accordion="Settings",
    )
    auth = None
    if api_key:

        def auth(_user: str, password: str) -> bool:
            return hmac.compare_digest(password.encode(), api_key.encode())

    return gr.mount_gradio_app(
        app, demo, path="/", auth=auth, auth_message="This Space's API key (any user name) opens the chat."
    )


def create_space_app(settings_file: str | Path) -> Any:
    """Build the Space's FastAPI app from the ``gym_space.json`` written when the Space was rendered.

    ``GYM_MODEL`` overrides the model (tests point it at a local folder); the API key is read from the
    environment variable the settings name (a Space secret), never from the file.
    """
    from gym.api.factory import build_serving_app

    settings = json.loads(Path(settings_file).read_text(encoding="utf-8"))
    if settings.get("zerogpu"):  # hardware zero-a10g: generation inside @spaces.GPU (gym/api/zerogpu.py)
        from gym.api.zerogpu import build_zerogpu_app as build_serving_app
    model = os.environ.get("GYM_MODEL") or settings["model"]
    carried = Path(settings_file).parent / model  # a private model's weights carried in the Space (model/)
    if not os.environ.get("GYM_MODEL") and "/" not in model and carried.is_dir():
        model = str(carried)
    revision = settings.get("revision")  # the model commit gym deploy pushed (gym rollback moves it)
    pinned = revision and "/" in model and settings.get("backend") != "llamacpp"  # a GGUF is read from main
    if pinned and not os.environ.get("GYM_MODEL"):
        from huggingface_hub import snapshot_download

        model = snapshot_download(model, revision=revision)
    api_key = os.environ.get(settings.get("api_key_env", "GYM_API_KEY")) or None
    system_prompt = None
    if settings.get("experiences"):  # a training-free GRPO library carried by the Space
        from gym.train.experiences import load_experiences, render_system_prompt

        system_prompt = render_system_prompt(
            load_experiences(Path(settings_file).with_name(settings["experiences"]))
        )
    app = build_serving_app(
        model, settings.get("backend", "transformers"), api_key, settings.get("served_model_name"),
        system_prompt=system_prompt,
    )  # fmt: skip
    served = {"model": settings["model"], "revision": revision}  # which model commit this Space serves
    app.add_api_route("/gym/served", lambda: served, methods=["GET"])
    title = settings.get("title", model) + (f" · {settings['model']}@{revision[:12]}" if revision else "")
    app = mount_chat(app, app.state.backend, title, system_prompt, api_key)
    if settings.get("zerogpu"):
        from gym.api.zerogpu import announce_to_zerogpu

        announce_to_zerogpu()
    return app
