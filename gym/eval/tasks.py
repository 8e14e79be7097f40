"""From ``eval.tasks`` to loaded lm-eval Task/Group objects, with Hub-dataset failures as one sentence.

Each entry is one of three kinds:

* ``gym_reverse`` (and later ``gym_*``): Gym's own tasks, written to a cache folder at eval time;
* a path to an lm-eval task YAML (``.yaml``/``.yml``; relative to gym.toml's folder); its folder is
  indexed too, so a group YAML can name sibling tasks and ``include:`` templates resolve;
* anything else: an lm-eval task, group or tag name (``mmlu``, ``arc_easy``, ``gsm8k``).

Indexing all ~14k YAML files lm-eval ships takes 15-30 s, so the built-in index is only built when a
built-in name is asked for, and even then a quick text scan first narrows it to the task families
that mention the name (about 2 s); the full index is the fallback when the scan finds nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gym.eval.builtin_tasks import BUILTIN_TASKS, GYM_TASK_PREFIX
from gym.eval.errors import EvalError
from gym.failures import error_chain

if TYPE_CHECKING:
    from gym.config.root import GymConfig

Kind = Literal["gym", "local", "lm-eval"]
YAML_SUFFIXES = (".yaml", ".yml")
# A YAML line defining (``task: x``/``group: x``/``tag: x``) or listing (``- x``) a name.
DEFINITION = re.compile(r"^\s*(?:task|group|tag)\s*:\s*['\"]?([\w.\-]+)['\"]?\s*$", re.M)
MENTION = re.compile(r"^\s*-\s*['\"]?([\w.\-]+)['\"]?\s*$", re.M)
LOCAL_BUILDERS = {"json", "csv", "parquet", "text", "arrow", "pandas", "webdataset", "imagefolder"}


@dataclass(frozen=True)
class TaskSpec:
    """One ``eval.tasks`` entry, resolved: what the user wrote, its kind, and what lm-eval should load."""

    requested: str
    kind: Kind
    load_as: str  # a registered name or an absolute YAML path

    @property
    def chat_template(self) -> bool:
        """Whether the prompt is rendered with the chat template by default.

        Gym's tasks are chat prompts (the demo model only knows them in its template); lm-eval's and
        local tasks keep lm-eval's own default (no template), so scores compare with published ones.
        """
        return self.kind == "gym"


@dataclass
class LoadedTask:
    """A spec with its lm-eval object (Task or Group) and the name results are reported under."""

    spec: TaskSpec
    obj: Any
    name: str


def resolve_spec(entry: str, config: GymConfig | None = None) -> TaskSpec:
    """Classify one ``eval.tasks`` entry; Gym tasks are written to the cache here."""
    if entry.startswith(GYM_TASK_PREFIX):
        if entry not in BUILTIN_TASKS:
            raise EvalError(
                f"unknown Gym task '{entry}'; Gym's built-in tasks are: {', '.join(sorted(BUILTIN_TASKS))}"
            )
        return TaskSpec(entry, "gym", str(BUILTIN_TASKS[entry]()))
    path = config.resolve_path(entry) if config is not None else Path(entry).expanduser().resolve()
    if path.suffix in YAML_SUFFIXES or path.exists():
        if not path.is_file():
            raise EvalError(
                f"task file '{path}' does not exist; check eval.tasks (paths are relative to gym.toml)"
            )
        if path.suffix not in YAML_SUFFIXES:
            raise EvalError(f"task '{entry}' is a file but not an lm-eval task YAML (.yaml or .yml)")
        return TaskSpec(entry, "local", str(path))
    return TaskSpec(entry, "lm-eval", entry)


def lm_eval_tasks_root() -> Path:
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).parent


def builtin_families(names: list[str], root: Path | None = None) -> list[Path] | None:
    """The lm-eval task family folders that define (else mention) each name; None if any is not found."""
    root = root or lm_eval_tasks_root()
    wanted = set(names)
    defined: dict[str, set[str]] = {}
    mentioned: dict[str, set[str]] = {}
    for path in root.rglob("*.yaml"):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        family = path.relative_to(root).parts[0]
        for pattern, found in ((DEFINITION, defined), (MENTION, mentioned)):
            for match in pattern.finditer(text):
                if match.group(1) in wanted:
                    found.setdefault(match.group(1), set()).add(family)
    folders: set[str] = set()
    for name in wanted:
        families = defined.get(name) or mentioned.get(name)
        if not families:
            return None
        folders |= families
    return [root / family for family in sorted(folders) if (root / family).is_dir()]


def task_manager(specs: list[TaskSpec], *, full_index: bool = False) -> Any:
    """A TaskManager indexing only what ``specs`` need (see the module docstring)."""
    from lm_eval.tasks import TaskManager

    include = sorted({str(Path(s.load_as).parent) for s in specs if s.kind != "lm-eval"})
    names = [s.load_as for s in specs if s.kind == "lm-eval"]
    use_defaults = full_index
    if names and not full_index:
        globbed = any(ch in name for name in names for ch in "*?[")
        families = None if globbed else builtin_families(names)
        if families is None:
            use_defaults = True
        else:
            include += [str(folder) for folder in families]
    return TaskManager(include_path=include or None, include_defaults=use_defaults)


def _dataset_id(spec: TaskSpec, manager: Any, error: BaseException) -> str | None:
    """The Hub dataset a failed task wanted: from the error text, else from the task's config."""
    for link in error_chain(error):
        match = re.search(r"(?:reach|[Dd]ataset) '?([\w.\-]+/[\w.\-]+)'?", str(link))
        if match:
            return match.group(1)
    entry = manager.task_index.get(spec.load_as)
    cfg = (entry.cfg or {}) if entry is not None else {}
    return cfg.get("dataset_path")


