"""Exactly what a run pushes to its model repository, and how a failed push is told to the user.

The output folder of a run holds much more than the model: ``checkpoints/`` (every checkpoint's
weights, optimizer and RNG states), the launch state, the rendered Space, logs. The Hub gets an
*allow-list* instead: the weights (adapter or full), the tokenizer with its chat template, the card,
``.eval_results/``, ``eval_results.json``, ``train_results.json``, ``gate_results.json`` and ``judge_answers.jsonl`` (the
answers a later run's judge compares with) — and, for a training-free GRPO
run, the experience library and the reference to its frozen base.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ADAPTER = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
WEIGHTS = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model-*-of-*.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model-*-of-*.bin",
    "pytorch_model.bin.index.json",
)
TOKENIZER = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
)
CARD = ("README.md", "eval_results.json", "train_results.json", "gate_results.json", "judge_answers.jsonl")
EVAL_DIR = ".eval_results"
TRAINING_FREE = ("experiences.json", "training_free.json")


def is_training_free(folder: Path) -> bool:
    """A training-free GRPO run's folder: an experience library, no weights of its own."""
    return (folder / "training_free.json").is_file()


def model_files(folder: Path, *, extra_from: Path | None = None) -> dict[str, Path]:
    """``{path in repo: file}`` of what belongs on the Hub, from ``folder`` (and card files from
    ``extra_from``, the run folder, when the weights come from a merged copy elsewhere)."""
    patterns = ADAPTER + WEIGHTS + TOKENIZER + CARD + TRAINING_FREE
    found: dict[str, Path] = {}
    for source in (extra_from, folder):  # the weights' own folder wins over the run folder
        if source is None or not source.is_dir():
            continue
        for path in sorted(source.iterdir()):
            if path.is_file() and any(fnmatch.fnmatchcase(path.name, pattern) for pattern in patterns):
                if source is extra_from and path.name not in CARD + TRAINING_FREE:
                    continue
                found[path.name] = path
        results = source / EVAL_DIR
        if results.is_dir():
            for path in sorted(results.glob("*.yaml")):
                found[f"{EVAL_DIR}/{path.name}"] = path
    return found


def has_weights(files: dict[str, Path]) -> bool:
    return any(name in files for name in ("adapter_config.json", "config.json"))


# hf_xet (the Xet transfer path, huggingface_hub's default) raises builtins such as ConnectionError whose
# message alone keeps the HTTP status and the URL: "... HTTP status client error (403 Forbidden), domain: URL".
XET_STATUS = re.compile(r"HTTP status (?:client|server) error \((\d{3})[^)]*\)(?:, domain: (\S+))?")


def transfer_status(error: BaseException) -> tuple[int | None, bool]:
    """The HTTP status behind a failed upload of file contents, and whether the Hub's API (True) or its
    file storage (False) answered it. Both transfer paths are read: LFS, where huggingface_hub wraps the
    storage's answer (``__cause__.response``), and Xet, where hf_xet's message carries it, as do
    huggingface_hub's own Xet token errors. ``(None, False)`` when no status survived."""
    for cause in (error.__cause__, error.__context__):
        response = getattr(cause, "response", None)
        status = getattr(response, "status_code", None)
        if status is not None:
            return status, _is_hub_api(str(getattr(response, "url", "")))
    found = XET_STATUS.search(str(error))
    if found is not None:
        return int(found[1]), _is_hub_api(found[2] or "")
    if isinstance(error, PermissionError) and type(error).__name__.startswith("Xet"):
        return 401, False  # hf_xet's XetAuthenticationError: the storage refused its credentials
    return None, False


def _is_hub_api(url: str) -> bool:
    """The Hub's API hands out the Xet tokens; xorbs, shards and LFS objects go to its file storage."""
    return "/xet-write-token" in url or "/xet-read-token" in url


def describe_push_error(error: BaseException, *, repo: str, token_env: str, folder: Path) -> str:
    """One sentence for a failed push (no token in it), saying the outputs are kept and how to retry.

    A status from the file storage (an LFS object, a Xet xorb or shard) says so; one from the Hub's API,
    whichever transfer path met it (a commit, or the Xet write token), names the token or the server.
    """
    status = getattr(getattr(error, "response", None), "status_code", None)
    retry = f"the run's outputs stay in {folder}; retry with `gym deploy`"
    if status is None:
        status, api = transfer_status(error)
        if status is not None and not api:
            if status >= 500:
                return (
                    f"the Hub's file storage failed while uploading the weights of {repo} "
                    f"(HTTP {status}, a server error); {retry} later"
                )
            return f"the Hub's file storage answered HTTP {status} while uploading the weights of {repo}; {retry}"
    if status == 401:
        return f"the Hub refused the token in ${token_env} (401 unauthorized) while pushing {repo}; {retry}"
    if status == 403:
        return (
            f"the token in ${token_env} may not write to {repo} (403 forbidden): use a token with write "
            f"access to its owner; {retry}"
        )
    if status is not None and status >= 500:
        return f"the Hub failed while pushing {repo} (HTTP {status}, a server error); {retry} later"
    if status is not None:
        return f"the Hub answered HTTP {status} while pushing {repo}; {retry}"
    name = type(error).__name__
    if "Connect" in name or "Timeout" in name or isinstance(error, (ConnectionError, TimeoutError)):
        return f"cannot reach the Hub ({name}) while pushing {repo}; {retry} when it is reachable"
    return f"pushing {repo} failed ({name}); {retry}"
