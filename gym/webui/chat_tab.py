"""The Chat tab: the tuned model, and side by side its base, answering the same prompt.

Models load through :mod:`gym.api` (``resolve_source`` + ``create_backend``), the code `gym serve`
runs, so a reply here is what the API would send. A training-free GRPO library (``experiences.json`` in
output_dir) can be put in the system prompt or left out, to see what it changes. Images attached to a
message reach a vision-language model as OpenAI ``image_url`` parts through the API's own image path
(:mod:`gym.webui.chat_images`); a text-only model refuses them with one sentence and the box keeps them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from gym.webui.workspace import Workspace

_backends: dict[tuple[str, str | None, float], Any] = {}
_lock = threading.Lock()


def _backend(target: str) -> Any:
    """A loaded backend for ``target`` (a folder or model id), reloaded when the folder was retrained."""
    from gym.engine.backend import create_backend
    from gym.engine.loading import resolve_source

    source = resolve_source(target)
    weights = Path(source.adapter or source.base)
    stamp = max((p.stat().st_mtime for p in weights.glob("*.safetensors")), default=0.0)
    key = (source.base, source.adapter, stamp)
    with _lock:
        if key not in _backends:
            for old in [k for k in _backends if k[:2] == key[:2]]:
                _backends.pop(old).close()
            _backends[key] = create_backend("transformers", source, device=None)
        return _backends[key]


def _text(content: Any) -> str:
    from gym.api.ui import _text as text_of

    if isinstance(content, dict):
        return str(content.get("text", ""))
    return text_of(content)


def library(output: Path) -> Path | None:
    path = output / "experiences.json"
    return path if path.is_file() else None


async def _reply(
    backend: Any, messages: list[dict[str, str]], params: Any, images: list[Any]
) -> AsyncIterator[str]:
    from dataclasses import replace

    prompt = await asyncio.to_thread(backend.encode_chat, messages)
    length = backend.check_images(prompt, images) if images else len(prompt)  # image tokens count too
    room = max(1, min(params.max_tokens, backend.context_length - length))
    extra = {"images": images} if images else {}
    text = ""
    async for chunk in backend.generate(prompt, replace(params, max_tokens=room), **extra):
        if chunk.error:
            raise RuntimeError(chunk.error)
        text += chunk.text
        yield text


def _conversation(history: list, text: str, uploads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The OpenAI messages of ``history`` plus the new user turn (image parts first, then the text)."""
    from gym.webui.chat_images import history_parts

    messages: list[dict[str, Any]] = [
        {
            "role": t["role"],
            "content": history_parts(t["content"]) if t["role"] == "user" else _text(t["content"]),
        }
        for t in history
    ]
    messages.append({"role": "user", "content": [*uploads, {"type": "text", "text": text}]})
    return messages


def _for_backend(backend: Any, conversation: list[dict[str, Any]]) -> tuple[list[dict[str, str]], list[Any]]:
    """Template messages and images: a VL backend takes the API's image path, a text-only one the text."""
    if getattr(backend, "accepts_images", False):
        from gym.webui.chat_images import template_messages

        return template_messages(conversation)
    return [{"role": m["role"], "content": _text(m["content"])} for m in conversation], []


