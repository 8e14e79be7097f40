"""The Action's rollback (``mode: rollback``, workflow_dispatch) follows the launch rule: only write, maintain or
admin may roll the Hub back, read from the API when it runs (action/gitops_jobs.py). The rollback itself is
tests/gitops/test_lineage_rollback.py's, through `gym rollback`."""

from __future__ import annotations

import pytest

from tests.action.conftest import RecordingLauncher
from tests.action.github_server import FakeGitHub

DISPATCH = {"inputs": {"rollback-to": "", "rollback-reason": "bad push"}, "sender": {"login": "tina"}}


@pytest.mark.parametrize(("role", "shown"), [("triage", "triage"), (None, "no")])
def test_a_rollback_dispatched_without_write_is_refused(run_action, github: FakeGitHub, role: str | None,
                                                        shown: str) -> None:  # fmt: skip
    if role is not None:
        github.roles["tina"] = role
    launcher = RecordingLauncher()
    result = run_action("", "workflow_dispatch", launcher, event_data=DISPATCH, mode="rollback",
                        extra_env={"GITHUB_ACTOR": "tina"})  # fmt: skip
    assert result.rc == 1 and launcher.requests == []
    line = f"rollback refused: @tina has {shown} permission (rolling back needs write, maintain or admin)"
    assert f"::error::{line}" in result.stdout and line in result.summary
    assert "HF_TOKEN" not in result.env.read and "GYM_INPUT_HF_TOKEN" not in result.env.read  # never touched


def test_rollback_runs_only_on_workflow_dispatch(run_action, github: FakeGitHub) -> None:
    github.roles["tina"] = "admin"
    result = run_action("push_main.json", "push", RecordingLauncher(), mode="rollback")
    assert result.rc == 1
    assert "::error::mode rollback runs only on workflow_dispatch, not on push" in result.stdout
