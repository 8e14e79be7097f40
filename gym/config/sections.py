"""The ``[project]``, ``[model]`` and ``[[datasets]]`` tables of gym.toml."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Literal

from pydantic import Field, field_validator, model_validator

from gym.config.base import Section, fail

PROJECT_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")

# Names of the chat templates Gym ships (gym/data/templates registers each of them; a test keeps the
# two lists equal). Kept here as plain strings so `gym validate` never imports the data layer.
NAMED_TEMPLATES = (
    "chatml",
    "qwen3",
    "qwen2.5",
    "llama3",
    "llama3.1",
    "llama3.2",
    "llama3.3",
    "llama2",
    "mistral",
    "mistral-v0.3",
    "mistral-v0.2",
    "mistral-v0.1",
    "mistral-legacy",
    "gemma",
    "phi3",
    "phi3.5",
    "zephyr",
    "vicuna",
    "alpaca",
)

# Gym's offline models (gym/model/builtin.py builds them; plain strings so `gym validate` stays light).
BUILTIN_MODEL_NAMES = ("builtin:tiny", "builtin:tiny-vl")

DatasetFormat = Literal["alpaca", "sharegpt", "openai", "preference", "kto", "text", "prompt"]
ColumnRole = Literal[
    "prompt",
    "query",
    "response",
    "history",
    "system",
    "messages",
    "tools",
    "images",
    "videos",
    "audios",
    "chosen",
    "rejected",
    "label",
    "text",
    "answer",
]
TagRole = Literal[
    "role",
    "content",
    "user",
    "assistant",
    "system",
    "observation",
    "function",
]


class ProjectConfig(Section):
    """What the run is called and where its artifacts go."""

    name: str = Field(
        description="Project name: lowercase letters, digits and '-', 1-64 characters. "
        "Names the output folder, the cloud job and the default Hub repositories.",
        examples=["support-bot"],
    )
    output_dir: str | None = Field(
        default=None,
        description="Where checkpoints, the trained model, results and the model card are written. "
        "Default: outputs/<name>.",
        examples=["outputs/support-bot"],
    )
    allow_output_outside: bool = Field(
        default=False,
        description="Let the web UI save a gym.toml whose output_dir lies outside the gym.toml's folder "
        "(refused there by default: a browser user edits that file). The command line always allows it. "
        "A filesystem root, a system folder or the home folder itself is refused everywhere.",
    )

    @field_validator("output_dir")
    @classmethod
    def _check_output_dir(cls, value: str | None) -> str | None:
        from gym.config.paths import name_too_long

        problem = name_too_long(value) if value is not None else None
        if problem:
            raise fail(problem)
        return value

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not PROJECT_NAME.match(value):
            from gym.config.errors import looks_like_secret

            hint = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:64] or "my-project"
            suggestion = "" if looks_like_secret(value) else f"; try {hint!r}"  # a slugged token is still one
            raise fail(
                f"expected a project name of lowercase letters, digits and '-' "
                f"(1-64 characters, not starting or ending with '-'), got {value!r}{suggestion}"
            )
        return value

    @model_validator(mode="after")
    def _default_output_dir(self) -> ProjectConfig:
        if self.output_dir is None:
            self.output_dir = f"outputs/{self.name}"
        return self


class ModelConfig(Section):
    """The base model to fine-tune and how to load it."""

    name_or_path: str = Field(
        description="A Hugging Face Hub model id, a local folder, or 'builtin:tiny' "
        "(a small Llama that Gym builds offline, for demos and tests) or 'builtin:tiny-vl' "
        "(its vision-language twin: a tiny LLaVA).",
        examples=["Qwen/Qwen3-0.6B", "./models/my-base", "builtin:tiny"],
    )
    revision: str = Field(default="main", description="Hub branch, tag or commit of the model.")
    template: str = Field(
        default="auto",
        description="Chat template: 'auto' uses the tokenizer's own Jinja template; a registered name ("
        + ", ".join(NAMED_TEMPLATES)
        + ") or a path to a .jinja file overrides it. The template used is saved with the tokenizer.",
        examples=["auto", "qwen3", "chatml"],
    )
    trust_remote_code: bool = Field(
        default=False, description="Allow the model repository's own Python code to run (off by default)."
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        default="auto",
        description="Weights dtype. 'auto' picks bfloat16 where the hardware supports it, else float32.",
    )
    quantization: Literal["none", "bnb-4bit", "bnb-8bit", "gptq", "awq"] = Field(
        default="none",
        description="Quantized base: bitsandbytes 4/8-bit (QLoRA), or an already GPTQ/AWQ-quantized checkpoint.",
    )

    @field_validator("name_or_path")
    @classmethod
    def _check_name_or_path(cls, value: str) -> str:
        if not value.strip():
            raise fail("expected a Hub model id, a local folder or 'builtin:tiny', got an empty string")
        if value.startswith("builtin:") and value not in BUILTIN_MODEL_NAMES:
            raise fail(
                f"unknown built-in model {value!r}; the built-in models are "
                + ", ".join(repr(n) for n in BUILTIN_MODEL_NAMES)
            )
        return value

    @field_validator("template")
    @classmethod
    def _check_template(cls, value: str) -> str:
        if value == "auto" or value in NAMED_TEMPLATES or value.endswith((".jinja", ".j2")):
            return value
        from gym.config.suggest import did_you_mean

        raise fail(
            f"expected 'auto', a template name ({', '.join(NAMED_TEMPLATES)}) or a path to a .jinja file, "
            f"got {value!r}{did_you_mean(value, NAMED_TEMPLATES, 3)}"
        )


class DatasetConfig(Section):
    """One training dataset: where it lives, which format its rows have, how to map its columns."""

    name: str | None = Field(
        default=None,
        description="A short name for reports. Default: the file stem or the Hub id's last part.",
    )
    path: str | None = Field(
        default=None,
        description="A local file or folder (.json, .jsonl, .csv, .parquet), relative to gym.toml. "
        "Exactly one of path and hub.",
        examples=["data/support.jsonl"],
    )
    hub: str | None = Field(
        default=None,
        description="A Hugging Face Hub dataset id. Exactly one of path and hub.",
        examples=["tatsu-lab/alpaca"],
    )
    format: DatasetFormat = Field(
        description="Row format: alpaca (instruction/input/output), sharegpt (conversations of from/value), "
        "openai (messages of role/content), preference (chosen/rejected), kto (a boolean label), "
        "text (plain text, for continued pretraining), prompt (prompt + reference answer, for GRPO/PPO).",
    )
    split: str = Field(default="train", description="Split to read.")
    subset: str | None = Field(default=None, description="Hub dataset configuration (subset) name.")
    revision: str | None = Field(default=None, description="Hub dataset branch, tag or commit.")
    columns: dict[ColumnRole, str] = Field(
        default_factory=dict,
        description="Remap column names: { prompt = 'instruction', query = 'input', response = 'output' }.",
    )
    tags: dict[TagRole, str] = Field(
        default_factory=dict,
        description="Remap sharegpt tags: { role = 'from', content = 'value', user = 'human', assistant = 'gpt' }.",
    )
    max_samples: int | None = Field(default=None, gt=0, description="Read at most this many rows.")
    eval_fraction: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="Fraction of rows held out for evaluation during training."
    )
    max_bad_fraction: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="Bad rows are skipped and reported; the run fails when more than this fraction is bad.",
    )
    max_skipped_fraction: float = Field(
        default=0.1,
        ge=0.0,
        le=1.0,
        description="Rows whose last exchange cannot fit train.max_length are skipped and reported (never cut "
        "mid-answer); the run stops before training when more than this fraction of the dataset would be skipped.",
    )
    placeholders: dict[str, str] = Field(
        default_factory=dict,
        description="Values for {{name}}-style placeholders in the rows, e.g. { name = 'Gym', author = 'Zoo' }.",
    )

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str | None) -> str | None:
        from gym.config.paths import name_too_long

        problem = name_too_long(value) if value is not None else None
        if problem:
            raise fail(problem)
        return value

    @model_validator(mode="before")
    @classmethod
    def _exactly_one_source(cls, data: object) -> object:
        # A "before" check, so it is reported even when other keys of the table are wrong too.
        if isinstance(data, dict):
            has_path, has_hub = data.get("path") is not None, data.get("hub") is not None
            if has_path and has_hub:
                raise fail("set exactly one of 'path' and 'hub', not both")
            if not has_path and not has_hub:
                raise fail("set one of 'path' (a local file or folder) or 'hub' (a Hub dataset id)")
        return data

    @model_validator(mode="after")
    def _default_name(self) -> DatasetConfig:
        if self.name is None:
            source = self.path if self.path is not None else self.hub
            self.name = PurePosixPath(str(source).rstrip("/")).stem or str(source)
        return self
