"""`gym deploy` through the real huggingface_hub client against a local Hub double (HF_ENDPOINT)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.conftest import REPO, SERVE_MAIN, free_port, server_env
from tests.hub.hub_double import HubDouble

TOKEN = "hf_TestTokenNeverPrinted0123456789"
READ = "hf_ReadOnlyTokenAlsoSecret24680"
SECRET = "sk-space-secret-value-42"
READ_TOKEN_LINE = "space  HF_TOKEN secret from $HF_READ_TOKEN: a read token (space.hf_token_env)"
PUSH_TOKEN_LINE = (
    "space  HF_TOKEN secret from {source}: the push token, which can write to the whole account "
    "(space.reuse_push_token)"
)


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


def write_config(
    folder: Path, hub_push: str = "adapter", space_token: str = 'hf_token_env = "HF_READ_TOKEN"'
) -> Path:
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
wait_minutes = 0  # checks the push; tests/hub/test_space_runtime_flow.py runs a pushed Space
{space_token}
""")
    return path


def gym(
    args: list[str], cache_root: Path, cwd: Path, *, timeout: int = 180, **env: str
) -> subprocess.CompletedProcess:
    """``timeout``: a deploy that follows a running Space waits for its start (longer on a loaded machine)."""
    return subprocess.run(
        [sys.executable, str(SERVE_MAIN), *args], cwd=cwd,
        env=server_env(cache_root, HF_HUB_OFFLINE="0", COLUMNS="400", **env),
        capture_output=True, text=True, timeout=timeout,
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
        env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "GYM_API_KEY": SECRET, "HF_READ_TOKEN": READ}
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
        card = model_files[
            "README.md"
        ].decode()  # the run's card, and where it came from (gym/hub/lineage.py)
        assert (
            card.startswith("# tiny-lora\n\nA model card.\n\n## Source\n") and card.count("not in a git") == 1
        )
        space_files = state.files["space:acme/tiny-lora-chat"]
        assert {"README.md", "app.py", "requirements.txt", "gym_space.json", "gym/api/app.py"} <= set(
            space_files
        )
        header = space_files["README.md"].decode()
        for line in ("sdk: gradio", "sdk_version:", "app_file: app.py", "python_version:", "  - acme/tiny-lora",
                     "suggested_hardware: t4-small", "tags:"):  # fmt: skip
            assert line in header
        # the model is private: the Space gets the read token named by space.hf_token_env, not the push token
        assert state.secrets == {"acme/tiny-lora-chat": {"GYM_API_KEY": SECRET, "HF_TOKEN": READ}}
        assert READ_TOKEN_LINE in done.stdout.splitlines()
        assert state.hardware == {"acme/tiny-lora-chat": "t4-small"}
        assert_no_secret(state, done, TOKEN, SECRET, READ)

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
        args = [
            "deploy",
            "--model_path",
            str(lora_dir),
            "--hf_token",
            TOKEN,
            "--push_to_hub",
            "--reuse-push-token",
            "--no-wait",  # the push is checked here; tests/hub/test_space_runtime_flow.py runs a Space
        ]
        done = gym(args, cache_root, tmp_path, HF_ENDPOINT=hub.url)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (
            "model:tester/tiny-lora" in hub.state.repos and "space:tester/tiny-lora-chat" in hub.state.repos
        )
        assert hub.state.hardware == {"tester/tiny-lora-chat": "cpu-basic"}
        # opted in on the command line: the private model's Space holds the push token, and the plan said so
        assert hub.state.secrets["tester/tiny-lora-chat"] == {"HF_TOKEN": TOKEN}
        assert PUSH_TOKEN_LINE.format(source="--hf_token") in done.stdout.splitlines()
        assert_no_secret(hub.state, done, TOKEN)
    config = write_config(tmp_path, hub_push="merged")
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "tiny-lora").symlink_to(lora_dir)
    with HubDouble(TOKEN, free_port()) as hub:
        done = gym(
            ["deploy", str(config)], cache_root, REPO, HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, HF_READ_TOKEN=READ
        )
        assert done.returncode == 0, done.stdout + done.stderr
        files = hub.state.files["model:acme/tiny-lora"]
        assert "model.safetensors" in files and "adapter_config.json" not in files and "README.md" in files


def test_dry_run_renders_without_network(tmp_path: Path, cache_root: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    space = tmp_path / "space"
    done = gym(["deploy", "--model_path", str(model), "--dry-run", "--space-dir", str(space), "--repo-id", "me/m",
                "--space-hf-token-env", "HF_READ_TOKEN"], cache_root, tmp_path, HF_ENDPOINT="http://127.0.0.1:9",
               HF_TOKEN=TOKEN)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "dry run: nothing was sent" in done.stdout and "me/m-chat" in done.stdout
    assert READ_TOKEN_LINE in done.stdout.splitlines()
    assert TOKEN not in done.stdout + done.stderr
    assert (space / "app.py").is_file() and (space / "gym" / "engine" / "batching.py").is_file()
    assert "sdk: gradio" in (space / "README.md").read_text()


@pytest.mark.slow
def test_push_failures_keep_outputs_and_retry(lora_dir: Path, cache_root: Path) -> None:
    """401/403/5xx/network: one sentence without the token, the folder untouched, the next deploy works."""
    config = write_config(lora_dir.parents[1])
    before = sorted(str(p.relative_to(lora_dir)) for p in lora_dir.rglob("*"))
    with HubDouble(TOKEN, free_port()) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "GYM_API_KEY": SECRET, "HF_READ_TOKEN": READ}
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
                      HF_TOKEN=TOKEN, HF_READ_TOKEN=READ, HF_HUB_ETAG_TIMEOUT="2")  # fmt: skip
    assert unreachable.returncode == 1 and "cannot reach the Hub" in unreachable.stderr, unreachable.stderr
    assert TOKEN not in unreachable.stdout + unreachable.stderr
    assert sorted(str(p.relative_to(lora_dir)) for p in lora_dir.rglob("*")) == before


