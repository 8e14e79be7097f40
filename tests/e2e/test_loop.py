"""One loop, no step faked: a gym.toml event → the action → SkyPilot runs the job (2 ranks) → the Hub gets
the model, card and Space → the Space serves it (API and chat) → the numbers agree everywhere, and no
secret shows up in anything produced along the way.

Every service is a double on 127.0.0.1 driven by its real client: the action's entrypoint in a
subprocess talks to the recording GitHub API (PyGithub) and to the SkyPilot double (SkyPilot's SDK),
which runs the task's ``run`` as its node; `gym launch` on that node trains with torchrun (gloo, CPU)
and pushes to the Hub double (huggingface_hub); the Space is downloaded from the Hub double and
installed from its own requirements.txt into a fresh venv and started with ``python app.py`` and exactly
the secrets deploy gave it, then driven with ``openai`` and Chromium.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.action.github_server import serve
from tests.conftest import REPO
from tests.e2e import loop as e2e
from tests.e2e.loop import GitHubWithStatuses
from tests.hub.hub_double import TESTER, HubDouble
from tests.launch.sky_double import SkyDouble
from tests.space_runtime import api_answer

pytestmark = pytest.mark.slow

MODEL, SPACE = "acme/support-bot", "acme/support-bot-chat"

SFT = """\
[project]
name = "support-bot"
output_dir = "outputs/support-bot"

[model]
name_or_path = "builtin:tiny"
template = "chatml"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"
eval_fraction = 0.25  # the held-out loss: a score that is not 0.0 before and after 4 steps

[train]
method = "sft"
adapter = "lora"
max_steps = 4
batch_size = 8
max_length = 64
save_steps = 2

[eval]
tasks = ["gym_reverse"]
limit = 8
baseline = true

[compute]
accelerators = ["L4:2"]
managed = true

[hub]
repo_id = "acme/support-bot"

