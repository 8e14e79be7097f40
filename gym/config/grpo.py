"""The ``[train.grpo]`` table: GRPO with weights (TRL's GRPOTrainer) or training-free (experience library).

The loss family, clipping, KL and reward-scaling keys carry TRL's own names and values, so a recipe
written for TRL (``loss_type = "dapo"``, ``importance_sampling_level = "sequence"``, ``use_vllm = true``)
reads the same here; :func:`gym.train.methods.grpo.grpo_arguments` hands them to ``trl.GRPOConfig``
one to one. The values listed here are those of TRL 1.16; a run on a TRL that lacks the one chosen is
refused before the model loads (the installed TRL's own list is read then).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gym.config.base import EnvVarName, Section, fail

REWARD_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
BUILTIN_REWARDS = ("exact_match", "numeric_match", "regex_format", "length_penalty")
GrpoLoss = Literal["dapo", "grpo", "dr_grpo", "bnpo", "cispo", "sapo", "luspo", "vespo"]
LOSS_TYPES: tuple[str, ...] = GrpoLoss.__args__  # type: ignore[attr-defined]
VLLM_SERVER_KEYS = ("vllm_server_base_url", "vllm_server_host", "vllm_server_port")
VLLM_KEYS = ("vllm_mode", *VLLM_SERVER_KEYS, "vllm_gpu_memory_utilization")
# gym.toml key under [train.grpo] -> the trl.GRPOConfig field it becomes (a test compares with TRL's dataclass)
TRL_FIELDS = {
    "group_size": "num_generations",
    "max_completion_length": "max_completion_length",
    "temperature": "temperature",
    "loss_type": "loss_type",
    "importance_sampling_level": "importance_sampling_level",
    "epsilon": "epsilon",
    "epsilon_high": "epsilon_high",
    "beta": "beta",
    "scale_rewards": "scale_rewards",
    "mask_truncated_completions": "mask_truncated_completions",
    "use_vllm": "use_vllm",
    "vllm_mode": "vllm_mode",
    "vllm_server_base_url": "vllm_server_base_url",
    "vllm_server_host": "vllm_server_host",
    "vllm_server_port": "vllm_server_port",
    "vllm_gpu_memory_utilization": "vllm_gpu_memory_utilization",
}
TRL_NAMES = {trl: key for key, trl in TRL_FIELDS.items() if trl != key}  # accepted in gym.toml too


class GrpoConfig(Section):
    """Group relative policy optimisation, with weights or training-free (experience library)."""

    group_size: int = Field(
        default=5,
        ge=2,
        description="Completions sampled per prompt (G; TRL's num_generations, accepted too).",
    )
    reward: list[str] = Field(
        default_factory=lambda: ["exact_match"],
        min_length=1,
        description="Reward functions: built-in names ("
        + ", ".join(BUILTIN_REWARDS)
        + ") or 'module.path:function'.",
    )
    max_completion_length: int = Field(
        default=256, gt=0, description="Longest completion sampled, in tokens."
    )
    temperature: float = Field(default=0.7, gt=0, le=2, description="Sampling temperature of rollouts.")
    loss_type: GrpoLoss = Field(
        default="dapo",
        description="TRL's loss formulation: dapo (TRL's default: token losses over the active tokens of the "
        "whole accumulated batch), grpo (per sequence, length-biased), dr_grpo (Dr. GRPO: a constant "
        "normaliser), bnpo (active tokens of the local batch), cispo (MiniMax-M1: clipped importance "
        "weights), sapo (soft gate instead of clipping), luspo (length-unbiased sequence loss, with "
        "importance_sampling_level = 'sequence'), vespo (Gamma-weighted sequence weights).",
    )
    importance_sampling_level: Literal["token", "sequence"] = Field(
        default="token",
        description="'token': one importance ratio per token; 'sequence': one per completion (GSPO; pair it "
        "with loss_type = 'grpo' to reproduce the paper).",
    )
    epsilon: float = Field(
        default=0.2, gt=0, lt=1, description="Lower clipping bound of the importance ratio."
    )
    epsilon_high: float | None = Field(
        default=None,
        gt=0,
        lt=10,
        description="Upper clipping bound (DAPO's clip-higher, e.g. 0.28); default: epsilon.",
    )
    beta: float = Field(
        default=0.0,
        ge=0,
        description="KL coefficient to the reference model; 0 (TRL's default) loads no reference model.",
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        default="group",
        description="How advantages are scaled: by the standard deviation of each prompt's group, of the "
        "whole batch, or not at all ('none', as Dr. GRPO recommends). TRL's true/false mean group/none.",
    )
    mask_truncated_completions: bool = Field(
        default=False,
        description="Leave completions cut at max_completion_length out of the loss (DAPO's advice).",
    )
    use_vllm: bool = Field(
        default=False,
        description="Sample rollouts with vLLM instead of transformers' generate (a CUDA GPU and the vllm "
        "package on the machine that trains; refused on CPU).",
    )
    vllm_mode: Literal["colocate", "server"] = Field(
        default="colocate",
        description="'colocate': vLLM runs inside the training process and shares its GPUs; 'server': a "
        "`trl vllm-serve` server started beside the run.",
    )
    vllm_server_base_url: str | None = Field(
        default=None,
        description="vllm_mode = 'server': the server's URL; or give vllm_server_host and vllm_server_port.",
        examples=["http://127.0.0.1:8000"],
    )
    vllm_server_host: str | None = Field(
        default=None,
        description="vllm_mode = 'server': the server's host (default 0.0.0.0, TRL's: this machine).",
    )
    vllm_server_port: int | None = Field(
        default=None, ge=1, le=65535, description="vllm_mode = 'server': the server's port (default 8000)."
    )
    vllm_gpu_memory_utilization: float = Field(
        default=0.3,
        gt=0,
        le=1,
        description="vllm_mode = 'colocate': the fraction of each GPU's memory vLLM may take.",
    )
    training_free: bool = Field(
        default=False,
        description="True: the weights stay frozen and only an experience library (JSON) learns.",
    )
    experience_lib_path: str = Field(
        default="experiences", description="Folder of the experience library (training-free GRPO)."
    )
    max_experiences_per_group: int = Field(
        default=2, gt=0, description="K: experiences the learner may propose from one group (training-free)."
    )
    api_base: str | None = Field(
        default=None,
        description="An OpenAI-compatible endpoint for training-free rollouts; default: the local model.",
        examples=["http://127.0.0.1:8000/v1"],
    )
    api_key_env: EnvVarName | None = Field(
        default=None,
        description="Environment variable holding the endpoint's API key.",
        examples=["OPENAI_API_KEY"],
    )
    learner_api_base: str | None = Field(
        default=None,
        description="Training-free: an OpenAI-compatible endpoint for the learner (the model that summarises "
        "rollouts and edits the library); default: the policy's endpoint (api_base).",
        examples=["https://api.deepseek.com/v1"],
    )
    learner_model: str | None = Field(
        default=None,
        description="Training-free: the learner's model id at learner_api_base; default: the policy model.",
        examples=["deepseek-chat"],
    )
    learner_api_key_env: EnvVarName | None = Field(
        default=None,
        description="Training-free: environment variable holding the learner endpoint's API key; "
        "default: api_key_env when the learner shares the policy's endpoint.",
        examples=["LEARNER_API_KEY"],
    )
    learner_temperature: float = Field(
        default=0.3, ge=0, le=2, description="Training-free: sampling temperature of the learner's calls."
    )
    learner_max_tokens: int = Field(
        default=2048,
        gt=0,
        description="Training-free: longest learner reply (summary, experiences, operations), in tokens.",
    )
    concurrency: int = Field(
        default=16,
        gt=0,
        le=1024,
        description="Training-free: requests in flight at once (policy and learner together).",
    )
    request_timeout: float = Field(
        default=300.0,
        gt=0,
        le=86400,
        description="Training-free: seconds before one HTTP request is given up (then retried).",
    )

    @field_validator("reward")
    @classmethod
    def _check_rewards(cls, value: list[str]) -> list[str]:
        from gym.config.suggest import did_you_mean

        for name in value:
            if name not in BUILTIN_REWARDS and not REWARD_REFERENCE.match(name):
                raise fail(
                    f"expected a built-in reward ({', '.join(BUILTIN_REWARDS)}) or 'module.path:function', "
                    f"got {name!r}{did_you_mean(name, BUILTIN_REWARDS)}"
                )
        return value

    @field_validator("api_base", "learner_api_base")
    @classmethod
    def _check_api_base(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+", value):
            raise fail(f"expected an http(s) URL such as 'http://127.0.0.1:8000/v1', got {value!r}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _trl_names(cls, data: Any) -> Any:
        """TRL's ``num_generations`` is Gym's ``group_size``: a recipe written for TRL reads as it is."""
        if not isinstance(data, dict):
            return data
        for trl_name, name in TRL_NAMES.items():
            if trl_name in data:
                if name in data:
                    raise fail(f"set {name} or {trl_name} (TRL's name for it), not both")
                data = {(name if key == trl_name else key): value for key, value in data.items()}
        return data

    @field_validator("scale_rewards", mode="before")
    @classmethod
    def _scale_rewards_bool(cls, value: object) -> object:
        return {True: "group", False: "none"}.get(value, value) if isinstance(value, bool) else value  # type: ignore[call-overload]

    @field_validator("vllm_server_base_url")
    @classmethod
    def _check_server_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+", value):
            raise fail(f"expected an http(s) URL such as 'http://127.0.0.1:8000', got {value!r}")
        return value

    @model_validator(mode="after")
    def _check_pairs(self) -> GrpoConfig:
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            raise fail(f"epsilon_high ({self.epsilon_high:g}) is below epsilon ({self.epsilon:g}); "
                       "the upper clipping bound must be at least the lower one")  # fmt: skip
        # Judged on values, not on which keys were written: the resolved gym.toml saved beside the weights
        # writes every default, and must read back.
        defaults = {name: field.default for name, field in type(self).model_fields.items()}
        changed = [key for key in VLLM_KEYS if getattr(self, key) != defaults[key]]
        if changed and not self.use_vllm:
            raise fail(f"{changed[0]} applies to vLLM rollouts; set use_vllm = true, or remove it")
        server = [key for key in VLLM_SERVER_KEYS if getattr(self, key) is not None]
        if server and self.vllm_mode != "server":
            raise fail(f"{server[0]} is the address of a vLLM server; set vllm_mode = 'server' to use one")
        if self.vllm_server_base_url is not None and len(server) > 1:
            raise fail("set vllm_server_base_url or vllm_server_host/vllm_server_port, not both")
        if self.vllm_mode == "server" and "vllm_gpu_memory_utilization" in changed:
            raise fail(
                "vllm_gpu_memory_utilization applies to vllm_mode = 'colocate'; a vLLM server takes "
                "it when started (trl vllm-serve --gpu-memory-utilization)"
            )
        return self
