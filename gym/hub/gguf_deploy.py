"""The GGUF step of `gym deploy` for a CPU Space: which weights it serves, the file, its quality, the card.

On CPU hardware a decode step reads every weight, so the Space serves 8-bit (or 4-bit) GGUF weights
through llama.cpp instead of fp32 safetensors (space.cpu_format). GPU hardware keeps space.backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.config import GymConfig
    from gym.export.gguf_quality import QualityReport

QUALITY_FILE = "gguf_quality.json"
HELD_OUT_ROWS = 8


@dataclass(frozen=True)
class SpaceWeights:
    """What the Space serves: the engine, and the GGUF type when the model is converted (else None)."""

    backend: str
    gguf: str | None = None
    why: str = ""  # how it was chosen, for the plan

    @property
    def format(self) -> str:
        return f"gguf-{self.gguf}" if self.gguf else "transformers"


def _architecture(model_dir: Path) -> str | None:
    """The HF architecture of the model's full weights (the base's for a LoRA folder), if it can be read."""
    config = model_dir / "config.json"
    adapter = model_dir / "adapter_config.json"
    if not config.is_file() and adapter.is_file():
        base = json.loads(adapter.read_text(encoding="utf-8")).get("base_model_name_or_path") or ""
        from gym.model.builtin import BUILTIN_PREFIX, resolve_model_path

        if base.startswith(BUILTIN_PREFIX) or Path(base).is_dir():
            config = Path(resolve_model_path(base)) / "config.json"
        else:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(base, "config.json")
            config = Path(cached) if isinstance(cached, str) else config
    if not config.is_file():
        return None
    names = json.loads(config.read_text(encoding="utf-8")).get("architectures") or []
    return names[0] if names else None


def choose_space_weights(hardware: str, backend: str, cpu_format: str, model_dir: Path,
                         training_free: bool) -> SpaceWeights:  # fmt: skip
    """space.cpu_format applied to the Space's hardware and the model; a refusal is one sentence."""
    from gym.config.deploy import CPU_SPACE_HARDWARE
    from gym.export.gguf import ARCHITECTURES

    if hardware not in CPU_SPACE_HARDWARE:
        return SpaceWeights(backend, why=f"GPU hardware {hardware} keeps space.backend")
    if cpu_format == "transformers":
        return SpaceWeights(backend, why="space.cpu_format = transformers")
    arch = _architecture(model_dir)
    if training_free or arch not in ARCHITECTURES:
        what = "a training-free run has no weights of its own" if training_free else (
            f"GGUF export supports Llama, Mistral and Qwen2 models; {model_dir.name} is {arch or 'of an unknown architecture'}"
        )  # fmt: skip
        if cpu_format == "auto":
            return SpaceWeights(backend, why=f"space.cpu_format = auto: {what}")
        from gym.hub.push import DeployError

        raise DeployError(
            f'space.cpu_format = "{cpu_format}" cannot be served: {what}; set it to "transformers"'
        )
    quant = "q8_0" if cpu_format == "auto" else cpu_format.removeprefix("gguf-")
    return SpaceWeights("llamacpp", quant, why=f"space.cpu_format = {cpu_format} on CPU hardware {hardware}")


def quality_rows(config: GymConfig | None, tokenizer: Any) -> tuple[list[list[int]], str]:
    """Held-out rows of the run (its training rows when it holds none out), else Gym's built-in text."""
    from gym.export.gguf_quality import builtin_rows

    if config is None:
        return builtin_rows(tokenizer, HELD_OUT_ROWS), "rows of Gym's built-in text"
    from gym.data.prepare import prepare_data
    from gym.model.vision import model_vision

    prepared = prepare_data(config, tokenizer, check=False, vision=model_vision(config))
    if prepared.eval is not None and len(prepared.eval):
        return [list(r) for r in prepared.eval["input_ids"][:HELD_OUT_ROWS]], "held-out rows of the run"
    rows = prepared.train["input_ids"]
    return [list(r) for r in rows[-HELD_OUT_ROWS:]], "training rows of the run (it holds none out)"


@dataclass
class GGUFArtifact:
    path: Path
    quality: QualityReport | None


def build_gguf(model_dir: Path, quant: str, name: str, scratch: Path, config: GymConfig | None,
               echo: Callable[[str], None]) -> GGUFArtifact:  # fmt: skip
    """Merge (a LoRA folder), convert, check by answering one prompt, and measure quality when llama.cpp is here."""
    from gym.export.gguf import GGUFError
    from gym.export.gguf_export import convert_and_check, merged_model
    from gym.export.gguf_quality import llama_cpp_available, measure_quality
    from gym.hub.push import DeployError
    from gym.quiet import quiet_libraries

    quiet_libraries()
    try:
        merged = merged_model(model_dir, scratch, echo)
        path = convert_and_check(merged, scratch / name, quant, echo)
        if not llama_cpp_available():
            echo("quality not measured: llama-cpp-python is not installed here (`make gguf`)")
            return GGUFArtifact(path, None)
        from transformers import AutoTokenizer

        rows, source = quality_rows(config, AutoTokenizer.from_pretrained(merged))
        echo(f"measuring gguf-{quant} against full precision ...")
        report = measure_quality(merged, path, f"gguf-{quant}", rows, source)
    except GGUFError as error:
        raise DeployError(f"GGUF conversion: {error}; nothing was pushed") from None
    for line in report.lines():
        echo(line)
    return GGUFArtifact(path, report)


def card_with_serving(card: Path | None, artifact: GGUFArtifact, title: str, out: Path) -> Path:
    """The model card (or a new one) with its "Serving" section: the format the Space serves, its quality."""
    from gym.hub.card import serving_section, with_section

    text = card.read_text(encoding="utf-8") if card is not None and card.is_file() else f"# {title}\n"
    out.write_text(
        with_section(text, serving_section(artifact.path.name, artifact.quality)), encoding="utf-8"
    )
    return out


def quality_file(artifact: GGUFArtifact, out: Path) -> Path | None:
    if artifact.quality is None:
        return None
    out.write_text(json.dumps(artifact.quality.to_json(), indent=2) + "\n", encoding="utf-8")
    return out
