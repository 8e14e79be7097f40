"""The ``[train]`` table and its method-specific subtables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from gym.config.base import Section, fail
from gym.config.distributed import DistributedConfig
from gym.config.grpo import BUILTIN_REWARDS, GrpoConfig  # noqa: F401  (BUILTIN_REWARDS: re-exported)
from gym.config.messages import describe

TrainMethod = Literal["sft", "dpo", "kto", "ppo", "grpo", "rm", "pt"]
Adapter = Literal["lora", "qlora", "dora", "full", "freeze"]
Tracker = Literal["wandb", "mlflow", "tensorboard", "trackio", "comet_ml", "swanlab"]
PPO_SAMPLING_KEYS = ("max_completion_length", "temperature")  # once read from train.grpo, now train.ppo


class LoraConfig(Section):
    """LoRA / QLoRA / DoRA adapter shape."""

    r: int = Field(default=16, gt=0, le=4096, description="Adapter rank.")
    alpha: float = Field(default=32, gt=0, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(default=0.05, ge=0.0, lt=1.0, description="Dropout on the adapter input.")
    target_modules: Literal["all-linear"] | list[str] = Field(
        default="all-linear",
        description="'all-linear' (every linear layer but the output head) or a list of module names.",
        examples=["all-linear", ["q_proj", "v_proj"]],
    )

    @field_validator("target_modules", mode="before")
    @classmethod
    def _check_target_modules(cls, value: object) -> object:
        # Checked up front so a wrong value gets one sentence, not one error per member of the union.
        if value == "all-linear":
            return value
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise fail(f"expected 'all-linear' or a non-empty array of module names, got {describe(value)}")
        return value


class FreezeConfig(Section):
    """Partial fine-tuning: everything frozen but the last layers."""

    trainable_layers: int = Field(
        default=2, gt=0, description="How many of the last decoder layers are trained (adapter = 'freeze')."
    )


class DpoConfig(Section):
    """Direct preference optimisation."""

    beta: float = Field(
        default=0.1, gt=0, description="Strength of the KL constraint to the reference model."
    )
    loss_type: Literal["sigmoid", "ipo", "hinge", "robust", "simpo", "orpo"] = Field(
        default="sigmoid",
        description="Preference loss: sigmoid (DPO), ipo, hinge, robust; simpo (SimPO, reference-free, on TRL's "
        "CPOTrainer; beta is its reward scale, typically 2-10) or orpo (ORPO, reference-free, SFT loss plus "
        "an odds-ratio term weighted by beta, typically 0.1).",
    )
    simpo_gamma: float = Field(
        default=0.5, ge=0, description="Target reward margin of loss_type = 'simpo' (SimPO's gamma)."
    )


class KtoConfig(Section):
    """Kahneman-Tversky optimisation on unpaired, labelled rows."""

    beta: float = Field(
        default=0.1, gt=0, description="Strength of the KL constraint to the reference model."
    )
    desirable_weight: float = Field(default=1.0, gt=0, description="Loss weight of rows labelled true.")
    undesirable_weight: float = Field(default=1.0, gt=0, description="Loss weight of rows labelled false.")


class PpoConfig(Section):
    """Proximal policy optimisation (Gym's own implementation; TRL no longer ships one)."""

    reward_model: str | None = Field(
        default=None,
        description="Path of a reward model trained with method = 'rm'. Default: use train.grpo.reward functions.",
    )
    kl_coef: float = Field(default=0.05, ge=0, description="KL penalty to the frozen reference policy.")
    clip_range: float = Field(default=0.2, gt=0, lt=1, description="Policy ratio clipping.")
    gamma: float = Field(default=1.0, gt=0, le=1, description="Discount factor.")
    lam: float = Field(default=0.95, gt=0, le=1, description="GAE lambda.")
    ppo_epochs: int = Field(default=4, gt=0, description="Optimisation passes over each batch of rollouts.")
    max_completion_length: int = Field(
        default=256,
        gt=0,
        description="Longest completion sampled per prompt in a rollout, in tokens (prompt and completion share "
        "train.max_length).",
    )
    temperature: float = Field(
        default=0.7,
        gt=0,
        le=2,
        description="Sampling temperature of rollouts; PPO samples at exactly this temperature (no top-k or "
        "top-p), the distribution its probability ratios and KL are computed with.",
    )


class TrainConfig(Section):
    """How to train: the method, the adapter and the optimisation settings."""

    method: TrainMethod = Field(
        default="sft",
        description="sft (supervised), pt (continued pretraining on text), dpo, kto, rm (reward model), ppo, grpo.",
    )
    adapter: Adapter = Field(
        default="lora",
        description="lora, qlora (4-bit base + LoRA), dora, full (all weights) or freeze (last layers only).",
    )
    epochs: float = Field(default=3.0, gt=0, description="Passes over the training data.")
    max_steps: int = Field(
        default=-1, ge=-1, description="When > 0, train exactly this many steps (overrides epochs)."
    )
    learning_rate: float = Field(default=2e-4, gt=0, lt=1, description="Peak learning rate.")
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup"] = Field(
        default="cosine", description="Learning-rate schedule after warm-up."
    )
    warmup_ratio: float = Field(default=0.03, ge=0, lt=1, description="Fraction of steps spent warming up.")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    batch_size: int = Field(default=4, gt=0, description="Per-device batch size.")
    gradient_accumulation_steps: int = Field(default=4, gt=0, description="Micro-batches per optimiser step.")
    max_length: int = Field(
        default=2048,
        ge=16,
        description="Longest tokenized sample; longer rows are handled, never cut silently.",
    )
    packing: bool = Field(
        default=False,
        description="Pack several samples per row of up to max_length tokens (best fit, never cut); packed "
        "samples never attend to each other.",
    )
    padding_free: Literal["auto"] | bool = Field(
        default="auto",
        description="Concatenate the samples of a micro-batch into one row without padding (SFT and pt), "
        "attention kept within each sample. 'auto': on CPU when the model uses SDPA attention (Gym then "
        "computes attention per sample at padded cost and everything else on real tokens only), and "
        "whenever train.packing is on; false: right-padded batches.",
    )
    gradient_checkpointing: Literal["auto"] | bool = Field(
        default="auto", description="'auto': on for GPUs, off on CPU (measured slower there)."
    )
    cpu_threads: Literal["auto", "fastest"] | int = Field(
        default="auto",
        description="Torch threads when training on CPU. 'auto': OMP_NUM_THREADS if set, else one per core "
        "this process may use, whatever the load, so reruns and resumed runs give the same weights. "
        "'fastest' (not reproducible: results depend on the thread count): the first steps alternate one "
        "thread and one per core and the faster per trained token is kept (train_results.json records the "
        "measurement).",
    )
    cpu_kernels: Literal["auto"] | bool = Field(
        default="auto",
        description="Gym's CPU-only training speed-ups (LoRA products through a merged weight, packed "
        "per-sample attention for padding-free SFT, length-grouped batches, trainable-only gradient "
        "clipping, the cpu_threads policy; docs/cpu-kernels.md). 'auto': on when training on CPU, off on a "
        "GPU; false: a CPU run takes exactly the path a GPU node takes (PEFT's LoRA layers, transformers' "
        "attention, the standard collator, torch's default threads); true: on, refused on a CUDA machine. "
        "The environment variable GYM_CPU_KERNELS=0|1|auto overrides it.",
    )
    liger_kernel: bool = Field(
        default=False,
        description="GPU only: Liger's Triton kernels (RMSNorm, RoPE, SwiGLU, fused linear cross-entropy) "
        "in place of the model's own, for less memory and more speed (transformers' use_liger_kernel; "
        "pip install liger-kernel). Refused on CPU (docs/gpu.md).",
    )
    cut_cross_entropy: bool = Field(
        default=False,
        description="GPU only: Apple's Cut Cross-Entropy computes the loss without materialising the logits "
        "of the whole vocabulary (pip install cut-cross-entropy). Refused on CPU (docs/gpu.md).",
    )
    seed: int = Field(default=42, ge=0, description="Seed for data order, initialisation and sampling.")
    logging_steps: int = Field(default=10, gt=0, description="Log loss and throughput every N steps.")
    save_steps: int = Field(default=200, gt=0, description="Write a checkpoint every N steps.")
    eval_steps: int | None = Field(
        default=None,
        gt=0,
        description="Evaluate the held-out rows (datasets.eval_fraction) every N steps, besides before the first "
        "and after the last step. Default: save_steps.",
    )
    save_total_limit: int = Field(default=3, gt=0, description="Checkpoints kept on disk.")
    resume: str = Field(
        default="auto",
        description="'auto' resumes from the latest complete checkpoint in output_dir, 'never' starts over, "
        "or the path of a checkpoint.",
    )
    report_to: list[Tracker] = Field(
        default_factory=list, description="Experiment trackers, e.g. ['wandb'] or ['tensorboard']."
    )
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA / QLoRA / DoRA settings.")
    freeze: FreezeConfig = Field(default_factory=FreezeConfig, description="Settings of adapter = 'freeze'.")
    dpo: DpoConfig = Field(default_factory=DpoConfig, description="Settings of method = 'dpo'.")
    kto: KtoConfig = Field(default_factory=KtoConfig, description="Settings of method = 'kto'.")
    ppo: PpoConfig = Field(default_factory=PpoConfig, description="Settings of method = 'ppo'.")
    grpo: GrpoConfig = Field(default_factory=GrpoConfig, description="Settings of method = 'grpo'.")
    distributed: DistributedConfig = Field(
        default_factory=DistributedConfig,
        description="Training over several processes: DDP, FSDP or DeepSpeed ZeRO.",
    )

    _ppo_keys_in_grpo: list[str] = PrivateAttr(default_factory=list)

    @field_validator("cpu_threads", mode="before")
    @classmethod
    def _check_threads(cls, value: object) -> object:
        if value in ("auto", "fastest") or (
            isinstance(value, int) and not isinstance(value, bool) and value >= 1
        ):
            return value
        raise fail(f"expected 'auto', 'fastest' or a whole number >= 1, got {describe(value)}")

    @field_validator("gradient_checkpointing", "padding_free", "cpu_kernels", mode="before")
    @classmethod
    def _check_checkpointing(cls, value: object) -> object:
        if value == "auto" or isinstance(value, bool):
            return value
        raise fail(f"expected 'auto', true or false, got {describe(value)}")

    @model_validator(mode="after")
    def _ppo_sampling_from_grpo(self) -> TrainConfig:
        """Configs written before [train.ppo] had sampling keys set them under train.grpo: PPO still uses those."""
        if self.method == "ppo":
            self._ppo_keys_in_grpo = [
                key
                for key in PPO_SAMPLING_KEYS
                if key in self.grpo.model_fields_set and key not in self.ppo.model_fields_set
            ]
            for key in self._ppo_keys_in_grpo:
                setattr(self.ppo, key, getattr(self.grpo, key))
        return self

    @property
    def ppo_keys_in_grpo(self) -> list[str]:
        """PPO sampling keys this config sets under train.grpo (the older place) rather than train.ppo."""
        return list(self._ppo_keys_in_grpo)

    @property
    def completion_key(self) -> tuple[str, str, str]:
        """Where this method's ``max_completion_length`` is set (GRPO: train.grpo; PPO: train.ppo)."""
        moved = self.method == "ppo" and "max_completion_length" not in self._ppo_keys_in_grpo
        return ("train", "ppo" if moved else "grpo", "max_completion_length")

    @property
    def completion_tokens(self) -> int:
        """Tokens a GRPO/PPO prompt leaves free for the completions sampled from it."""
        return self.ppo.max_completion_length if self.method == "ppo" else self.grpo.max_completion_length

    @field_validator("resume")
    @classmethod
    def _check_resume(cls, value: str) -> str:
        if not value.strip():
            raise fail("expected 'auto', 'never' or a checkpoint path, got an empty string")
        return value

    @field_validator("report_to")
    @classmethod
    def _unique_trackers(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))
