"""The Chat tab: the tuned model, and side by side its base, answering the same prompt.

Models load through :mod:`gym.api` (``resolve_source`` + ``create_backend``), the code `gym serve`
runs, so a reply here is what the API would send. A training-free GRPO library (``experiences.json`` in
output_dir) can be put in the system prompt or left out, to see what it changes.
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
    from gym.api.backend import create_backend
    from gym.api.loading import resolve_source

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


async def _reply(backend: Any, messages: list[dict[str, str]], params: Any) -> AsyncIterator[str]:
    prompt = backend.encode_chat(messages)
    room = max(1, min(params.max_tokens, backend.context_length - len(prompt)))
    from dataclasses import replace

    text = ""
    async for chunk in backend.generate(prompt, replace(params, max_tokens=room)):
        if chunk.error:
            raise RuntimeError(chunk.error)
        text += chunk.text
        yield text


async def chat(workspace: Workspace, message: str, tuned: list, base: list, compare: bool, use_library: bool,
               temperature: float, top_p: float, max_tokens: int):  # fmt: skip
    """Stream (tuned history, base history, note) for one user message."""
    from gym.api.backend import SamplingParams
    from gym.config import ConfigError

    tuned, base = list(tuned or []), list(base or [])
    if not message.strip():
        yield tuned, base, "type a message first"
        return
    try:
        config = workspace.config()
    except ConfigError as error:
        yield tuned, base, f"✗ the saved gym.toml has problems:\n```\n{error}\n```"
        return
    output = config.output_path
    if not ((output / "config.json").is_file() or (output / "adapter_config.json").is_file()):
        yield tuned, base, f"✗ no trained model in {output} yet: train it on the Train tab first"
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
    targets = [("tuned", str(output), tuned)]
    if compare:
        targets.append(("base", config.model.name_or_path, base))
    for name, target, history in targets:
        messages = [{"role": t["role"], "content": _text(t["content"])} for t in history]
        messages.append({"role": "user", "content": message})
        if system:
            from gym.train.experiences import with_experiences

            messages = with_experiences(messages, system)
        history.append({"role": "user", "content": message})
        history.append({"role": "assistant", "content": ""})
        try:
            yield tuned, base, note + f"{name}: loading the model"
            backend = await asyncio.to_thread(_backend, target)  # loading never blocks the event loop
            async for text in _reply(backend, messages, params):
                history[-1] = {"role": "assistant", "content": text}
                yield tuned, base, note + f"{name}: generating"
        except (OSError, ValueError, RuntimeError) as error:
            history[-1] = {"role": "assistant", "content": f"(cannot answer: {error})"}
    yield tuned, base, note + "done"


def build(workspace: Workspace) -> None:
    import gradio as gr

    with gr.Row():
        tuned = gr.Chatbot(label="tuned (output_dir)", elem_id="chat-tuned", height=360)
        base = gr.Chatbot(label="base (model.name_or_path)", elem_id="chat-base", height=360)
    with gr.Row():
        box = gr.Textbox(placeholder="Message", show_label=False, scale=4, elem_id="chat-input")
        send = gr.Button("Send", variant="primary", scale=1, elem_id="chat-send")
    with gr.Row():
        compare = gr.Checkbox(value=True, label="Side by side with the base model")
        use_library = gr.Checkbox(value=False, label="Use the training-free experience library")
        temperature = gr.Slider(0.0, 2.0, value=0.7, step=0.05, label="temperature")
        top_p = gr.Slider(0.05, 1.0, value=0.95, step=0.05, label="top_p")
        max_tokens = gr.Slider(1, 1024, value=64, step=1, label="max new tokens")
    note = gr.Markdown(elem_id="chat-note")
    clear = gr.Button("Clear", size="sm")

    async def respond(*args: Any):
        async for update in chat(workspace, *args):
            yield update

    inputs = [box, tuned, base, compare, use_library, temperature, top_p, max_tokens]
    send.click(respond, inputs, [tuned, base, note], api_name="chat").then(
        lambda: "", None, box, api_visibility="private"
    )
    box.submit(respond, inputs, [tuned, base, note], api_visibility="private").then(
        lambda: "", None, box, api_visibility="private"
    )
    clear.click(lambda: ([], [], ""), None, [tuned, base, note], api_visibility="private")
