"""`gym export --gguf` and the conversion step of `gym deploy`: merge, convert, prove the file serves."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from gym.export.gguf import GGUFError, convert_to_gguf
from gym.export.gguf_quality import PROMPTS, check_answer, llama_cpp_available

NOT_CHECKED = "not checked: llama-cpp-python is not installed (`make gguf`), so {name} was not loaded"


def merged_model(path: Path, scratch: Path, echo: Callable[[str], None]) -> Path:
    """The full weights of ``path``: the folder itself, or its LoRA adapter merged into the base."""
    if not (path / "adapter_config.json").is_file():
        return path
    from gym.export.merge import merge_adapter

    echo(f"merging the adapter {path.name} into its base ...")
    return merge_adapter(path, scratch / "merged")


def convert_and_check(model_dir: Path, output: Path, quant: str, echo: Callable[[str], None]) -> Path:
    """Convert the full weights in ``model_dir`` to ``output``, then load it and answer one prompt.

    A file llama.cpp cannot load is removed, so what is left behind always serves.
    """
    echo(f"converting {model_dir.name} to GGUF {quant} ...")
    convert_to_gguf(model_dir, output, quant, progress=True)
    if not llama_cpp_available():
        echo(NOT_CHECKED.format(name=output.name))
        return output
    try:
        answer = check_answer(output, model_dir)
    except GGUFError:
        output.unlink(missing_ok=True)
        raise
    echo(f"checked: llama.cpp loaded {output.name} and answered {PROMPTS[0]!r} with {answer!r}")
    return output


def export_gguf(path: Path, quant: str, output: Path | None, echo: Callable[[str], None]) -> Path:
    """`gym export PATH --gguf QUANT`: PATH (a model or LoRA folder) as one GGUF file, checked."""
    from gym.export.gguf import GGUF_QUANTS

    if quant not in GGUF_QUANTS:
        raise GGUFError(f"--gguf must be one of {', '.join(GGUF_QUANTS)}, got {quant!r}")
    if not path.is_dir():
        raise GGUFError(f"{path} is not a folder; pass a trained model or LoRA output folder")
    target = output or path.with_name(f"{path.name}-{quant}.gguf")
    if target.is_dir():
        raise GGUFError(f"--output {target} is a folder; name the .gguf file to write")
    with tempfile.TemporaryDirectory(prefix="gym-gguf-") as scratch:
        return convert_and_check(merged_model(path, Path(scratch), echo), target, quant, echo)