async def chat(workspace: Workspace, message: Any, tuned: list, base: list, compare: bool, use_library: bool,
               temperature: float, top_p: float, max_tokens: int):  # fmt: skip
    """Stream (tuned history, base history, note, sent) for one user message.

    ``message`` is the chat box's value: text, or ``{"text", "files"}`` with uploaded images. ``sent`` is
    False while the message is refused or not yet taken: the box keeps what was typed and attached.
    """
    from gym.config import ConfigError
    from gym.engine.backend import SamplingParams
    from gym.webui.chat_images import UploadRefused, check_uploads, has_images, split_input, text_only_refusal

    tuned, base = list(tuned or []), list(base or [])
    text, files = split_input(message)
    if not text.strip() and not files:
        yield tuned, base, "type a message first", False
        return
    try:
        config = workspace.config()
    except ConfigError as error:
        yield tuned, base, f"✗ the saved gym.toml has problems:\n```\n{error}\n```", False
        return
    output = config.output_path
    if not ((output / "config.json").is_file() or (output / "adapter_config.json").is_file()):
        yield tuned, base, f"✗ no trained model in {output} yet: train it on the Train tab first", False
        return
    try:
        uploads = await asyncio.to_thread(check_uploads, files)
    except UploadRefused as refused:
        yield tuned, base, str(refused), False
        return
    params = SamplingParams(max_tokens=int(max_tokens), temperature=float(temperature), top_p=float(top_p))
    system = None
    note = ""
    if use_library:
        path = library(output)
        if path is None:
            note = f"no experience library in {output} (train.grpo.training_free writes experiences.json); "
        else:
            from gym.train.experiences import load_experiences, render_system_prompt

            system = render_system_prompt(load_experiences(path))
            note = f"with {path.name} in the system prompt; "
    targets = [("tuned", str(output), tuned, f"the tuned model in {output}")]
    if compare:
        targets.append(
            ("base", config.model.name_or_path, base, f"the base model {config.model.name_or_path}")
        )
    backends: dict[str, Any] = {}  # loaded before anything is added: a refusal must leave the chat as it was
    for name, target, history, who in targets:
        yield tuned, base, note + f"{name}: loading the model", False
        try:
            backends[name] = await asyncio.to_thread(_backend, target)  # never blocks the event loop
        except (OSError, ValueError, RuntimeError) as error:
            backends[name] = error
            continue
        conversation = _conversation(history, text, uploads)
        if has_images(conversation) and not getattr(backends[name], "accepts_images", False):
            yield tuned, base, text_only_refusal(who, attached=bool(files)), False
            return
    for name, _, history, _ in targets:
        conversation = _conversation(history, text, uploads)
        history.append(
            {"role": "user", "content": [*({"path": f} for f in files), *([text] if text else [])]}
        )
        history.append({"role": "assistant", "content": ""})
        try:
            backend = backends[name]
            if isinstance(backend, Exception):
                raise backend
            messages, images = _for_backend(backend, conversation)
            if system:
                from gym.train.experiences import with_experiences

                messages = with_experiences(messages, system)
            async for reply in _reply(backend, messages, params, images):
                history[-1] = {"role": "assistant", "content": reply}
                yield tuned, base, note + f"{name}: generating", True
        except (OSError, ValueError, RuntimeError) as error:
            history[-1] = {"role": "assistant", "content": f"(cannot answer: {error})"}
    yield tuned, base, note + "done", True


def build(workspace: Workspace) -> None:
    import gradio as gr

    with gr.Row():
        tuned = gr.Chatbot(label="tuned (output_dir)", elem_id="chat-tuned", height=360)
        base = gr.Chatbot(label="base (model.name_or_path)", elem_id="chat-base", height=360)
    with gr.Row():
        box = gr.MultimodalTextbox(
            placeholder="Message (attach images for a vision-language model)", show_label=False, scale=4,
            file_types=["image"], file_count="multiple", sources=["upload"], submit_btn=False,
            elem_id="chat-input",
        )  # fmt: skip
        send = gr.Button("Send", variant="primary", scale=1, elem_id="chat-send")
    with gr.Row():
        compare = gr.Checkbox(value=True, label="Side by side with the base model")
        use_library = gr.Checkbox(value=False, label="Use the training-free experience library")
        temperature = gr.Slider(0.0, 2.0, value=0.7, step=0.05, label="temperature")
        top_p = gr.Slider(0.05, 1.0, value=0.95, step=0.05, label="top_p")
        max_tokens = gr.Slider(1, 1024, value=64, step=1, label="max new tokens")
    note = gr.Markdown(elem_id="chat-note")
    clear = gr.Button("Clear", size="sm")

    sent = gr.State(False)

    async def respond(*args: Any):
        async for update in chat(workspace, *args):
            yield update

    def empty_when_sent(was_sent: bool) -> Any:
        """The box is emptied once the message was taken; refused, it keeps the text and the images."""
        return {"text": "", "files": []} if was_sent else gr.skip()

    inputs = [box, tuned, base, compare, use_library, temperature, top_p, max_tokens]
    outputs = [tuned, base, note, sent]
    send.click(respond, inputs, outputs, api_name="chat").then(
        empty_when_sent, sent, box, api_visibility="private"
    )
    box.submit(respond, inputs, outputs, api_visibility="private").then(
        empty_when_sent, sent, box, api_visibility="private"
    )
    clear.click(lambda: ([], [], ""), None, [tuned, base, note], api_visibility="private")
