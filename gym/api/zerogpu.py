"""The Space's engine on ZeroGPU (hardware ``zero-a10g``): generation inside an ``@spaces.GPU`` function.

A ZeroGPU Space has no GPU of its own. The ``spaces`` package lends one to each call of a function
decorated with ``@spaces.GPU`` (for at most ``duration`` seconds), runs that call in a process forked from
the app, and passes its arguments and results across by pickling. Weights are moved with
``.to("cuda")`` at start-up, in the main process, where ``spaces`` records them and packs them when the
Gradio app launches; a Space that defines no decorated function never reports to ZeroGPU and fails with
"No @spaces.GPU function detected". Off ZeroGPU, ``spaces.GPU`` returns the function unchanged, so the
same app runs on CPU (where the suite runs it) or on a plain GPU.

So the continuous-batching engine of `gym serve` (a worker thread holding the model) cannot be used
here: nothing but the decorated call may touch CUDA, and a forked process inherits no thread.
:func:`generate_on_gpu` instead runs the engine's own pieces for one request inside the call: the same
:class:`gym.engine.kvbatch.RunningBatch` prefill and decode steps and the same
:class:`gym.engine.sequence.Sequence` sampling, stop and streaming rules, so at temperature 0 it gives
`gym serve`'s answer. The model is a module global (inherited by the fork, never pickled); the prompt
ids, :class:`SamplingParams` and the :class:`Chunk` results are small and picklable. Both the OpenAI
routes and the Gradio chat reach the model through :class:`ZeroGPUBackend.generate`, so both run inside
the decorated function.

``spaces`` must be imported before torch initialises CUDA (it patches torch), so this module imports it
first and is imported only by a ZeroGPU Space (``gym_space.json`` ``zerogpu``). Vision models are not
served this way (their engine needs the processor's image path): the Space stops with one sentence.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import spaces  # first: on ZeroGPU it patches torch's CUDA, which must not be initialised before

from gym.engine.backend import Chunk, SamplingParams, TokenizerPrompts

DURATION_S = 60  # the GPU lease of one generation: ZeroGPU's default; a longer one queues behind others
ENGINE: dict[
    str, Any
] = {}  # model, tokenizer, eos_ids, pad_id: set at start-up, inherited by the GPU process


@spaces.GPU(duration=DURATION_S)
def generate_on_gpu(prompt_ids: list[int], params: SamplingParams, n: int = 1) -> Iterator[Chunk]:
    """Generate ``n`` choices of one prompt on the lent GPU (or where the model is, off ZeroGPU)."""
    import torch

    from gym.engine.kvbatch import RunningBatch
    from gym.engine.sequence import Sequence

    out: list[Chunk] = []
    seqs = [
        Sequence(index=i, prompt_ids=list(prompt_ids), params=params,
                 seed=None if params.seed is None else params.seed + i, emit=out.append,
                 tokenizer=ENGINE["tokenizer"], eos_ids=ENGINE["eos_ids"])
        for i in range(n)
    ]  # fmt: skip
    batch = RunningBatch(ENGINE["model"], ENGINE["pad_id"])
    try:
        # inference mode is per thread, and each `next` may run on another one: entered per step, not
        # around the yields
        with torch.inference_mode():
            batch.admit(seqs)
        while True:
            yield from out
            out.clear()
            if not batch.seqs:
                return
            with torch.inference_mode():
                batch.step()
                batch.retire()
    except Exception as error:  # noqa: BLE001 - the request fails in one chunk, the Space goes on
        out.clear()
        for seq in seqs:
            seq.fail(f"generation failed: {type(error).__name__}")
        yield from out


def load_engine(source: Any) -> None:
    """Load the model on CPU, then move it to CUDA when there is one (on ZeroGPU: the emulated device that
    ``spaces`` packs at launch), as ZeroGPU expects; the CPU path keeps `gym serve`'s attention kernel."""
    import torch

    from gym.engine.loading import load_model_and_tokenizer
    from gym.model.folders import is_vision_folder

    if is_vision_folder(source.base):
        raise ValueError(
            f"{source.model_id} is a vision model, which this ZeroGPU Space does not serve: deploy it on "
            "GPU hardware (space.hardware, e.g. t4-small) or cpu-basic"
        )
    model, tokenizer = load_model_and_tokenizer(source, device="cpu")
    if torch.cuda.is_available():
        model.to("cuda")
    else:
        from gym.engine.attention import use_gqa_sdpa

        use_gqa_sdpa(model)
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        eos_ids.add(tokenizer.eos_token_id)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids or {0})
    ENGINE.update(model=model, tokenizer=tokenizer, eos_ids=eos_ids, pad_id=pad_id)


class ZeroGPUBackend(TokenizerPrompts):
    """A :class:`gym.engine.backend.Backend` whose every generation is one :func:`generate_on_gpu` call."""

    name = "transformers"
    supports_logprobs = True

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.tokenizer = ENGINE["tokenizer"]
        config = ENGINE["model"].config
        limit = getattr(config, "max_position_embeddings", None) or 2048
        tok_limit = getattr(self.tokenizer, "model_max_length", None)
        self.context_length = min(limit, tok_limit) if tok_limit and tok_limit < 10**8 else limit
        self.requests = 0

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, n: int = 1
    ) -> AsyncIterator[Chunk]:
        """Stream the decorated call's chunks; each ``next`` runs off the event loop."""
        self.requests += 1
        stream = generate_on_gpu(list(prompt_ids), params, n)
        try:
            while (chunk := await asyncio.to_thread(next, stream, None)) is not None:
                yield chunk
        finally:
            with contextlib.suppress(ValueError):  # still running in its thread: it ends by itself
                stream.close()

    def stats(self) -> dict[str, Any]:
        return {"requests": self.requests, "zerogpu": True, "gpu_duration_s": DURATION_S}

    def close(self) -> None:
        pass


def build_zerogpu_app(model: str, backend: str = "transformers", api_key: str | None = None,
                      served_model_name: str | None = None, **app_options: Any) -> Any:  # fmt: skip
    """The OpenAI app of :func:`gym.api.factory.build_serving_app`, over :class:`ZeroGPUBackend`."""
    from gym.api.app import create_app
    from gym.engine.loading import resolve_source

    if backend != "transformers":
        raise ValueError(f"space.backend {backend!r} cannot run on ZeroGPU; use 'transformers'")
    source = resolve_source(model, served_model_name)
    load_engine(source)
    return create_app(ZeroGPUBackend(source.model_id), api_key=api_key, **app_options)


def announce_to_zerogpu() -> None:
    """On ZeroGPU, run the start-up ``spaces`` hooks onto ``gradio.Blocks.launch`` (pack the weights moved to
    CUDA, report the decorated functions). The Space mounts its chat on its own FastAPI app and never calls
    ``launch``, so a one-off Blocks is launched on a loopback port and closed. Off ZeroGPU: nothing."""
    from spaces.config import Config

    if not Config.zero_gpu:
        return
    import socket

    import gradio as gr

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with gr.Blocks() as startup:
        gr.Markdown("ZeroGPU start-up")
    startup.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                   show_error=False, ssr_mode=False)  # fmt: skip
    startup.close()
