"""What every side-by-side benchmark shares: the peers' environments, the model folders, timed subprocesses.

Peers live under ``.bench/`` (ignored by git), never in the project's ``.venv``:
- ``.bench/llamafactory``: LLaMA-Factory 0.9.5 on the CPU torch wheel, with the CPU fix from
  the peers folder's README (:data:`PEERS`; its PyPI torchvision/torchaudio wheels are CUDA builds
  that crash its CLI on import: torchvision is removed and torchaudio's shared libraries are moved aside).
- plain TRL and ``transformers serve --continuous-batching`` run from the project's venv: the same
  transformers, TRL and torch that Gym itself uses, so only the tool differs.
- ``.bench/gym-train``: Gym as a user who trains installs it, ``zoo-gym[train]`` (editable, so it runs
  this checkout), pinned to the project venv's exact versions. The project's venv holds every extra,
  and two of them cost a training command ~2 s of start-up without being used: peft imports
  bitsandbytes (``qlora``) and transformers imports scikit-learn (lm-eval's, ``eval``) whenever they
  are installed. LLaMA-Factory's venv holds neither, so whole-command times compare like with like.

Model folders, identical for every tool: Gym's ``builtin:tiny`` (0.66M parameters) and a random 26M
Llama (hidden 512, 8 layers, 8 heads, intermediate 1408) built offline with the tiny tokenizer.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures" / "llamafactory-data"
# The peers' notes and load client, beside the checkout like the fixtures.
PEERS = REPO.parent / "shared" / "peers"
BENCH = Path(os.environ.get("GYM_BENCH_DIR", REPO / ".bench"))
TORCH = "torch==2.13.0"
LLAMAFACTORY = "llamafactory==0.9.5"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def llamafactory_python(build: bool = False) -> Path | None:
    """The python of the LLaMA-Factory venv (built on request), or None when it is not there."""
    venv = BENCH / "llamafactory"
    python = venv / "bin" / "python"
    if python.exists() and (venv / ".ready").exists():
        return python
    if not build:
        return None
    log(f"building LLaMA-Factory's venv in {venv} (once; a few minutes)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, TORCH], check=True)
    constraint = venv / "constraints.txt"
    constraint.write_text(TORCH + "\n")
    subprocess.run([*pip, "-c", str(constraint), LLAMAFACTORY], check=True)
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "torchvision"], check=False)
    site = next((venv / "lib").glob("python3*/site-packages"))
    aside = venv / "torchaudio-libs-aside"
    aside.mkdir(exist_ok=True)
    for library in (site / "torchaudio" / "lib").glob("*.so"):
        shutil.move(str(library), aside / library.name)
    (venv / ".ready").write_text("ok\n")
    return python


def gym_train_python(build: bool = False) -> Path | None:
    """The python of a venv holding ``zoo-gym[train]`` only (built on request), or None when absent."""
    venv = BENCH / "gym-train"
    python = venv / "bin" / "python"
    if python.exists() and (venv / ".ready").exists():
        return python
    if not build:
        return None
    log(f"building Gym's train-only venv in {venv} (once; about a minute)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    frozen = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
                            check=True, capture_output=True, text=True).stdout  # fmt: skip
    pins = venv / "constraints.txt"  # the project venv's exact versions: only the set of packages differs
    pins.write_text("".join(line + "\n" for line in frozen.splitlines() if "==" in line))
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-c", str(pins), "-e", f"{REPO}[train]"], check=True
    )
    (venv / ".ready").write_text("ok\n")
    return python


def tiny_model() -> Path:
    from gym.model.builtin import ensure_builtin

    return Path(ensure_builtin("builtin:tiny"))


def model_26m() -> Path:
    """The random 26M Llama with the tiny tokenizer (built once, deterministically)."""
    folder = BENCH / "models" / "llama-26m"
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tiny = tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    source = LlamaConfig.from_pretrained(tiny)
    config = LlamaConfig(
        vocab_size=source.vocab_size, hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=8, intermediate_size=1408, max_position_embeddings=2048,
        bos_token_id=source.bos_token_id, eos_token_id=source.eos_token_id, pad_token_id=source.pad_token_id,
        tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    for extra in ("generation_config.json",):
        if (tiny / extra).is_file():
            shutil.copy(tiny / extra, staging / extra)
    staging.rename(folder)
    return folder


MODELS: dict[str, Callable[[], Path]] = {"tiny": tiny_model, "26m": model_26m}


def run_result(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
               timeout: float = 1800) -> dict[str, Any]:  # fmt: skip
    """Run ``cmd``; the JSON after its last ``RESULT `` line, plus ``wall`` (seconds, whole process) and
    ``cpu`` (user + system CPU seconds of the process and its children: on a shared machine, where wall
    time mostly measures the other users, the work a command did)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed:\n{(done.stdout + done.stderr)[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    result = json.loads(lines[-1].removeprefix("RESULT ")) if lines else {}
    return {**result, "wall": wall, "cpu": cpu}


def thread_env(threads: int | None, **extra: str) -> dict[str, str]:
    """The environment of one run: ``threads`` pins torch/OpenMP (None: each tool's default)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    env.update({"CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "true", "HF_HUB_OFFLINE": "1",
                "PYTHONPATH": str(REPO), "DISABLE_VERSION_CHECK": "1", **extra})  # fmt: skip
    return env


def gym_env(threads: int | None, **extra: str) -> dict[str, str]:
    """:func:`thread_env` for a Gym command, at Gym's default tokenizer threads: ``TOKENIZERS_PARALLELISM``
    unset. Gym then gives the Rust tokenizer one thread beside its rendering thread (and one per worker
    process); it obeys a user's setting, and forced to "true" its two-core pool competed with the
    GIL-bound thread (preprocessing 0.7x, 16 alternated runs). The peers keep "true"."""
    env = thread_env(threads, **extra)
    env.pop("TOKENIZERS_PARALLELISM")
    return env


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(float(run[key]) for run in runs)


def ratio(ours: float, theirs: float | None) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "n/a"
