"""What each `gym launch` stage consumed and produced, so a rerun redoes a stage exactly when one changed.

A stage's record in ``gym_state.json`` names its **inputs**: the resolved settings it reads (gym.toml
with the command-line flags, as a hash of the part of the config the stage reads), for training the
data's content (SHA-256 of every local dataset file, re-hashed only when a file's size or mtime moved)
and the base model's revision when it is known (the commit the Hugging Face cache resolved, or a local
model folder's files), and for the gates the commit of the champion they were compared with. It also
names its **outputs**: the SHA-256 of the file it wrote in ``output_dir`` (``train_results.json``,
``eval_results.json``, ``gate_results.json``, ``README.md``) and, for the deploy stage, the commits the
model repository and the Space were at after the push.

A recorded stage is done only while all of that still holds. `gym train`, `gym eval` and `gym deploy`
write into the same folder without recording anything here, so a file rewritten by one of them (a
5-step `gym train`, a `gym eval --eval.limit 5`) no longer matches its record, and the stage runs again
with one line saying why; it is never adopted silently. Training output that this launch did not record
(a manual `gym train` before the first `gym launch`) is moved aside to ``output_dir/set-aside/<time>``
(nothing is deleted) and training starts from scratch, so a finished 60-step run is never resumed as
the start of gym.toml's 600. Checkpoints of this launch's own interrupted training are resumed: rank 0
records the train stage as ``running`` with its inputs before training begins.

Why move rather than pass ``train.resume = "never"`` alone: under torchrun every rank decides for
itself, and a rank that reads the state after rank 0 recorded ``running`` would resume what rank 0
ignores; once the foreign checkpoints are gone, every rank's choice trains the same way.

The Hub side of the records (the champion's commit, what a push left there): :mod:`gym.launch.stage_hub`;
reading the state file itself: :mod:`gym.launch.state_file`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.config.reading import display_path
from gym.launch.stage_hub import champion_change, hub_change, pushed_commits
from gym.launch.state_file import STATE_FILE

if TYPE_CHECKING:
    from gym.config import GymConfig

# The file in output_dir each stage writes last, and the other commands that write it too.
OUTPUTS = {
    "train": ("train_results.json", "`gym train`"),
    "eval": ("eval_results.json", "`gym eval`"),
    "gates": ("gate_results.json", "`gym deploy`"),
    "card": ("README.md", "`gym eval` or `gym deploy`"),
}
SET_ASIDE = "set-aside"


def shown(path: str | Path, base: Path) -> str:
    """``path`` as a rerun's line names it: relative to gym.toml's folder when under it (``out/...``)."""
    relative = os.path.relpath(path, base)
    return display_path(path if relative.startswith("..") else relative)


def sha256_file(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


# ----------------------------------------------------------------------------------------- inputs


def data_inputs(config: GymConfig, previous: dict[str, Any] | None) -> dict[str, Any]:
    """``{"digest", "files": {path: {size, mtime_ns, sha256}}}`` of every local dataset file.

    A file whose size and mtime match ``previous`` keeps its recorded hash (a rerun reads nothing); any
    other is hashed. A dataset Gym cannot find is recorded as such, so the train stage runs and says why.
    """
    from gym.data.loading import BUILDERS, local_path
    from gym.data.report import DataError

    known = (previous or {}).get("files")
    known = known if isinstance(known, dict) else {}
    files: dict[str, Any] = {}
    for dataset in config.datasets:
        if dataset.path is None:  # a Hub dataset: its id and revision are in the settings
            continue
        try:
            path = local_path(dataset, config.base_dir)
            found = sorted(p for p in path.iterdir() if p.suffix in BUILDERS) if path.is_dir() else [path]
        except (DataError, OSError):
            files[str(dataset.path)] = {"problem": "unreadable"}
            continue
        for file in found:
            files[str(file)] = _file_entry(file, known.get(str(file)))
    digest = hashlib.sha256(
        json.dumps({name: entry.get("sha256") or entry.get("problem") for name, entry in files.items()},
                   sort_keys=True).encode()
    ).hexdigest()[:16]  # fmt: skip
    return {"digest": digest, "files": files}


def _file_entry(file: Path, known: Any) -> dict[str, Any]:
    try:
        stat = file.stat()
    except OSError:
        return {"problem": "missing"}
    if not file.is_file():
        return {"problem": "not a regular file"}
    if (
        isinstance(known, dict)
        and known.get("size") == stat.st_size
        and known.get("mtime_ns") == stat.st_mtime_ns
        and isinstance(known.get("sha256"), str)
    ):
        return known
    digest = sha256_file(file)
    if digest is None:
        return {"problem": "unreadable"}
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}


def base_revision(config: GymConfig) -> str | None:
    """The base model as far as it can be known without the network: a local folder's files (name, size,
    mtime), or the commit the Hugging Face cache resolved its revision to; None when unknown (``builtin:``,
    a model not downloaded yet, a revision given as a commit, which the settings already hold)."""
    name, revision = config.model.name_or_path, config.model.revision
    if name.startswith("builtin:") or re.fullmatch(r"[0-9a-f]{40}", revision):
        return None
    try:
        local = config.resolve_path(name)
        if local.is_dir():
            stats = [
                (p.name, p.stat().st_size, p.stat().st_mtime_ns)
                for p in sorted(local.iterdir())
                if p.is_file()
            ]
            return "files:" + hashlib.sha256(json.dumps(stats).encode()).hexdigest()[:16]
    except (OSError, RuntimeError, ValueError):  # unreadable or a looping link: training says what is wrong
        return "files:unreadable"
    from huggingface_hub.constants import HF_HUB_CACHE

    ref = Path(HF_HUB_CACHE) / f"models--{name.replace('/', '--')}" / "refs" / revision
    try:
        return ref.read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def stage_inputs(config: GymConfig, stage: str, settings: str, previous: Any) -> dict[str, Any]:
    """The inputs ``stage`` reads for ``config`` now (``settings``: its config hash)."""
    inputs: dict[str, Any] = {"settings": settings}
    if stage == "train":
        recorded = previous.get("inputs") if isinstance(previous, dict) else None
        inputs["data"] = data_inputs(config, recorded.get("data") if isinstance(recorded, dict) else None)
        inputs["base"] = base_revision(config)
    return inputs


# ------------------------------------------------------------------------------------ why rerun


def rerun_reason(
    config: GymConfig, stage: str, previous: Any, inputs: dict[str, Any], state: dict[str, Any]
) -> str | None:
    """None when ``previous`` (the stage's record) is done for exactly these inputs and its outputs are
    still the ones it wrote; else what changed, as the line a rerun prints ('' when there is nothing to
    say: no record, or a stage that did not finish)."""
    if not isinstance(previous, dict) or previous.get("status") != "done":
        return ""
    recorded = previous.get("inputs")
    if not isinstance(recorded, dict):
        return f"{STATE_FILE} recorded it without the inputs it read (an older Gym); running it again"
    if recorded.get("settings") != inputs["settings"]:
        return "gym.toml or the command-line flags changed what this stage reads; running it again"
    if stage == "train":
        changed = _data_change(recorded.get("data"), inputs["data"], config.base_dir)
        if changed:
            return f"the training data changed ({changed}); training again"
        if recorded.get("base") != inputs["base"]:
            return f"the base model {config.model.name_or_path} is at another revision now; training again"
    output = _output_change(config, stage, previous)
    if output:
        return output
    if stage == "gates":
        return champion_change(config, recorded, state)
    if stage == "deploy":
        return hub_change(config, previous)
    return None


def _data_change(recorded: Any, now: dict[str, Any], base: Path) -> str | None:
    if not isinstance(recorded, dict) or recorded.get("digest") != now["digest"]:
        before = recorded.get("files") if isinstance(recorded, dict) else None
        before = before if isinstance(before, dict) else {}
        names = sorted(set(before) | set(now["files"]))
        differ = [
            n for n in names if (before.get(n) or {}).get("sha256") != now["files"].get(n, {}).get("sha256")
        ]
        names = ", ".join(shown(n, base) for n in differ[:3]) + (" and more" if len(differ) > 3 else "")
        return f"{names or 'its files'} {'differ' if len(differ) > 1 else 'differs'} from what it trained on"
    return None


def _output_change(config: GymConfig, stage: str, previous: dict[str, Any]) -> str | None:
    if stage not in OUTPUTS:
        return None
    name, writers = OUTPUTS[stage]
    outputs = previous.get("outputs")
    recorded = outputs.get(name) if isinstance(outputs, dict) else None
    path = config.output_path / name
    where = shown(path, config.base_dir)
    if not path.is_file():
        return f"{where}, which this stage wrote, is gone; running it again"
    if recorded is None or sha256_file(path) != recorded:
        return (
            f"{where}{describe_results(path)} is not the file this stage wrote (another command "
            f"rewrote it, e.g. {writers}); running it again"
        )
    return None


def describe_results(path: Path) -> str:
    """' (a 5-step run)' or ' (limit 5)' from a results file, when it says so; '' otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.stat().st_size < 2**20 else None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return ""
    if not isinstance(data, dict):
        return ""
    if isinstance(data.get("steps"), int):
        return f" (a {data['steps']}-step run)"
    if "limit" in data and isinstance(data.get("limit"), (int, float, type(None))):
        return f" (eval limit {data['limit']})"
    return ""


# ------------------------------------------------------------------------------------- records


def stage_record(config: GymConfig, stage: str, outcome: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """The record of a finished stage (a StageOutcome): what it did, its inputs and its outputs."""
    inputs = dict(inputs)
    outputs: dict[str, Any] = {}
    folder = config.output_path
    if stage == "train":
        inputs["base"] = base_revision(config)  # the commit the cache resolved once training downloaded it
    if stage in OUTPUTS and outcome.status == "done":
        name = OUTPUTS[stage][0]
        outputs[name] = sha256_file(folder / name)
    if stage == "gates" and outcome.status == "done":
        champion_gates = config.hub is not None and any(g.needs_champion for g in config.eval.gates.gates)
        if champion_gates:
            from gym.eval.gates import GateReport

            report = GateReport.read(folder)
            champion = report.champion if report is not None else None
            inputs["champion"] = champion.get("sha") if isinstance(champion, dict) else None
    if stage == "deploy" and outcome.status == "done" and config.hub is not None:
        outputs.update(pushed_commits(config, outcome.artifacts))
    return {**asdict(outcome), "finished": time.time(), "config": inputs["settings"], "inputs": inputs,
            "outputs": outputs}  # fmt: skip


def running_record(previous: Any, inputs: dict[str, Any], settings: str) -> dict[str, Any]:
    """What rank 0 records before training: this launch's inputs, and the results file it last wrote."""
    outputs = previous.get("outputs") if isinstance(previous, dict) else None
    return {"status": "running", "started": time.time(), "config": settings, "inputs": inputs,
            "outputs": outputs if isinstance(outputs, dict) else {}}  # fmt: skip


# ------------------------------------------------------------------------- foreign training output


def foreign_training(folder: Path, previous: Any, base: Path) -> str | None:
    """What training output in ``folder`` this launch did not record, or None when there is none."""
    results = folder / OUTPUTS["train"][0]
    outputs = previous.get("outputs") if isinstance(previous, dict) else None
    recorded = outputs.get(results.name) if isinstance(outputs, dict) else None
    if results.is_file() and (recorded is None or sha256_file(results) != recorded):
        what = f"{shown(results, base)}{describe_results(results)}"
        return f"{what} was written by another command (e.g. `gym train`)"
    checkpoints = folder / "checkpoints"
    if not isinstance(previous, dict) and checkpoints.is_dir() and any(checkpoints.glob("checkpoint-*")):
        where = shown(checkpoints, base)
        return f"{where} holds checkpoints that gym launch did not record (e.g. of `gym train`)"
    return None


def set_aside_foreign_training(
    config: GymConfig, previous: Any, *, main: bool, echo: Callable[[str], None]
) -> GymConfig:
    """The config the train stage runs with: when ``output_dir`` holds training this launch did not
    record and ``train.resume`` is 'auto', rank 0 moves it aside (checkpoints first) and every rank trains
    from scratch; otherwise ``config`` itself."""
    if config.train.resume != "auto":
        return config
    folder = config.output_path
    found = foreign_training(folder, previous, config.base_dir)
    if found is None:
        return config
    if main:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target, suffix = folder / SET_ASIDE / stamp, 1
        while target.exists():
            suffix += 1
            target = folder / SET_ASIDE / f"{stamp}-{suffix}"
        target.mkdir(parents=True)
        for name in ("checkpoints", OUTPUTS["train"][0]):
            if (folder / name).exists():
                shutil.move(str(folder / name), str(target / name))
        echo(f"[train] {found}; moved it to {shown(target, config.base_dir)} and training from scratch")
    return config.model_copy(update={"train": config.train.model_copy(update={"resume": "never"})})
