"""`gym deploy` through the real huggingface_hub client against a local Hub double (HF_ENDPOINT)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.conftest import REPO, SERVE_MAIN, free_port, server_env
from tests.hub.hub_double import HubDouble

TOKEN = "hf_TestTokenNeverPrinted0123456789"
SECRET = "sk-space-secret-value-42"


@pytest.fixture(scope="module")
def lora_dir(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("run") / "output" / "tiny-lora"
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_dir), LoraConfig(r=2, target_modules=["q_proj"])
    )
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(out)
    (out / "README.md").write_text("# tiny-lora\n\nA model card.\n")
    (out / "eval_results.json").write_text('{"results": []}\n')
    (out / "train_results.json").write_text('{"steps": 2}\n')
    (out / ".eval_results").mkdir()
    (out / ".eval_results" / "gym_reverse.yaml").write_text("- dataset: {id: gym_reverse}\n")
    # what a run leaves beside the model and must never reach the Hub
    junk = out / "checkpoints" / "checkpoint-2"
    junk.mkdir(parents=True)
    for name in (
        "adapter_model.safetensors",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "training_args.bin",
    ):
        (junk / name).write_bytes(b"junk")
    (out / "gym_state.json").write_text("{}")
    (out / "space").mkdir()
    (out / "space" / "app.py").write_text("junk")
    (out / "gym.toml").write_text("# resolved config\n")
    return out


PUSHED = {
    "adapter_config.json", "adapter_model.safetensors", "README.md", "tokenizer.json", "tokenizer_config.json",
    "eval_results.json", "train_results.json", ".eval_results/gym_reverse.yaml",
}  # fmt: skip


def write_config(folder: Path, hub_push: str = "adapter") -> Path:
    (folder / "data").mkdir(exist_ok=True)
    (folder / "data" / "train.jsonl").write_text('{"instruction": "hi", "output": "hello"}\n')
    path = folder / "gym.toml"
    path.write_text(f"""\
[project]
name = "tiny-lora"
output_dir = "output/tiny-lora"

[model]
name_or_path = "builtin:tiny"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"

[hub]
repo_id = "acme/tiny-lora"
push = "{hub_push}"

