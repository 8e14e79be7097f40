"""Training-free GRPO: the loop against a scripted OpenAI-compatible server, the library rules, resume,
bad learner JSON, failing requests and the API key; then mechanics against a real `gym serve` of builtin:tiny."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest

from gym.config import load_config
from gym.train.experiences import render_system_prompt, with_experiences
from gym.train.training_free.library import Library, Operation, enforce_rules, load_library
from gym.train.training_free.loop import LoopOptions
from gym.train.training_free.trainer import run_loop
from tests.train.scripted_server import ScriptedServer, scripted_server

KEY_ENV = "GYM_TEST_TF_KEY"
SECRET = "sk-tf-test-secret-4242"
ROWS = [
    {"prompt": [{"role": "user", "content": "Q-varied: say right"}], "reference": "right"},
    {"prompt": [{"role": "user", "content": "Q-equal: say right"}], "reference": "right"},
]
ALPHA, BETA = "When alpha, do A.", "When beta, do B."


def write_config(folder: Path, api_base: str, extra: str = "", key_env: str | None = None) -> Any:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.jsonl").write_text(
        json.dumps({"prompt": "say ok", "answer": "ok"}) + "\n", encoding="utf-8"
    )
    key = f'api_key_env = "{key_env}"\n' if key_env else ""
    (folder / "gym.toml").write_text(
        f"""
