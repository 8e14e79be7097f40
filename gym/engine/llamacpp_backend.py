"""`gym serve --backend llamacpp`: a GGUF file decoded by llama.cpp, batched continuously by Gym.

On a CPU, decoding a 0.5B+ model is bound by reading the weights every step; llama.cpp's 8-bit and
4-bit GGUF weights read 4-8x fewer bytes than fp32 torch. Only the matrix work goes to llama.cpp:
prompts are rendered and tokenized by the model's own Hugging Face tokenizer (exactly as the
transformers backend does, whatever pre-tokenizer the GGUF file names), token ids are fed to
llama.cpp, and sampling, logprobs, stop strings and detokenization run in Gym's
:class:`gym.engine.sequence.Sequence` on the logits llama.cpp returns. So answers, tool-call parsing and
streaming behave as with the transformers backend.

Continuous batching uses llama.cpp's low-level API: one context with ``n_seq_max`` KV sequences, and
per step ONE ``llama_decode`` whose batch holds the next token of every decoding sequence plus a chunk
of waiting prompts (so a long prompt never stalls the streams for more than one chunk). A sequence
is admitted when a KV sequence is free and its prompt plus ``max_tokens`` fits in the cache.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym.engine.backend import BackendUnavailable, TokenizerPrompts
from gym.engine.cputhreads import ThreadPolicy
from gym.engine.handoff import WorkerHandoff
from gym.engine.loading import TOKENIZER_FILES, ModelSource
from gym.engine.sequence import Sequence

DEFAULT_CONTEXT = 4096  # tokens per sequence when the model was trained on more
PREFILL_CHUNK = 256  # prompt tokens fed per step, beside the decoding streams
KV_BUDGET_TOKENS = 65536  # KV cells for all sequences together (~0.8 GB f16 for a 0.5B Qwen2)
# what serving a GGUF model from the Hub needs: the .gguf file, and the HF tokenizer with its configs
# (tokenizer.json/tokenizer_config.json, generation_config.json's EOS ids, the chat template,
# a slow tokenizer's vocab.json/merges.txt or tokenizer.model)
GGUF_REPO_FILES = ["*.gguf", "*.json", "*.jinja", "*.txt", "*.model", "*.tiktoken"]


def resolve_gguf_source(target: str, served_name: str | None = None) -> ModelSource:
    """A ``.gguf`` file, or a folder (or Hub repository) holding one GGUF file and the HF tokenizer."""
    path = Path(target).expanduser()
    if not path.exists() and not target.startswith((".", "/", "~", "builtin:")) and target.count("/") == 1:
        from huggingface_hub import snapshot_download

        # the repository also holds the safetensors weights (4x the GGUF's bytes in fp32): not fetched
        path = Path(snapshot_download(target, allow_patterns=GGUF_REPO_FILES))
        served_name = served_name or target  # not the snapshot folder's commit hash
    if path.is_file() and path.suffix == ".gguf":
        gguf = path.absolute()
    elif path.is_dir():
        found = sorted(path.glob("*.gguf"))
        if not found:
            raise ValueError(f"{path} holds no .gguf file; write one with `gym export --gguf`")
        if len(found) > 1:
            names = ", ".join(f.name for f in found)
            raise ValueError(f"{path} holds several .gguf files ({names}); pass the one to serve")
        gguf = found[0].absolute()  # not resolved: in the Hub cache the file links into blobs/
    else:
        raise ValueError(f"--backend llamacpp serves a .gguf file or a folder holding one, not {target}")
    if not any((gguf.parent / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(
            f"{gguf.parent} has no Hugging Face tokenizer (tokenizer.json) beside {gguf.name}; "
            "Gym tokenizes with it, as `gym export --gguf` saves it"
        )
    return ModelSource(model_id=served_name or gguf.parent.name, base=str(gguf))


def _llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError:
        raise BackendUnavailable(
            "--backend llamacpp needs llama-cpp-python, which is not installed in this environment "
            "(make gguf, or pip install 'zoo-gym[gguf]')"
        ) from None
    return llama_cpp


@dataclass(eq=False)
class _Slot:
    """One admitted sequence: its KV sequence id, prompt tokens still to feed, and cache length."""

    seq: Sequence
    seq_id: int
    feed: list[int]
    reserved: int
    pos: int = 0
    pending: int | None = None  # the last sampled token, not yet in the cache


class LlamaCppBackend(WorkerHandoff, TokenizerPrompts):
    """A :class:`gym.engine.backend.Backend` over one llama.cpp context shared by every request."""

    name = "llamacpp"
    supports_logprobs = True

    def __init__(self, gguf_path: str | Path, tokenizer: Any, model_id: str, eos_ids: set[int],
                 max_batch_size: int = 8, prefill_chunk: int = PREFILL_CHUNK) -> None:  # fmt: skip
        lib = self._lib = _llama_cpp()
        self.tokenizer, self.model_id, self.eos_ids = tokenizer, model_id, eos_ids
        self.max_batch_size, self.prefill_chunk = max(1, max_batch_size), max(1, prefill_chunk)
        lib.llama_backend_init()
        self._model = lib.llama_model_load_from_file(
            str(gguf_path).encode(), lib.llama_model_default_params()
        )
        if not self._model:
            raise ValueError(f"llama.cpp could not load {Path(gguf_path).name}")
        self.n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self._model))
        trained = lib.llama_model_n_ctx_train(self._model) or DEFAULT_CONTEXT
        tok_limit = getattr(tokenizer, "model_max_length", None) or 10**9
        self.context_length = min(trained, DEFAULT_CONTEXT, tok_limit)
        self.kv_cells = max(
            self.context_length, min(KV_BUDGET_TOKENS, self.context_length * self.max_batch_size)
        )
        self._threads = ThreadPolicy(set_threads=self._set_threads)
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_seq_max, params.kv_unified = self.kv_cells, self.max_batch_size, True
        params.n_batch = params.n_ubatch = self.prefill_chunk + self.max_batch_size
        params.n_threads = params.n_threads_batch = self._threads.threads
        params.no_perf = True
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED  # the same kernels whatever the batch
        self._ctx = lib.llama_init_from_model(self._model, params)
        if not self._ctx:
            lib.llama_model_free(self._model)
            raise ValueError(f"llama.cpp could not allocate a context of {self.kv_cells} tokens")
        self._memory = lib.llama_get_memory(self._ctx)
        self._batch = lib.llama_batch_init(params.n_batch, 0, 1)
        self._open_handoff()
        self._decode_seconds = self._busy_seconds = 0.0
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._run, name="gym-llamacpp", daemon=True)
        self._worker.start()

    @classmethod
    def from_source(cls, source: ModelSource, max_batch_size: int = 8, **_: Any) -> LlamaCppBackend:
        _llama_cpp()
        from transformers import AutoTokenizer

        folder = Path(source.base).parent
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        return cls(source.base, tokenizer, source.model_id, eos_token_ids(folder, tokenizer), max_batch_size)

    def _set_threads(self, threads: int) -> None:
        if getattr(self, "_ctx", None):
            self._lib.llama_set_n_threads(self._ctx, threads, threads)

    # -- the Backend protocol -------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        self._stats.queued = self._inbox.qsize()
        return self._stats.as_dict()

    def close(self) -> None:
        self._stop.set()
        self._inbox.put(None)
        self._worker.join(timeout=30)
        if self._worker.is_alive():
            return  # a decode still runs: freeing its context under it would crash the process
        lib = self._lib
        lib.llama_batch_free(self._batch)
        lib.llama_free(self._ctx)
        lib.llama_model_free(self._model)
        self._ctx = None

    # -- the worker -----------------------------------------------------------------------------
    def _run(self) -> None:
        import torch

        torch.set_num_threads(1)  # torch only samples here; the cores belong to llama.cpp
        waiting: deque[Sequence] = deque()
        slots: list[_Slot] = []
        free_ids = list(range(self.max_batch_size))
        self._threads.apply(force=True)
        while not self._stop.is_set():
            self._take(waiting, block=not slots and not waiting)
            if not slots and not waiting:
                continue
            self._stats.extra["llama_threads"] = self._threads.apply()
            self._admit(waiting, slots, free_ids)
            started = time.perf_counter()
            try:
                if slots:
                    self._step(slots)
            except Exception as error:  # noqa: BLE001 - a failed decode must not kill the server
                for slot in slots:
                    slot.seq.fail(f"generation failed: {type(error).__name__}")
            for slot in [s for s in slots if s.seq.done]:
                slots.remove(slot)
                self._lib.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
                free_ids.append(slot.seq_id)
            self._stats.active = len(slots)
            self._flush()
            self._busy_seconds += time.perf_counter() - started
            # where the worker's time goes (/health): llama.cpp's decode, and whole steps with Gym's Python
            self._stats.extra["decode_seconds"] = round(self._decode_seconds, 3)
            self._stats.extra["step_seconds"] = round(self._busy_seconds, 3)

    def _take(self, waiting: deque[Sequence], block: bool) -> None:
        try:
            item = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
            while item is not None:
                waiting.append(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            pass

    def _admit(self, waiting: deque[Sequence], slots: list[_Slot], free_ids: list[int]) -> None:
        """Give waiting sequences a KV sequence, first come first served, while the cache has room."""
        reserved = sum(slot.reserved for slot in slots)
        while waiting and free_ids:
            seq = waiting[0]
            if seq.cancelled:
                waiting.popleft()
                continue
            if not seq.prompt_ids or not all(0 <= t < self.n_vocab for t in seq.prompt_ids):
                waiting.popleft()
                seq.fail("the prompt is empty or holds token ids this model does not have")
                continue
            need = min(len(seq.prompt_ids) + seq.params.max_tokens, self.context_length)
            if reserved + need > self.kv_cells and slots:
                return  # waits until running sequences free their cells
            waiting.popleft()
            slots.append(_Slot(seq, free_ids.pop(0), list(seq.prompt_ids), need))
            reserved += need

    def _step(self, slots: list[_Slot]) -> None:
        """One llama_decode: every decoding stream's next token, then prompt chunks up to the budget."""
        lib, batch = self._lib, self._batch
        rows: list[tuple[_Slot, int]] = []  # slots whose logits come out of this step, and their row
        n = 0

        def add(slot: _Slot, token: int, logits: bool) -> None:
            nonlocal n
            batch.token[n], batch.pos[n], batch.n_seq_id[n] = token, slot.pos, 1
            batch.seq_id[n][0], batch.logits[n] = slot.seq_id, logits
            if logits:
                rows.append((slot, n))
            slot.pos += 1
            n += 1

        for slot in slots:
            if slot.pending is not None and not slot.seq.done:
                add(slot, slot.pending, True)
                slot.pending = None
        budget = self.prefill_chunk
        for slot in slots:
            if slot.feed and budget > 0 and not slot.seq.done:
                take, slot.feed = slot.feed[:budget], slot.feed[budget:]
                for i, token in enumerate(take):
                    add(slot, token, not slot.feed and i == len(take) - 1)
                budget -= len(take)
        if n == 0:
            return
        batch.n_tokens = n
        started = time.perf_counter()
        code = lib.llama_decode(self._ctx, batch)
        self._decode_seconds += time.perf_counter() - started
        if code != 0:
            raise RuntimeError(f"llama_decode returned {code}")
        self._stats.steps += 1
        self._stats.max_batch_size = max(self._stats.max_batch_size, len(rows))
        self._sample(rows)

    def _sample(self, rows: list[tuple[_Slot, int]]) -> None:
        import numpy as np
        import torch

        for slot, row in rows:
            seq = slot.seq
            try:
                pointer = self._lib.llama_get_logits_ith(self._ctx, row)
                values = np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))  # llama.cpp's row, no copy
                logits = torch.from_numpy(values)
                # greedy: numpy's argmax (the first maximum, as torch's) reads 151,936 logits ~20x faster
                # than torch's on one thread, which at 8 rows a step was several % of the step
                token = int(values.argmax()) if seq.params.greedy else seq.sample(logits)
                seq.push(token, seq.token_logprob(token, logits))
                self._stats.generated_tokens += 1
            except Exception as error:  # noqa: BLE001 - isolate the sequence, keep the batch
                seq.fail(f"generation failed for this request: {type(error).__name__}: {error}")
                continue
            if not seq.done:
                if slot.pos + 1 >= self.context_length:
                    seq.fail("the sequence reached this server's context length")
                slot.pending = token


def eos_token_ids(folder: Path, tokenizer: Any) -> set[int]:
    """The tokens that end an answer: generation_config.json's (as transformers reads it) and the tokenizer's."""
    ids: set[int] = set()
    config = folder / "generation_config.json"
    if config.is_file():
        eos = json.loads(config.read_text(encoding="utf-8")).get("eos_token_id")
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids
