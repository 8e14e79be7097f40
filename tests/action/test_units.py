"""The pure parts: the launch policy, config selection, comment size limit, output escaping."""

from __future__ import annotations

import pytest

from action.changes import ChangedFile, matches, select_configs
from action.context import Inputs, public_env
from action.outputs import Redactor, annotation, write_outputs
from action.policy import Approval, PullFacts, decide
from gym.launch.report.outcome import ConfigOutcome, LaunchOutcome, PlanView
from gym.launch.report.render import MAX_BODY, marker, render
from tests.action.conftest import RESULTS, parse_outputs

SAME = PullFacts(1, "acme/models", "acme/models", frozenset({"gym:launch"}))
FORK = PullFacts(1, "mallory/models", "acme/models", frozenset({"gym:launch"}))
GONE = PullFacts(1, None, "acme/models", frozenset({"gym:launch"}))


WRITER = Approval("wendy", "write", True, 1)
TRIAGER = Approval("tom", "triage", False, 2)


@pytest.mark.parametrize(
    ("requested", "event", "pull", "push", "labeled", "approval", "expected"),
    [
        ("auto", "pull_request", SAME, False, True, WRITER, "launch"),
        ("auto", "pull_request", SAME, False, True, TRIAGER, "plan"),
        ("auto", "pull_request", SAME, False, True, None, "plan"),
        ("auto", "pull_request", SAME, False, False, WRITER, "plan"),  # a push after the label
        ("launch", "pull_request", FORK, False, True, WRITER, "plan"),
        ("launch", "pull_request", GONE, False, True, WRITER, "plan"),
        ("launch", "pull_request_target", None, False, True, WRITER, "plan"),
        ("auto", "push", None, True, False, None, "launch"),
        ("auto", "push", None, False, False, None, "plan"),
        ("auto", "workflow_dispatch", None, False, False, None, "plan"),
        ("launch", "workflow_dispatch", None, False, False, None, "launch"),
        ("validate", "push", None, True, False, None, "validate"),
    ],
)
def test_policy(requested, event, pull, push, labeled, approval, expected) -> None:
    decision = decide(
        requested,
        event,
        pull=pull,
        label="gym:launch",
        default_branch_push=push,
        labeled_now=labeled,
        approval=approval,
        head_sha="a" * 40,
    )
    assert decision.mode == expected
    if approval is TRIAGER and labeled and pull is SAME:
        assert decision.reason == (
            "plan only: label `gym:launch` applied by @tom who has triage permission "
            "(launching needs write, maintain or admin)"
        )


def test_config_patterns() -> None:
    assert matches("gym.toml", ["**/gym.toml"]) and matches("a/b/gym.toml", ["**/gym.toml"])
    assert matches("gym.toml", ["./gym.toml"]) and not matches("a/gym.toml", ["gym.toml"])
    changed = [ChangedFile("b/gym.toml"), ChangedFile("a/gym.toml"), ChangedFile("c/gym.toml", "removed")]
    assert select_configs(changed, ["**/gym.toml"]) == ["a/gym.toml", "b/gym.toml"]
    assert Inputs.from_env({"GYM_INPUT_CONFIG": "a/gym.toml\n b/gym.toml, "}).configs == (
        "a/gym.toml",
        "b/gym.toml",
    )


def test_public_env_never_reads_secret_values() -> None:
    read = []

    class Env(dict):
        def __getitem__(self, key):
            read.append(key)
            return super().__getitem__(key)

    env = Env(HF_TOKEN="x", AWS_ACCESS_KEY_ID="y", WANDB_API_KEY="z", HOME="/h", GYM_INPUT_MODE="plan")
    assert public_env(env) == {"HOME": "/h", "GYM_INPUT_MODE": "plan"}
    assert sorted(read) == ["GYM_INPUT_MODE", "HOME"]


def test_comment_stays_under_the_limit_and_keeps_the_head() -> None:
    outcome = ConfigOutcome(
        path="team/gym.toml",
        mode="launch",
        reason="push to the default branch",
        plan=PlanView(target="cloud", name="gym-x", accelerators=["A100:1"], task_yaml="run: x\n" * 20_000),
        launch=LaunchOutcome(job_id="7", detail="submitted", results=RESULTS),
        log=[f"step {i} loss 1.0 ```" for i in range(50_000)],
    )
    body = render(outcome, run_url="https://github.example/acme/models/actions/runs/1")
    assert len(body) <= MAX_BODY
    assert body.startswith(marker("team/gym.toml"))
    assert "| gym_reverse | exact_match |" in body
    assert "truncated; the full text is in the workflow run: https://github.example/" in body
    assert "step 49999" in body and "step 0 " not in body  # a log keeps its end
    small = render(outcome, limit=4000)
    assert len(small) <= 4000 and small.startswith(marker("team/gym.toml"))


