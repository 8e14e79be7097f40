"""An axolotl training YAML as gym.toml data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gym.config.migrate.convert import Conversion, relative_to

KeyPath = tuple[str | int, ...]

ALIASES: dict[str, KeyPath] = {
    "base_model": ("model", "name_or_path"),
    "revision_of_model": ("model", "revision"),
    "trust_remote_code": ("model", "trust_remote_code"),
    "output_dir": ("project", "output_dir"),
    "num_epochs": ("train", "epochs"),
    "max_steps": ("train", "max_steps"),
    "learning_rate": ("train", "learning_rate"),
    "warmup_ratio": ("train", "warmup_ratio"),
    "weight_decay": ("train", "weight_decay"),
    "micro_batch_size": ("train", "batch_size"),
    "gradient_accumulation_steps": ("train", "gradient_accumulation_steps"),
    "sequence_len": ("train", "max_length"),
    "sample_packing": ("train", "packing"),
    "seed": ("train", "seed"),
    "logging_steps": ("train", "logging_steps"),
    "save_steps": ("train", "save_steps"),
    "save_total_limit": ("train", "save_total_limit"),
    "resume_from_checkpoint": ("train", "resume"),
    "gradient_checkpointing": ("train", "gradient_checkpointing"),
    "lora_r": ("train", "lora", "r"),
    "lora_alpha": ("train", "lora", "alpha"),
    "lora_dropout": ("train", "lora", "dropout"),
    "lora_target_modules": ("train", "lora", "target_modules"),
    "dpo_beta": ("train", "dpo", "beta"),
    "rl_beta": ("train", "dpo", "beta"),
    "hub_model_id": ("hub", "repo_id"),
    "val_set_size": ("datasets", "*", "eval_fraction"),
}
IGNORED = {
    "tokenizer_type": "the tokenizer is loaded with the model",
    "model_type": "the architecture is read from the model's config",
    "strict": "gym.toml is always strict: unknown keys are errors",
    "tf32": "TF32 matmuls follow the hardware default",
    "flash_attention": "transformers picks the attention kernel for the hardware",
    "sdp_attention": "transformers picks the attention kernel for the hardware",
    "xformers_attention": "transformers picks the attention kernel for the hardware",
    "dataset_prepared_path": "Gym caches prepared data itself, keyed by the data's content",
    "pad_to_sequence_len": "Gym pads each batch to its longest row",
    "eval_sample_packing": "Gym evaluates held-out rows unpacked",
    "wandb_entity": "set WANDB_ENTITY in the environment",
    "wandb_name": "set WANDB_NAME in the environment",
    "special_tokens": "the tokenizer's own special tokens are used",
}
TEMPLATES = {
    "chatml": "chatml", "llama3": "llama3", "llama2": "llama2", "qwen_25": "qwen2.5", "qwen3": "qwen3",
    "gemma": "gemma", "phi_3": "phi3", "mistral_v1": "mistral-v0.2", "zephyr": "zephyr", "vicuna": "vicuna",
    "alpaca": "alpaca", "tokenizer_default": "auto",
}  # fmt: skip
SCHEDULERS = {"cosine": "cosine", "linear": "linear", "constant": "constant"}
SPEED_PLUGINS = {
    "axolotl.integrations.liger.LigerPlugin",
    "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin",
}
LORA_KERNELS = ("lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel")
RL_METHODS = {"dpo": ("dpo", "sigmoid"), "ipo": ("dpo", "ipo"), "orpo": ("dpo", "orpo"), "simpo": ("dpo", "simpo"), "kto": ("kto", None), "grpo": ("grpo", None)}  # fmt: skip


def convert(data: dict[str, Any], conversion: Conversion, target_dir: Path) -> None:
    from gym.config.cli_args import derived_project_name
    from gym.config.loader import Override
    from gym.config.migrate.distributed import carry_deepspeed, carry_fsdp

    base = conversion.source.parent
    datasets = [
        _dataset(item, index, conversion, base, target_dir)
        for index, item in enumerate(data.get("datasets") or [])
    ]
    conversion.data["datasets"] = [d for d in datasets if d is not None]
    for index, dataset in enumerate(conversion.data["datasets"]):
        for name in dataset:
            conversion.origins[("datasets", index, name)] = "datasets"
    conversion.put(("train", "adapter"), "full", "adapter (none: full fine-tuning)")
    conversion.put(("train", "method"), "sft", "rl (none: supervised)")
    for key, value in data.items():
        if value is None or key == "datasets":
            continue
        if key in ALIASES:
            if key == "lora_target_modules" and not value:
                continue
            conversion.put(ALIASES[key], value, key)
        elif key == "adapter":
            if value in ("lora", "qlora"):
                conversion.put(("train", "adapter"), value, key)
            else:
                conversion.skip(key, f"Gym's adapters are lora, qlora, dora, full and freeze, got {value!r}")
        elif key in ("peft_use_dora", "load_in_4bit", "load_in_8bit"):
            if value is True:  # false is the default: nothing to carry
                path, target = {
                    "peft_use_dora": (("train", "adapter"), "dora"),
                    "load_in_4bit": (("model", "quantization"), "bnb-4bit"),
                    "load_in_8bit": (("model", "quantization"), "bnb-8bit"),
                }[key]
                conversion.put(path, target, key)
        elif key == "lora_target_linear":
            if value:
                conversion.put(("train", "lora", "target_modules"), "all-linear", key)
        elif key in ("bf16", "fp16"):
            if value is True or value == "true":
                conversion.put(("model", "dtype"), "bfloat16" if key == "bf16" else "float16", key)
            elif value == "auto":
                conversion.put(("model", "dtype"), "auto", key)
        elif key == "chat_template":
            if value in TEMPLATES:
                conversion.put(("model", "template"), TEMPLATES[value], key)
            else:
                conversion.skip(
                    key, f"Gym has no template {value!r}; model.template = 'auto' uses the tokenizer's own"
                )
        elif key == "lr_scheduler":
            if value in SCHEDULERS:
                conversion.put(("train", "lr_scheduler"), SCHEDULERS[value], key)
            else:
                conversion.skip(key, f"Gym's schedules are cosine, linear, constant, got {value!r}")
        elif key == "rl":
            if value in RL_METHODS:
                method, loss = RL_METHODS[value]
                conversion.put(("train", "method"), method, key)
                if loss is not None:
                    conversion.put(("train", "dpo", "loss_type"), loss, key)
            else:
                conversion.skip(key, f"Gym has no RL method {value!r}")
        elif key == "wandb_project" and value:
            conversion.put(("train", "report_to"), ["wandb"], key)
            conversion.ignored.append((key, f"set WANDB_PROJECT={value} in the environment"))
        elif key == "use_tensorboard" and value:
            conversion.put(("train", "report_to"), ["tensorboard"], key)
        elif key == "deepspeed":
            carry_deepspeed(value, conversion, base)
        elif key in ("trl", "vllm", "plugins", "cut_cross_entropy", *LORA_KERNELS) or key.startswith(
            "liger_"
        ):
            _carry_speed_and_rl(key, value, data, conversion)
        elif key in ("fsdp", "fsdp_config"):
            if key == "fsdp" or data.get("fsdp") is None:  # the pair is carried (or refused) once
                carry_fsdp(data, conversion)
        elif key in IGNORED:
            conversion.ignored.append((key, IGNORED[key]))
        else:
            conversion.skip(key, "Gym has no equivalent setting")
    if "val_set_size" in data:
        conversion.put(("datasets", "*", "eval_fraction"), data["val_set_size"], "val_set_size")
    overrides = [
        Override(("project", "output_dir"), conversion.data.get("project", {}).get("output_dir"), "")
    ]
    if overrides[0].value is None:
        overrides = [
            Override(("model", "name_or_path"), data.get("base_model", "model"), ""),
            Override(("train", "method"), conversion.data["train"]["method"], ""),
        ]
    conversion.put(("project", "name"), derived_project_name(overrides), "output_dir")


def _carry_speed_and_rl(key: str, value: Any, data: dict[str, Any], conversion: Conversion) -> None:
    """axolotl's ``trl:``/``vllm:`` blocks (TRL's GRPO names) and its GPU speed switches."""
    from gym.config.migrate.trl_names import carry_grpo

    if key == "trl" and isinstance(value, dict):
        settings = dict(value)
        server = data.get("vllm") if isinstance(data.get("vllm"), dict) else {}
        for ours, theirs in (("vllm_server_host", "host"), ("vllm_server_port", "port")):
            if server.get(theirs) is not None and settings.get(ours) is None and settings.get("use_vllm"):
                settings[ours] = server[theirs]
        handled = carry_grpo(settings, conversion, "trl.")
        for name in sorted(set(value) - handled):
            conversion.skip(f"trl.{name}", "Gym has no equivalent GRPO setting")
    elif key == "vllm" and isinstance(value, dict):
        for name in sorted(set(value) - {"host", "port"}):
            conversion.skip(
                f"vllm.{name}", "a setting of the vLLM server, given to `trl vllm-serve` when it starts"
            )
    elif key == "plugins" and isinstance(value, list):
        for plugin in value:
            if plugin in SPEED_PLUGINS:
                conversion.ignored.append((f"plugins: {plugin}", "Gym turns it on with train.liger_kernel or "
                                           "train.cut_cross_entropy"))  # fmt: skip
            else:
                conversion.skip(f"plugins: {plugin}", "Gym loads no axolotl plugins")
    elif key in LORA_KERNELS:
        if value:
            conversion.skip(key, "axolotl's own Triton LoRA kernels; PEFT has no such option")
    elif key == "cut_cross_entropy" or key.startswith("liger_"):
        target = "cut_cross_entropy" if key == "cut_cross_entropy" else "liger_kernel"
        if value is True and target not in conversion.data.get("train", {}):
            conversion.put(("train", target), True, key)  # Gym's switch turns on all of Liger's kernels
        elif not isinstance(value, bool):
            conversion.skip(key, f"expected true or false, got {value!r}")
    else:
        conversion.skip(key, "expected a mapping" if key in ("trl", "vllm") else "expected a list of plugins")


def _dataset(
    item: Any, index: int, conversion: Conversion, base: Path, target_dir: Path
) -> dict[str, Any] | None:
    label = f"datasets[{index}]"
    if not isinstance(item, dict) or not item.get("path"):
        conversion.skip(label, "a dataset needs a path")
        return None
    kind = str(item.get("type") or "")
    table: dict[str, Any] = {}
    kind_base = kind.split(":")[0].split(".")[0]
    if kind_base in ("alpaca", "alpaca_chat", "alpaca_w_system"):
        table["format"] = "alpaca"
    elif kind_base == "sharegpt":
        table["format"] = "sharegpt"
    elif kind_base == "completion":
        table["format"] = "text"
        if item.get("field", "text") != "text":
            table["columns"] = {"text": item["field"]}
    elif kind_base == "chat_template" and "." not in kind:
        mapping = item.get("message_property_mappings") or {}
        role = mapping.get("role", item.get("message_field_role", "role"))
        content = mapping.get("content", item.get("message_field_content", "content"))
        field = item.get("field_messages", "messages")
        if (role, content) == ("from", "value"):
            table["format"] = "sharegpt"
            if field != "conversations":
                table["columns"] = {"messages": field}
        else:
            table["format"] = "openai"
            if field != "messages":
                table["columns"] = {"messages": field}
            if (role, content) != ("role", "content"):
                table["tags"] = {"role": role, "content": content}
    else:
        conversion.skip(f"{label}.type", f"Gym reads no row format like axolotl's {kind!r}")
        return None
    path = str(item["path"])
    local = next((p for p in (base / path, Path(path)) if p.exists()), None)
    data_files = item.get("data_files")
    if local is not None:
        table["path"] = relative_to(target_dir, local)
    elif isinstance(data_files, str) and (base / data_files).exists():
        table["path"] = relative_to(target_dir, base / data_files)
    else:
        table["hub"] = path
        if item.get("name"):
            table["subset"] = item["name"]
    if item.get("split"):
        table["split"] = item["split"]
    for key in set(item) - {
        "path",
        "type",
        "split",
        "name",
        "field",
        "field_messages",
        "message_property_mappings",
        "message_field_role",
        "message_field_content",
        "roles_to_train",
        "train_on_eos",
        "ds_type",
    }:
        conversion.skip(f"{label}.{key}", "Gym has no equivalent dataset setting")
    return dict(
        sorted(
            table.items(),
            key=lambda kv: ("path", "hub", "subset", "split", "format", "columns", "tags").index(kv[0]),
        )
    )
