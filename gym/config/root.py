"""`GymConfig`: the one typed object built from gym.toml that every layer of Gym receives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, ValidationInfo, model_validator

from gym.config.base import Section, fail
from gym.config.deploy import ComputeConfig, EvalConfig, HubConfig, SpaceConfig, space_token_issues
from gym.config.sections import DatasetConfig, ModelConfig, ProjectConfig
from gym.config.training import TrainConfig

# Which dataset formats each method can learn from. SFT turns alpaca/sharegpt/openai rows into chats;
# RL methods take the prompt (and the reference answer, when there is one) from any chat-like row.
FORMATS_BY_METHOD: dict[str, tuple[str, ...]] = {
    "sft": ("alpaca", "sharegpt", "openai"),
    "pt": ("text",),
    "dpo": ("preference",),
    "rm": ("preference",),
    "kto": ("kto",),
    "ppo": ("prompt", "alpaca", "sharegpt", "openai"),
    "grpo": ("prompt", "alpaca", "sharegpt", "openai"),
}
SINGLE_NODE_ONLY = {"ppo": "PPO"}
DEFER_CROSS_CHECKS = "gym_defer_cross_checks"

Issue = tuple[tuple[str | int, ...], str]


def resolve_against(base_dir: Path, path: str | Path) -> Path:
    """``path`` (``~`` expanded) as is when absolute, else resolved under ``base_dir``."""
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else (base_dir / candidate).resolve()


class GymConfig(Section):
    """A whole fine-tuning run: model, data, training, evaluation, compute and publishing."""

    project: ProjectConfig = Field(description="Name and output folder of the run.")
    model: ModelConfig = Field(description="The base model.")
    datasets: list[DatasetConfig] = Field(
        min_length=1, description="Training datasets ([[datasets]], one or more)."
    )
    train: TrainConfig = Field(default_factory=TrainConfig, description="Training method and settings.")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Evaluation after training (lm-eval).")
    compute: ComputeConfig | None = Field(
        default=None, description="Cloud resources for `gym launch --cloud`."
    )
    hub: HubConfig | None = Field(
        default=None, description="Hugging Face Hub repository for the trained model."
    )
    space: SpaceConfig | None = Field(
        default=None, description="Hugging Face Space serving the trained model."
    )

    _source: Path | None = PrivateAttr(default=None)
    _placeholders: dict[tuple[str | int, ...], str] = PrivateAttr(default_factory=dict)
    _notes: list[str] = PrivateAttr(default_factory=list)

    @property
    def notes(self) -> list[str]:
        """One ``file:line:col: key: message`` line per key that works but has moved (see deprecation_notes)."""
        return list(self._notes)

    @property
    def env_references(self) -> dict[tuple[str | int, ...], str]:
        """Keys whose value came from ``${VAR}`` expansion -> the text as written in gym.toml."""
        return dict(self._placeholders)

    def to_toml_data(self) -> dict[str, Any]:
        """The config as plain TOML data, every default filled in, ``${VAR}`` references kept as written.

        What is written next to the weights (and may be pushed to the Hub): an expanded
        ``${HF_TOKEN}`` there would publish the secret.
        """
        data = self.model_dump(mode="json", exclude_none=True)
        for path, text in self._placeholders.items():
            node: Any = data
            try:
                for part in path[:-1]:
                    node = node[part]
                if isinstance(node, list) or path[-1] in node:
                    node[path[-1]] = text
            except (KeyError, IndexError, TypeError):  # a key the schema dropped: nothing to restore
                continue
        return data

    @property
    def source(self) -> Path | None:
        """The gym.toml this config was read from (None when built from flags or code)."""
        return self._source

    @property
    def base_dir(self) -> Path:
        """Folder that relative paths in the config are resolved against: gym.toml's folder, else the cwd."""
        return self._source.parent if self._source is not None else Path.cwd()

    def resolve_path(self, path: str | Path) -> Path:
        """A path from the config made absolute relative to :attr:`base_dir`."""
        return resolve_against(self.base_dir, path)

    @property
    def output_path(self) -> Path:
        """Absolute output folder of the run."""
        assert self.project.output_dir is not None  # filled by ProjectConfig's validator
        return self.resolve_path(self.project.output_dir)

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> GymConfig:
        if info.context and info.context.get(DEFER_CROSS_CHECKS):
            return self  # the loader runs cross_field_issues itself, to report each at its own line
        issues = cross_field_issues(self)
        if issues:
            raise fail("; ".join(f"{'.'.join(map(str, loc))}: {message}" for loc, message in issues))
        return self


def batching_issues(config: GymConfig) -> list[Issue]:
    """train.packing and train.padding_free shape SFT/pt batches; the other trainers batch rows themselves."""
    train, issues = config.train, []
    set_keys = [key for key, value in (("packing", train.packing), ("padding_free", train.padding_free))
                if value not in (False, "auto")]  # fmt: skip
    if train.method not in ("sft", "pt"):
        issues += [(("train", key), f"{key} applies to train.method = 'sft' or 'pt', not {train.method!r}; "
                    "remove it") for key in set_keys]  # fmt: skip
    elif train.packing and train.padding_free is False:
        issues.append((("train", "padding_free"), "train.packing = true puts several samples in one row without "
                       "padding; it cannot be combined with padding_free = false"))  # fmt: skip
    return issues


def deprecation_notes(config: GymConfig) -> list[Issue]:
    """Keys still honoured in their older place, each with the place to move it to (shown, never fatal)."""
    return [
        (
            ("train", "grpo", key),
            f"method = 'ppo' reads its sampling settings from [train.ppo]; move this key to train.ppo.{key} "
            "(it is used from here for now)",
        )
        for key in config.train.ppo_keys_in_grpo
    ]


