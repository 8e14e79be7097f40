"""`run_training`: one gym.toml in, a trained model and its records in ``output_dir`` out.

``output_dir`` then holds the adapter or full weights (safetensors), the tokenizer carrying the chat
template used, the resolved ``gym.toml``, ``train_results.json`` (loss curve, tokens/s, wall time,
trainable parameters, held-out evaluation) and ``checkpoints/``. Rerunning the same command resumes
from the newest complete, intact checkpoint (``train.resume = "auto"``) and stops at exactly the planned
step; rerunning a finished run is a no-op.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.files import atomic_write_text

if TYPE_CHECKING:
    from gym.config import GymConfig
    from gym.train.trainer_protocol import GymTrainer

RESULTS = "train_results.json"


@dataclass
class TrainResult:
    """Summary of a finished training run (also written to train_results.json)."""

    output_dir: str
    method: str
    adapter: str
    steps: int
    wall_seconds: float
    tokens: int
    tokens_per_second: float
    trainable_parameters: int
    total_parameters: int
    final_loss: float | None
    loss_curve: list[tuple[int, float]]
    resumed_from: str | None
    hardware: str
    train_rows: int
    eval: dict[str, Any] | None = None  # held-out rows (datasets.eval_fraction): see gym.train.history
    already_trained: bool = False  # a rerun of a finished run: nothing was trained or written
    restored_only: bool = False  # the last checkpoint was the planned step: the result was written from it
    data: dict = field(default_factory=dict)  # rows read, trained, truncated, skipped; p95 length


def device_plan(config: GymConfig, device: str | None = None) -> Any:
    """:func:`gym.model.device.plan_device`; ``train.cpu_kernels = true`` on a CUDA machine is a config error
    at its ``file:line:col`` (the environment variable's is one sentence)."""
    from gym.model.device import KernelsOnGpu, plan_device

    try:
        return plan_device(config, device=device)
    except KernelsOnGpu as error:
        if error.from_env:
            raise
        raise key_error(config, ("train", "cpu_kernels"), f"true {error.REASON}") from None


def key_error(config: GymConfig, key: tuple[str, ...], message: str) -> Exception:
    """A ConfigError at ``key``'s line and column in the gym.toml ``config`` was read from."""
    from gym.config.errors import ConfigError
    from gym.config.reading import read_toml

    line = column = None
    source = "gym.toml"
    if config.source is not None:
        _, positions, source = read_toml(config.source)
        line, column = positions.find(key)
    return ConfigError.single(source, message, ".".join(key), line, column)


def write_resolved_config(config: GymConfig, folder: Path) -> None:
    """The config as trained (defaults filled in, flags applied), as TOML next to the weights.

    ``${VAR}`` references stay as written: `gym deploy` uploads this file, so an expanded secret would
    be published with the model.
    """
    import tomlkit

    data = config.to_toml_data()
    header = "# The configuration this model was trained with, every default filled in (written by Gym).\n"
    (folder / "gym.toml").write_text(header + tomlkit.dumps(data), encoding="utf-8")


def _tell(label: str, style: str, message: str) -> None:
    """``note``/``warning`` lines on stderr, main process only; the message (paths, dataset names) is
    printed literally, never read as rich markup."""
    if is_main_process():
        from rich.console import Console
        from rich.text import Text

        from gym.config.errors import redact

        Console(stderr=True).print(
            Text.assemble((label, style), " ", redact(message)), highlight=False, soft_wrap=True
        )


def _note(message: str) -> None:
    _tell("note", "dim", message)


def _warn(message: str) -> None:
    _tell("warning", "yellow", message)


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


TRACKER_PACKAGES = {
    "wandb": ("wandb",),
    "mlflow": ("mlflow",),
    "tensorboard": ("tensorboard", "tensorboardX"),
    "trackio": ("trackio",),
    "comet_ml": ("comet_ml",),
    "swanlab": ("swanlab",),
}


def check_trackers(config: GymConfig) -> None:
    """Fail before any loading when a tracker in ``train.report_to`` is not installed."""
    import importlib.util

    for tracker in config.train.report_to:
        packages = TRACKER_PACKAGES.get(tracker, (tracker,))
        if not any(importlib.util.find_spec(name) is not None for name in packages):
            raise ValueError(
                f"train.report_to includes {tracker!r} but {' or '.join(packages)} is not installed; "
                f"pip install {packages[0]}, or remove it from train.report_to"
            )


def run_training(config: GymConfig, *, show_progress: bool = True,
                 serve_local: Callable[[str], Any] | None = None) -> TrainResult:  # fmt: skip
    """Train ``config`` to completion (resuming when a complete checkpoint exists) and save everything.

    ``serve_local``: a model name to an app serving it in process (:class:`gym.train.registry.TrainContext`).

    A rerun of a finished run changes nothing and returns its recorded result (``already_trained``);
    resume always ends at exactly the planned step (see :mod:`gym.train.resume`).
    """
    from gym.data.loading import check_local_files
    from gym.quiet import quiet_libraries
    from gym.train.checkpoints import claim_checkpoint_folder

    # What can be refused without a model library is refused before one is imported (seconds of a
    # laptop, minutes of a cloud node's set-up): trackers, a foreign checkpoint folder, missing data.
    check_trackers(config)
    output = config.output_path
    checkpoint_dir = output / "checkpoints"
    claim_checkpoint_folder(checkpoint_dir)  # before anything is written: never someone else's checkpoints
    check_local_files(config.datasets, config.base_dir)
    quiet_libraries()
    from transformers import set_seed

    from gym.data.prepare import prepare_data
    from gym.model.adapters import apply_adapter, trainable_parameters
    from gym.model.cpu_kernels.threads import fixed_threads, header_note, make_tuner
    from gym.model.loading import load_model, load_tokenizer
    from gym.model.vision import model_vision
    from gym.train.checkpoint_callback import CompleteCheckpoints
    from gym.train.checkpoints import mark_checkpoint_folder, resume_point, training_fingerprint
    from gym.train.distributed import check_fsdp_wrap, cpu_ranks_setup
    from gym.train.guards import FiniteGuard
    from gym.train.progress import ProgressCallback, TrainLog
    from gym.train.registry import TrainContext, trainer_for
    from gym.train.resume import checkpoint_step, finished_run
    from gym.train.speed import apply_cut_cross_entropy, check_switches
    from gym.train.trainer_protocol import as_gym_trainer

    plan = device_plan(config)
    check_switches(config, plan.device)  # GPU-only switches (Liger, CCE, vLLM) before anything loads
    _note(plan.header())
    for line in plan.notes():
        _note(line)
    builder = trainer_for(config.train.method)
    tokenizer = load_tokenizer(config)
    data = prepare_data(config, tokenizer, vision=model_vision(config))
    _note(f"data: {data.summary_line()}")
    not_reproducible = header_note(config)
    if not_reproducible:
        _note(not_reproducible)

    # Marks the checkpoints written and picks the one resumed; the data's content hash (the prepared
    # cache key) is part of it, so an edited train.jsonl never resumes a checkpoint of the old rows.
    fingerprint = training_fingerprint(config, data.fingerprint)
    done = finished_run(config, fingerprint)
    if done is not None:
        return replace(
            TrainResult(**{k: done[k] for k in TrainResult.__dataclass_fields__ if k in done}),
            already_trained=True,
        )
    log = TrainLog()
    progress = ProgressCallback(log, show=show_progress and is_main_process())

    def model_with_adapter() -> Any:
        model = apply_cut_cross_entropy(load_model(config, for_training=True), config)
        check_fsdp_wrap(config, model)  # its class is known only now; before any step
        # The adapter's initial weights from train.seed, not from whatever the process drew before (the
        # Trainer seeds only once it exists): every run of a config starts from the same weights.
        set_seed(config.train.seed)
        return apply_adapter(model, config)

    context = TrainContext(
        config,
        model_with_adapter,
        tokenizer,
        data,
        checkpoint_dir,
        [FiniteGuard(config.train.learning_rate), CompleteCheckpoints(fingerprint), progress],
        serve_local=serve_local,
    )
    trainer = as_gym_trainer(builder(context))
    strategy_note = cpu_ranks_setup(config, trainer.accelerator)
    if strategy_note:
        _note(strategy_note)
    mark_checkpoint_folder(checkpoint_dir)
    trainable, total = trainable_parameters(trainer.model) if trainer.model is not None else (0, 0)
    threads = fixed_threads(config)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(
        PrinterCallback
    )  # the progress bar shows loss; the curve goes to train_results.json
    progress.token_source = trainer.tokens_trained
    planned = trainer.planned_steps()
    resume = resume_point(checkpoint_dir, config.train.resume, fingerprint, warn=_warn, max_step=planned)
    restored = resume is not None and planned is not None and checkpoint_step(resume) >= planned
    measured: dict[str, Any] = {}  # what this run measured, written into train_results.json
    evaluating = trainer.args is not None and trainer.args.eval_strategy != "no"
    if restored:
        trainer.restore_checkpoint(resume)  # killed after its last checkpoint: finish without a step
    else:
        if evaluating and resume is not None:
            trainer.args.eval_on_start = False  # the step-0 evaluation is in the resumed log already
        # Only transformers Trainers take step callbacks; PPO and training-free GRPO keep the fixed count.
        tuner = make_tuner(config, planned or 0, progress.token_source, _note)
        if tuner is not None and not trainer.add_step_callback(tuner):
            tuner = None
        # Libraries, model and data live for the whole run: the garbage collector (Trainer.train starts with
        # a full collection, and old-generation passes recur while training) need not scan them again.
        gc.freeze()
        try:
            output = trainer.train(resume_from_checkpoint=str(resume) if resume is not None else None)
        finally:
            gc.unfreeze()  # a caller training again in this process gets its garbage collected as usual
        # Trainer.train's own clock, the window every Trainer-based tool reports (benchmarks compare on it)
        runtime = (getattr(output, "metrics", None) or {}).get("train_runtime")
        if runtime is not None:
            measured["train_runtime"] = runtime
        if log.cpu_seconds:
            measured["train_cpu_seconds"] = round(log.cpu_seconds, 3)  # the same window, in CPU time
        if tuner is not None and tuner.measured:
            measured["cpu_threads"] = tuner.measured
    if evaluating:
        evaluate_at_end(trainer)
    check_final_weights(config, trainer, checkpoint_dir)
    result = save_outputs(
        config,
        trainer,
        tokenizer,
        data,
        log,
        resume,
        fingerprint,
        (trainable, total),
        measured,
        plan=plan,
    )
    return replace(result, restored_only=restored)


def evaluate_at_end(trainer: GymTrainer) -> None:
    """Evaluate the held-out rows at the final step unless ``eval_steps`` just did."""
    from gym.train.history import eval_points

    points = eval_points(trainer.state.log_history)
    if not points or points[-1]["step"] != trainer.state.global_step:
        trainer.evaluate()


def check_final_weights(config: GymConfig, trainer: GymTrainer, checkpoint_dir: Path) -> None:
    """Never save NaN or infinite weights as the result (the loss can stay finite a step longer)."""
    from gym.train.guards import non_finite_parameter, non_finite_weights

    model = trainer.model
    bad = non_finite_parameter(model) if model is not None and hasattr(model, "named_parameters") else None
    if bad is not None:
        raise non_finite_weights(trainer.state.global_step, bad, config.train.learning_rate, checkpoint_dir)


def method_record(config: GymConfig) -> dict[str, Any]:
    """The GPU switches the run trained with and, for GRPO with weights, its loss and rollout settings."""
    from gym.train.speed import switches_record

    record: dict[str, Any] = {"gpu_switches": switches_record(config)}
    if config.train.method == "grpo" and not config.train.grpo.training_free:
        from gym.train.methods.grpo import grpo_record

        record["grpo"] = grpo_record(config)
    return record


def save_outputs(
    config: GymConfig,
    trainer: GymTrainer,
    tokenizer: Any,
    data: Any,
    log: Any,
    resume: Path | None,
    fingerprint: str,
    parameters: tuple[int, int],
    measured: dict[str, Any] | None = None,
    *,
    plan: Any = None,
) -> TrainResult:
    """Write weights, tokenizer, resolved gym.toml and, last, train_results.json (the completion record)."""
    from gym.train.history import eval_summary, loss_curve
    from gym.train.resume import completion_record

    output = config.output_path
    history = list(trainer.state.log_history or [])
    losses = loss_curve(history) or log.losses  # the whole run's curve, across resumes
    result = TrainResult(
        output_dir=str(output),
        method=config.train.method,
        adapter=config.train.adapter,
        steps=trainer.state.global_step,
        wall_seconds=round(log.wall_seconds, 3),
        tokens=log.tokens,
        tokens_per_second=round(log.tokens_per_second, 1),
        trainable_parameters=parameters[0],
        total_parameters=parameters[1],
        final_loss=losses[-1][1] if losses else None,
        loss_curve=losses,
        resumed_from=str(resume) if resume is not None else None,
        hardware=plan.hardware if plan is not None else "",
        train_rows=len(data.train),
        data=data.summary(),
        eval=eval_summary(history, len(data.eval) if data.eval is not None else 0),
    )
    # A method whose numbers are not the Trainer's (training-free GRPO: requests and tokens, no weights)
    # supplies them itself; keys that are not TrainResult fields are written to train_results.json as is.
    overrides = dict(trainer.result_overrides())
    fields = {
        name: overrides.pop(name) for name in list(overrides) if name in TrainResult.__dataclass_fields__
    }
    result = replace(result, **fields)
    if trainer.accelerator.is_main_process:
        trainer.save_model(str(output))
        tokenizer.save_pretrained(str(output))
        from gym.model.vision import save_processor

        save_processor(config, tokenizer, output)
        write_resolved_config(config, output)
        record = {k: v for k, v in asdict(result).items() if k not in ("already_trained", "restored_only")}
        record["world_size"] = trainer.accelerator.num_processes  # every rank on every node trained
        if plan is not None:
            record["device"] = plan.record()  # what the run computed on and which code paths it took
        record.update(method_record(config))
        record = {**record, **(measured or {}), **overrides, **completion_record(config, fingerprint, output)}
        atomic_write_text(output / RESULTS, json.dumps(record, indent=2) + "\n")
    trainer.accelerator.wait_for_everyone()
    return result
