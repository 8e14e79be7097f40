"""Is the GGUF file the same model? Load it with llama.cpp, answer a prompt, and measure its quality.

Quality is measured against the full-precision model on the same token ids (the HF tokenizer makes
them; Gym's llama.cpp backend serves the same way):

- token agreement: the full-precision model answers a fixed prompt set greedily; the GGUF model reads
  the same prompt and answer and must pick the same next token at every answer position. Because the
  prefix is shared, its greedy answer leaves the full-precision one exactly at the first disagreement,
  which is the reported first divergence.
- perplexity of both models on held-out rows.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PROMPTS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Reverse the letters: g y m",
    "Explain what a language model is in one sentence.",
    "What is 12 + 30?",
    "Summarise: the quick brown fox jumps over the lazy dog.",
    "Give three tips for writing clear code.",
    "Translate 'good morning' into French.",
)
ANSWER_TOKENS = 32
MAX_ROW_TOKENS = 256


class GGUFRuntimeMissing(RuntimeError):
    """llama-cpp-python is not installed, so a GGUF file cannot be loaded here."""

    def __init__(self) -> None:
        super().__init__("llama-cpp-python is not installed (run `make gguf` or pip install 'zoo-gym[gguf]')")


@dataclass(frozen=True)
class QualityReport:
    """How closely a GGUF form follows the full-precision model; what deploy prints and the card shows."""

    format: str  # e.g. "gguf-q8_0"
    agreement: float  # share of answer tokens where both models pick the same greedy token
    answer_tokens: int
    identical_answers: int
    prompts: int
    first_divergence: int | None  # earliest answer token where a GGUF answer differs; None: never
    perplexity_full: float
    perplexity_gguf: float
    rows: int
    rows_source: str  # "held-out rows of the run", "training rows of the run", "Gym's built-in text"

    def lines(self) -> list[str]:
        divergence = (
            "never" if self.first_divergence is None else f"at answer token {self.first_divergence + 1}"
        )
        return [
            f"quality  {self.format} vs full precision: token agreement {self.agreement:.1%} "
            f"({self.answer_tokens} greedy answer tokens, {self.identical_answers}/{self.prompts} answers "
            f"identical, first divergence {divergence})",
            f"quality  perplexity {self.perplexity_full:.3f} (full precision) vs {self.perplexity_gguf:.3f} "
            f"({self.format}) on {self.rows} {self.rows_source}",
        ]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def llama_cpp_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def open_gguf(path: Path, n_ctx: int = 512) -> Any:
    """The GGUF file loaded by llama.cpp with every position's logits kept; a clear error if it fails."""
    if not llama_cpp_available():
        raise GGUFRuntimeMissing()
    import llama_cpp

    from gym.export.gguf import GGUFError

    try:
        return llama_cpp.Llama(
            model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, logits_all=True, verbose=False
        )
    except ValueError as error:
        raise GGUFError(f"llama.cpp cannot load {path.name}: {error}") from None


def gguf_logits(llm: Any, ids: list[int]) -> Any:
    """Logits of the GGUF model at every position of ``ids`` (a fresh sequence each call)."""
    import numpy as np

    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def greedy_gguf(llm: Any, ids: list[int], max_new_tokens: int, eos: set[int]) -> list[int]:
    """The GGUF model's greedy answer to ``ids`` (argmax, no sampler settings involved)."""
    import numpy as np

    llm.reset()
    llm.eval(ids)
    answer: list[int] = []
    for _ in range(max_new_tokens):
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        if token in eos:
            break
        answer.append(token)
        llm.eval([token])
    return answer


def prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    if getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=True,
                                                 add_generation_prompt=True, return_dict=True)  # fmt: skip
        return list(rendered["input_ids"])
    return list(tokenizer(prompt)["input_ids"])


def eos_ids(tokenizer: Any, model: Any = None) -> set[int]:
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(configured if isinstance(configured, list) else [configured] if configured is not None else [])
    return ids


