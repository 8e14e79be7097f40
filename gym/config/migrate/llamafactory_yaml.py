"""A LLaMA-Factory training YAML: each key goes through the same table as the command-line flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gym.config.errors import ConfigError
from gym.config.llamafactory import CONVERTED, IGNORED
from gym.config.migrate import trl_names
from gym.config.migrate.convert import Conversion, relative_to
from gym.config.sections import NAMED_TEMPLATES

# LLaMA-Factory template names whose format a Gym template reproduces.
TEMPLATES = {
    "qwen": "qwen2.5", "qwen2": "qwen2.5", "qwen3": "qwen3", "qwen3_nothink": "qwen3", "llama3": "llama3",
    "llama2": "llama2", "mistral": "mistral", "gemma": "gemma", "phi": "phi3", "zephyr": "zephyr",
    "vicuna": "vicuna", "alpaca": "alpaca", "chatml": "chatml", "chatml_de": "chatml",
}  # fmt: skip
# Keys that configure LLaMA-Factory's own export/inference/multimodal paths: known, but not training.
OTHER_COMMANDS = {
    "export_dir", "export_size", "export_device", "export_legacy_format", "export_hub_model_id",
    "infer_backend", "max_new_tokens", "temperature", "top_p", "top_k", "do_sample", "default_system",
}  # fmt: skip


def _as_flag_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


def _carry_trl(data: dict[str, Any], conversion: Conversion) -> set[str]:
    """TRL's own names (a ``trl grpo --config`` YAML): GRPO's settings, and ``dataset_name`` as a Hub dataset."""
    grpo = trl_names.is_grpo(data)
    handled = trl_names.carry_grpo(data, conversion) if grpo else set()
    if grpo and data.get("stage") is None and data.get("finetuning_type") is None:
        conversion.put(("train", "method"), "grpo", "num_generations / use_vllm / reward_funcs (GRPO)")
    name = data.get("dataset_name")
    if isinstance(name, str) and name and "dataset" not in data:
        handled.add("dataset_name")
        if grpo:  # GRPO rows are prompts (with a reference answer when the rewards need one)
            table = {"hub": name, "format": "prompt"}
            split = data.get("dataset_train_split")
            if isinstance(split, str) and split:
                table["split"] = split
                handled.add("dataset_train_split")
            conversion.data["datasets"] = [table]
            conversion.origins.update({("datasets", 0, field): "dataset_name" for field in table})
        else:
            conversion.skip("dataset_name", "its row format is not in the YAML: add a [[datasets]] table with hub "
                            f"= {name!r} and its format")  # fmt: skip
    return handled


def convert(data: dict[str, Any], conversion: Conversion, target_dir: Path, dataset_dir: str | None) -> None:
    from gym.config.cli_args import derived_project_name
    from gym.config.flags import parse_flags
    from gym.config.loader import Override

    dataset_dir = dataset_dir or data.get("dataset_dir")
    handled = _carry_trl(data, conversion) if conversion.tool == "trl" or trl_names.is_grpo(data) else set()
    overrides = []
    for key, value in data.items():
        if value is None or key in handled:
            continue
        if key == "template" and value not in NAMED_TEMPLATES:
            if value in TEMPLATES:
                value = TEMPLATES[value]
            else:
                conversion.skip(
                    key, f"Gym has no template {value!r}; model.template = 'auto' uses the tokenizer's own"
                )
                continue
        if key in OTHER_COMMANDS:
            conversion.skip(
                key, "not a training setting (export/inference); see `gym export` and `gym serve`"
            )
            continue
        if key == "dataset_dir":
            continue
        if key == "deepspeed":
            from gym.config.migrate.distributed import carry_deepspeed

            carry_deepspeed(value, conversion, conversion.source.parent)
            continue
        notes: list[str] = []
        unknown: list[str] = []
        try:
            found = parse_flags([f"--{key}", _as_flag_text(value)], dataset_dir, notes=notes, unknown=unknown)
        except ConfigError as error:
            conversion.skip(key, "; ".join(issue.message.split(": ", 1)[-1] for issue in error.issues))
            continue
        if unknown:
            conversion.skip(key, "Gym has no equivalent setting")
        elif key in IGNORED:
            conversion.ignored.append((key, IGNORED[key]))
        elif not found and key in CONVERTED:
            conversion.ignored.append((key, f"{_as_flag_text(value)}: nothing to set"))
        overrides.extend(found)
    # Datasets first: per-dataset keys (max_samples, val_size) fan out over them. The adapter implied by
    # quantization_bit / use_dora wins over finetuning_type whatever their order, as in LLaMA-Factory.
    overrides.sort(key=lambda o: (o.path != ("datasets",), o.flag in ("--quantization_bit", "--use_dora")))
    for override in overrides:
        origin = override.flag.removeprefix("--")
        if override.path == ("datasets",):
            for dataset in override.value:
                for place in ("path",):
                    if place in dataset:
                        dataset[place] = relative_to(target_dir, dataset[place])
            conversion.data["datasets"] = override.value
            for index, dataset in enumerate(override.value):
                for name in dataset:
                    conversion.origins[("datasets", index, name)] = "dataset"
            continue
        conversion.put(override.path, override.value, origin)
    if "datasets" not in conversion.data and "dataset" not in data:
        conversion.skip("dataset", "the YAML names no dataset; add a [[datasets]] table")
    output_dir = str(data.get("output_dir") or "")
    if output_dir:  # saves/llama3-8b/lora/sft -> llama3-8b-lora-sft (its last part alone says little)
        overrides = [Override(("project", "output_dir"), "-".join(Path(output_dir).parts[-3:]), "")]
    conversion.put(("project", "name"), derived_project_name(overrides), "output_dir")
