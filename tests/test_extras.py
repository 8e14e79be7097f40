"""Every third-party import sits in the pyproject extra of the command that needs it.

The issue asks for a venv built from each command's extras alone. Building one per extra from the
registry takes far longer than the ~10-minute suite allows (torch alone), so this checks the same
thing two cheaper ways:

1. statically, every ``import`` in a package's source, including the lazy ones inside functions that
   a plain import never runs (training-free GRPO's ``openai``), must name a distribution that the
   package's extras (or the base install) list *directly*, so it cannot vanish when a transitive
   dependency drops it;
2. dynamically, in a fresh interpreter started with ``-I -S`` (no site-packages at all), whose path
   holds only links to the distributions that ``pip install zoo-gym[<extras>]`` resolves to
   (the transitive closure of those requirements, read from the installed metadata), every module of
   the package imports and `gym --help` runs.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

# Which extras each package runs with. gym/cli and gym/config are what a bare `pip install zoo-gym`
# gives: `gym --help`, `gym validate`, `gym init`, `gym schema`.
PACKAGE_EXTRAS: dict[str, tuple[str, ...]] = {
    "gym/config": (),
    "gym/cli": (),
    "gym/data": ("train",),
    "gym/model": ("train", "qlora"),
    "gym/train": ("train",),
    "gym/eval": ("train", "eval"),
    "gym/engine": ("train", "serve"),
    "gym/api": ("train", "serve"),
    "gym/hub": ("train",),
    "gym/launch": ("cloud",),
    "gym/gitops": ("cloud",),  # history, rollback and pins read the Hub (huggingface_hub, in cloud)
    "gym/webui": ("train", "eval", "serve", "webui"),
    "gym/export": ("train", "gguf"),
    "action": ("action",),
}
# Files whose lazy imports belong to one command: the CLI dispatches to every extra.
FILE_EXTRAS: dict[str, tuple[str, ...]] = {
    "gym/cli/model_commands.py": ("train",),
    "gym/cli/config_commands.py": (
        "cloud",
    ),  # `gym validate --online` asks the Hub (plain validate stays bare)
    "gym/train/speed.py": ("train", "kernels"),  # the Liger and Cut Cross-Entropy switches
    "gym/cli/serve_commands.py": ("train", "serve"),
    "gym/export/quantize.py": ("train", "quantize"),  # `gym export --quantize`
    "gym/launch/report/job.py": ("cloud", "action"),  # the job's report-back: PyGithub
    "gym/launch/report/sticky.py": ("cloud", "action"),  # the sticky comment, shared with the Action
    "gym/api/ui.py": ("train", "serve", "space"),  # the Gradio chat page of `gym serve --ui`
    "gym/api/zerogpu.py": ("train", "serve", "space"),  # a ZeroGPU Space's app (`spaces`, Gradio)
    "gym/engine/llamacpp_backend.py": ("train", "serve", "gguf"),  # `gym serve --backend llamacpp`
}
# GPU serving engines the user installs for `--backend vllm|sglang`; the backend checks for them and
# says how to install them. Gym does not pin them: each pins its own torch/CUDA build.
OPTIONAL_ENGINES = {"vllm", "sglang"}
# Compiled distributions the main venv does without (their overlay venv has them): module -> distribution.
OVERLAY_MODULES = {"llama_cpp": "llama-cpp-python"}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(requirement).name).lower()


def _direct(extras: tuple[str, ...]) -> set[str]:
    wanted = list(PYPROJECT["dependencies"])
    for extra in extras:
        wanted += PYPROJECT["optional-dependencies"][extra]
    return {_name(r) for r in wanted if "zoo-gym" not in r}


def _third_party_imports(path: Path) -> set[str]:
    """Top-level module names imported anywhere in the file, TYPE_CHECKING blocks excepted."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("gym", "action", "__future__")}


def _package_files(package: str) -> list[Path]:
    folder = REPO / package
    return sorted(folder.rglob("*.py"))


def test_every_package_is_assigned_extras() -> None:
    packages = {f"gym/{p.name}" for p in (REPO / "gym").iterdir() if (p / "__init__.py").exists()}
    missing = packages - set(PACKAGE_EXTRAS)
    assert not missing, f"say which extras these packages run with: {sorted(missing)}"


@pytest.mark.parametrize("package", PACKAGE_EXTRAS)
def test_imports_are_declared_in_the_package_extras(package: str) -> None:
    if not (REPO / package).is_dir():
        pytest.skip(f"{package} is not in this checkout")
    by_module = metadata.packages_distributions()
    problems = []
    for file in _package_files(package):
        extras = FILE_EXTRAS.get(str(file.relative_to(REPO)), PACKAGE_EXTRAS[package])
        allowed = _direct(extras)
        for module in sorted(_third_party_imports(file)):
            if module in OPTIONAL_ENGINES:
                continue
            distributions = {_name(d) for d in by_module.get(module, [OVERLAY_MODULES.get(module, module)])}
            if not distributions & allowed:
                where = ",".join(extras) or "the base install"
                problems.append(
                    f"{file.relative_to(REPO)} imports {module} ({'/'.join(distributions)}), not in {where}"
                )
    assert not problems, "\n".join(problems)


def _closure(extras: tuple[str, ...]) -> set[str]:
    """Installed distributions that `pip install zoo-gym[extras]` pulls in, by requirement metadata."""
    environment = default_environment()
    todo = [(Requirement(r), "") for r in PYPROJECT["dependencies"]]
    for extra in extras:
        todo += [(Requirement(r), "") for r in PYPROJECT["optional-dependencies"][extra]]
    seen: set[str] = set()
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker and not requirement.marker.evaluate({**environment, "extra": extra}):
            continue
        name = _name(str(requirement))
        if name in seen or name == "zoo-gym":
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        for sub in dist.requires or []:
            parsed = Requirement(sub)
            for wanted in requirement.extras or {""}:
                todo.append((parsed, wanted))
    return seen


def _linked_site(extras: tuple[str, ...], folder: Path) -> Path:
    """A folder of symlinks to exactly the closure's installed files (top-level entries)."""
    site = folder / "site"
    site.mkdir()
    for name in _closure(extras):
        dist = metadata.distribution(name)
        base = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            target = base / top
            link = site / top
            if target.exists() and not link.exists() and not top.endswith(".pth"):
                link.symlink_to(target)
    return site


DYNAMIC = {
    "base": ((), ["gym.config", "gym.cli"]),
    "train": (("train",), ["gym.data", "gym.model", "gym.train"]),
    "cloud": (("cloud",), ["gym.launch", "gym.gitops"]),
    "serve": (("train", "serve", "space"), ["gym.api", "gym.hub"]),  # space: the ZeroGPU app imports spaces
    "eval": (("train", "eval"), ["gym.eval"]),
    "webui": (("train", "eval", "serve", "webui"), ["gym.webui"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", DYNAMIC)
def test_modules_import_with_only_their_extras(name: str, tmp_path: Path) -> None:
    extras, packages = DYNAMIC[name]
    site = _linked_site(extras, tmp_path)
    script = (
        "import importlib, pkgutil, sys\n"
        f"sys.path[:0] = [{str(site)!r}, {str(REPO)!r}]\n"
        f"for package in {packages!r}:\n"
        "    module = importlib.import_module(package)\n"
        "    for info in pkgutil.walk_packages(module.__path__, package + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "from gym.cli import main\n"
        "sys.argv = ['gym', '--help']\n"
        "main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "validate" in result.stdout