[space]
repo_id = "acme/support-bot-chat"
hardware = "t4-small"
wait_minutes = 0  # checks the push; tests/hub/test_space_runtime_flow.py runs a pushed Space
api_key_env = "GYM_API_KEY"
hf_token_env = "HF_READ_TOKEN"
"""

PUSH = {
    "ref": "refs/heads/main", "before": "1" * 40, "after": "2" * 40,
    "repository": {"full_name": "acme/models", "name": "models", "default_branch": "main",
                   "owner": {"login": "acme"}},
}  # fmt: skip


def labelled_pr(number: int) -> dict:
    repo = {
        "full_name": "acme/models",
        "name": "models",
        "default_branch": "main",
        "owner": {"login": "acme"},
    }
    return {
        "action": "labeled", "number": number, "label": {"name": "gym:launch"}, "repository": repo,
        "pull_request": {"number": number, "labels": [{"name": "gym:launch"}],
                         "head": {"ref": "feature", "sha": "a" * 40, "repo": repo},
                         "base": {"ref": "main", "sha": "b" * 40, "repo": repo}},
    }  # fmt: skip


@dataclass
class Loop:
    root: Path
    workspace: Path
    cache: Path
    hub: HubDouble
    github: GitHubWithStatuses
    sky: SkyDouble


@pytest.fixture
def loop(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Loop]:
    gpus = getattr(request, "param", 2)
    workspace = tmp_path / "repo"
    (workspace / "data").mkdir(parents=True)
    rows = (REPO / "examples" / "quickstart" / "data" / "train.jsonl").read_text().splitlines()[:200]
    (workspace / "data" / "train.jsonl").write_text("\n".join(rows) + "\n")
    (workspace / "gym.toml").write_text(SFT)
    cache = tmp_path / "cache"
    # the workflow's token for the action, the report token for the job: GitHub checks either on every call
    github = GitHubWithStatuses(token=e2e.GITHUB_TOKEN, extra_tokens=(e2e.REPORT_TOKEN,))
    server, _ = serve(github)
    # the push token writes; the Space's token only reads (both of user tester, member of org acme)
    tokens = {e2e.HF_TOKEN: TESTER, e2e.READ_TOKEN: dataclasses.replace(TESTER, role="read")}
    hub = HubDouble(tokens, e2e.free_port())
    with hub:
        sky = SkyDouble(tmp_path / "sky", base_env=e2e.node_env(tmp_path, hub.url, cache), gpus=gpus,
                        master_port=e2e.free_port())  # fmt: skip
        with sky:
            yield Loop(tmp_path, workspace, cache, hub, github, sky)
    server.shutdown()
    server.server_close()


def outputs(env: dict[str, str]) -> dict[str, str]:
    from tests.action.conftest import parse_outputs

    return parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text())


def assert_nothing_leaked(loop: Loop, *texts: str) -> None:
    """No secret value in any file, log, card, comment, status or task YAML of the run."""
    for index, text in enumerate(texts):
        e2e.assert_no_secret(f"text #{index}", text)
    for key, files in loop.hub.state.files.items():
        for path, content in files.items():
            e2e.assert_no_secret(f"{key}/{path}", content)
    for job in loop.sky.jobs.values():
        e2e.assert_no_secret(f"the log of job {job.job_id}", "".join(job.lines))
        if job.node_dir is not None:
            for path in e2e.files_under(job.node_dir):
                e2e.assert_no_secret(str(path), path.read_bytes())
    for call in loop.sky.calls:  # secret values travel only as the task's `secrets`
        if call["path"] in ("/jobs/launch", "/launch", "/validate"):
            import yaml

            body = json.loads(call["body"])
            for doc in yaml.safe_load_all(body.get("task") or body.get("dag") or ""):
                if isinstance(doc, dict):
                    e2e.assert_no_secret(f"SkyPilot {call['path']}", json.dumps({k: v for k, v in doc.items()
                                                                             if k != "secrets"}))  # fmt: skip
        else:
            e2e.assert_no_secret(f"SkyPilot {call['path']}", call["body"])
    for recorded in loop.github.requests:
        e2e.assert_no_secret(f"GitHub {recorded.path}", json.dumps(recorded.body))
    for folder in (loop.workspace, loop.root / "runner-push", loop.root / "runner-pull_request"):
        if folder.is_dir():
            for path in e2e.files_under(folder):
                e2e.assert_no_secret(str(path), path.read_bytes())


def test_push_to_main_trains_on_two_ranks_pushes_once_and_the_space_serves_it(loop: Loop) -> None:
    loop.github.compares["1" * 40 + "..." + "2" * 40] = [("gym.toml", "modified")]
    env = e2e.action_env(loop.root, loop.github, PUSH, "push", loop.sky.endpoint, loop.workspace,
                     GYM_INPUT_WAIT="true", GYM_API_KEY=e2e.API_KEY, HF_READ_TOKEN=e2e.READ_TOKEN)  # fmt: skip
    done = e2e.run_action(env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (job,) = loop.sky.jobs.values()
    log = "".join(job.lines)
    assert job.status == "SUCCEEDED", log[-4000:]
    assert "gym: node 0 of 1 starts 2 process(es)" in log  # torchrun with 2 ranks
    assert log.count("[deploy] done") == 1 and log.count("[eval] running") == 1  # rank 0 only

    # the Hub: one model commit with exactly the model, the Space with exactly its two secrets
    state = loop.hub.state
    assert state.commits.count(f"model:{MODEL}") == 1
    assert state.repos[f"model:{MODEL}"]["visibility"] == "private"
    model = state.files[f"model:{MODEL}"]
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md", "eval_results.json",
            "train_results.json", "tokenizer_config.json"} <= set(model)  # fmt: skip
    assert not [
        p for p in model if p.startswith(("checkpoint", "space/")) or p.endswith((".pt", ".pth", ".bin"))
    ]
    assert any(p.startswith(".eval_results/") for p in model)
    assert state.secrets[SPACE] == {"GYM_API_KEY": e2e.API_KEY, "HF_TOKEN": e2e.READ_TOKEN}
    assert state.hardware[SPACE] == "t4-small"

    # the same numbers in the action's output, eval_results.json, the card's model-index and .eval_results/
    results = json.loads(model["eval_results.json"])
    action_results = json.loads(outputs(env)["results-json"])[0]["results"]
    assert e2e.json_scores(results).get("held-out", 0.0) > 0.0  # a real number, not a 0.0 that always matches
    assert e2e.json_scores(action_results) == e2e.json_scores(results)
    assert e2e.card_scores(model["README.md"].decode()) == e2e.json_scores(results)
    assert e2e.eval_results_scores(model) == e2e.json_scores(results)

    # the Space, as the Hub would start it: private model read with its own token; API and chat keyed
    space = e2e.start_space(SPACE, loop.hub.url, state.secrets[SPACE], loop.root, loop.cache)
    try:
        e2e.wait_healthy(space)
        import openai

        client = openai.OpenAI(base_url=space.url + "/v1", api_key=e2e.API_KEY, max_retries=0, timeout=120)
        assert [m.id for m in client.models.list().data] == [MODEL]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=space.url + "/v1", api_key="sk-wrong", max_retries=0).models.list()
        assert e2e.login_refused(space.url, "sk-wrong")
        # the chat at temperature 0 shows what the API answers to the same message, not the message
        expected = api_answer(space.url, e2e.API_KEY, MODEL, "Reverse: c d", max_tokens=16)
        shown = e2e.chat_in_browser(
            space.url, e2e.API_KEY, "Reverse: c d", loop.root / "chat.png", max_tokens=16
        )
        assert shown == expected and shown != "Reverse: c d"
        assert any(path.endswith("adapter_model.safetensors") for path in state.downloads)
    finally:
        space_log = space.stop()
    assert_nothing_leaked(loop, done.stdout, done.stderr, space_log)


@pytest.mark.parametrize("loop", [1], indirect=True)  # one rank: the push test above covers two
def test_labelled_pr_reports_back_after_the_action_has_ended(loop: Loop) -> None:
    """wait=false: the action posts the plan and ends; the job edits the same comment and sets the status."""
    (loop.workspace / "gym.toml").write_text(SFT.replace('"L4:2"', '"L4:1"'))
    github = loop.github
    github.pulls[8] = {"head_repo": "acme/models"}
    github.files[8] = [("gym.toml", "modified")]
    github.labels[8] = []
    github.roles["wendy"] = "write"  # a maintainer applies the label: the action reads the role from the API
    github.apply_label(8, "gym:launch", "wendy")
    env = e2e.action_env(loop.root, github, labelled_pr(8), "pull_request", loop.sky.endpoint, loop.workspace,
                     GYM_INPUT_WAIT="false", GYM_REPORT_TOKEN=e2e.REPORT_TOKEN, GYM_API_KEY=e2e.API_KEY)  # fmt: skip
    done = e2e.run_action(env, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (comment,) = github.comments[8]
    assert "the job posts its eval table here when it ends" in comment["body"]
    (job,) = loop.sky.jobs.values()
    assert job.done.wait(600), "the job did not finish"
    log = "".join(job.lines)
    assert job.status == "SUCCEEDED", log[-4000:]
    assert "GYM_REPORT_TOKEN" in job.task["secrets"] and "GYM_REPORT_TOKEN" not in job.task["envs"]

    (comment,) = github.comments[8]  # still one comment: edited by the job
    body = comment["body"]
    assert body.startswith("<!-- gym-action config=gym.toml -->") and "🚀 launched and evaluated" in body
    from gym.launch.report.sticky import RunState

    job_record = RunState.parse(body)  # the action's record of its job survives the job's edit, marked ended
    assert job_record is not None and job_record.ended and job_record.state == "finished"
    assert job_record.job_id == str(job.job_id)
    results = json.loads((job.node_dir / "outputs" / "support-bot" / "eval_results.json").read_text())
    assert e2e.json_scores(results).get("held-out", 0.0) > 0.0
    shown, recorded = e2e.comment_scores(body), e2e.json_scores(results)
    assert shown.keys() == recorded.keys()  # the comment's table shows 4 decimals
    assert all(abs(shown[task] - recorded[task]) <= 0.5e-4 + 1e-9 for task in shown), (shown, recorded)
    states = [(s["state"], s["context"]) for s in github.statuses]
    assert states == [("pending", "gym / gym.toml"), ("success", "gym / gym.toml")]
    assert all(s["sha"] == "a" * 40 for s in github.statuses)
    assert all(r.authorized for r in github.requests)  # the action's token, then the job's report token
    assert "gym_reverse" in github.statuses[-1]["description"]
    assert loop.hub.state.commits == []  # a pull request's run publishes nothing; the merge does
    assert_nothing_leaked(loop, done.stdout, done.stderr)


TRAINING_FREE = """\
[project]
name = "tf-bot"
output_dir = "outputs/tf-bot"

