"""The ``[eval]``, ``[compute]``, ``[hub]`` and ``[space]`` tables: what happens around training."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from gym.config.base import EnvVarName, Section, fail
from gym.config.gates import GatesConfig
from gym.config.judge import JudgeConfig

ACCELERATOR = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_.-]*)(?::(?P<count>[0-9]+(?:\.[0-9]+)?))?$")
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
INFRA = re.compile(r"^[a-z0-9][a-z0-9-]*(?:/[^\s/]+){0,2}$")
BUCKET_SCHEMES = ("s3", "gs", "r2", "cos", "oci", "https")
SPACE_HARDWARE = (
    "cpu-basic", "cpu-upgrade", "cpu-performance", "cpu-xl", "sprx8", "zero-a10g",
    "t4-small", "t4-medium", "l4x1", "l4x4", "l40sx1", "l40sx4", "l40sx8",
    "a10g-small", "a10g-large", "a10g-largex2", "a10g-largex4", "a100-large", "a100x4", "a100x8",
    "h100", "h100x8", "h200", "h200x2", "h200x4", "h200x8", "inf2x6",
)  # fmt: skip
CPU_SPACE_HARDWARE = tuple(name for name in SPACE_HARDWARE if name.startswith("cpu-"))


def check_repo_id(value: str) -> str:
    if not REPO_ID.match(value):
        raise fail(f"expected a Hub repository id 'owner/name', got {value!r}")
    return value


RepoId = Annotated[str, AfterValidator(check_repo_id)]


def check_accelerator(value: str) -> str:
    match = ACCELERATOR.match(value)
    if match is None or (match["count"] is not None and float(match["count"]) <= 0):
        raise fail(
            f"expected an accelerator as NAME or NAME:COUNT with a positive count (e.g. 'A100:1', 'H100:8'), "
            f"got {value!r}"
        )
    return value


Accelerator = Annotated[str, AfterValidator(check_accelerator)]


class EvalConfig(Section):
    """Benchmarks run after training through lm-eval, on the tuned and (optionally) the base model."""

    tasks: list[str] = Field(
        default_factory=list,
        description="lm-eval task names (mmlu, ceval-valid, cmmlu, gsm8k, ...), paths to local lm-eval task "
        "YAML files, or Gym's built-in tasks. Empty: no evaluation stage.",
        examples=[["mmlu", "cmmlu"]],
    )
    num_fewshot: int = Field(default=5, ge=0, description="Few-shot examples per prompt.")
    limit: int = Field(default=0, ge=0, description="0 evaluates every sample; N > 0 at most N per task.")
    baseline: bool = Field(default=True, description="Also evaluate the base model and report the delta.")
    batch_size: int = Field(default=8, gt=0, description="Evaluation batch size.")
    gates: GatesConfig = Field(
        default_factory=GatesConfig,
        description="Promotion gates ([eval.gates]): rules the scores must meet before the run is pushed.",
    )
    judge: JudgeConfig | None = Field(
        default=None,
        description="An LLM judge ([eval.judge]): win rates against the base and the champion, rubric scores "
        "(task 'judge' in the table, the card and the gates; docs/judge.md).",
    )

    @field_validator("tasks")
    @classmethod
    def _no_blank_tasks(cls, value: list[str]) -> list[str]:
        if any(not task.strip() for task in value):
            raise fail("expected task names or paths, got an empty string in the list")
        return list(dict.fromkeys(value))


class ComputeConfig(Section):
    """Where `gym launch --cloud` runs: through SkyPilot on any cloud, or on Hugging Face Jobs."""

    provider: Literal["skypilot", "hf-jobs"] = Field(
        default="skypilot",
        description="'skypilot': any cloud your credentials reach, spot with recovery, multi-node. 'hf-jobs': "
        "Hugging Face Jobs, which needs only the Hub token (billed per minute to its account; no spot, one "
        "machine of up to 8 GPUs); set compute.flavor.",
    )
    flavor: str = Field(
        default="",
        description="Hugging Face Jobs hardware (provider = 'hf-jobs'), e.g. 'l4x1', 'a10g-large', 'a100-large', "
        "'h200x8'; `gym launch --cloud --dryrun` shows its hourly price.",
        examples=["l4x1", "a100-large"],
    )
    checkpoint_volume: str = Field(
        default="",
        description="provider = 'hf-jobs': a Hub Storage Bucket ('bucket:OWNER/NAME') mounted read-write as the "
        "run's output folder, so a job stopped by its timeout (or a failure) is resumed by the next launch "
        "from its last checkpoint. Empty: the outputs live and die with the job.",
        examples=["bucket:my-org/gym-checkpoints"],
    )

    accelerators: list[Accelerator] = Field(
        default_factory=lambda: ["A100:1"],
        min_length=1,
        description="Candidate accelerators as NAME:COUNT; SkyPilot takes whichever is available and cheapest.",
        examples=[["A100:1", "L4:1"], ["H100:8"]],
    )
    infra: str = Field(
        default="",
        description="'' for any enabled cloud, or 'aws', 'gcp/us-central1', 'k8s', 'k8s/my-context', ...",
    )
    use_spot: bool = Field(
        default=False, description="Use spot/preemptible instances (pair with managed = true)."
    )
    num_nodes: int = Field(
        default=1, ge=1, le=512, description="Machines for multi-node data-parallel training."
    )
    disk_size: int = Field(default=256, ge=10, description="Disk per node, in GB.")
    managed: bool = Field(
        default=True, description="Run as a SkyPilot managed job that recovers from preemption."
    )
    autostop_minutes: int = Field(
        default=10,
        ge=0,
        description="Unmanaged clusters stop after this many idle minutes (0: tear down when done).",
    )
    max_runtime_hours: float = Field(
        default=0,
        ge=0,
        le=24 * 30,
        description="Stop the cloud run (train → eval → card) after this many hours; 0 = no limit. The clock "
        "restarts when a managed job recovers from preemption. The GitHub Action's plan shows the hourly "
        "price times this bound.",
        examples=[6, 0.5],
    )
    checkpoint_bucket: str = Field(
        default="",
        description="A bucket mounted as the checkpoint folder so preempted jobs resume: s3://, gs://, r2://, "
        "cos://, oci:// or an Azure https://<account>.blob.core.windows.net/<container> URL.",
        examples=["s3://my-bucket/gym"],
    )

    @field_validator("flavor")
    @classmethod
    def _check_flavor(cls, value: str) -> str:
        if value:
            from gym.config.job_flavors import FLAVORS

            if value not in FLAVORS:
                from gym.config.suggest import did_you_mean

                raise fail(f"expected a Hugging Face Jobs flavor ({', '.join(FLAVORS)}), got {value!r}"
                           f"{did_you_mean(value, tuple(FLAVORS))}")  # fmt: skip
        return value

    @field_validator("checkpoint_volume")
    @classmethod
    def _check_volume(cls, value: str) -> str:
        kind, sep, source = value.partition(":")
        if value and (kind != "bucket" or not sep or not REPO_ID.match(source)):
            raise fail(f"expected a Hub Storage Bucket as 'bucket:OWNER/NAME', got {value!r}")
        return value

    @model_validator(mode="after")
    def _check_provider(self) -> ComputeConfig:
        if self.provider == "hf-jobs":
            if not self.flavor:
                raise fail(
                    "provider = 'hf-jobs' needs compute.flavor (e.g. 'l4x1'): the hardware the job runs on"
                )
            for key, wrong, why in (("use_spot", self.use_spot, "Hugging Face Jobs has no spot instances"),
                                    ("num_nodes", self.num_nodes > 1, "a Hugging Face job is one machine"),
                                    ("checkpoint_bucket", bool(self.checkpoint_bucket),
                                     "use compute.checkpoint_volume = 'bucket:OWNER/NAME'")):  # fmt: skip
                if wrong:
                    raise fail(f"compute.{key} does not apply to provider = 'hf-jobs': {why}")
        elif self.flavor or self.checkpoint_volume:
            raise fail("compute.flavor and compute.checkpoint_volume are for provider = 'hf-jobs'")
        return self

    @field_validator("infra")
    @classmethod
    def _check_infra(cls, value: str) -> str:
        if value and not INFRA.match(value):
            raise fail(
                f"expected '' (any cloud) or CLOUD[/REGION[/ZONE]] such as 'gcp/us-central1', got {value!r}"
            )
        return value

    @field_validator("checkpoint_bucket")
    @classmethod
    def _check_bucket(cls, value: str) -> str:
        if not value:
            return value
        scheme, sep, rest = value.partition("://")
        if not sep or scheme not in BUCKET_SCHEMES or not rest.strip("/"):
            raise fail(
                f"expected a bucket URL starting with one of {', '.join(s + '://' for s in BUCKET_SCHEMES)}, "
                f"got {value!r}"
            )
        if scheme == "https" and ".blob.core.windows.net/" not in value:
            raise fail(
                f"expected an Azure blob URL https://<account>.blob.core.windows.net/<container>, got {value!r}"
            )
        return value


class HubConfig(Section):
    """Where the trained model and its card are pushed on the Hugging Face Hub."""

    repo_id: RepoId = Field(description="Model repository 'owner/name'.", examples=["my-org/support-bot"])
    private: bool = Field(default=True, description="Create the repository as private.")
    push: Literal["adapter", "merged", "none"] = Field(
        default="adapter", description="Push the LoRA adapter, the merged full model, or nothing."
    )
    token_env: EnvVarName = Field(
        default="HF_TOKEN", description="Environment variable holding the Hub token."
    )


class SpaceConfig(Section):
    """The Hugging Face Space generated for the model: a Gradio chat plus an OpenAI-compatible API."""

    repo_id: RepoId = Field(
        description="Space repository 'owner/name'.", examples=["my-org/support-bot-chat"]
    )
    hardware: str = Field(
        default="auto",
        description="Space hardware flavour: 'auto' or one of "
        + ", ".join(SPACE_HARDWARE)
        + ". 'auto' picks "
        "what the owner's plan can host (read from the token's whoami at deploy): cpu-basic for a PRO user or "
        "a Team/Enterprise organization, zero-a10g (ZeroGPU) for a free personal account. A flavour the plan "
        "cannot have (since July 2026 the Hub refuses Gradio Spaces on cpu-basic without PRO/Team, and paid "
        "hardware without a payment method) is refused before training: by `gym deploy --dry-run`, the first "
        "stage of `gym launch` and the Action's plan. `gym validate` stays offline and does not check it.",
    )
    backend: Literal["transformers", "vllm"] = Field(
        default="transformers", description="Serving engine in the Space."
    )
    cpu_format: Literal["auto", "gguf-q8_0", "gguf-q4_k_m", "gguf-f16", "transformers"] = Field(
        default="auto",
        description="Weights a CPU Space (hardware cpu-*) serves. 'auto': 'gguf-q8_0' for a Llama, Mistral or "
        "Qwen2 model, else 'transformers'. 'gguf-*': gym deploy converts the model to one GGUF file "
        "(8-bit q8_0, 4-bit q4_k_m, or f16), checks it, measures its quality against the full-precision "
        "model, pushes it with the model and the Space serves it with llama.cpp; q4_k_m needs "
        "llama-cpp-python where you deploy (make gguf). 'transformers': the Space serves the pushed weights "
        "with space.backend. GPU hardware ignores this key and keeps space.backend.",
    )
    private: bool = Field(default=False, description="Create the Space as private.")
    api_key_env: EnvVarName = Field(
        default="GYM_API_KEY",
        description="Name of the Space secret (and local environment variable) whose value the Space's "
        "OpenAI API requires as its key when set.",
    )
    hf_token_env: EnvVarName | None = Field(
        default=None,
        description="Environment variable holding a read-only Hub token that deploy sets as the Space's "
        "HF_TOKEN secret, so the Space can download a private model. A private model (hub.private) needs "
        "this or space.reuse_push_token = true.",
        examples=["HF_READ_TOKEN"],
    )
    reuse_push_token: bool = Field(
        default=False,
        description="Give the Space the push token (hub.token_env) as its HF_TOKEN secret instead of a read "
        "token. That token can write to every repository of its account, and the Space holds it; prefer "
        "space.hf_token_env.",
    )
    wait_minutes: float = Field(
        default=15,
        ge=0,
        description="How long `gym deploy` (and gym launch's deploy stage) follows the pushed Space until it is "
        "RUNNING and has answered one chat request through its API; a Space that fails to build or start "
        "fails the deploy with the last lines of its log. 0 = do not wait (the deploy then says nothing about "
        "whether the Space runs).",
    )

    @field_validator("hardware")
    @classmethod
    def _check_hardware(cls, value: str) -> str:
        if value != "auto" and value not in SPACE_HARDWARE:
            from gym.config.suggest import did_you_mean

            raise fail(
                f"expected 'auto' or a Space hardware flavour ({', '.join(SPACE_HARDWARE)}), got {value!r}"
                f"{did_you_mean(value, ('auto', *SPACE_HARDWARE))}"
            )
        return value


def space_token_issues(hub: HubConfig | None, space: SpaceConfig | None) -> list[tuple[tuple[str, ...], str]]:
    """A private model's Space must be given a token on purpose: a read token, or the push token by opt-in."""
    if space is None:
        return []
    if space.hf_token_env and space.reuse_push_token:
        return [(("space", "reuse_push_token"), "set space.hf_token_env (a read token) or space.reuse_push_token "
                 "= true (the push token), not both")]  # fmt: skip
    if hub is not None and space.hf_token_env == hub.token_env:
        return [(("space", "hf_token_env"), f"space.hf_token_env names the push token ${hub.token_env} "
                 "(hub.token_env), which can write to the whole account: name a variable holding a read token, "
                 "or set space.reuse_push_token = true to give the Space the push token on purpose")]  # fmt: skip
    if hub is not None and hub.private and not space.hf_token_env and not space.reuse_push_token:
        return [(("space", "hf_token_env"), f"the model {hub.repo_id} is private, so its Space needs a token to "
                 "read it: set space.hf_token_env to the variable holding a read token, or space.reuse_push_token "
                 f"= true to give the Space the push token ${hub.token_env}, which can write to the whole account")]  # fmt: skip
    return []
