"""`gym export --gguf` and the conversion step of `gym deploy`: merge, convert, prove the file serves."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from gym.export.files import missing_reason
from gym.export.gguf import GGUFError, checked_source, convert_to_gguf
from gym.export.gguf_quality import PROMPTS, check_answer, llama_cpp_available
from gym.export.output import FILE, check_output, source_folders
from gym.failures import first_line

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

    The file is loaded under its temporary name and renamed to ``output`` only once it answered, so what
    is left behind always serves and a file it would replace stays until then.
    """
    source = checked_source(model_dir)  # the one sentence on a damaged folder comes before any progress
    echo(f"converting {model_dir.name} to GGUF {quant} ...")
    answers: list[str] = []

    def check(partial: Path) -> None:
        if not llama_cpp_available():
            return
        try:
            answers.append(check_answer(partial, model_dir))
        except GGUFError as error:
            raise GGUFError(str(error).replace(partial.name, output.name)) from None

    convert_to_gguf(model_dir, output, quant, progress=True, check=check, source=source)
    if not answers:
        echo(NOT_CHECKED.format(name=output.name))
    else:
        echo(f"checked: llama.cpp loaded {output.name} and answered {PROMPTS[0]!r} with {answers[0]!r}")
    return output


def export_gguf(path: Path, quant: str, output: Path | None, echo: Callable[[str], None],
                overwrite: bool = False) -> Path:  # fmt: skip
    """`gym export PATH --gguf QUANT`: PATH (a model or LoRA folder) as one GGUF file, checked.

    The output may not be inside a folder the export reads, nor replace a file without ``overwrite``.
    """
    from gym.export.gguf import GGUF_QUANTS

    if quant not in GGUF_QUANTS:
        raise GGUFError(f"--gguf must be one of {', '.join(GGUF_QUANTS)}, got {quant!r}")
    if not path.is_dir():
        if path.exists():
            raise GGUFError(f"{path} is not a folder; pass a trained model or LoRA output folder")
        raise GGUFError(f"{path} {missing_reason(path)}; pass a trained model or LoRA output folder")
    target = output or path.with_name(f"{path.name}-{quant}.gguf")
    check_output(target, source_folders(path), overwrite, FILE)
    with tempfile.TemporaryDirectory(prefix="gym-gguf-") as scratch:
        try:
            merged = merged_model(path, Path(scratch), echo)
        except (ValueError, OSError) as error:
            raise GGUFError(first_line(error)) from None
        try:
            return convert_and_check(merged, target, quant, echo)
        except OSError as error:  # a folder full, read-only or gone while writing; a file unreadable
            name = error.filename and Path(os.fsdecode(error.filename))
            if not name or name.parent == target.parent:  # the output or its temporary name
                raise GGUFError(
                    f"--output {target} could not be written: {error.strerror or error}"
                ) from None
            raise GGUFError(f"{name}: {error.strerror or error}") from None
