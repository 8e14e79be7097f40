"""`gym export --merge`, and the first step of every other export: base + LoRA adapter as plain weights.

Merging loads the base and the adapter through the serving loader on CPU, so the merged folder holds
exactly the weights `gym serve` would have answered with, and the adapter's tokenizer (its chat
template is the one the model was trained with).
"""

from __future__ import annotations

from pathlib import Path

from gym.engine.loading import ModelSource, adapter_base, load_model_and_tokenizer
from gym.model.folders import ADAPTER_CONFIG, is_adapter_folder


def require_adapter(adapter_dir: Path) -> None:
    if not is_adapter_folder(adapter_dir):
        raise ValueError(f"{adapter_dir} is not a LoRA adapter folder (no {ADAPTER_CONFIG})")


def export_merged(adapter_dir: Path, target: Path, overwrite: bool) -> Path:
    """`gym export --merge`: the merged model built in a hidden sibling of ``target``, renamed into place.

    ``target`` may not be inside (or hold) the adapter or its base, nor replace a folder without ``overwrite``.
    """
    import shutil
    import tempfile

    from gym.export.output import FOLDER, check_output, new_parents, replace_folder, source_folders

    require_adapter(adapter_dir)
    check_output(target, source_folders(adapter_dir), overwrite, FOLDER)
    with new_parents(target):
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        try:
            merge_adapter(adapter_dir, staging)
            replace_folder(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def merge_adapter(adapter_dir: str | Path, output_dir: str | Path) -> Path:
    """Base + LoRA merged into plain weights in ``output_dir``, saved with the adapter's tokenizer."""
    adapter_dir, output_dir = Path(adapter_dir), Path(output_dir)
    require_adapter(adapter_dir)
    resolved = adapter_dir.resolve()
    source = ModelSource(model_id=adapter_dir.name, base=adapter_base(resolved), adapter=str(resolved))
    from gym.model.quantized import checkpoint_quantization, merge_refusal

    method = checkpoint_quantization(source.base)
    if method is not None:
        raise ValueError(merge_refusal(source.base, adapter_dir, method))
    model, tokenizer = load_model_and_tokenizer(source, device="cpu")
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, safe_serialization=True)
    tokenizer.save_pretrained(output_dir)
    card = adapter_dir / "README.md"
    if card.is_file():
        (output_dir / "README.md").write_text(card.read_text(encoding="utf-8"), encoding="utf-8")
    return output_dir
