"""Local training runs started from the web UI: `gym train` in its own process, watched through its files.

The UI never trains in its own process. It starts the same command a person types (``gym train
gym.toml --no-progress``) in a new session, so the run keeps going when the browser reloads or the UI
restarts, and reads everything it shows from the run's own files: ``checkpoints/progress.jsonl``
(written by :class:`gym.train.progress.ProgressCallback`), the checkpoints and ``train_results.json``.
A stop is a request the run honours at the end of a step, after saving a checkpoint: it never cuts a
checkpoint in half.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym.files import atomic_write_text

RECORD = ".gym-webui-run.json"  # in output_dir: the process the UI started, and how it ended
LOG = "train.log"  # in output_dir: the run's stdout and stderr
CHECKPOINTS = "checkpoints"
RESULTS = "train_results.json"
EVENTS = "progress.jsonl"  # gym.train.progress.EVENTS_FILE (not imported: that module imports transformers)
STOP = "stop_requested"  # gym.train.progress.STOP_FILE
QUIET_SECONDS = 120  # a run without a record whose progress is this fresh is treated as running

_children: dict[int, subprocess.Popen] = {}  # runs this process started, so their exit codes are reaped


class RunError(Exception):
    """A run cannot be started or stopped; the message is the sentence the user sees."""


@dataclass
class RunStatus:
    """What one output_dir's run is doing, read from its files."""

    output_dir: Path
    state: str  # "not started" | "starting" | "running" | "stopping" | "finished" | "stopped" | "failed"
    step: int = 0
    max_steps: int = 0
    eta_seconds: float | None = None
    message: str = ""
    curve: list[dict[str, Any]] = field(default_factory=list)  # step, loss, learning_rate, tokens_per_second
    checkpoints: list[tuple[int, bool]] = field(default_factory=list)  # (step, complete)
    pid: int | None = None

    @property
    def active(self) -> bool:
        return self.state in ("starting", "running", "stopping")

    @property
    def fraction(self) -> float:
        return min(1.0, self.step / self.max_steps) if self.max_steps else 0.0


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_events(output_dir: Path) -> list[dict[str, Any]]:
    """Every event of ``progress.jsonl`` (a line being written is skipped)."""
    path = output_dir / CHECKPOINTS / EVENTS
    events = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def _alive(pid: int) -> bool:
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by a parent that is gone) is not running
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _exit_code(output_dir: Path, record: dict[str, Any]) -> int | None:
    """How the recorded run ended; written into the record once seen, so a restarted UI knows too."""
    child = _children.get(record.get("pid", -1))
    if child is not None and child.poll() is not None and "exit_code" not in record:
        record["exit_code"] = child.returncode
        atomic_write_text(output_dir / RECORD, json.dumps(record))
    return record.get("exit_code")


def checkpoint_list(output_dir: Path) -> list[tuple[int, bool]]:
    folder = output_dir / CHECKPOINTS
    found = []
    if folder.is_dir():
        for child in folder.iterdir():
            if child.name.startswith("checkpoint-") and child.name[11:].isdigit() and child.is_dir():
                found.append((int(child.name[11:]), (child / "gym_complete.json").is_file()))
    return sorted(found)