def _load_error(spec: TaskSpec, manager: Any, error: BaseException) -> EvalError:
    from gym.model.loading import _connection_failure, hub_offline

    dataset = _dataset_id(spec, manager, error)
    from_hub = dataset is not None and dataset not in LOCAL_BUILDERS and not Path(dataset).exists()
    if from_hub and (hub_offline() or _connection_failure(error)):
        return EvalError(
            f"task '{spec.requested}' needs the Hub dataset '{dataset}', which is not in the local cache and "
            "cannot be downloaded here (offline or no network); run it once where there is network to cache it, or use a "
            "local lm-eval task YAML (dataset_path: json with dataset_kwargs.data_files) in eval.tasks"
        )
    first = (str(error).strip().splitlines() or [type(error).__name__])[0].rstrip(".")
    return EvalError(f"could not load task '{spec.requested}': {first}")


class _UnknownTask(Exception):
    """A name the TaskManager does not know (lm-eval raises a bare KeyError for it)."""


def _load_all(manager: Any, specs: list[TaskSpec]) -> tuple[Any, list[LoadedTask]]:
    loaded = []
    for spec in specs:
        try:
            obj = _load_one(manager, spec)
        except KeyError as error:
            raise _UnknownTask(spec.requested) from error
        except EvalError:
            raise
        except Exception as error:  # datasets/lm-eval raise many types; each becomes one sentence
            raise _load_error(spec, manager, error) from error
        loaded.append(LoadedTask(spec, obj, _name_of(obj)))
    return manager, loaded


def load_tasks(specs: list[TaskSpec]) -> tuple[Any, list[LoadedTask]]:
    """Build every task (reading its dataset) before any model is loaded, so a bad task fails fast.

    Returns the TaskManager too: simple_evaluate needs one, and without it would build the full index.

    When the narrowed index misses a name (a group whose members live in another family folder), the
    full built-in index is built once and the load retried.
    """
    narrowed = any(s.kind == "lm-eval" for s in specs)
    missing = ""
    try:
        return _load_all(task_manager(specs), specs)
    except _UnknownTask as error:
        missing = str(error)
    if narrowed:  # the quick scan may have missed a family folder a group draws from
        try:
            return _load_all(task_manager(specs, full_index=True), specs)
        except _UnknownTask as error:
            missing = str(error)
    raise EvalError(
        f"unknown task '{missing}'; use an lm-eval task name (`lm_eval ls tasks` lists them), a path "
        f"to a task YAML, or one of Gym's tasks ({', '.join(sorted(BUILTIN_TASKS))})"
    )


def _load_one(manager: Any, spec: TaskSpec) -> Any:
    """The top-level object for one spec: its root Group, its one Task, or a tag's list of Tasks."""
    target: str | dict[str, Any] = spec.load_as
    if spec.kind == "local":
        target = anchored_config(Path(spec.load_as)) or spec.load_as
    result = manager.load([target])
    groups = list(result.get("groups", {}).values())
    children = {name for group in groups for name in group.child_names}
    roots = [group for group in groups if group.name not in children]
    if len(roots) == 1:
        return roots[0]
    tasks = list(result["tasks"].values())
    return tasks[0] if len(tasks) == 1 else tasks


def _name_of(obj: Any) -> str:
    from lm_eval.api.group import Group

    if isinstance(obj, list):
        return ",".join(task.task_name for task in obj)
    return obj.name if isinstance(obj, Group) else obj.task_name


def _anchor(value: Any, folder: Path) -> Any:
    if isinstance(value, str):
        candidate = folder / value
        return str(candidate) if not Path(value).is_absolute() and candidate.exists() else value
    if isinstance(value, list):
        return [_anchor(item, folder) for item in value]
    if isinstance(value, dict):
        return {key: _anchor(item, folder) for key, item in value.items()}
    return value


def anchored_config(path: Path) -> dict[str, Any] | None:
    """A local task's config with relative ``data_files`` made relative to the YAML, or None if unchanged.

    lm-eval resolves them against the working directory, so a task folder would only work when Gym is
    started from inside it; reading them relative to the YAML lets gym.toml live anywhere. Groups are
    loaded as lm-eval reads them.
    """
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(path, resolve_func=True, recursive=True)
    if not isinstance(cfg.get("task"), str) or "group" in cfg or "class" in cfg:
        return None
    kwargs = cfg.get("dataset_kwargs") or {}
    if "data_files" not in kwargs:
        return None
    anchored = _anchor(kwargs["data_files"], path.parent)
    if anchored == kwargs["data_files"]:
        return None
    return {**cfg, "dataset_kwargs": {**kwargs, "data_files": anchored}}
