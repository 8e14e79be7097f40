"""The cloud node installs what it runs: the task's own setup line installs Gym's wheel in a fresh venv.

`gym launch --cloud` sends the real task to the SkyPilot double; its node runs ``setup`` (``pip install
"zoo-gym[train,eval]==X"``, offline, the only candidate being the wheel built from this checkout) and
then ``run``, whose command (GYM_TRAIN_CMD, the run script's hook) is a probe that reports where Gym
was imported from and uses the installed data files. A second test lists the wheel's files against
every data file the source tree holds for Gym to read at run time.
"""

from __future__ import annotations

import json
import re
import sysconfig
import zipfile
from pathlib import Path

import tomllib

from gym import __version__
from gym.launch.templates import SETUP
from tests.conftest import REPO

from .cloud_run import TRAIN, client_env, gym, write_project
from .node_image import node_image
from .sky_double import SkyDouble

PROBE = """\
import json, os, shutil, subprocess, sys
import gym
from gym.data.templates.registry import TEMPLATES
from gym.hub.space import TEMPLATE_DIR, SpaceSettings, render_space

checked = subprocess.run(["gym", "validate", "gym.toml"], capture_output=True, text=True)
render_space("probe_space", SpaceSettings("acme/demo", "acme/demo-chat"))
json.dump({"gym": gym.__file__, "which": shutil.which("gym"), "template_dir": str(TEMPLATE_DIR),
           "validate": [checked.returncode, checked.stdout + checked.stderr],
           "templates": {name: t.jinja for name, t in TEMPLATES.items()},
           "pythonpath": os.environ.get("PYTHONPATH")}, open("probe.json", "w"))
"""

MANAGED = '\n[compute]\naccelerators = ["L4:1"]\n'


def test_the_node_installs_the_wheel_with_the_tasks_setup_and_runs_from_it(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    write_project(project, TRAIN.format(max_steps=2) + MANAGED)
    (project / "probe.py").write_text(PROBE)
    with SkyDouble(tmp_path / "sky", base_env={"GYM_TRAIN_CMD": "python probe.py"}, gpus=0) as sky:
        done = gym(["launch", "--cloud", "gym.toml"], project, client_env(tmp_path / "home", sky.endpoint))
        assert done.returncode == 0, done.stderr + done.stdout
        (job,) = sky.jobs.values()
        assert job.done.wait(300), "the job did not finish"
    log = "".join(job.lines)
    assert job.status == "SUCCEEDED", log[-3000:]
    assert job.task["setup"] == SETUP  # the line a real node runs, not a stand-in
    assert job.task["envs"]["GYM_PIP_SPEC"] == f"zoo-gym[train,eval]=={__version__}"

    venv = job.attempts[0].nodes[0].folder / "venv"
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    report = json.loads((job.node_dir / "probe.json").read_text())
    assert report["gym"] == str(purelib / "gym" / "__init__.py")
    assert not report["gym"].startswith(str(REPO)) and report["pythonpath"] is None
    assert report["which"] == str(venv / "bin" / "gym")
    assert (purelib / f"zoo_gym-{__version__}.dist-info").is_dir()
    assert report["validate"][0] == 0, report["validate"][1]
    assert report["template_dir"] == str(venv / "share" / "zoo-gym" / "space_template")
    assert (job.node_dir / "probe_space" / "app.py").read_bytes() == (
        REPO / "space_template" / "app.py"
    ).read_bytes()
    from gym.data.templates.registry import TEMPLATES

    assert report["templates"] == {name: t.jinja for name, t in TEMPLATES.items()}


def _runtime_data_files() -> dict[str, Path]:
    """Every file Gym reads at run time, by its path inside the wheel: the non-Python files of its packages,
    and the top-level folders its code opens relative to the checkout (``Path(__file__).parents[N] /
    "name"``), which the wheel carries as data under ``share/zoo-gym/``."""
    wanted: dict[str, Path] = {}
    for package in ("gym", "action"):
        for path in (REPO / package).rglob("*"):
            if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts:
                wanted[path.relative_to(REPO).as_posix()] = path
    # `Path(__file__).parents[N] / "a" / "b"`: the folder a/b of the checkout, which pyproject's
    # [tool.setuptools.data-files] places under <prefix>/<destination>/ in a wheel
    opened = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?\.parents\[(\d+)\]((?:\s*/\s*\"[^\"]+\")+)")
    shipped = {
        REPO / source: destination
        for destination, patterns in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"][
            "setuptools"
        ]["data-files"].items()
        for pattern in patterns
        for source in (path.relative_to(REPO) for path in REPO.glob(pattern))
    }
    for source in (REPO / "gym").rglob("*.py"):
        for depth, chain in opened.findall(source.read_text(encoding="utf-8")):
            if source.parents[int(depth)] != REPO:
                continue
            folder = REPO.joinpath(*re.findall(r'"([^"]+)"', chain))
            for path in folder.rglob("*"):
                if path.is_file() and "__pycache__" not in path.parts:
                    destination = shipped.get(path, f"(no data-files entry ships {path.relative_to(REPO)})")
                    wanted[f"zoo_gym-{__version__}.data/data/{destination}/{path.name}"] = path
    return wanted


def test_the_wheel_carries_every_data_file_gym_reads() -> None:
    wanted = _runtime_data_files()
    assert any(name.endswith(".jinja") for name in wanted) and any(
        "space_template/app.py" in n for n in wanted
    )
    with zipfile.ZipFile(node_image().wheel) as wheel:
        names = set(wheel.namelist())
        missing = sorted(name for name in wanted if name not in names)
        assert not missing, f"the wheel lacks files Gym reads at run time: {missing}"
        changed = [name for name, path in wanted.items() if wheel.read(name) != path.read_bytes()]
    assert not changed, changed