def check_answer(gguf_path: Path, model_dir: Path, prompt: str = PROMPTS[0], max_new_tokens: int = 16) -> str:
    """Load the GGUF file with llama.cpp and answer ``prompt`` greedily: proof the file serves."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = prompt_ids(tokenizer, prompt)
    llm = open_gguf(gguf_path, n_ctx=len(ids) + max_new_tokens + 8)
    try:
        answer = greedy_gguf(llm, ids, max_new_tokens, eos_ids(tokenizer))
    finally:
        llm.close()
    return tokenizer.decode(answer, skip_special_tokens=True)


def _nll(logits: Any, ids: list[int]) -> tuple[float, int]:
    """Summed negative log-likelihood of ids[1:] under ``logits`` (positions 0..n-2), and the count."""
    import numpy as np

    shifted = logits[:-1].astype(np.float64)
    peak = shifted.max(axis=-1, keepdims=True)
    log_norm = peak[:, 0] + np.log(np.exp(shifted - peak).sum(axis=-1))
    targets = np.asarray(ids[1:])
    return float((log_norm - shifted[np.arange(len(targets)), targets]).sum()), len(targets)


def measure_quality(model_dir: Path, gguf_path: Path, fmt: str, rows: list[list[int]], rows_source: str,
                    answer_tokens: int = ANSWER_TOKENS, prompts: tuple[str, ...] = PROMPTS) -> QualityReport:  # fmt: skip
    """Compare the GGUF model in ``gguf_path`` with the full-precision model in ``model_dir``."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    eos = eos_ids(tokenizer, model)
    rows = [row[:MAX_ROW_TOKENS] for row in rows if len(row) >= 2]
    prompt_rows = [prompt_ids(tokenizer, prompt) for prompt in prompts]
    longest = max([len(p) + answer_tokens for p in prompt_rows] + [len(r) for r in rows])
    llm = open_gguf(gguf_path, n_ctx=longest + 8)
    try:
        agree = total = identical = 0
        first: int | None = None
        for ids in prompt_rows:
            with torch.no_grad():
                out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                     max_new_tokens=answer_tokens, do_sample=False, eos_token_id=list(eos) or None,
                                     pad_token_id=tokenizer.pad_token_id)  # fmt: skip
            answer = out[0, len(ids) :].tolist()
            ends = [i for i, token in enumerate(answer) if token in eos]
            answer = answer[: ends[0] + 1] if ends else answer  # the end of the answer is compared too
            picks = gguf_logits(llm, ids + answer)[len(ids) - 1 : -1].argmax(axis=-1)
            matches = picks == np.asarray(answer)
            agree, total = agree + int(matches.sum()), total + len(answer)
            identical += bool(matches.all())
            if not matches.all():
                where = int(np.argmin(matches))
                first = where if first is None else min(first, where)
        nll_full = nll_gguf = 0.0
        count = 0
        for row in rows:
            with torch.no_grad():
                full = model(torch.tensor([row])).logits[0].float().numpy()
            a, n = _nll(full, row)
            b, _ = _nll(gguf_logits(llm, row), row)
            nll_full, nll_gguf, count = nll_full + a, nll_gguf + b, count + n
    finally:
        llm.close()
    return QualityReport(
        format=fmt, agreement=agree / total if total else 1.0, answer_tokens=total, identical_answers=identical,
        prompts=len(prompt_rows), first_divergence=first,
        perplexity_full=math.exp(nll_full / count) if count else float("nan"),
        perplexity_gguf=math.exp(nll_gguf / count) if count else float("nan"),
        rows=len(rows), rows_source=rows_source,
    )  # fmt: skip


def builtin_rows(tokenizer: Any, limit: int = 8) -> list[list[int]]:
    """Rows of Gym's own fixed text, for a model deployed without a gym.toml to take held-out rows from."""
    from gym.model.builtin import corpus

    text = corpus()
    picked = text[4 : 4 + 2 * limit : 2]  # chat turns after the prose block, one of each kind
    return [list(tokenizer(line)["input_ids"]) for line in picked]