def cross_field_issues(config: GymConfig) -> list[Issue]:
    """Rules that tie keys of different tables together, each reported at the key to change."""
    from gym.config.paths import forbidden_output

    issues: list[Issue] = []
    assert config.project.output_dir is not None
    forbidden = forbidden_output(config.project.output_dir, config.output_path, config.base_dir.resolve())
    if forbidden:
        issues.append((("project", "output_dir"), forbidden))
    train = config.train
    allowed = FORMATS_BY_METHOD[train.method]
    seen_names: dict[str, int] = {}
    for index, dataset in enumerate(config.datasets):
        if dataset.format not in allowed:
            issues.append(
                (
                    ("datasets", index, "format"),
                    f"train.method = {train.method!r} needs rows in format "
                    f"{' or '.join(repr(f) for f in allowed)}, got {dataset.format!r}",
                )
            )
        assert dataset.name is not None
        if dataset.name in seen_names:
            issues.append(
                (
                    ("datasets", index, "name"),
                    f"dataset name {dataset.name!r} is already used by datasets[{seen_names[dataset.name]}]; "
                    "give each dataset its own name",
                )
            )
        seen_names.setdefault(dataset.name, index)

    quantization = config.model.quantization
    if train.adapter == "qlora" and quantization not in ("none", "bnb-4bit"):
        issues.append(
            (
                ("model", "quantization"),
                f"train.adapter = 'qlora' loads the base in 4-bit bitsandbytes; use 'bnb-4bit' or 'none', got {quantization!r}",
            )
        )
    if train.adapter in ("full", "freeze") and quantization != "none":
        issues.append(
            (
                ("train", "adapter"),
                f"a quantized base (model.quantization = {quantization!r}) cannot be trained with adapter = "
                f"{train.adapter!r}; use 'lora' or 'qlora'",
            )
        )
    if train.grpo.training_free and train.method != "grpo":
        issues.append(
            (
                ("train", "grpo", "training_free"),
                f"training-free GRPO needs train.method = 'grpo', got {train.method!r}",
            )
        )
    if train.method in ("grpo", "ppo") and train.completion_tokens >= train.max_length:
        issues.append(
            (
                train.completion_key,
                f"prompt and completion share train.max_length = {train.max_length}, so "
                f"max_completion_length = {train.completion_tokens} leaves no room for the prompt; "
                "lower it or raise train.max_length",
            )
        )
    issues += batching_issues(config)
    if config.eval.gates.rules:
        from gym.config.gates import gate_issues

        issues += gate_issues(config)
    if train.grpo.training_free:
        issues += training_free_issues(train)
    from gym.config.distributed import distributed_issues

    issues += distributed_issues(train)
    compute = config.compute
    if compute is not None and compute.num_nodes > 1:
        if train.method in SINGLE_NODE_ONLY:
            issues.append(
                (
                    ("compute", "num_nodes"),
                    f"{SINGLE_NODE_ONLY[train.method]} runs on one node; set num_nodes = 1, got {compute.num_nodes}",
                )
            )
        elif train.grpo.training_free:
            issues.append(
                (
                    ("compute", "num_nodes"),
                    f"training-free GRPO trains no weights and runs on one node; set num_nodes = 1, got {compute.num_nodes}",
                )
            )
    if compute is not None and (train.method in SINGLE_NODE_ONLY or train.grpo.training_free):
        what = SINGLE_NODE_ONLY.get(train.method, "training-free GRPO")
        for index, accelerator in enumerate(compute.accelerators):
            count = float(accelerator.partition(":")[2] or 1)
            if count > 1:  # the run script starts one process per GPU: one process is all these methods take
                issues.append(
                    (
                        ("compute", "accelerators", index),
                        f"{what} runs as one process, but {accelerator!r} starts {count:g}; "
                        f"ask for one GPU (e.g. '{accelerator.partition(':')[0]}:1')",
                    )
                )
    space = config.space
    if space is not None and space.backend == "vllm" and space.hardware.startswith(("cpu", "sprx", "auto")):
        issues.append(
            (
                ("space", "backend"),
                f"the vLLM backend needs GPU hardware; space.hardware is {space.hardware!r}",
            )
        )
    issues += space_token_issues(config.hub, space)
    return issues


def training_free_issues(train: TrainConfig) -> list[tuple[tuple[str | int, ...], str]]:
    """Keys that training-free GRPO cannot honour: it trains no weights, so it has no optimiser steps to
    accumulate and no loss curve to send to a tracker (its per-step record is train_results.json)."""
    issues: list[tuple[tuple[str | int, ...], str]] = []
    if train.report_to:
        issues.append((("train", "report_to"), "training-free GRPO trains no weights and logs no training "
                       "curves to trackers; its per-step rewards, library size and tokens go to "
                       "train_results.json. Remove train.report_to"))  # fmt: skip
    default_accumulation = type(train).model_fields["gradient_accumulation_steps"].default
    # Set and not the default: a resolved gym.toml written back by `gym train` spells every default out.
    if (
        "gradient_accumulation_steps" in train.model_fields_set
        and train.gradient_accumulation_steps != default_accumulation
    ):
        issues.append((("train", "gradient_accumulation_steps"), "training-free GRPO has no optimiser "
                       "steps to accumulate; train.batch_size sets the queries per step. Remove "
                       "train.gradient_accumulation_steps"))  # fmt: skip
    grpo = train.grpo
    if grpo.learner_api_key_env is not None and grpo.learner_api_base is None:
        issues.append((("train", "grpo", "learner_api_key_env"), "learner_api_key_env is the key of "
                       "learner_api_base, which is not set; the learner shares api_base and its api_key_env"))  # fmt: skip
    return issues
