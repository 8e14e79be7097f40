"""Report-back from the job itself: a long cloud run posts its eval table when it ends, holding no runner.

With ``wait: false`` and a ``GYM_REPORT_TOKEN`` in the action's environment, the action launches the
job with two additions (see :func:`report_target`): the environment variable ``GYM_REPORT_TO``, a
JSON object naming where to report (API address, repository, pull request, commit, config path, run
link; nothing secret), and the token itself as the SkyPilot *secret* ``GYM_REPORT_TOKEN``. The job's
`gym launch` (rank 0) then calls :func:`report_started`, and :func:`report_finished` when the run
ends or fails: it edits the same sticky comment the action wrote (found by the same marker, rendered
by the same :func:`gym.launch.report.render.render`) and sets the commit status ``gym / <config>``.

Why a separate token: the workflow's ``GITHUB_TOKEN`` expires when the workflow job ends, which is
the point of not waiting. A fine-grained token limited to the repository with *Pull requests: write*
and *Commit statuses: write* is enough. It never appears in a comment, status, log or task YAML:
everything sent is passed through the redactor with its value first.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

TOKEN_ENV = "GYM_REPORT_TOKEN"
TARGET_ENV = "GYM_REPORT_TO"
STATUS_CONTEXT = "gym / {config}"


@dataclass(frozen=True)
class ReportTarget:
    """Where the job reports: nothing in it is secret (it travels as a plain task env)."""

    api_url: str
    repository: str
    sha: str
    config: str  # the config's path in the repository: the sticky comment's marker
    pull: int | None = None
    run_url: str = ""
    author: str = "github-actions[bot]"  # whose sticky comment is the action's (its token's identity)

    def as_env(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ReportTarget | None:
        raw = env.get(TARGET_ENV, "")
        if not raw:
            return None
        try:
            data = json.loads(raw)
            return cls(**{key: data[key] for key in cls.__dataclass_fields__ if key in data})
        except (ValueError, TypeError, KeyError):
            return None


class Reporter:
    """The job's side: the sticky comment and the commit status, through PyGithub."""

    def __init__(self, target: ReportTarget, token: str, echo: Callable[[str], None] = print) -> None:
        self.target = target
        self.token = token
        self.echo = echo
        self._secrets = (token,) if len(token) >= 4 else ()  # the action's Redactor rule

    def redact(self, text: str) -> str:
        from gym.config.errors import redact

        return redact(text, self._secrets)

    def _repo(self) -> Any:
        from github import Auth, Github

        return Github(base_url=self.target.api_url, auth=Auth.Token(self.token)).get_repo(
            self.target.repository
        )

    def status(self, state: str, description: str) -> None:
        """Set the commit status ``gym / <config>`` (state: pending, success, failure, error)."""
        self._repo().get_commit(self.target.sha).create_status(
            state=state,
            target_url=self.target.run_url or "",
            description=self.redact(description)[:140],  # GitHub's limit
            context=STATUS_CONTEXT.format(config=self.target.config),
        )

    def comment(self, build: Callable[[str], str]) -> str:
        """Edit the action's sticky comment of the config with ``build(its body)``, or create one when there is
        none. Editing keeps the comment's author, so the action still finds it as its own."""
        from gym.launch.report.render import marker
        from gym.launch.report.sticky import find_sticky, write_sticky

        if self.target.pull is None:
            return ""
        from github import Auth, Github

        from gym.launch.report.sticky import own_login

        pull = self._repo().get_pull(self.target.pull)
        # the action's own comment only (marker *and* author: the action's identity, or this token's owner
        # when an earlier report of the job had to create it): one planted by someone else is never edited
        mine = own_login(Github(base_url=self.target.api_url, auth=Auth.Token(self.token)))
        sticky = find_sticky(pull, marker(self.target.config), (self.target.author, mine))
        existing = sticky.comment.body or "" if sticky.comment is not None else ""
        return write_sticky(pull, sticky, self.redact(build(existing))).url


def _reporter(env: Mapping[str, str], echo: Callable[[str], None]) -> Reporter | None:
    target = ReportTarget.from_env(env)
    token = env.get(TOKEN_ENV, "")
    if target is None or not token:
        return None
    return Reporter(target, token, echo)


def _safely(echo: Callable[[str], None], what: str, call: Callable[[], Any], token: str) -> Any:
    """Reporting never fails the run: a GitHub error is one line (no token) and the run goes on."""
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - PyGithub, network: reported, not raised
        status = getattr(error, "status", None)
        message = f"could not {what} on GitHub ({type(error).__name__}{f', HTTP {status}' if status else ''})"
        echo(message.replace(token, "***") if token else message)
        return None


def report_started(
    job: str, env: Mapping[str, str] | None = None, echo: Callable[[str], None] = print
) -> None:
    env = os.environ if env is None else env
    reporter = _reporter(env, echo)
    if reporter is not None:
        _safely(
            echo,
            "set the commit status",
            lambda: reporter.status("pending", f"{job} running"),
            reporter.token,
        )


def report_finished(
    *,
    job: str,
    results: dict[str, Any] | None,
    error: str = "",
    env: Mapping[str, str] | None = None,
    echo: Callable[[str], None] = print,
) -> str:
    """Post the finished run (its eval results, or its error) to the PR and the commit; returns the comment URL."""
    env = os.environ if env is None else env
    reporter = _reporter(env, echo)
    if reporter is None:
        return ""
    from gym.launch.report.outcome import ConfigOutcome, LaunchOutcome
    from gym.launch.report.render import render

    target = reporter.target
    detail = (
        f"{job} finished" + ("" if results else " without eval results") if not error else f"{job} failed"
    )

    def body(existing: str) -> str:
        outcome = ConfigOutcome(
            path=target.config, mode="launch", reason="reported by the job when it ended",
            launch=LaunchOutcome(detail=detail, results=results), error=error,
            job=_ended_job(existing, failed=bool(error)),
        )  # fmt: skip
        return render(outcome, run_url=target.run_url, sha=target.sha)

    url = (
        _safely(echo, "update the pull request comment", lambda: reporter.comment(body), reporter.token) or ""
    )
    state, summary = ("failure", error) if error else ("success", _summary(results))
    gated = gate_status(results)
    if gated is not None:
        state, summary = gated
    _safely(echo, "set the commit status", lambda: reporter.status(state, summary), reporter.token)
    if url:
        echo(f"reported to {url}")
    return url


def _ended_job(existing: str, *, failed: bool) -> Any:
    """The action's job record (its hidden RunState line) carried over, marked ended: the next action run
    then knows there is nothing left to cancel."""
    from gym.launch.report.sticky import RunState

    state = RunState.parse(existing)
    if state is not None:
        state.state = "failed" if failed else "finished"
        state.ended = True
    return state


def gate_status(results: dict[str, Any] | None) -> tuple[str, str] | None:
    """``(state, description)`` of the commit status when the run had promotion gates, else None."""
    gates = (results or {}).get("gates")
    if not isinstance(gates, dict):
        return None
    from gym.eval.gates import GateReport

    report = GateReport.from_dict(gates)
    return ("success" if report.passed else "failure"), "gates: " + report.summary()


def _summary(results: dict[str, Any] | None) -> str:
    """A status description: the first scores and their change against the base."""
    if not results:
        return "finished (no eval results)"
    parts = []
    for row in results.get("results", [])[:3]:
        if row.get("value") is None:
            continue
        delta = f" ({row['delta']:+.3f})" if row.get("delta") is not None else ""
        parts.append(f"{row.get('task')} {row['value']:.3f}{delta}")
    return ", ".join(parts) or "finished"
