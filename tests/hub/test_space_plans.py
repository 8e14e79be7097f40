"""The Space the owner's plan can have, settled before anything is paid for, and the sentences for the rest.

Driven through the real `gym` CLI and huggingface_hub against the Hub double, whose accounts have plans
(tests/hub/hub_plans.py: since July 2026 a free account's Gradio Space on cpu-basic is HTTP 402, paid
hardware without a payment method 403; free personal accounts get up to two ZeroGPU Spaces).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from tests.api.conftest import free_port, server_env
from tests.hub.hub_double import FREE, TESTER, HubDouble
from tests.hub.test_deploy import TOKEN, assert_no_secret, gym

FREE_TOKEN = "hf_FreeAccountTokenNeverPrinted42"
NO_BILLING = "hf_ProWithoutBillingTokenSecret7"
SECRET = "sk-space-secret-value-43"


@pytest.fixture
def hub() -> Iterator[HubDouble]:
    tokens = {
        TOKEN: TESTER,
        FREE_TOKEN: FREE,
        NO_BILLING: dataclasses.replace(TESTER, user="nobill", can_pay=False),
    }
    with HubDouble(tokens, free_port()) as double:
        yield double


def project(folder: Path, owner: str, hardware: str | None, *, max_steps: int = 2) -> Path:
    """A gym.toml that trains builtin:tiny and publishes ``owner``/tiny + its Space (public: no token needed)."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    rows = [{"instruction": f"Reverse: {w}", "output": w[::-1]} for w in ("ab", "cd", "ef", "gh")]
    (folder / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = f'hardware = "{hardware}"' if hardware else ""
    path = folder / "gym.toml"
    path.write_text(f"""\
[project]
name = "tiny"
output_dir = "output/tiny"

[model]
name_or_path = "builtin:tiny"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"

[train]
max_steps = {max_steps}

[hub]
repo_id = "{owner}/tiny"
private = false

[space]
repo_id = "{owner}/tiny-chat"
{line}
""")
    return path


def gym_command(args: list[str], cache_root: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """The `gym` command itself (`python -m gym`), as a user runs it."""
    return subprocess.run([sys.executable, "-m", "gym", *args], cwd=cwd, capture_output=True, text=True,
                          env=server_env(cache_root, HF_HUB_OFFLINE="0", COLUMNS="400", **env), timeout=300)  # fmt: skip


def test_a_free_account_forcing_cpu_basic_is_refused_before_any_training_step(
    hub: HubDouble, tmp_path: Path, cache_root: Path
) -> None:
    config = project(tmp_path, "freebie", "cpu-basic")
    done = gym_command(
        ["launch", str(config)], cache_root, tmp_path, HF_ENDPOINT=hub.url, HF_TOKEN=FREE_TOKEN
    )
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert (
        'space.hardware = "cpu-basic" would be refused for freebie/tiny-chat (HTTP 402): freebie is a free personal account'
        in said
    )
    assert '"zero-a10g" (up to two ZeroGPU Spaces free)' in said and "Traceback" not in done.stderr
    output = tmp_path / "output" / "tiny"
    assert not (output / "checkpoints").exists() and not (output / "train_results.json").exists()
    assert hub.state.commits == [] and hub.state.repos == {}
    assert_no_secret(hub.state, done, FREE_TOKEN)


@pytest.mark.parametrize(
    ("token", "owner", "hardware", "expected"),
    [
        (FREE_TOKEN, "freebie", None, "hardware auto → zero-a10g: freebie is a free personal account"),
        (TOKEN, "tester", None, "hardware auto → cpu-basic: tester is a PRO account"),
        (TOKEN, "acme", None, "hardware auto → cpu-basic: the organization acme is on a paid plan"),
        (
            FREE_TOKEN,
            "freebie",
            "zero-a10g",
            "hardware zero-a10g: allowed, freebie is a free personal account",
        ),
    ],
)
def test_dry_run_shows_the_hardware_the_plan_gives(
    hub: HubDouble, lora_dir: Path, tmp_path: Path, cache_root: Path, token: str, owner: str,
    hardware: str | None, expected: str,
) -> None:  # fmt: skip
    config = project(tmp_path, owner, hardware)
    args = ["deploy", str(config), "--model_path", str(lora_dir), "--dry-run"]
    done = gym(args, cache_root, tmp_path, HF_ENDPOINT=hub.url, HF_TOKEN=token)
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout
    if expected.startswith("hardware auto → cpu-basic"):
        assert "llamacpp, GGUF q8_0" in done.stdout  # a CPU Space serves 8-bit GGUF through llama.cpp
    assert hub.state.commits == [] and hub.state.repos == {}


@pytest.mark.parametrize(
    ("token", "owner", "hardware", "sentence"),
    [
        (FREE_TOKEN, "freeorg", None, 'space.hardware = "auto" has no free choice for freeorg/tiny-chat: the '
         "organization freeorg is on no paid plan"),
        (FREE_TOKEN, "freeorg", "zero-a10g", 'space.hardware = "zero-a10g" would be refused for freeorg/tiny-chat '
         "(HTTP 402)"),
        (NO_BILLING, "nobill", "t4-small", 'space.hardware = "t4-small" would be refused for nobill/tiny-chat (HTTP '
         "403): it is paid hardware and nobill has no payment method on file"),
        (FREE_TOKEN, "acme", None, "the token belongs to freebie, who is not a member of acme"),
    ],
)  # fmt: skip
def test_dry_run_refuses_what_the_plan_cannot_have_in_one_sentence(
    hub: HubDouble, lora_dir: Path, tmp_path: Path, cache_root: Path, token: str, owner: str,
    hardware: str | None, sentence: str,
) -> None:  # fmt: skip
    config = project(tmp_path, owner, hardware)
    args = ["deploy", str(config), "--model_path", str(lora_dir), "--dry-run"]
    done = gym(args, cache_root, tmp_path, HF_ENDPOINT=hub.url, HF_TOKEN=token)
    assert done.returncode == 1
    said = " ".join(done.stderr.split())
    assert sentence in said and "Traceback" not in done.stderr
    assert said.count("error:") == 1
    assert hub.state.commits == [] and hub.state.repos == {}


def test_a_space_refused_after_the_model_push_says_what_landed_and_space_only_finishes(
    hub: HubDouble, lora_dir: Path, tmp_path: Path, cache_root: Path
) -> None:
    """A 503 on the Space's secret: the model is up, the Space is not; `--space-only` finishes without pushing
    the model again."""
    config = project(tmp_path, "acme", "t4-small")
    hub.state.fail["secrets"] = [503]
    args = ["deploy", str(config), "--model_path", str(lora_dir), "--no-wait"]
    env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "GYM_API_KEY": SECRET}
    done = gym(args, cache_root, tmp_path, **env)
    assert done.returncode == 1
    said = " ".join(done.stderr.split())
    assert (
        "the Hub failed while setting a secret of acme/tiny-chat (HTTP 503, a server error); the model acme/tiny "
        "was pushed, the Space was not updated; retry `gym deploy --space-only` later"
    ) in said
    assert hub.state.commits.count("model:acme/tiny") == 1
    done = gym([*args, "--space-only"], cache_root, tmp_path, **env)
    assert done.returncode == 0, done.stderr
    assert hub.state.commits.count("model:acme/tiny") == 1  # not pushed again
    assert hub.state.secrets["acme/tiny-chat"] == {"GYM_API_KEY": SECRET}
    assert hub.state.hardware["acme/tiny-chat"] == "t4-small"
    assert_no_secret(hub.state, done, TOKEN, SECRET)


def test_the_space_is_settled_before_the_model_is_pushed(
    hub: HubDouble, lora_dir: Path, tmp_path: Path, cache_root: Path
) -> None:
    """An existing Space whose hardware is refused (no payment method): nothing of the model is pushed."""
    config = project(tmp_path, "nobill", "a10g-small")
    done = gym(["deploy", str(config), "--model_path", str(lora_dir), "--no-wait"], cache_root, tmp_path,
               HF_ENDPOINT=hub.url, HF_TOKEN=NO_BILLING)  # fmt: skip
    assert done.returncode == 1
    assert "has no payment method on file" in " ".join(done.stderr.split())
    assert hub.state.commits == [] and "model:nobill/tiny" not in hub.state.repos


class _Index(BaseHTTPRequestHandler):
    """A package index's JSON API that holds zoo-gym at exactly the version being deployed."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        from gym import __version__

        if self.path == f"/pypi/zoo-gym/{__version__}/json":
            body = json.dumps({"info": {"name": "zoo-gym", "version": __version__}}).encode()
            self.send_response(200)
        else:
            body = b'{"message": "Not Found"}'
            self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_released_gym_is_installed_from_the_index_and_a_dev_build_carries_only_serving_code(
    lora_dir: Path, tmp_path: Path, cache_root: Path
) -> None:
    from gym import __version__

    config = project(tmp_path, "acme", "t4-small")
    server = HTTPServer(("127.0.0.1", 0), _Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for name, index in (
            ("released", f"http://127.0.0.1:{server.server_port}/pypi"),
            ("dev", "http://127.0.0.1:9"),
        ):
            out = tmp_path / name
            done = gym(["deploy", str(config), "--model_path", str(lora_dir), "--dry-run", "--space-dir", str(out)],
                       cache_root, tmp_path, GYM_PACKAGE_INDEX=index)  # fmt: skip
            assert done.returncode == 0, done.stderr
            requirements = (out / "requirements.txt").read_text()
            readme = (out / "README.md").read_text()
            assert 'python_version: "3.1' in readme and "sdk_version: " in readme
            if name == "released":
                assert f"zoo-gym[space]=={__version__}" in requirements and not (out / "gym").exists()
            else:
                carried = [p for p in (out / "gym").rglob("*") if p.is_file()]
                assert "zoo-gym" not in requirements and 60 < len(carried) < 120, len(carried)
                assert (out / "gym" / "api" / "ui.py").is_file() and not (
                    out / "gym" / "train" / "runner.py"
                ).exists()
    finally:
        server.shutdown()


def test_a_402_on_creating_the_space_names_the_space_and_says_retrying_cannot_help(
    hub: HubDouble, lora_dir: Path, tmp_path: Path, cache_root: Path
) -> None:
    """The Hub refuses the Space itself (HTTP 402, as for a plan that changed since the check): one sentence about
    the Space, not the model repo; nothing of the model was pushed."""
    config = project(tmp_path, "acme", "t4-small")
    hub.state.fail["create"] = [402]
    done = gym(["deploy", str(config), "--model_path", str(lora_dir), "--no-wait"], cache_root, tmp_path,
               HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN)  # fmt: skip
    assert done.returncode == 1
    said = " ".join(done.stderr.split())
    assert "error: the Hub refused acme/tiny-chat on t4-small (HTTP 402: the owner's plan)" in said
    assert "retrying as it is cannot help" in said and "acme/tiny " not in said.replace("acme/tiny-chat", "")
    assert hub.state.commits == []


PLAN_VIEW = """
import sys
from pathlib import Path
from action.run import plan_view
from gym.config import load_config
from gym.launch.task import LaunchError
path = Path(sys.argv[1])
try:
    plan = plan_view(load_config(path), path, [], cloud=False, workspace=path.parent)
except LaunchError as error:
    print("refused:", error)
else:
    print("notes:", " | ".join(plan.notes))
"""


def test_the_actions_plan_refuses_a_space_the_owner_cannot_have(
    hub: HubDouble, tmp_path: Path, cache_root: Path
) -> None:
    """The pull request's plan says it before a GPU hour is spent (the sentence the comment shows)."""

    def plan(folder: str, hardware: str | None, **env: str) -> str:
        config = project(tmp_path / folder, "freebie", hardware)
        done = subprocess.run([sys.executable, "-c", PLAN_VIEW, str(config)], capture_output=True, text=True,
                              env=server_env(cache_root, HF_HUB_OFFLINE="0", HF_ENDPOINT=hub.url, **env), timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return " ".join(done.stdout.split())

    refused = plan("a", "cpu-basic", HF_TOKEN=FREE_TOKEN)
    assert refused.startswith(
        'refused: space.hardware = "cpu-basic" would be refused for freebie/tiny-chat (HTTP 402)'
    )
    assert "Space hardware auto → zero-a10g: freebie is a free personal account" in plan(
        "b", None, HF_TOKEN=FREE_TOKEN
    )
    unchecked = plan("c", None)
    assert (
        "Space hardware 'auto' is not checked against the owner's plan: $HF_TOKEN is not set for this step"
        in unchecked
    )


def test_validate_online_asks_the_hub_what_offline_validation_cannot(
    hub: HubDouble, tmp_path: Path, cache_root: Path
) -> None:
    """`gym validate` stays offline and passes; `--online` refuses the Space the plan cannot have, and a Jobs
    flavor the Hub does not offer."""
    config = project(tmp_path, "freebie", "cpu-basic")
    env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": FREE_TOKEN}
    assert gym_command(["validate", str(config)], cache_root, tmp_path, **env).returncode == 0
    online = gym_command(["validate", "--online", str(config)], cache_root, tmp_path, **env)
    assert online.returncode == 1 and "would be refused for freebie/tiny-chat (HTTP 402)" in " ".join(
        online.stderr.split()
    )
    jobs_section = '\n[compute]\nprovider = "hf-jobs"\nflavor = "l4x1"\n'
    unpaid = project(tmp_path / "unpaid", "freebie", None)
    unpaid.write_text(unpaid.read_text() + jobs_section)
    refused = gym_command(["validate", "--online", str(unpaid)], cache_root, tmp_path, **env)
    assert refused.returncode == 1 and "freebie has no payment method or credits" in " ".join(
        refused.stderr.split()
    )
    jobs = project(tmp_path / "jobs", "tester", None)
    jobs.write_text(jobs.read_text() + jobs_section)
    paid = {"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
    fine = gym_command(["validate", "--online", str(jobs)], cache_root, tmp_path, **paid)
    assert fine.returncode == 0, fine.stderr
    assert (
        "Space hardware auto → cpu-basic" in fine.stdout
        and "Jobs flavor l4x1: offered, $0.80/h" in fine.stdout
    )
    assert (
        gym_command(["validate", "--online", str(jobs)], cache_root, tmp_path, HF_ENDPOINT=hub.url).returncode
        == 1
    )
