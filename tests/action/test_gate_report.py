"""A cloud job whose gates failed: its scores and gate results travel back through the log, and its
report-back sets a failing ``gym / <config>`` status and a comment naming the gate (PyGithub, recording API)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym.config.gates import parse_gate
from gym.eval.gates import Champion, evaluate_gates
from gym.eval.report import EvalReport
from gym.launch.report.job import ReportTarget, report_finished
from gym.launch.report.render import marker
from gym.launch.results import emit_results, results_from_lines
from tests.action.conftest import RESULTS
from tests.action.github_server import serve
from tests.e2e.loop import GitHubWithStatuses

TOKEN = "github_pat_" + "Y" * 40
GATE = "gym_reverse.exact_match >= champion"


@pytest.fixture
def github():
    state = GitHubWithStatuses(token=TOKEN)
    server, _ = serve(state)
    state.pulls[3] = {"head_repo": state.repo}
    yield state
    server.shutdown()
    server.server_close()


def test_failed_gates_reach_the_pull_request_from_the_job(github, tmp_path: Path, monkeypatch) -> None:
    report = EvalReport.from_dict(RESULTS)  # this run: exact_match 0.35
    report.write(tmp_path)
    better = EvalReport.from_dict({**RESULTS, "results": [{**RESULTS["results"][0], "value": 0.5}]})
    gates = evaluate_gates([parse_gate(GATE)], report, Champion("acme/bot", "e" * 40, better), "acme/bot")
    gates.write(tmp_path)

    monkeypatch.setenv("GYM_EMIT_RESULTS", "1")
    log: list[str] = []
    assert emit_results(tmp_path, log.append)
    results = results_from_lines(["some training output\n", *log])
    assert results is not None and results["gates"]["passed"] is False
    assert results["results"] == RESULTS["results"]

    target = ReportTarget(
        api_url=github.base, repository=github.repo, sha="d" * 40, config="gym.toml", pull=3
    )
    env = {"GYM_REPORT_TO": target.as_env(), "GYM_REPORT_TOKEN": TOKEN}
    error = f"promotion gate '{GATE}' failed (short by 0.1500); nothing was pushed"
    report_finished(job="SkyPilot job `gym-bot`", results=results, error=error, env=env, echo=lambda _: None)

    (status,) = github.statuses
    assert (status["state"], status["context"], status["sha"]) == ("failure", "gym / gym.toml", "d" * 40)
    assert status["description"] == f"gates: 0 of 1 gates pass; failed: {GATE} (short by 0.1500)"
    (comment,) = github.comments[3]
    body = comment["body"]
    assert body.startswith(marker("gym.toml")) and "❌ promotion gates failed: not pushed" in body
    assert "#### Promotion gates · champion `acme/bot` at `eeeeeeeeeeee`" in body
    assert (
        f"| `{GATE}` | champion 0.5000 | 0.3500 | -0.1500 | {(0.04**2 + 0.04**2) ** 0.5:.4f} | 0.5000 | "
        "❌ fail (short by 0.1500) |" in body
    )
    assert TOKEN not in body