def curve(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per step (a resumed run's numbers replace the earlier ones for the same steps)."""
    points: dict[int, dict[str, Any]] = {}
    for event in events:
        step = int(event.get("step", 0))
        if event.get("event") == "log" and ("loss" in event or "learning_rate" in event):
            point = points.setdefault(step, {"step": step})
            for key in ("loss", "learning_rate"):
                if key in event:
                    point[key] = float(event[key])
        elif event.get("event") == "step" and event.get("seconds"):
            tokens, seconds = int(event.get("tokens", 0)), float(event["seconds"])
            points.setdefault(step, {"step": step})["tokens_per_second"] = round(tokens / seconds, 1)
    return [points[step] for step in sorted(points)]


def _eta(events: list[dict[str, Any]]) -> float | None:
    """Seconds left, from the pace of the current segment (since the last begin)."""
    start = max((i for i, e in enumerate(events) if e.get("event") == "begin"), default=None)
    if start is None:
        return None
    segment = [e for e in events[start:] if e.get("event") == "step"]
    if len(segment) < 2:
        return None
    first, last = segment[0], segment[-1]
    steps = last["step"] - first["step"]
    seconds = float(last["seconds"]) - float(first["seconds"])
    if steps <= 0 or seconds <= 0:
        return None
    return max(0.0, (last.get("max_steps", 0) - last["step"]) * seconds / steps)


def run_status(output_dir: str | Path) -> RunStatus:
    """The state of the run writing into ``output_dir``, from its record, progress events and results."""
    output_dir = Path(output_dir)
    record = _read_json(output_dir / RECORD) or {}
    events = read_events(output_dir)
    checkpoints = checkpoint_list(output_dir)
    status = RunStatus(output_dir, "not started", curve=curve(events), checkpoints=checkpoints)
    started = float(record.get("started", 0))
    mine = [e for e in events if float(e.get("time", 0)) >= started]  # this run's events
    steps = [e for e in mine if "step" in e]
    if steps:
        status.step = int(steps[-1]["step"])
        status.max_steps = int(max((e.get("max_steps", 0) for e in steps), default=0))
    complete = [step for step, done in checkpoints if done]
    resume_note = f"; Resume continues from checkpoint-{complete[-1]}" if complete else ""
    pid = record.get("pid")
    if pid and _alive(int(pid)):
        status.pid = int(pid)
        if (output_dir / CHECKPOINTS / STOP).is_file():
            status.state = "stopping"
            status.message = f"stopping: saving a checkpoint at step {status.step}, then the run ends"
        elif not any(e.get("event") == "begin" for e in mine):
            status.state = "starting"
            status.message = "starting: loading the model and preparing the data"
        else:
            status.state = "running"
            status.eta_seconds = _eta(mine)
            status.message = f"training: step {status.step} of {status.max_steps}"
        return status
    begins = [e for e in events if e.get("event") == "begin"]
    if begins and events[-1].get("event") != "end" and begins[-1].get("pid") != pid:
        age = time.time() - float(events[-1].get("time", 0))
        alive = _alive(int(begins[-1]["pid"])) if begins[-1].get("pid") else age < QUIET_SECONDS
        if alive:  # a run started outside the UI (`gym train`) that is still writing
            status.state = "running"
            status.message = (
                f"training (started outside the web UI): step {status.step} of {status.max_steps}"
            )
            return status
    results = _read_json(output_dir / RESULTS)
    ended = [e for e in mine if e.get("event") == "end"]
    code = _exit_code(output_dir, record) if record else None
    if results is not None and (not record or (output_dir / RESULTS).stat().st_mtime >= started):
        status.step = int(results.get("steps", status.step))
        if ended and ended[-1].get("stopped"):
            status.state = "stopped"
            status.message = f"stopped at step {status.step} of {status.max_steps}{resume_note}"
        else:
            status.state = "finished"
            loss = results.get("final_loss")
            status.message = (
                f"finished: {status.step} steps in {results.get('wall_seconds', 0):.1f}s, "
                f"{results.get('tokens_per_second', 0):,.0f} tok/s, final loss {loss}"
            )
        return status
    cut = [step for step, done in checkpoints if not done]
    if cut:  # a save interrupted by a forced stop: never resumed from, removed by the next run
        resume_note += f" (checkpoint-{cut[-1]} was cut off while being written and is discarded)"
    if record:
        if code is not None and code < 0:
            status.state = "stopped"
            status.message = f"ended by signal {-code} at step {status.step}{resume_note}"
        elif code not in (None, 0):
            status.state = "failed"
            status.message = f"the run failed (exit code {code}): {_error_line(output_dir)}{resume_note}"
        else:
            status.state = "stopped"
            status.message = f"the run ended at step {status.step} without finishing{resume_note}"
    elif checkpoints:
        status.state = "stopped"
        status.message = f"interrupted at step {checkpoints[-1][0]}{resume_note}"
    return status


def _error_line(output_dir: Path) -> str:
    """The run's own error sentence: the last ``error ...`` line of its log, else its last line."""
    try:
        lines = [line.strip() for line in (output_dir / LOG).read_text(errors="replace").splitlines()]
    except OSError:
        return "no log was written"
    lines = [line for line in lines if line]
    errors = [line for line in lines if line.startswith("error")]
    return (errors or lines or ["no output"])[-1]


def log_tail(output_dir: str | Path, lines: int = 40) -> str:
    try:
        text = (Path(output_dir) / LOG).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def start_run(config_path: str | Path, output_dir: str | Path, *, resume_only: bool = False) -> RunStatus:
    """Start ``gym train CONFIG --no-progress`` unless a run is already writing into ``output_dir``.

    ``resume_only`` refuses when there is no complete checkpoint to continue from. The run resumes from
    the newest complete checkpoint either way, exactly as the command does (``train.resume = "auto"``).
    """
    output_dir = Path(output_dir)
    current = run_status(output_dir)
    if current.active:
        who = f"pid {current.pid}" if current.pid else "started outside the web UI"
        raise RunError(
            f"a run is already training into {output_dir} ({who}, {current.message}); "
            "stop it or wait for it to finish before starting another"
        )
    if resume_only and not any(done for _, done in current.checkpoints):
        raise RunError(f"nothing to resume: {output_dir / CHECKPOINTS} holds no complete checkpoint")
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / CHECKPOINTS / STOP).unlink(missing_ok=True)
    command = [sys.executable, "-m", "gym", "train", str(Path(config_path).resolve()), "--no-progress"]
    started = time.time()
    with (output_dir / LOG).open("w", encoding="utf-8") as log:
        log.write(f"$ gym train {config_path} --no-progress\n")
        log.flush()
        process = subprocess.Popen(
            command, cwd=Path(config_path).resolve().parent, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    _children[process.pid] = process
    record = {"pid": process.pid, "started": started, "config": str(Path(config_path).resolve())}
    atomic_write_text(output_dir / RECORD, json.dumps(record))
    return run_status(output_dir)


def stop_run(output_dir: str | Path, *, force: bool = False) -> str:
    """Ask the run to checkpoint and stop (``force``: end the process now; unsaved steps are lost)."""
    output_dir = Path(output_dir)
    status = run_status(output_dir)
    if not status.active or status.pid is None:
        raise RunError(f"no run started from the web UI is training into {output_dir}")
    if force or status.state == "starting":  # nothing trained yet: nothing to save
        os.killpg(status.pid, signal.SIGTERM)
        complete = [step for step, done in status.checkpoints if done]
        kept = f"checkpoint-{complete[-1]} is kept" if complete else "no checkpoint had been written"
        return f"ended the run (pid {status.pid}) at step {status.step}; {kept}"
    atomic_write_text(output_dir / CHECKPOINTS / STOP, json.dumps({"time": time.time()}))
    return (
        f"stop requested at step {status.step}: the run finishes the step (and any checkpoint being "
        "written), saves a checkpoint, then ends; Resume continues from it"
    )


def list_runs(folders: list[Path]) -> list[RunStatus]:
    """Every run found in ``folders`` or directly below them (folders holding checkpoints or results)."""
    seen: dict[Path, RunStatus] = {}
    for folder in folders:
        candidates = [folder, *(sorted(folder.iterdir()) if folder.is_dir() else [])]
        for candidate in candidates:
            if candidate.is_dir() and any(
                (candidate / name).exists() for name in (CHECKPOINTS, RESULTS, RECORD)
            ):
                seen.setdefault(candidate.resolve(), run_status(candidate))
    return list(seen.values())
