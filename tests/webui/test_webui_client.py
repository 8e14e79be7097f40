"""`gym webui` driven through gradio_client, as a script or another program would: validate, save, preview,
train builtin:tiny (refusing a second run, stopping while it checkpoints, resuming) to the end, evaluate, chat. Every answer comes from the running app's own endpoints."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.webui.conftest import wait_for_state

pytestmark = pytest.mark.slow


def _line_of(text: str, needle: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1) if needle in line)


def test_workflow_through_gradio_client(webui: tuple[str, Path]) -> None:
    from gradio_client import Client

    url, folder = webui
    path = folder / "gym.toml"
    client = Client(url, verbose=False)
    original = path.read_text()

    broken = original.replace('adapter = "lora"', 'adapter = "lorax"')
    result, _ = client.predict(broken, api_name="/validate")
    line = _line_of(broken, "lorax")
    assert f"gym.toml:{line}:11: train.adapter: expected one of" in result and "did you mean 'lora'" in result
    refused = client.predict(broken, api_name="/save")
    assert refused.startswith("✗ not saved: 1 problem") and path.read_text() == original  # nothing written

    fixed = original.replace("learning_rate = 3e-2", "learning_rate = 2e-2")
    result, command = client.predict(fixed, api_name="/validate")
    assert result.startswith("✓ valid")
    assert command == "gym train gym.toml --train.learning_rate=0.02"  # unsaved edits shown as flags
    diff = client.predict(fixed, api_name="/diff")
    assert "-learning_rate = 3e-2  # large" in diff and "+learning_rate = 2e-2  # large" in diff
    assert client.predict(fixed, api_name="/save") == "✓ saved gym.toml"
    assert path.read_text() == fixed  # comments and order kept: the file is the editor's text
    assert client.predict(fixed, api_name="/validate")[1] == "gym train gym.toml"

    samples, report, histogram = client.predict(fixed, 2, api_name="/preview")
    assert "trained tokens" in samples and "sample 2" in samples and "background-color" in samples
    assert "200 of 200 rows kept" in report
    assert sum(rows for _, rows in histogram["data"]) == 200

    started = client.predict(fixed, api_name="/start_run")
    assert started.startswith("▶ started `gym train gym.toml`")
    second = client.predict(fixed, api_name="/start_run")
    assert second.startswith("✗ a run is already training into") and "stop it or wait" in second

    # Stop while the run saves a checkpoint every step: the save in progress completes, the run ends on a
    # complete checkpoint, and Resume continues from exactly there to the end.
    deadline = time.monotonic() + 300
    while (status := client.predict(api_name="/run_status"))["step"] < 3:
        assert status["state"] in ("starting", "running") and time.monotonic() < deadline, status
        time.sleep(0.3)
    message = client.predict(api_name="/stop_run")
    assert message.startswith("■ stop requested at step") and "saves a checkpoint, then ends" in message
    stopped = wait_for_state(client, ("stopped", "finished", "failed"))
    step = stopped["step"]
    assert stopped["state"] == "stopped" and 3 <= step < 16, stopped
    assert stopped["message"] == f"stopped at step {step} of 16; Resume continues from checkpoint-{step}"
    assert stopped["checkpoints"][-1] == {"step": step, "complete": True}
    assert all(c["complete"] for c in stopped["checkpoints"])  # nothing cut in half
    assert client.predict(api_name="/stop_run").startswith("✗ no run started from the web UI is training")
    resumed = client.predict(fixed, api_name="/resume_run")
    assert resumed.startswith("▶ started") and f"resuming from checkpoint-{step}" in resumed

    status = wait_for_state(client, ("finished", "failed", "stopped"))
    assert status["state"] == "finished", status
    assert status["step"] == status["max_steps"] == 16 and status["points"] == 16
    assert status["checkpoints"][-1] == {"step": 16, "complete": True}
    assert all(c["complete"] for c in status["checkpoints"])
    results = json.loads((folder / "outputs/run/train_results.json").read_text())
    assert results["resumed_from"].endswith(f"checkpoint-{step}") and results["steps"] == 16
    progress, loss, rate, speed, runs, log = client.predict(api_name="/refresh_runs")
    assert 'data-state="finished"' in progress and "step 16 / 16 · 100%" in progress
    assert len(loss["data"]) == 16 and len(rate["data"]) == 16 and speed["data"]  # both segments' points
    assert runs["data"][0][1] == "finished" and "trained 16 steps" in log

    message, table, chart, card = client.predict(fixed, api_name="/evaluate")
    assert message.startswith("✓"), message
    assert "| gym_reverse | exact_match | 4 |" in table and "vs base **builtin:tiny**" in table
    assert {row[2] for row in chart["data"]} == {"base", "tuned"}
    assert (
        "gym_reverse" in card
        and not card.startswith("---")
        and (folder / "outputs/run/eval_results.json").is_file()
    )

    tuned, base, note = client.predict(
        {"text": "Reverse: a b", "files": []}, [], [], True, False, 0.0, 1.0, 8, api_name="/chat"
    )
    assert note == "done"
    for history in (tuned, base):
        assert [turn["role"] for turn in history] == ["user", "assistant"]
        assert "Reverse: a b" in str(history[0]["content"])