def test_marker_cannot_close_the_html_comment() -> None:
    assert "-->" not in marker("x-->y").removesuffix(" -->")


def test_outputs_use_random_delimiters_and_are_redacted(tmp_path) -> None:
    redactor = Redactor()
    redactor.add("s3cr3t-value")
    path = tmp_path / "out"
    write_outputs(path, {"a": "line1\nEOF\nline3", "b": "has s3cr3t-value and hf_" + "x" * 30}, redactor)
    assert parse_outputs(path.read_text()) == {"a": "line1\nEOF\nline3", "b": "has *** and ***"}


def test_annotations_cannot_inject_workflow_commands() -> None:
    text = annotation("error", "bad\n::add-mask::x 100%", file="a,b:c.toml", line=3, col=4)
    assert text == "::error file=a%2Cb%3Ac.toml,line=3,col=4::bad%0A::add-mask::x 100%25"


def test_run_state_round_trips_and_rejects_garbage() -> None:
    from gym.launch.report.sticky import RunState, with_state

    state = RunState(sha="a" * 40, job_id="7", name="gym-x--y", managed=True, approval=3, history=["-->"])
    body = with_state("<!-- gym-action config=gym.toml -->\n### Gym\ntext\n", state)
    assert body.splitlines()[1] == state.line() and "-->" not in state.line().removesuffix(" -->")
    assert RunState.parse(body) == state
    newer = RunState(sha="c" * 40, job_id="8", name="gym-x", managed=False, approval=4)
    assert (
        RunState.parse(with_state(body, newer)) == newer and with_state(body, newer).count("gym-state") == 1
    )
    assert RunState.parse("<!-- gym-state bm90IGpzb24= -->") is None  # base64 of "not json"
    assert RunState.parse("<!-- gym-state e30= -->") is None  # {} lacks the fields


def test_price_is_unknown_without_a_cached_catalog(tmp_path, monkeypatch) -> None:
    """Nothing cached (or only another cloud's list): "unknown", and SkyPilot is not even imported."""
    import sys

    from action.pricing import estimate

    monkeypatch.setenv("SKY_RUNTIME_DIR", str(tmp_path))
    had_sky = "sky" in sys.modules
    price = estimate(["A100:1"], use_spot=True, num_nodes=2, infra="")
    assert price.summary(2, 6) == "unknown (no SkyPilot price catalog is cached on this runner)"
    (tmp_path / ".sky" / "catalogs" / "v8" / "aws").mkdir(parents=True)
    (tmp_path / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv").write_text("InstanceType\n")
    price = estimate(["A100:1"], use_spot=False, num_nodes=1, infra="gcp/us-central1")
    assert price.summary(1) == "unknown (no SkyPilot price catalog for gcp is cached on this runner)"
    assert ("sky" in sys.modules) == had_sky


def test_price_summary_bounds_the_cost() -> None:
    from action.pricing import PriceEstimate

    price = PriceEstimate(low=2.5, high=5.0)
    assert price.summary(2, 3) == (
        "≈ $2.50–$5.00/h for 2 nodes (cheapest cached offer per candidate), at most ≈ $15.00 for 3 h"
    )
    assert (
        PriceEstimate(low=1.0, high=1.0).summary(1)
        == "≈ $1.00/h for 1 node (cheapest cached offer per candidate)"
    )


def test_comment_shows_what_happened_to_the_training_rows() -> None:
    data = {"rows_read": 999, "rows_trained": 195, "rows_truncated": 0, "rows_skipped": 804,
            "skipped_share": 0.8048, "rows_bad": 1, "length_p95": 1451, "max_length": 128}  # fmt: skip
    outcome = ConfigOutcome(
        path="gym.toml",
        mode="launch",
        reason="push to the default branch",
        launch=LaunchOutcome(job_id="7", detail="done", results={**RESULTS, "training_data": data}),
    )
    body = render(outcome)
    assert "| gym_reverse | exact_match |" in body
    assert (
        "**Training data:** 999 rows read: 195 trained, 0 truncated (oldest turns dropped), 804 skipped as too "
        "long (80.5%), 1 bad; p95 length 1,451 tokens vs max_length 128." in body
    )