[model]
name_or_path = "builtin:tiny"
template = "chatml"

[[datasets]]
path = "data/prompts.jsonl"
format = "prompt"

[train]
method = "grpo"
batch_size = 2
max_steps = 2

[train.grpo]
training_free = true
group_size = 2
max_experiences_per_group = 2
api_base = "{api_base}"
api_key_env = "POLICY_API_KEY"

[eval]
tasks = ["gym_reverse"]
limit = 4

[compute]
accelerators = ["L4:1"]

[hub]
repo_id = "acme/tf-bot"
private = false

[space]
repo_id = "acme/tf-bot-chat"
wait_minutes = 0  # checks the push; tests/hub/test_space_runtime_flow.py runs a pushed Space
"""


@pytest.mark.parametrize("loop", [1], indirect=True)
def test_training_free_config_pushes_base_ref_and_library_and_the_space_serves_with_it(loop: Loop) -> None:
    from tests.train.scripted_server import scripted_server
    from tests.train.test_training_free import default_script

    rows = [
        {"prompt": "Q-varied: say right", "answer": "right"},
        {"prompt": "Q-equal: say right", "answer": "right"},
    ]
    (loop.workspace / "data" / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with scripted_server(default_script, api_key=e2e.POLICY_KEY) as policy:
        (loop.workspace / "gym.toml").write_text(TRAINING_FREE.format(api_base=policy.url))
        loop.github.compares["1" * 40 + "..." + "2" * 40] = [("gym.toml", "modified")]
        env = e2e.action_env(loop.root, loop.github, PUSH, "push", loop.sky.endpoint, loop.workspace,
                         GYM_INPUT_WAIT="true", POLICY_API_KEY=e2e.POLICY_KEY)  # fmt: skip
        done = e2e.run_action(env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (job,) = loop.sky.jobs.values()
    log = "".join(job.lines)
    assert job.status == "SUCCEEDED", log[-4000:]
    assert "starts 1 process(es)" in log

    state = loop.hub.state
    assert state.commits.count("model:acme/tf-bot") == 1
    model = state.files["model:acme/tf-bot"]
    assert {"experiences.json", "training_free.json", "README.md", "eval_results.json"} <= set(model)
    assert not [p for p in model if p.endswith((".safetensors", ".bin"))]  # a frozen base: no weights pushed
    library = json.loads(model["experiences.json"])["experiences"]
    assert library, "the scripted learner proposes experiences: the library cannot be empty"
    card = model["README.md"].decode()
    assert (
        "frozen base model `builtin:tiny`" in card
        and f"experience library** of {len(library)} experiences" in card
    )
    results = json.loads(model["eval_results.json"])
    assert "+ experiences" in results["model"] and "without experiences" in results["base_model"]
    assert e2e.card_scores(card) == e2e.json_scores(results) == e2e.eval_results_scores(model)
    space_files = state.files["space:acme/tf-bot-chat"]
    settings = json.loads(space_files["gym_space.json"])
    assert settings["model"] == "builtin:tiny" and settings["experiences"] == "experiences.json"
    assert json.loads(space_files["experiences.json"]) == json.loads(model["experiences.json"])
    assert "HF_TOKEN" not in state.secrets.get("acme/tf-bot-chat", {})  # a public model needs no read token

    space = e2e.start_space("acme/tf-bot-chat", loop.hub.url, state.secrets.get("acme/tf-bot-chat", {}),
                        loop.root, loop.cache)  # fmt: skip
    try:
        e2e.wait_healthy(space)

        from gradio_client import Client

        # the library reaches the chat and the API alike: at temperature 0 they give the same answer
        expected = api_answer(space.url, "unused", "acme/tf-bot", "hi", max_tokens=4)
        assert Client(space.url + "/", verbose=False).predict("hi", 0.0, 4, api_name="/chat") == expected
    finally:
        space_log = space.stop()
    shutil.rmtree(loop.root / "space", ignore_errors=True)
    assert_nothing_leaked(loop, done.stdout, done.stderr, space_log)
