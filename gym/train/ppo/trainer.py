"""PPO for language models on plain transformers / PEFT / accelerate (TRL no longer ships a PPOTrainer).

One training step is one rollout batch of ``train.batch_size`` prompts: sample a completion for each
(``train.ppo.max_completion_length`` tokens at ``train.ppo.temperature``), score it (reward model or
reward functions, see :mod:`gym.train.ppo.rewards`), fold a per-token KL penalty to the frozen reference
into the rewards, compute GAE advantages and returns, whiten the advantages, then take
``train.ppo.ppo_epochs`` optimizer steps on the clipped policy loss plus the clipped value loss.

The value head is one linear layer on the policy's last hidden state (it shares the body and its
adapters); the reference is the same model with its adapters disabled under PEFT, a frozen copy
otherwise. The model runs in eval mode throughout: dropout would make the new/old probability ratio
differ from 1 on identical weights and the KL to the reference nonzero before any update.

The trainer implements :class:`gym.train.trainer_protocol.GymTrainer`, the runner's one view of a
trainer, and calls the TrainerCallbacks it is given on train begin / step end / log / save / train end, with the ``train.report_to`` trackers'
callbacks among them. It runs in one process. A step's rollout batch is ``batch_size x
gradient_accumulation_steps`` prompts, sampled and trained in micro-batches of ``batch_size`` whose
gradients each optimizer step accumulates. Held-out prompts (``datasets.eval_fraction``) are scored
before the first step, every ``eval_steps`` and at the end: ``eval_reward`` and ``eval_kl``.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from gym.train.ppo import core as ppo_core
from gym.train.ppo.rollout import Prompt, Rollout, forward, prompts_from_rows, sample, value_head
from gym.train.trainer_protocol import GymTrainer

if TYPE_CHECKING:
    from gym.train.registry import TrainContext

VALUE_COEF = 0.1  # weight of the value loss next to the policy loss (the body is shared)
MAX_GRAD_NORM = 1.0  # transformers' default, as the other methods train with


class PPOTrainer(GymTrainer):
    """PPO on a causal LM with a value head; see the module docstring for the algorithm."""

    def __init__(self, ctx: TrainContext) -> None:
        from accelerate import Accelerator
        from transformers import TrainerControl, TrainerState, TrainingArguments, set_seed

        from gym.model.adapters import is_peft, is_quantized
        from gym.train.arguments import common_arguments
        from gym.train.ppo.rewards import make_scorer

        config = self.config = ctx.config
        # Before the Accelerator: building TrainingArguments resets accelerate's shared state.
        self.args = TrainingArguments(**common_arguments(config, ctx.checkpoint_dir, evaluate=ctx.has_eval))
        self.accelerator = Accelerator(cpu=self.args.use_cpu)  # the DevicePlan's device
        if self.accelerator.num_processes > 1:
            raise ValueError("train.method = 'ppo' runs in one process; launch it on a single GPU")
        set_seed(config.train.seed)
        self.tokenizer = ctx.tokenizer
        self.prompts = prompts_from_rows(ctx.data.train)
        self.data_fingerprint = ctx.data.fingerprint  # marks checkpoints as the runner's resume expects
        self.eval_prompts = prompts_from_rows(ctx.data.eval) if ctx.has_eval else []
        device = self.accelerator.device
        first = self.prompts[0]
        self.scorer = make_scorer(config, ctx.tokenizer, device, (first.messages, first.reference))
        self.model = ctx.model if is_quantized(ctx.model) else ctx.model.to(device)
        self.peft = is_peft(self.model)
        self.reference = None if self.peft else copy.deepcopy(self.model).requires_grad_(False).eval()
        hidden = self.model.config.get_text_config().hidden_size
        self.value_head = value_head(hidden).to(device)
        self.trained = [p for p in self.model.parameters() if p.requires_grad]
        self.trained += list(self.value_head.parameters())
        train = config.train
        self.optimizer = torch.optim.AdamW(
            self.trained, lr=train.learning_rate, weight_decay=train.weight_decay
        )
        # One PPO step samples batch_size x gradient_accumulation_steps prompts, in micro-batches of batch_size.
        batch = min(train.batch_size * train.gradient_accumulation_steps, len(self.prompts))
        self.batch_size = batch
        self.micro_batch = min(train.batch_size, batch)
        steps = (
            train.max_steps if train.max_steps > 0 else math.ceil(train.epochs * len(self.prompts) / batch)
        )
        self.scheduler = self._scheduler(steps * train.ppo.ppo_epochs)
        self.state = TrainerState(
            max_steps=steps,
            logging_steps=train.logging_steps,
            save_steps=train.save_steps,
            train_batch_size=batch,
            num_train_epochs=math.ceil(steps * batch / len(self.prompts)),
        )
        self.control = TrainerControl()
        from transformers.integrations import get_reporting_integration_callbacks

        # train.report_to: the same tracker callbacks a transformers Trainer adds, fed the same events.
        trackers = [tracker() for tracker in get_reporting_integration_callbacks(self.args.report_to)]
        self.callbacks = [*trackers, *ctx.callbacks]
        self.tokens = 0
        self.reward_curve: list[tuple[int, float]] = []

    def _scheduler(self, updates: int) -> Any:
        from transformers import get_scheduler

        warmup = math.ceil(self.config.train.warmup_ratio * updates)
        return get_scheduler(self.config.train.lr_scheduler, self.optimizer, warmup, updates)

    # -- GymTrainer: what the runner uses ----------------------------------------------------------

    def tokens_trained(self) -> int:
        """Prompt and completion tokens of every rollout, counted once per PPO epoch trained on them."""
        return self.tokens

    def planned_steps(self) -> int | None:
        return self.state.max_steps if self.state.max_steps > 0 else None

    def result_overrides(self) -> dict[str, Any]:
        """Nothing: the runner's numbers (steps, loss curve, tokens) describe a PPO run as they are."""
        return {}

    def add_step_callback(self, callback: Any) -> bool:
        """False: a PPO step is sampling and scoring as much as training, so the thread tuner stays out."""
        return False

    def remove_callback(self, callback: Any) -> None:
        """Drop callbacks that are ``callback`` or instances of it (as Trainer.remove_callback does)."""
        self.callbacks = [
            c
            for c in self.callbacks
            if c is not callback and not (isinstance(callback, type) and isinstance(c, callback))
        ]

    def save_model(self, output_dir: str) -> None:
        """The policy as the other methods save it: the adapter under PEFT, else the full weights."""
        self.model.save_pretrained(output_dir)

    def restore_checkpoint(self, folder: Path) -> None:
        """Load a checkpoint without training (the run was killed after its last checkpoint)."""
        from gym.train.ppo.checkpoint import load_checkpoint

        load_checkpoint(self, folder)

    def train(self, resume_from_checkpoint: str | None = None) -> Any:
        """Run PPO steps until ``state.max_steps``, resuming exactly from a Gym PPO checkpoint when given."""
        from gym.train.guards import non_finite_loss
        from gym.train.ppo.checkpoint import load_checkpoint, save_checkpoint

        if resume_from_checkpoint:
            load_checkpoint(self, Path(resume_from_checkpoint))
        self.model.eval()
        self._event("on_train_begin")
        state, train = self.state, self.config.train
        evaluating = bool(self.eval_prompts) and self.args.eval_strategy != "no"
        if evaluating and self.args.eval_on_start:
            self.evaluate()
        while state.global_step < state.max_steps:
            metrics = self.step(self.batch(state.global_step))
            state.global_step += 1
            if not math.isfinite(metrics["loss"]):  # before anything is logged or saved
                raise non_finite_loss(
                    state.global_step,
                    "loss",
                    metrics["loss"],
                    train.learning_rate,
                    Path(self.args.output_dir),
                )
            state.epoch = state.global_step * self.batch_size / len(self.prompts)
            self.reward_curve.append((state.global_step, metrics["reward"]))
            self._event("on_step_end")
            last = state.global_step >= state.max_steps
            if state.global_step % train.logging_steps == 0 or state.global_step == 1 or last:
                self.log(metrics)
            if evaluating and state.global_step % self.args.eval_steps == 0:
                self.evaluate()
            if state.global_step % train.save_steps == 0 or last:
                save_checkpoint(self)
                self._event("on_save")
        self._event("on_train_end")
        return state

    # -- PPO --------------------------------------------------------------------------------------

    def batch(self, step: int) -> list[Prompt]:
        """The prompts of ``step``: consecutive slices of one seeded permutation of the rows per epoch."""
        count, size = len(self.prompts), self.batch_size
        orders: dict[int, list[int]] = {}
        picked = []
        for position in range(step * size, (step + 1) * size):
            epoch, offset = divmod(position, count)
            if epoch not in orders:
                generator = torch.Generator().manual_seed(self.config.train.seed + epoch)
                orders[epoch] = torch.randperm(count, generator=generator).tolist()
            picked.append(self.prompts[orders[epoch][offset]])
        return picked

    def reference_logprobs(self, rollout: Rollout, temperature: float) -> torch.Tensor:
        if self.peft:
            with self.model.disable_adapter():
                return forward(self.model, None, rollout, temperature, with_values=False)[0]
        return forward(self.reference, None, rollout, temperature, with_values=False)[0]

    def rollout(self, prompts: list[Prompt]) -> dict[str, Any]:
        """Sample and score one micro-batch; the old log-probs, values, advantages and returns of PPO."""
        ppo = self.config.train.ppo
        rollout = sample(self.model, self.tokenizer, prompts, ppo.max_completion_length, ppo.temperature)
        scores = self.scorer(
            [p.messages for p in prompts],
            rollout.texts,
            rollout.completion_ids,
            [p.reference for p in prompts],
        )
        mask = rollout.mask
        with torch.no_grad():
            old_logprobs, old_values = forward(self.model, self.value_head, rollout, ppo.temperature)
            ref_logprobs = self.reference_logprobs(rollout, ppo.temperature)
        score_tensor = torch.tensor(scores, device=mask.device, dtype=torch.float32)
        rewards, kl = ppo_core.kl_penalised_rewards(
            score_tensor, old_logprobs, ref_logprobs, mask, ppo.kl_coef
        )
        advantages, returns = ppo_core.gae(rewards, old_values, mask, ppo.gamma, ppo.lam)
        return {
            "rollout": rollout,
            "scores": scores,
            "kl": kl,
            "old_logprobs": old_logprobs,
            "old_values": old_values,
            "advantages": ppo_core.masked_whiten(advantages, mask),
            "returns": returns,
        }

    def step(self, prompts: list[Prompt]) -> dict[str, float]:
        """One rollout batch and ``ppo_epochs`` optimizer steps on it; returns the step's metrics.

        The batch is sampled and scored in micro-batches of ``train.batch_size`` prompts; each optimizer step
        accumulates the gradients of all of them (``train.gradient_accumulation_steps``). Advantages are
        whitened per micro-batch.
        """
        ppo = self.config.train.ppo
        size = self.micro_batch
        parts = [self.rollout(prompts[i : i + size]) for i in range(0, len(prompts), size)]
        share = 1.0 / (ppo.ppo_epochs * len(parts))
        totals = {"loss": 0.0, "policy_loss": 0.0, "value_loss": 0.0, "clip_fraction": 0.0}
        for _ in range(ppo.ppo_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            for part in parts:
                rollout, mask = part["rollout"], part["rollout"].mask
                logprobs, values = forward(self.model, self.value_head, rollout, ppo.temperature)
                pg, clipped = ppo_core.policy_loss(
                    logprobs, part["old_logprobs"], part["advantages"], mask, ppo.clip_range
                )
                vf, _ = ppo_core.value_loss(values, part["old_values"], part["returns"], mask, ppo.clip_range)
                loss = pg + VALUE_COEF * vf
                self.accelerator.backward(loss / len(parts))
                self.tokens += int(rollout.attention_mask.sum())
                for name, value in (
                    ("loss", loss),
                    ("policy_loss", pg),
                    ("value_loss", vf),
                    ("clip_fraction", clipped),
                ):
                    totals[name] += value.item() * share
            torch.nn.utils.clip_grad_norm_(self.trained, MAX_GRAD_NORM)
            self.optimizer.step()
            self.scheduler.step()
        scores = [score for part in parts for score in part["scores"]]
        masks = torch.cat([part["rollout"].mask.sum(dim=1).float() for part in parts])
        return {
            **totals,
            "reward": sum(scores) / len(scores),
            "kl": float(torch.cat([part["kl"].sum(dim=1) for part in parts]).mean()),
            "completion_length": float(masks.mean()),
            "learning_rate": self.scheduler.get_last_lr()[0],
        }

    def evaluate(self) -> dict[str, float]:
        """Mean reward and KL to the reference on the held-out prompts, logged as ``eval_reward`` / ``eval_kl``.

        Sampling here runs under a forked RNG, so evaluating never changes what training samples next.
        """
        ppo = self.config.train.ppo
        rewards, kls = [], []
        devices = [self.accelerator.device] if self.accelerator.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            for i in range(0, len(self.eval_prompts), self.micro_batch):
                prompts = self.eval_prompts[i : i + self.micro_batch]
                rollout = sample(
                    self.model, self.tokenizer, prompts, ppo.max_completion_length, ppo.temperature
                )
                rewards += self.scorer(
                    [p.messages for p in prompts],
                    rollout.texts,
                    rollout.completion_ids,
                    [p.reference for p in prompts],
                )
                logprobs = forward(self.model, None, rollout, ppo.temperature, with_values=False)[0]
                reference = self.reference_logprobs(rollout, ppo.temperature)
                kls += ((logprobs - reference) * rollout.mask).sum(dim=1).tolist()
        metrics = {"eval_reward": sum(rewards) / len(rewards), "eval_kl": sum(kls) / len(kls)}
        self.log(metrics)
        return metrics

    # -- callbacks ----------------------------------------------------------------------------------

    def log(self, metrics: dict[str, float]) -> None:
        logs = {name: round(value, 6) for name, value in metrics.items()}
        logs["epoch"] = self.state.epoch
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self._event("on_log", logs=logs)

    def _event(self, name: str, **kwargs: Any) -> None:
        for callback in self.callbacks:
            handler = getattr(callback, name, None)
            if handler is not None:
                handler(
                    self.args,
                    self.state,
                    self.control,
                    model=self.model,
                    processing_class=self.tokenizer,
                    optimizer=self.optimizer,
                    lr_scheduler=self.scheduler,
                    **kwargs,
                )
