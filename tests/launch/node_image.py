"""What a cloud node starts from: Gym's wheel, built from this checkout, and a Python with its dependencies.

A real node runs the task's ``setup`` (``pip install "zoo-gym[train,eval]==X"``) on a machine image
that has Python; here the image is :func:`node_image`, made once per test process:

- ``wheels/``: the wheel built from a copy of the checkout (``pip wheel --no-deps``), the only thing
  the node's pip may install (``PIP_NO_INDEX=1``, ``PIP_FIND_LINKS``);
- ``site-packages/``: symlinks to every entry of the test venv's site-packages except Gym's own (its dist-info,
  the editable finder, ``gym/``, ``action/``), so the dependencies count as installed and only the wheel
  is new. A node venv sees that folder through a ``.pth`` file; its ``bin/`` gets the dependencies'
  console scripts (``torchrun``...) rewritten to the node's own interpreter.

Nothing on the node points back at the checkout: no ``PYTHONPATH``, no test-venv ``bin`` on ``PATH``.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Gym's own entries in site-packages: the node must get them from the wheel, never from the checkout.
OWN_ENTRIES = ("zoo_gym-", "__editable__", "__pycache__")
OWN_PACKAGES = {"gym", "action"}
# Folders of the checkout a wheel is not built from (tests, tooling, caches, other venvs).
NOT_SOURCES = (".git", ".venv*", "tests", "bench", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
               "outputs", ".bench", "docs", ".ruff_cache", ".pytest_cache", ".hypothesis")  # fmt: skip
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class NodeImage:
    wheels: Path
    site: Path
    scripts: dict[str, str]  # console script name -> its text after the shebang line

    @property
    def wheel(self) -> Path:
        (found,) = self.wheels.glob("zoo_gym-*.whl")
        return found

    @staticmethod
    def purelib(folder: Path) -> Path:
        """The site-packages folder of the venv at ``folder``."""
        return Path(sysconfig.get_path("purelib", vars={"base": str(folder), "platbase": str(folder)}))

    def new_venv(self, folder: Path) -> Path:
        """A fresh venv at ``folder`` that sees the image's dependencies but not Gym; returns it."""
        venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
        (self.purelib(folder) / "node_image.pth").write_text(f"{self.site}\n")
        python = folder / "bin" / "python"
        for name, body in self.scripts.items():
            script = folder / "bin" / name
            script.write_text(f"#!{python}\n{body}")
            script.chmod(0o755)
        return folder

    def env(self, folder: Path) -> dict[str, str]:
        """What the node's shell gets for the venv at ``folder``: its bin first, pip offline to the wheel."""
        return {
            "PATH": f"{folder / 'bin'}{os.pathsep}{SYSTEM_PATH}",
            "VIRTUAL_ENV": str(folder),
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(self.wheels),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_WARN_SCRIPT_LOCATION": "1",
        }


def build_wheel(out: Path) -> Path:
    """Gym's wheel, built from a copy of the checkout (the build writes egg-info and build/ beside it)."""
    source = out / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    wheels = out / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
         str(source)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    shutil.rmtree(source)
    return wheels


def _dependency_site(out: Path) -> Path:
    # Named site-packages as on a real node: dill (through datasets) pickles modules from elsewhere by value.
    site = out / "site-packages"
    site.mkdir()
    packages = Path(sysconfig.get_path("purelib"))
    for entry in packages.iterdir():
        name = entry.name
        if name.startswith(OWN_ENTRIES) or name in OWN_PACKAGES or name.endswith(".pth"):
            continue
        (site / name).symlink_to(entry)
    return site


def _dependency_scripts() -> dict[str, str]:
    """The test venv's console scripts of third-party packages (not Gym's ``gym``, not pip's or python)."""
    own = Path(sys.executable)
    scripts = {}
    for path in Path(sys.executable).parent.iterdir():
        if path.name in {"gym"} or path.name.startswith(("python", "activate", "Activate", "pip")):
            continue
        try:
            first, _, body = path.read_text().partition("\n")
        except (UnicodeDecodeError, IsADirectoryError, OSError):
            continue  # compiled tools (ruff, act...) are not Python entry points
        if first.startswith("#!") and Path(first[2:].strip()).parent == own.parent:
            scripts[path.name] = body
    return scripts


@functools.cache
def node_image() -> NodeImage:
    """Built once per test process (~5 s); removed when the process exits."""
    out = Path(tempfile.mkdtemp(prefix="gym-node-image-"))
    atexit.register(shutil.rmtree, out, True)
    return NodeImage(wheels=build_wheel(out), site=_dependency_site(out), scripts=_dependency_scripts())
