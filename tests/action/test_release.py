"""What a release publishes is what a cloud node installs and what `uses: zoo-gym/gym@v1` runs.

The release workflow (.github/workflows/release.yml) builds the wheel and sdist, refuses a tag that is
not ``gym.__version__``, publishes through PyPI trusted publishing and then moves the major tag. These
tests run its build and tag-check steps as written on a copy of the checkout, and check that the
launcher's ``GYM_PIP_SPEC`` pins the version of the wheel so built.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest
import yaml

from gym import __version__
from tests.action.conftest import GYM_TOML
from tests.conftest import REPO
from tests.launch.node_image import NOT_SOURCES

RELEASE = REPO / ".github" / "workflows" / "release.yml"


def _release() -> dict:
    return yaml.safe_load(RELEASE.read_text())


def _step(job: str, name: str) -> str:
    (step,) = [s for s in _release()["jobs"][job]["steps"] if s.get("name") == name]
    return step["run"]


def test_release_publishes_through_trusted_publishing_then_moves_the_major_tag() -> None:
    release = _release()
    assert release[True] == {"push": {"tags": ["v[0-9]+.[0-9]+.[0-9]+"]}}  # `on:` reads as True in YAML 1.1
    assert release["permissions"] == {}
    jobs = release["jobs"]
    publish = jobs["publish"]
    assert publish["needs"] == "build" and publish["environment"]["name"] == "pypi"
    assert publish["permissions"] == {"id-token": "write"}  # OIDC for PyPI, nothing else
    (uses,) = [
        s["uses"] for s in publish["steps"] if s.get("uses", "").startswith("pypa/gh-action-pypi-publish@")
    ]
    assert (
        "with" not in publish["steps"][-1] or "password" not in publish["steps"][-1]["with"]
    )  # no API token
    assert re.fullmatch(r"pypa/gh-action-pypi-publish@[0-9a-f]{40}", uses)
    assert jobs["major-tag"]["needs"] == "publish" and jobs["major-tag"]["permissions"] == {
        "contents": "write"
    }
    assert all(job["permissions"] != "write-all" for job in jobs.values())


def _bash(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], cwd=cwd, env={"PATH": "/usr/bin:/bin", **env},
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.mark.slow
def test_release_builds_the_version_the_launcher_pins(tmp_path: Path) -> None:
    source = tmp_path / "checkout"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    build = _step("build", "Build the wheel and the sdist").splitlines()[-1]
    assert build == "python -m build --outdir dist ."
    # the workflow's command, without build isolation: setuptools comes from this venv, not the network
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", "dist", "."], cwd=source,
                   check=True, capture_output=True, text=True, timeout=300)  # fmt: skip
    (wheel,) = (source / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        meta = HeaderParser().parsestr(archive.read(metadata).decode())
    assert (meta["Name"], meta["Version"]) == ("zoo-gym", __version__)

    check = _step("build", "Check the tag is the version")
    assert _bash(check, source, GITHUB_REF_NAME=f"v{meta['Version']}").returncode == 0
    wrong = _bash(check, source, GITHUB_REF_NAME="v9.9.9")
    assert wrong.returncode == 1 and wrong.stdout.startswith("::error::tag v9.9.9 is not gym.__version__")

    from gym.config import config_from_args
    from gym.launch.cloud import launch_cloud

    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "train.jsonl").write_text('{"instruction": "hi", "output": "hello"}\n')
    (project / "gym.toml").write_text(GYM_TOML)
    shown: list[str] = []
    config = config_from_args(project / "gym.toml")
    launch_cloud(config, project / "gym.toml", dryrun=True, echo=shown.append, warn=lambda _: None)
    task = yaml.safe_load(shown[-1])
    assert task["envs"]["GYM_PIP_SPEC"] == f"zoo-gym[train,eval]=={meta['Version']}"
    for name in ("train", "eval"):  # the templates for `sky launch` by hand pin it too
        by_hand = yaml.safe_load((REPO / "sky_tasks" / f"{name}.yaml").read_text())
        assert by_hand["envs"]["GYM_PIP_SPEC"] == f"zoo-gym[train,eval]=={meta['Version']}"
