"""Training-free GRPO as a `gym train` method: ``train.method = "grpo"`` with ``train.grpo.training_free``.

:func:`build_training_free` returns a :class:`gym.train.trainer_protocol.GymTrainer`, the runner's one view
of a trainer, so the seed's command line and ``[train.grpo] training_free = true`` run through the usual runner. Settings:
``train.batch_size`` queries per step (the paper uses 50; Gym's default is 4), ``ceil(train.epochs)``
epochs, ``train.max_steps`` caps the steps of the whole run (resumed steps included), ``train.seed``
orders the data, ``train.resume = "never"`` starts a new library.

The runner asks :meth:`TrainingFreeTrainer.result_overrides` for what train_results.json should say
(requests, tokens in/out per step and in total, the library; no trainable weights), so the file and the
console summary describe this run.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from gym.train.trainer_protocol import GymTrainer
from gym.train.training_free.library import atomic_write_json
from gym.train.training_free.loop import LoopOptions, LoopResult, TrainingFreeLoop

if TYPE_CHECKING:
    from gym.config import GymConfig
    from gym.train.registry import TrainContext


def options_for(config: GymConfig, show_progress: bool = True) -> LoopOptions:
    train, grpo = config.train, config.train.grpo
    return LoopOptions(
        group_size=grpo.group_size, k=grpo.max_experiences_per_group, batch_size=train.batch_size,
        epochs=max(1, math.ceil(train.epochs)), max_steps=train.max_steps, seed=train.seed,
        temperature=grpo.temperature, max_completion_length=grpo.max_completion_length,
        learner_temperature=grpo.learner_temperature, learner_max_tokens=grpo.learner_max_tokens,
        resume=train.resume != "never", show_progress=show_progress,
    )  # fmt: skip


def api_key(config: GymConfig, key: str = "api_key_env") -> str | None:
    """The key from ``train.grpo.<key>``; a missing variable is an error naming it (never its value)."""
    name = getattr(config.train.grpo, key)
    if name is None:
        return None
    value = os.environ.get(name)
    if not value:
        raise ValueError(f"train.grpo.{key} names ${name}, which is not set in the environment")
    return value


async def run_loop(config: GymConfig, rows: list[dict[str, Any]], options: LoopOptions, *,
                   backoff: float = 1.0, timeout: float | None = None,
                   serve_local: Callable[[str], Any] | None = None) -> LoopResult:  # fmt: skip
    """One run over ``rows`` against ``train.grpo.api_base`` (or the local model in process, in the app
    ``serve_local`` builds), the learner against ``learner_api_base`` when it is set. ``timeout``
    overrides ``train.grpo.request_timeout``."""
    from gym.train.methods.grpo import reward_functions
    from gym.train.training_free.client import PolicyClient, open_endpoint, open_local, served_model

    rewards = reward_functions(config)
    grpo = config.train.grpo
    timeout = grpo.request_timeout if timeout is None else timeout
    if grpo.api_base:
        secret = api_key(config)
        raw = open_endpoint(grpo.api_base, secret, timeout)
        model, closer = await served_model(raw, config.model.name_or_path), None
    else:
        secret = None
        raw, model, closer = open_local(config.model.name_or_path, timeout, serve_local)
    client = PolicyClient(
        raw, model, concurrency=grpo.concurrency, backoff=backoff, secret=secret, closer=closer
    )
    learner = None
    try:
        if grpo.learner_api_base or grpo.learner_model:
            learner = await _learner_client(config, client, raw, secret, backoff, timeout)
        folder = config.resolve_path(grpo.experience_lib_path)
        return await TrainingFreeLoop(rows, rewards, client, folder, options, model, learner).run()
    finally:
        if learner is not None and learner.client is not raw:
            await learner.client.close()
        await client.aclose()


async def _learner_client(config: GymConfig, policy: Any, raw: Any, secret: str | None, backoff: float,
                          timeout: float) -> Any:  # fmt: skip
    """The learner's client: its own endpoint and key, or the policy's endpoint under another model id.

    It shares the policy client's meter (one run's counters, by role) and semaphore (one concurrency bound).
    """
    from gym.train.training_free.client import PolicyClient, open_endpoint, served_model

    grpo = config.train.grpo
    if grpo.learner_api_base:
        learner_secret = api_key(config, "learner_api_key_env")
        learner_raw = open_endpoint(grpo.learner_api_base, learner_secret, timeout)
        model = grpo.learner_model or await served_model(learner_raw, policy.model)
    else:
        learner_secret, learner_raw, model = secret, raw, grpo.learner_model
    return PolicyClient(learner_raw, model, backoff=backoff, secret=learner_secret, meter=policy.meter,
                        semaphore=policy.semaphore)  # fmt: skip


def results_section(config: GymConfig, result: LoopResult) -> dict[str, Any]:
    """What train_results.json says about a training-free run (never the API key: only its variable's name)."""
    library = result.library
    return {
        "model": library.model,
        "api_base": config.train.grpo.api_base or "local (in process)",
        "learner": {
            "api_base": config.train.grpo.learner_api_base
            or config.train.grpo.api_base
            or "local (in process)",
            "model": config.train.grpo.learner_model or library.model,
        },
        "experience_lib_path": str(config.resolve_path(config.train.grpo.experience_lib_path)),
        "experiences": library.experiences,
        "library_step": library.step,
        "resumed_from_step": result.resumed_from_step,
        "totals": library.totals,
        "steps": result.steps,
    }


class _OneProcess:
    """The runner's view of accelerate: a single process that saves and needs no barrier."""

    is_main_process = True
    num_processes = 1

    def wait_for_everyone(self) -> None:
        """Nothing to wait for."""


class TrainingFreeTrainer(GymTrainer):
    """The frozen model's experience library, learned by :class:`TrainingFreeLoop`."""

    def __init__(self, config: GymConfig, rows: list[dict[str, Any]], show_progress: bool,
                 serve_local: Callable[[str], Any] | None = None) -> None:  # fmt: skip
        self.config, self.rows, self.show_progress = config, rows, show_progress
        self.serve_local = serve_local
        self.state = SimpleNamespace(global_step=0, log_history=[])
        self.accelerator = _OneProcess()
        self.result: LoopResult | None = None
        self.model = self.args = None  # no weights train, no TrainingArguments (and no held-out evaluation)

    def tokens_trained(self) -> int:
        """Tokens in and out of every request (rollouts and learner)."""
        totals = self.result.library.totals if self.result else {}
        return int(totals.get("tokens_in", 0) + totals.get("tokens_out", 0))

    def planned_steps(self) -> int | None:
        """None: the library folder's newest step decides where a run continues, not a checkpoint."""
        return None

    def restore_checkpoint(self, folder: Path) -> None:
        """Nothing to restore: the library folder is the state (never called, as there is no plan)."""

    def evaluate(self) -> dict[str, float]:
        """No held-out evaluation (never called: ``args`` is None)."""
        return {}

    def add_step_callback(self, callback: Any) -> bool:
        """False: the loop reports through its own progress bar and calls no TrainerCallbacks."""
        return False

    def remove_callback(self, callback: Any) -> None:
        """Nothing to remove: this loop reports through its own progress bar."""

    def train(self, resume_from_checkpoint: str | None = None) -> LoopResult:
        """Run (or continue: the library folder's newest step decides, not ``resume_from_checkpoint``)."""
        options = options_for(self.config, self.show_progress)
        self.result = asyncio.run(run_loop(self.config, self.rows, options, serve_local=self.serve_local))
        self.state.global_step = self.result.library.step
        return self.result

    def save_model(self, output_dir: str) -> None:
        """The final library and the model it belongs to: what `gym serve --experiences` needs."""
        assert self.result is not None, "train() first"
        output = Path(output_dir)
        atomic_write_json(output / "experiences.json", self.result.library.as_json())
        atomic_write_json(output / "training_free.json", {
            "model": self.config.model.name_or_path, "policy_model": self.result.library.model,
            "api_base": self.config.train.grpo.api_base, "experiences": "experiences.json",
            "library": str(self.config.resolve_path(self.config.train.grpo.experience_lib_path)),
            "step": self.result.library.step,
        })  # fmt: skip

    def result_overrides(self) -> dict[str, Any]:
        """train_results.json as a training-free run means it: requests and tokens in + out, no weights."""
        if self.result is None:
            return {}
        totals = self.result.library.totals
        tokens = int(totals.get("tokens_in", 0) + totals.get("tokens_out", 0))
        seconds = self.result.wall_seconds
        return {
            "steps": self.result.library.step,
            "tokens": tokens,
            "wall_seconds": round(seconds, 3),
            "tokens_per_second": round(tokens / seconds, 1) if seconds else 0.0,
            "trainable_parameters": 0,
            "final_loss": None,
            "loss_curve": [],
            "adapter": "none (training-free)",
            "training_free": results_section(self.config, self.result),
        }


def prompt_list(rows: Any) -> list[dict[str, Any]]:
    """Prepared rows as ``{"prompt": messages, "reference": answer}`` dicts (the grpo method's conversion)."""
    from gym.train.methods.grpo import prompt_rows

    return [{"prompt": list(r["prompt"]), "reference": r["reference"]} for r in prompt_rows(rows)]


def build_training_free(ctx: TrainContext) -> TrainingFreeTrainer:
    show = any(getattr(callback, "show", False) for callback in ctx.callbacks)
    return TrainingFreeTrainer(ctx.config, prompt_list(ctx.data.train), show, ctx.serve_local)
