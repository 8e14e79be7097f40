"""Mistakes a user can make with `gym launch --cloud`: one clear sentence, no traceback, nothing sent."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import typer
from typer.testing import CliRunner

from gym.cli.launch_commands import register

runner = CliRunner()


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    app.callback()(lambda: None)
    return app


@pytest.fixture
def server_hits(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """A server on 127.0.0.1 that SkyPilot would be pointed at; the list of requests it got."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(500)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("SKYPILOT_API_SERVER_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield hits
    server.shutdown()


CASES = {
    "no compute": ("", "error gym launch --cloud needs a [compute] table"),
    "malformed accelerator": (
        '\n[compute]\naccelerators = ["A100:x"]\n',
        "compute.accelerators.0: expected an accelerator as NAME or NAME:COUNT",
    ),
    "unknown bucket scheme": (
        '\n[compute]\ncheckpoint_bucket = "ftp://bucket/x"\n',
        "compute.checkpoint_bucket: expected a bucket URL starting with one of s3://",
    ),
    "ppo on several nodes": (
        '\n[train]\nmethod = "ppo"\n\n[compute]\nnum_nodes = 2\n',
        "compute.num_nodes: PPO runs on one node; set num_nodes = 1, got 2",
    ),
    "training-free grpo on several nodes": (
        '\n[train]\nmethod = "grpo"\n\n[train.grpo]\ntraining_free = true\n\n[compute]\nnum_nodes = 3\n',
        "compute.num_nodes: training-free GRPO trains no weights and runs on one node",
    ),
    "missing hub token": (
        '\n[compute]\ncheckpoint_bucket = "s3://b/x"\n\n[hub]\nrepo_id = "me/demo"\n',
        "error set $HF_TOKEN (hub.token_env (pushing to me/demo)) in your environment",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mistakes_are_caught_before_anything_is_sent(case: str, project, server_hits) -> None:
    extra, expected = CASES[case]
    path = project(extra)
    result = runner.invoke(_app(), ["launch", "--cloud", str(path)])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert expected in text
    assert "Traceback" not in result.output
    assert server_hits == []


def test_dataset_outside_the_synced_folder(project, server_hits) -> None:
    from .conftest import BASE

    path = project("\n[compute]\n", base=BASE.replace("data/train.jsonl", "../../outside.jsonl"))
    result = runner.invoke(_app(), ["launch", "--cloud", "--dryrun", str(path)])
    assert result.exit_code == 1 and "lies outside" in result.output and server_hits == []
