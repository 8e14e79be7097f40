"""The pure parts: the launch policy, config selection, comment size limit, output escaping."""

from __future__ import annotations

import pytest

from action.changes import ChangedFile, matches, select_configs
from action.context import Inputs, public_env
from action.outcome import ConfigOutcome, LaunchOutcome, PlanView
from action.outputs import Redactor, annotation, write_outputs
from action.policy import PullFacts, decide
from action.render import MAX_BODY, marker, render
from tests.action.conftest import RESULTS, parse_outputs

SAME = PullFacts(1, "acme/models", "acme/models", frozenset({"gym:launch"}))
FORK = PullFacts(1, "mallory/models", "acme/models", frozenset({"gym:launch"}))
GONE = PullFacts(1, None, "acme/models", frozenset({"gym:launch"}))


@pytest.mark.parametrize(
    ("requested", "event", "pull", "push", "expected"),
    [
        ("auto", "pull_request", SAME, False, "launch"),
        ("launch", "pull_request", FORK, False, "plan"),
        ("launch", "pull_request", GONE, False, "plan"),
        ("launch", "pull_request", PullFacts(1, "acme/models", "acme/models"), False, "plan"),
        ("launch", "pull_request_target", None, False, "plan"),
        ("auto", "push", None, True, "launch"),
        ("auto", "push", None, False, "plan"),
        ("auto", "workflow_dispatch", None, False, "plan"),
        ("launch", "workflow_dispatch", None, False, "launch"),
        ("validate", "push", None, True, "validate"),
    ],
)
def test_policy(requested, event, pull, push, expected) -> None:
    assert decide(requested, event, pull=pull, label="gym:launch", default_branch_push=push).mode == expected


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