def gym_command(args: list[str], cache_root: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`python -m gym ...` as a user runs it, in a terminal wide enough that no line is wrapped."""
    return subprocess.run(
        [sys.executable, "-m", "gym", *args], cwd=cwd, env=server_env(cache_root, COLUMNS="400", **env),
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip


REFUSED = (
    "space.hf_token_env: the model acme/tiny-lora is private, so its Space needs a token to read it: set "
    "space.hf_token_env to the variable holding a read token, or space.reuse_push_token = true to give the "
    "Space the push token $HF_TOKEN, which can write to the whole account"
)


def test_private_model_space_without_a_token_choice_is_refused(tmp_path: Path, cache_root: Path) -> None:
    """No silent write token: validation and deploy name both ways out, at the [space] table, in one sentence."""
    config = write_config(tmp_path, space_token="")
    text = config.read_text()
    header = text.splitlines().index("[space]") + 1
    for args in (["validate", str(config)], ["deploy", str(config), "--dry-run"]):
        done = gym_command(args, cache_root, tmp_path, HF_ENDPOINT="http://127.0.0.1:9", HF_TOKEN=TOKEN)
        assert done.returncode == 1, done.stdout
        problems = [line for line in (done.stdout + done.stderr).splitlines() if "space." in line]
        assert problems == [problems[0]] and problems[0].endswith(f"gym.toml:{header}:1: {REFUSED}"), problems
        assert "Traceback" not in done.stderr and TOKEN not in done.stdout + done.stderr
    assert config.read_text() == text  # nothing rewritten


def test_reused_push_token_is_an_explicit_choice_shown_in_the_plan(tmp_path: Path, cache_root: Path) -> None:
    (tmp_path / "output" / "tiny-lora").mkdir(parents=True)
    (tmp_path / "output" / "tiny-lora" / "config.json").write_text("{}")
    config = write_config(tmp_path, space_token="reuse_push_token = true")
    done = gym_command(["deploy", str(config), "--dry-run"], cache_root, tmp_path, HF_ENDPOINT="http://127.0.0.1:9",
               HF_TOKEN=TOKEN)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert PUSH_TOKEN_LINE.format(source="$HF_TOKEN") in done.stdout.splitlines()
    assert TOKEN not in done.stdout + done.stderr
    both = write_config(tmp_path, space_token='hf_token_env = "HF_READ_TOKEN"\nreuse_push_token = true')
    refused = gym_command(["validate", str(both)], cache_root, tmp_path)
    assert (
        refused.returncode == 1
        and (
            "space.reuse_push_token: set space.hf_token_env (a read token) or space.reuse_push_token = true "
            "(the push token), not both"
        )
        in refused.stdout + refused.stderr
    )
    same = write_config(tmp_path, space_token='hf_token_env = "HF_TOKEN"')
    refused = gym_command(["validate", str(same)], cache_root, tmp_path)
    assert (
        refused.returncode == 1
        and "space.hf_token_env names the push token $HF_TOKEN (hub.token_env)"
        in (refused.stdout + refused.stderr)
    )


def test_bare_command_line_serves_a_private_model_without_a_token(tmp_path: Path, cache_root: Path) -> None:
    """No gym.toml, no read token: the Space carries its own copy of the weights and holds no token (the
    dry run says so, and how to change it); a pasted token where a variable's name belongs is refused."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    base = ["deploy", "--model_path", str(model), "--dry-run", "--repo-id", "me/m"]
    planned = gym_command(base, cache_root, tmp_path, HF_ENDPOINT="http://127.0.0.1:9", HF_TOKEN=TOKEN)
    assert planned.returncode == 0 and "Traceback" not in planned.stderr, planned.stderr
    said = " ".join(planned.stdout.split())
    assert (
        "space reads the model from a copy of its weights in its own repo (private, like me/m), so it holds no "
        "token; to serve from the model repo instead, give it a read token with --space-hf-token-env VAR"
    ) in said
    assert "not checked against the owner's plan (cannot reach the Hub" in said  # a dry run says, not fails
    assert TOKEN not in planned.stdout + planned.stderr
    pasted = gym(
        [*base, "--space-hf-token-env", READ], cache_root, tmp_path, HF_ENDPOINT="http://127.0.0.1:9"
    )
    assert pasted.returncode == 1 and "looks like a secret token" in pasted.stderr
    assert READ not in pasted.stdout + pasted.stderr


def test_action_plan_names_the_space_token(tmp_path: Path) -> None:
    """The pull request's plan says which variable's token the Space will hold, never its value."""
    from action.run import plan_view
    from gym.config import load_config
    from gym.launch.report.outcome import ConfigOutcome
    from gym.launch.report.render import render

    for space_token, expected in (
        ('hf_token_env = "HF_READ_TOKEN"', "the Space gets HF_TOKEN secret from $HF_READ_TOKEN: a read token (space.hf_token_env)"),
        ("reuse_push_token = true", "the Space gets HF_TOKEN secret from $HF_TOKEN: the push token, which can "
         "write to the whole account (space.reuse_push_token)"),
    ):  # fmt: skip
        config = load_config(write_config(tmp_path, space_token=space_token))
        plan = plan_view(config, tmp_path / "gym.toml", [], cloud=False, workspace=tmp_path)
        assert [note for note in plan.notes if note.startswith("the Space gets")] == [expected]
        body = render(ConfigOutcome(path="gym.toml", mode="plan", reason="changed", plan=plan))
        assert expected.replace("$", "") in body.replace("\\", "").replace("$", "")
