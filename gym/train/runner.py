"""`run_training`: one gym.toml in, a trained model and its records in ``output_dir`` out.

``output_dir`` then holds the adapter or full weights (safetensors), the tokenizer carrying the chat
template used, the resolved ``gym.toml``, ``train_results.json`` (loss curve, tokens/s, wall time,
trainable parameters) and ``checkpoints/``. Rerunning the same command resumes from the newest
complete checkpoint (``train.resume = "auto"``).
"""

from __future__ import annotations

import gc
import json
import os
import platform
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gym.config import GymConfig

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


def hardware() -> str:
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}"
    return f"CPU ({os.cpu_count()} cores, {platform.machine()})"


def write_resolved_config(config: GymConfig, folder: Path) -> None:
    """The config as trained (defaults filled in, flags applied), as TOML next to the weights.

    ``${VAR}`` references stay as written: `gym deploy` uploads this file, so an expanded secret would
    be published with the model.
    """
    import tomlkit

    data = config.to_toml_data()
    header = "# The configuration this model was trained with, every default filled in (written by Gym).\n"
    (folder / "gym.toml").write_text(header + tomlkit.dumps(data), encoding="utf-8")


def _note(message: str) -> None:
    if is_main_process():
        from rich.console import Console

        Console(stderr=True).print(f"[dim]note[/dim] {message}", markup=True, highlight=False, soft_wrap=True)


def _warn(message: str) -> None:
    if is_main_process():
        from rich.console import Console

        Console(stderr=True).print(
            f"[yellow]warning[/yellow] {message}", markup=True, highlight=False, soft_wrap=True
        )


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


def run_training(config: GymConfig, *, show_progress: bool = True) -> TrainResult:
    """Train ``config`` to completion (resuming when a complete checkpoint exists) and save everything."""
    from gym.quiet import quiet_libraries

    quiet_libraries()
    from gym.data.prepare import prepare_data
    from gym.model.adapters import apply_adapter, trainable_parameters
    from gym.model.loading import load_model, load_tokenizer
    from gym.train.checkpoints import CompleteCheckpoints, resume_point, training_fingerprint
    from gym.train.progress import ProgressCallback, TrainLog
    from gym.train.registry import TrainContext, trainer_for
    from gym.train.threads import fixed_threads, make_tuner

    check_trackers(config)
    output = config.output_path
    checkpoint_dir = output / "checkpoints"
    builder = trainer_for(config.train.method)
    tokenizer = load_tokenizer(config)
    data = prepare_data(config, tokenizer)

    fingerprint = training_fingerprint(config)  # marks the checkpoints written and picks the one resumed
    log = TrainLog()
    progress = ProgressCallback(log, show=show_progress and is_main_process())
    context = TrainContext(
        config,
        lambda: apply_adapter(load_model(config, for_training=True), config),
        tokenizer,
        data,
        checkpoint_dir,
        [CompleteCheckpoints(fingerprint), progress],
    )
    trainer = builder(context)
    trained_model = getattr(trainer, "model", None)
    trainable, total = trainable_parameters(trained_model) if trained_model is not None else (0, 0)
    threads = fixed_threads(config)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(
        PrinterCallback
    )  # the progress bar shows loss; the curve goes to train_results.json
    # Gym's own trainers count tokens as ``gym_tokens``; TRL's count them as ``_total_train_tokens``.
    progress.token_source = lambda: int(
        getattr(trainer, "gym_tokens", getattr(trainer, "_total_train_tokens", 0))
    )
    tuner = make_tuner(config, trainer.args.max_steps, progress.token_source, _note)
    if tuner is not None:
        trainer.add_callback(tuner)
    resume = resume_point(checkpoint_dir, config.train.resume, fingerprint, warn=_warn)
    # Libraries, model and data live for the whole run: the garbage collector (Trainer.train starts with a
    # full collection, and old-generation passes recur while training) need not scan them again.
    gc.freeze()
    try:
        output_metrics = getattr(
            trainer.train(resume_from_checkpoint=str(resume) if resume is not None else None), "metrics", None
        )
    finally:
        gc.unfreeze()  # a caller training again in this process gets its garbage collected as usual

    result = TrainResult(
        output_dir=str(output),
        method=config.train.method,
        adapter=config.train.adapter,
        steps=trainer.state.global_step,
        wall_seconds=round(log.wall_seconds, 3),
        tokens=log.tokens,
        tokens_per_second=round(log.tokens_per_second, 1),
        trainable_parameters=trainable,
        total_parameters=total,
        final_loss=log.losses[-1][1] if log.losses else None,
        loss_curve=log.losses,
        resumed_from=str(resume) if resume is not None else None,
        hardware=hardware(),
        train_rows=len(data.train),
    )
    # A method whose numbers are not the Trainer's (training-free GRPO: requests and tokens, no weights)
    # supplies them itself; keys that are not TrainResult fields are written to train_results.json as is.
    overrides = dict(trainer.gym_result_overrides()) if hasattr(trainer, "gym_result_overrides") else {}
    fields = {
        name: overrides.pop(name) for name in list(overrides) if name in TrainResult.__dataclass_fields__
    }
    result = replace(result, **fields)
    if trainer.accelerator.is_main_process:
        trainer.save_model(str(output))
        tokenizer.save_pretrained(str(output))
        write_resolved_config(config, output)
        # Trainer.train's own clock, the window every Trainer-based tool reports (benchmarks compare on it)
        runtime = (output_metrics or {}).get("train_runtime")
        measured = {"cpu_threads": tuner.measured} if tuner is not None and tuner.measured else {}
        record = {**asdict(result), **({"train_runtime": runtime} if runtime is not None else {}), **measured,
                  **overrides}  # fmt: skip
        (output / RESULTS).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    trainer.accelerator.wait_for_everyone()
    return result