[space]
repo_id = "acme/tiny-lora-chat"
hardware = "t4-small"
""")
    return path


def gym(args: list[str], cache_root: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SERVE_MAIN), *args], cwd=cwd, env=server_env(cache_root, HF_HUB_OFFLINE="0", **env),
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def assert_no_secret(state, done: subprocess.CompletedProcess, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in done.stdout and secret not in done.stderr
        for files in state.files.values():
            assert all(secret.encode() not in content for content in files.values())


@pytest.mark.slow
def test_deploy_from_gym_toml(lora_dir: Path, cache_root: Path) -> None:
    config = write_config(lora_dir.parents[1])
    with HubDouble(TOKEN, free_port()) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "GYM_API_KEY": SECRET}
        done = gym(["deploy", str(config)], cache_root, REPO, **env)
        assert done.returncode == 0, done.stdout + done.stderr
        state = hub.state
        assert state.unknown == [] and state.bad_auth == 0
        assert state.repos["model:acme/tiny-lora"]["visibility"] == "private"
        assert state.repos["space:acme/tiny-lora-chat"]["sdk"] == "gradio"
        model_files = state.files["model:acme/tiny-lora"]
        tokenizer_extras = {"special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt"}
        assert set(model_files) >= PUSHED and set(model_files) - PUSHED <= tokenizer_extras, set(model_files)
        assert state.commits.count("model:acme/tiny-lora") == 1  # one commit for the whole model
        assert model_files["README.md"] == b"# tiny-lora\n\nA model card.\n"
        space_files = state.files["space:acme/tiny-lora-chat"]
        assert {"README.md", "app.py", "requirements.txt", "gym_space.json", "gym/api/app.py"} <= set(
            space_files
        )
        header = space_files["README.md"].decode()
        for line in ("sdk: gradio", "sdk_version:", "app_file: app.py", "python_version:", "  - acme/tiny-lora",
                     "suggested_hardware: t4-small", "tags:"):  # fmt: skip
            assert line in header
        # the model is private: the Space gets a token to read it (here the push token: no space.hf_token_env)
        assert state.secrets == {"acme/tiny-lora-chat": {"GYM_API_KEY": SECRET, "HF_TOKEN": TOKEN}}
        assert "HF_TOKEN secret from $HF_TOKEN" in done.stdout
        assert state.hardware == {"acme/tiny-lora-chat": "t4-small"}
        assert_no_secret(state, done, TOKEN, SECRET)

        # again: the repos exist (409 from create_repo is fine) and the files are updated
        again = gym(["deploy", str(config)], cache_root, REPO, **env)
        assert again.returncode == 0, again.stdout + again.stderr
        # nothing changed: the Hub answers each file's oid and the client makes no empty commit, so a
        # retry after a push that did land (a job preempted right after it) still leaves one model commit
        assert state.commits.count("model:acme/tiny-lora") == 1

        # a wrong token fails cleanly and the message does not contain it
        wrong = "hf_WrongTokenAlsoSecret987654321"
        failed = gym(["deploy", str(config), "--hf_token", wrong], cache_root, REPO, HF_ENDPOINT=hub.url)
        assert failed.returncode == 1 and "error:" in failed.stderr
        assert wrong not in failed.stdout + failed.stderr and "Traceback" not in failed.stderr


@pytest.mark.slow
def test_seed_command_line_and_merged_push(lora_dir: Path, cache_root: Path, tmp_path: Path) -> None:
    with HubDouble(TOKEN, free_port()) as hub:
        args = ["deploy", "--model_path", str(lora_dir), "--hf_token", TOKEN, "--push_to_hub"]
        done = gym(args, cache_root, tmp_path, HF_ENDPOINT=hub.url)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (
            "model:tester/tiny-lora" in hub.state.repos and "space:tester/tiny-lora-chat" in hub.state.repos
        )
        assert hub.state.hardware == {"tester/tiny-lora-chat": "cpu-basic"}
        assert_no_secret(hub.state, done, TOKEN)
    config = write_config(tmp_path, hub_push="merged")
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "tiny-lora").symlink_to(lora_dir)
    with HubDouble(TOKEN, free_port()) as hub:
        done = gym(["deploy", str(config)], cache_root, REPO, HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN)
        assert done.returncode == 0, done.stdout + done.stderr
        files = hub.state.files["model:acme/tiny-lora"]
        assert "model.safetensors" in files and "adapter_config.json" not in files and "README.md" in files


def test_dry_run_renders_without_network(tmp_path: Path, cache_root: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    space = tmp_path / "space"
    done = gym(["deploy", "--model_path", str(model), "--dry-run", "--space-dir", str(space), "--repo-id", "me/m"],
               cache_root, tmp_path, HF_ENDPOINT="http://127.0.0.1:9", HF_TOKEN=TOKEN)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "dry run: nothing was sent" in done.stdout and "me/m-chat" in done.stdout
    assert TOKEN not in done.stdout + done.stderr
    assert (space / "app.py").is_file() and (space / "gym" / "api" / "batching.py").is_file()
    assert "sdk: gradio" in (space / "README.md").read_text()


@pytest.mark.slow
def test_push_failures_keep_outputs_and_retry(lora_dir: Path, cache_root: Path) -> None:
    """401/403/5xx/network: one sentence without the token, the folder untouched, the next deploy works."""
    config = write_config(lora_dir.parents[1])
    before = sorted(str(p.relative_to(lora_dir)) for p in lora_dir.rglob("*"))
    with HubDouble(TOKEN, free_port()) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "GYM_API_KEY": SECRET}
        for status, phrase in ((403, "may not write to acme/tiny-lora (403 forbidden)"),
                               (503, "the Hub failed while pushing acme/tiny-lora (HTTP 503")):  # fmt: skip
            hub.state.fail["commit"] = [status] * 10  # huggingface_hub retries 5xx on its own
            failed = gym(["deploy", str(config)], cache_root, REPO, **env)
            assert failed.returncode == 1, failed.stdout
            assert phrase in failed.stderr and "retry with `gym deploy`" in failed.stderr, failed.stderr
            assert "Traceback" not in failed.stderr and TOKEN not in failed.stdout + failed.stderr
        hub.state.fail.clear()
        assert "model:acme/tiny-lora" not in hub.state.commits
        done = gym(["deploy", str(config)], cache_root, REPO, **env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert hub.state.commits.count("model:acme/tiny-lora") == 1
    unreachable = gym(["deploy", str(config)], cache_root, REPO, HF_ENDPOINT=f"http://127.0.0.1:{free_port()}",
                      HF_TOKEN=TOKEN, HF_HUB_ETAG_TIMEOUT="2")  # fmt: skip
    assert unreachable.returncode == 1 and "cannot reach the Hub" in unreachable.stderr, unreachable.stderr
    assert TOKEN not in unreachable.stdout + unreachable.stderr
    assert sorted(str(p.relative_to(lora_dir)) for p in lora_dir.rglob("*")) == before