[project]
name = "tf"
output_dir = "out"
[model]
name_or_path = "builtin:tiny"
[[datasets]]
path = "data.jsonl"
format = "prompt"
[train]
method = "grpo"
{extra}
[train.grpo]
training_free = true
experience_lib_path = "experiences"
group_size = 4
max_experiences_per_group = 2
api_base = "{api_base}"
{key}""",
        encoding="utf-8",
    )
    return load_config(folder / "gym.toml")


def options(**changes: Any) -> LoopOptions:
    base = dict(group_size=4, k=2, batch_size=2, epochs=2, show_progress=False)
    return LoopOptions(**{**base, **changes})


def run(config: Any, rows: list[dict[str, Any]] = ROWS, **changes: Any) -> Any:
    return asyncio.run(run_loop(config, rows, options(**changes), backoff=0.001, timeout=10))


def echo_operations(prompt: str) -> str:
    listed = re.search(r"<operations>\n(.*)\n</operations>", prompt, re.DOTALL)[1]
    return json.dumps({"operations": json.loads(listed)})


def default_script(messages: list[dict[str, Any]], server: ScriptedServer) -> str | int:
    """Q-varied answers right/wrong in turn (rewards differ), Q-equal always wrong (all equal)."""
    text = messages[-1]["content"]
    if not text.startswith("## Task"):  # a rollout: the problem as it is, the library in the system prompt
        if "Q-broken" in text:
            return 500
        if "Q-varied" in text:
            return ["right", "wrong"][server.count("varied") % 2]
        return "wrong"
    if text.startswith("## Task: summarise one attempt"):
        return json.dumps({"summary": "answered directly"})
    if text.startswith("## Task: extract experiences"):
        return json.dumps({"experiences": [ALPHA, BETA, "When extra, a third one beyond K."]})
    if text.startswith("## Task: update the experience library"):
        if "[1]. When alpha" not in text:
            ops = [{"operation": "ADD", "content": ALPHA}, {"operation": "ADD", "content": BETA}]
        else:
            ops = [
                {"operation": "UPDATE", "id": 1, "content": "When alpha, do A carefully."},
                {"operation": "DELETE", "id": 2},
                {"operation": "NONE"},
                {"operation": "ADD", "content": "When gamma, do C."},
            ]
        return json.dumps({"operations": ops})
    if text.startswith("## Task: consolidate library operations"):
        return echo_operations(text)
    return 400


def test_loop_skips_equal_groups_applies_operations_and_renumbers(tmp_path: Path) -> None:
    with scripted_server(default_script) as server:
        result = run(write_config(tmp_path, server.url))
    folder = tmp_path / "experiences"
    step1, step2 = load_library(folder / "step_0001.json"), load_library(folder / "step_0002.json")
    assert step1.experiences == [ALPHA, BETA]  # two ADDs; the third proposal was beyond K = 2
    assert step2.experiences == [
        "When alpha, do A carefully.",
        "When gamma, do C.",
    ]  # UPDATE 1, DELETE 2, ADD
    latest = json.loads((folder / "latest.json").read_text())
    assert [e["id"] for e in latest["experiences"]] == [1, 2] and latest["step"] == 2
    assert latest["model"] == "scripted-model"
    learner = [t for t in server.texts() if t.startswith("## Task")]
    assert learner and not any(
        "Q-equal" in t for t in learner
    )  # the all-equal group never reached the learner
    for stats in result.steps:
        assert stats["groups_kept"] == 1 and stats["queries"] == 2
        assert stats["by_role"]["rollout"]["requests"] == 8  # 2 queries x G = 4
        assert (
            stats["by_role"]["learner"]["requests"] == 4 + 1 + 1 + 1
        )  # summaries, advantage, update, consolidate
        assert stats["tokens_in"] == 10 * stats["requests"] and stats["tokens_out"] == 5 * stats["requests"]
    assert result.steps[1]["applied"] == {"DELETE": 1, "UPDATE": 1, "ADD": 1}
    assert result.library.totals["requests"] == sum(s["requests"] for s in result.steps) == 30
    chats = [r["body"]["messages"] for r in server.requests if r["path"].endswith("/chat/completions")]
    second_rollout = next(m for m in chats[20:] if m[-1]["content"].startswith("Q-varied"))
    system = render_system_prompt([ALPHA, BETA])
    assert second_rollout == [{"role": "system", "content": system}, *ROWS[0]["prompt"]]  # as served
    assert with_experiences(ROWS[0]["prompt"], system) == second_rollout
    advantage = next(t for t in server.texts()[20:] if t.startswith("## Task: extract experiences"))
    assert "Current experience library:\n[1]. When alpha, do A.\n[2]. When beta, do B." in advantage


def test_consolidation_rules() -> None:
    proposed = [
        Operation("UPDATE", 1, "When a, x."), Operation("UPDATE", 1, "When a, y."),
        Operation("UPDATE", 2, "When b, z."), Operation("DELETE", 2),
        Operation("ADD", None, "When c, w."), Operation("ADD", None, "when c,  w"), Operation("NONE"),
    ]  # fmt: skip
    # the consolidation reply merged the UPDATEs of 1, but kept an UPDATE of 2 and touched 3 unasked
    merged = [
        Operation("UPDATE", 1, "When a, x then y."), Operation("UPDATE", 2, "When b, z."),
        Operation("DELETE", 3), Operation("ADD", None, "When c, w."), Operation("ADD", None, "When c, w"),
    ]  # fmt: skip
    applied = enforce_rules(merged, proposed, size=3)
    assert applied == [
        Operation("DELETE", 2),
        Operation("UPDATE", 1, "When a, x then y."),
        Operation("ADD", None, "When c, w."),
    ]
    library = Library(["When a, old.", "When b, old.", "When d, keep."]).apply(applied)
    assert library.experiences == ["When a, x then y.", "When d, keep.", "When c, w."]
    assert library.enumerated().splitlines() == [
        "[1]. When a, x then y.",
        "[2]. When d, keep.",
        "[3]. When c, w.",
    ]
    # without a consolidation reply the proposals themselves are merged: the last UPDATE of an id wins
    assert enforce_rules(proposed, proposed, size=3)[:2] == [
        Operation("DELETE", 2),
        Operation("UPDATE", 1, "When a, y."),
    ]
    with pytest.raises(ValueError, match="UPDATE needs the id"):
        Operation.parse({"operation": "update", "content": "x"})


def test_resume_continues_from_the_last_step(tmp_path: Path) -> None:
    with scripted_server(default_script) as server:
        config = write_config(tmp_path, server.url)
        first = run(config, max_steps=1)
        step1 = (tmp_path / "experiences" / "step_0001.json").read_text()
        before = len(server.requests)
        second = run(config)
        step1_after, after = (tmp_path / "experiences" / "step_0001.json").read_text(), len(server.requests)
        fresh = run(config, resume=False, max_steps=1)
    assert first.library.step == 1 and second.resumed_from_step == 1 and second.library.step == 2
    assert [s["step"] for s in second.steps] == [2]  # epoch 2 only: epoch 1 was not repeated
    assert step1_after == step1
    assert sum(not t.startswith("## Task") for t in server.texts(before, after)) == 8
    assert second.library.totals["requests"] == 30  # totals carry over the resumed step
    assert fresh.resumed_from_step == 0 and fresh.library.experiences == [ALPHA, BETA]


def test_malformed_learner_json_is_retried_then_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def script(messages: list[dict[str, Any]], server: ScriptedServer) -> str | int:
        text = messages[-1]["content"]
        if text.startswith("## Task: update the experience library"):
            return "Sure! Here are the operations: ADD the experience"  # never JSON
        if text.startswith("## Task: summarise one attempt"):  # the first reply is broken, the retry is fine
            return '```json\n{"summary": "ok"}\n```' if server.count("summary") % 2 else "{summary: oops"
        return default_script(messages, server)

    caplog.set_level(logging.WARNING, "gym.train.training_free")
    with scripted_server(script) as server:
        result = run(write_config(tmp_path, server.url), epochs=1)
    texts = server.texts()
    assert sum(t.startswith("## Task: update") for t in texts) == 4  # 1 + 3 retries, then skipped
    assert sum(t.startswith("## Task: summarise") for t in texts) == 8  # each retried once, then accepted
    assert "skipped a group's operations: no valid JSON after 4 attempts" in caplog.text
    assert result.library.experiences == [] and result.library.step == 1
    assert load_library(tmp_path / "experiences" / "latest.json").step == 1  # the file is still valid


def test_failed_requests_are_counted_not_raised_and_the_key_never_leaks(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
) -> None:
    def script(messages: list[dict[str, Any]], server: ScriptedServer) -> str | int:
        text = messages[-1]["content"]
        if text.startswith("Q-varied") and server.count("flaky") < 2:
            return 429  # retried with backoff
        return default_script(messages, server)

    monkeypatch.setenv(KEY_ENV, SECRET)
    caplog.set_level(logging.DEBUG)
    rows = [*ROWS, {"prompt": [{"role": "user", "content": "Q-broken"}], "reference": "right"}]
    with scripted_server(script, api_key=SECRET) as server:
        config = write_config(tmp_path, server.url, key_env=KEY_ENV)
        result = run(config, rows=rows, batch_size=3, epochs=1)
        from gym.train.training_free.trainer import results_section

        (tmp_path / "out").mkdir(parents=True, exist_ok=True)
        record = {"training_free": results_section(config, result)}  # what the runner writes for this method
        (tmp_path / "out" / "train_results.json").write_text(json.dumps(record))
    stats = result.steps[0]
    assert stats["failed_rollouts"] == 4 and stats["by_role"]["rollout"]["failed"] == 4
    assert (
        stats["by_role"]["rollout"]["retries"] == 2 + 4 * 4
    )  # two 429s, then four 500s retried 4 times each
    assert result.library.experiences == [ALPHA, BETA]
    assert all(r["headers"]["authorization"] == f"Bearer {SECRET}" for r in server.requests)
    results = json.loads((tmp_path / "out" / "train_results.json").read_text())
    assert results["training_free"]["totals"]["requests"] == stats["requests"]
    captured = capsys.readouterr()
    assert SECRET not in caplog.text + captured.out + captured.err
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path
    with pytest.raises(ValueError, match="every rollout of step 2 failed"):  # nobody listens there any more
        run(config, rows=rows, batch_size=3, epochs=2)
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ValueError, match=rf"\${KEY_ENV}, which is not set"):
        run(config)


def test_experiences_go_into_the_system_prompt(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from gym.api.app import create_app
    from gym.engine.backend import Chunk
    from gym.train.experiences import load_experiences, render_system_prompt, with_experiences

    path = tmp_path / "latest.json"
    path.write_text(json.dumps(Library(["When x, y."]).as_json()), encoding="utf-8")
    prompt = render_system_prompt(load_experiences(path))
    assert prompt.endswith("experiences:\n[1]. When x, y.")
    user = [{"role": "user", "content": "hi"}]
    assert with_experiences(user, prompt) == [{"role": "system", "content": prompt}, *user]
    merged = with_experiences([{"role": "system", "content": "Be brief."}, *user], prompt)
    assert merged[0]["content"] == f"Be brief.\n\n{prompt}" and len(merged) == 2
    assert load_experiences(tmp_path) == ["When x, y."] == load_experiences(write_list(tmp_path))

    class Backend:
        name, model_id, context_length = "stub", "stub", 512
        seen: list[Any] = []

        def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
            self.seen.append(messages)
            return [1, 2]

        async def generate(self, prompt_ids: list[int], params: Any, n: int = 1) -> Any:
            yield Chunk(0, "ok", "stop", 1)

        def stats(self) -> dict[str, Any]:
            return {}

        def close(self) -> None:
            pass

    backend = Backend()
    client = TestClient(create_app(backend, system_prompt=prompt))
    reply = client.post("/v1/chat/completions", json={"model": "stub", "messages": user})
    assert reply.status_code == 200 and backend.seen[-1][0] == {"role": "system", "content": prompt}


def write_list(folder: Path) -> Path:
    path = folder / "hand.json"
    path.write_text(json.dumps(["When x, y."]), encoding="utf-8")
    return path


@pytest.mark.slow
def test_end_to_end_against_gym_serve_of_builtin_tiny(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mechanics only: the tiny model writes no learner JSON, so the run must just complete and count."""
    from gym.model.builtin import ensure_builtin
    from gym.train.runner import run_training
    from tests.api.conftest import start_server, stop

    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))
    ensure_builtin("builtin:tiny")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("GYM_API_KEY", None)
    url, process = start_server(["builtin:tiny"], env)
    try:
        rows = [{"prompt": f"Say ok {i}", "answer": "ok"} for i in range(2)]
        extra = 'max_steps = 1\nbatch_size = 2\nadapter = "lora"'
        config = write_config(tmp_path, url + "/v1", extra=extra)
        (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        config = config.model_copy(deep=True)
        config.train.grpo.group_size, config.train.grpo.max_completion_length = 2, 8
        config.train.grpo.reward = ["length_penalty"]  # differs within a group, so groups reach the learner
        result = run_training(config, show_progress=False)
    finally:
        stop(process)
    assert result.steps == 1
    assert (tmp_path / "experiences" / "step_0001.json").is_file() and (
        tmp_path / "experiences" / "latest.json"
    ).is_file()
    results = json.loads((tmp_path / "out" / "train_results.json").read_text())
    totals = results["training_free"]["totals"]
    assert (
        totals["by_role"]["rollout"]["requests"] == 4 and totals["tokens_in"] > 0 and totals["tokens_out"] > 0
    )
    assert results["trainable_parameters"] == 0 and (tmp_path / "out" / "experiences.json").is_file()


@pytest.mark.slow
def test_without_api_base_the_local_model_is_served_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``api_base``: `gym train` hands down `gym serve`'s app factory and the policy runs in process;
    without one, the run stops with one sentence before anything is written."""
    from gym.api.factory import build_serving_app
    from gym.train.runner import run_training

    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))
    config = write_config(
        tmp_path, "http://127.0.0.1:9/v1", extra="max_steps = 1\nbatch_size = 1"
    ).model_copy(deep=True)
    config.train.grpo.api_base = None
    config.train.grpo.group_size, config.train.grpo.max_completion_length = 2, 8
    with pytest.raises(ValueError) as refused:
        run_training(config, show_progress=False)
    assert str(refused.value) == (
        "train.grpo.api_base is not set and nothing serves the local model in process: run `gym train`, "
        "or set train.grpo.api_base"
    )
    assert not (tmp_path / "experiences").exists()
    served: list[str] = []

    def serve_local(model: str) -> Any:
        served.append(model)
        return build_serving_app(model)

    result = run_training(config, show_progress=False, serve_local=serve_local)
    assert served == ["builtin:tiny"] and result.steps == 1
    totals = json.loads((tmp_path / "out" / "train_results.json").read_text())["training_free"]["totals"]
    assert totals["by_role"]["rollout"]["requests"] == 2 and totals["tokens_out"] > 0
