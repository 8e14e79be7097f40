"""A `gym launch` rerun trusts a stage's record only for the exact inputs it read and the outputs it wrote.

Driven through the real CLI: in-process (typer's CliRunner) where only files matter, and as a subprocess
against the Hub double (``tests/hub/hub_double.py``, spoken to by huggingface_hub) where the Hub does.
Each test fails on a `gym launch` that keyed stages by gym.toml alone: a manual `gym train` or `gym eval`
in the same folder was adopted, an edited dataset never retrained, a champion that improved after a
failed push was never read again, a model repo deleted after a recorded push was never pushed again, and
a damaged ``gym_state.json`` was a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gym.cli import app
from tests.conftest import REPO
from tests.e2e.loop import free_port
from tests.hub.hub_double import HubDouble
from tests.launch.test_local import quickstart  # noqa: F401 - the fixture: examples/quickstart copied
from tests.launch.test_local_deploy import CONFIG, TOKEN, gym

FAST = ["--max_steps", "2", "--save_steps", "1", "--set", "eval.limit=2", "--project.output_dir=out"]


def launch(config: Path, *flags: str) -> str:
    result = CliRunner().invoke(app, ["launch", str(config), *FAST, *flags])
    assert result.exit_code == 0, result.output
    return result.output


def results(out: Path, name: str) -> dict:
    return json.loads((out / name).read_text())


# ------------------------------------------------------------------------------------------ files


@pytest.mark.slow
def test_launch_redoes_what_gym_train_and_gym_eval_left_in_output_dir(quickstart: Path) -> None:  # noqa: F811
    runner = CliRunner()
    out = quickstart.parent / "out"
    manual = ["train", str(quickstart), "--max_steps", "1", "--save_steps", "1", "--project.output_dir=out"]

    # a manual 1-step `gym train` before the first launch: never resumed as the start of launch's 2 steps
    assert runner.invoke(app, manual).exit_code == 0
    first = launch(quickstart)
    assert "out/train_results.json (a 1-step run) was written by another command" in first, first
    assert "training from scratch" in first
    trained = results(out, "train_results.json")
    assert trained["steps"] == 2 and trained["resumed_from"] is None
    (aside,) = (out / "set-aside").iterdir()  # kept, not deleted
    assert (aside / "checkpoints" / "checkpoint-1").is_dir()
    assert json.loads((aside / "train_results.json").read_text())["steps"] == 1

    # a manual `gym train` after it rewrites the weights: launch trains again rather than publish them
    assert runner.invoke(app, manual).exit_code == 0
    again = launch(quickstart)
    assert "[train] out/train_results.json (a 1-step run) is not the file this stage wrote" in again, again
    assert "[train] already done" not in again
    assert results(out, "train_results.json")["steps"] == 2

    # a manual `gym eval --eval.limit 1`: launch evaluates again with its own limit, without retraining
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    evaluated = runner.invoke(
        app, ["eval", str(quickstart), "--set", "eval.limit=1", "--project.output_dir=out"]
    )
    assert evaluated.exit_code == 0, evaluated.output
    assert results(out, "eval_results.json")["limit"] == 1
    rerun = launch(quickstart)
    assert "[train] already done" in rerun
    assert "[eval] out/eval_results.json (eval limit 1) is not the file this stage wrote" in rerun, rerun
    assert results(out, "eval_results.json")["limit"] == 2
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp

    finished = launch(quickstart)
    assert finished.count("already done for this config") == 3  # train, eval, card (no gates, no deploy)


@pytest.mark.slow
def test_a_dataset_edited_in_place_retrains(quickstart: Path) -> None:  # noqa: F811
    out = quickstart.parent / "out"
    launch(quickstart)
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    data = quickstart.parent / "data" / "train.jsonl"
    rows = data.read_text().splitlines()
    data.write_text("\n".join(rows[: len(rows) // 2]) + "\n")  # same path, other rows

    edited = launch(quickstart)
    assert "[train] the training data changed (data/train.jsonl differs from what it trained on)" in edited, (
        edited
    )
    assert "already done" not in edited
    assert (out / "model.safetensors").stat().st_mtime_ns != stamp
    assert launch(quickstart).count("already done for this config") == 3


# ----------------------------------------------------------------------------------- damaged state

DAMAGED = st.one_of(
    st.binary(max_size=40).filter(lambda raw: not _is_object(raw)),  # not JSON, or not UTF-8
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8), st.lists, max_leaves=5).map(
        lambda value: json.dumps(value).encode()
    ),  # JSON, but no object
    st.sampled_from([[], 1, "done", None, True]).map(lambda stages: json.dumps({"stages": stages}).encode()),
    st.sampled_from([[], 1, "done", None]).map(
        lambda record: json.dumps({"stages": {"train": record}}).encode()
    ),  # a stage record that is no record
)


def _is_object(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except ValueError:
        return False


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=DAMAGED)
def test_a_damaged_state_file_is_one_sentence_and_nothing_runs(project, raw: bytes) -> None:
    config = project("")
    out = config.parent / "outputs" / "demo"
    out.mkdir(parents=True, exist_ok=True)
    (out / "gym_state.json").write_bytes(raw)

    result = CliRunner().invoke(app, ["launch", str(config)])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error ") and "gym_state.json" in lines[0], result.output
    assert "delete it to run every stage again (or rerun with --force)" in lines[0]
    assert "Traceback" not in result.output and isinstance(
        result.exception, SystemExit
    )  # exit 1, not a crash
    assert (out / "gym_state.json").read_bytes() == raw  # left as it was
    assert sorted(p.name for p in out.iterdir()) == ["gym_state.json"]  # nothing trained


@pytest.mark.slow
def test_each_damaged_shape_names_what_is_wrong(project) -> None:
    config = project("")
    out = config.parent / "outputs" / "demo"
    out.mkdir(parents=True)
    state = out / "gym_state.json"
    expected = {
        b'{"stages": {"train"': "is not JSON (Expecting ':' delimiter at line 1)",
        b"[1, 2]": "holds a JSON list, not the object gym launch writes",
        b'{"stages": ["train"]}': "'stages' is a JSON list, not an object of stage records",
        b'{"stages": {"train": "done"}}': "the record of stage 'train' is a JSON string, not an object",
        b"\xff\xfe{}": "is not UTF-8 text",
    }
    for raw, sentence in expected.items():
        state.write_bytes(raw)
        result = CliRunner().invoke(app, ["launch", str(config)])
        assert result.exit_code == 1 and sentence in result.output, (raw, result.output)
    state.write_bytes(b"[1, 2]")
    forced = CliRunner().invoke(
        app, ["launch", str(config), "--force", "--max_steps", "1", "--set", "eval.tasks=[]"]
    )
    assert forced.exit_code == 0, forced.output  # --force starts over and writes a sound state
    assert isinstance(json.loads(state.read_text())["stages"], dict)


# -------------------------------------------------------------------------------------------- Hub

REPO_ID = "acme/local-push"  # test_local_deploy's CONFIG: builtin:tiny, 2 LoRA steps, no eval tasks


def hub_project(folder: Path, tasks: str = "[]", gates: str = "") -> Path:
    (folder / "data").mkdir()
    rows = (REPO / "examples" / "quickstart" / "data" / "train.jsonl").read_text().splitlines()[:40]
    (folder / "data" / "train.jsonl").write_text("\n".join(rows) + "\n")
    (folder / "gym.toml").write_text(CONFIG.replace("tasks = []\n", f"tasks = {tasks}\nlimit = 2\n{gates}"))
    return folder


@pytest.mark.slow
def test_a_champion_that_improved_after_a_failed_push_is_compared_again(tmp_path: Path) -> None:
    gate = "gym_reverse.exact_match > champion"
    folder = hub_project(tmp_path, '["gym_reverse"]', f'[eval.gates]\nrules = ["{gate}"]\n')
    with HubDouble(TOKEN, free_port()) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
        hub.state.fail["commit"] = [503] * 10
        failed = gym(["launch", "gym.toml"], folder, **env)
        assert failed.returncode == 1 and "the Hub failed while pushing" in failed.stderr, failed.stderr
        assert "no champion yet" in failed.stdout  # nothing deployed: the champion gate did not apply
        hub.state.fail.clear()

        # meanwhile another run becomes the champion, with a perfect score measured the same way
        from huggingface_hub import HfApi, ModelCard

        out = folder / "out"
        card = ModelCard.load(out / "README.md")
        for row in card.data.eval_results:
            row.metric_value = 1.0
        scores = json.loads((out / "eval_results.json").read_text())
        for row in scores["results"]:
            row["value"] = 1.0
        api = HfApi(endpoint=hub.url, token=TOKEN)
        api.create_repo(REPO_ID, exist_ok=True)
        api.upload_file(path_or_fileobj=str(card).encode(), path_in_repo="README.md", repo_id=REPO_ID)
        api.upload_file(path_or_fileobj=json.dumps(scores).encode(), path_in_repo="eval_results.json",
                        repo_id=REPO_ID)  # fmt: skip
        champion = dict(hub.state.files[f"model:{REPO_ID}"])
        commits = list(hub.state.commits)

        rerun = gym(["launch", "gym.toml"], folder, **env)
        assert rerun.returncode == 1, rerun.stdout[-3000:] + rerun.stderr[-3000:]
        assert "[train] already done" in rerun.stdout and "[eval] already done" in rerun.stdout
        assert (
            f"[gates] the champion {REPO_ID} is at {hub.state.sha('model:' + REPO_ID)[:12]} now, not absent"
            in (rerun.stdout)
        ), rerun.stdout
        assert f"promotion gate '{gate}' failed" in rerun.stderr and "Traceback" not in rerun.stderr
        assert hub.state.commits == commits and hub.state.files[f"model:{REPO_ID}"] == champion  # not pushed
        assert TOKEN not in rerun.stdout + rerun.stderr


@pytest.mark.slow
def test_a_recorded_push_that_is_gone_from_the_hub_is_pushed_again(tmp_path: Path) -> None:
    folder = hub_project(tmp_path)
    key = f"model:{REPO_ID}"
    with HubDouble(TOKEN, free_port()) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
        first = gym(["launch", "gym.toml"], folder, **env)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        assert hub.state.commits == [key]
        pushed = dict(hub.state.files[key])

        for store in (hub.state.repos, hub.state.files, hub.state.lfs_files):  # deleted on the website
            store.pop(key, None)
        rerun = gym(["launch", "gym.toml"], folder, **env)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
        assert f"[deploy] the model repository {REPO_ID} is gone from the Hub; pushing again" in rerun.stdout
        assert hub.state.commits == [key, key] and hub.state.files[key] == pushed

        # someone else's commit on top of it (another card): the recorded push no longer stands either
        from huggingface_hub import HfApi

        HfApi(endpoint=hub.url, token=TOKEN).upload_file(
            path_or_fileobj=b"another card", path_in_repo="README.md", repo_id=REPO_ID
        )
        moved = gym(["launch", "gym.toml"], folder, **env)
        assert moved.returncode == 0, moved.stdout[-3000:] + moved.stderr[-3000:]
        assert f"[deploy] the model repository {REPO_ID} is at " in moved.stdout, moved.stdout
        assert "which this launch pushed; pushing again" in moved.stdout
        assert len(hub.state.commits) == 4 and hub.state.files[key] == pushed

        settled = gym(["launch", "gym.toml"], folder, **env)
        assert settled.returncode == 0 and settled.stdout.count("already done for this config") == 3
        assert len(hub.state.commits) == 4  # a push that still stands is never repeated
