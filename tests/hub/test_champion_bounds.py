"""The champion lookup against a Hub that misbehaves (:mod:`tests.hub.hostile_hub`): bounded in time, in
bytes and in YAML expansion, writing nothing, and always one sentence with the gate blocking the push.

The endpoint is reached through huggingface_hub's own session and settings (``HF_ENDPOINT``,
``HF_HUB_ETAG_TIMEOUT``), in process with ``read_champion`` and end to end with `gym deploy`.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from gym.eval.gates import GateError
from gym.eval.report import EvalReport, TaskScore
from gym.hub.champion import ADVICE, read_champion
from tests.e2e.loop import venv_path
from tests.hub.hostile_hub import INFO, HostileHub, HostileState

TOKEN = "hf_" + "H" * 34
REPO = "acme/bot"
RUN = REPO.replace("/", "--")
# Nine levels of nine aliases: 9**9 (387 million) values in a few hundred bytes, in the card's metadata.
ALIAS_BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{','.join([f'*{previous}'] * 9)}]\n"
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def scores(value: float, stderr: float | str | None = 0.04) -> EvalReport:
    row = TaskScore(task="mmlu", metric="acc", value=value, stderr=stderr, samples=100, base_value=0.4,  # type: ignore[arg-type]
                    delta=value - 0.4, higher_is_better=True, n_shot=5)  # fmt: skip
    return EvalReport(model="out", results=[row], base_model="base", num_fewshot=5, limit=100)


def champion_files(tmp_path: Path, value: float = 0.9) -> dict[str, bytes]:
    """README.md and eval_results.json as Gym pushes them, for a champion scoring ``value``."""
    from gym.hub.card import write_card

    folder = tmp_path / "champion"
    write_card(scores(value), None, folder)
    scores(value).write(folder)
    return {name: (folder / name).read_bytes() for name in ("README.md", "eval_results.json")}


def card_with_metadata(metadata: str) -> bytes:
    return f"---\n{metadata}\n---\n# bot\n".encode()


def refusal(hub: HostileHub, timeout: float = 0.5) -> tuple[str, float, int]:
    """(the sentence, seconds taken, peak bytes Python allocated) of a lookup that must be refused."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(GateError) as caught:
            read_champion(REPO, TOKEN, endpoint=hub.url, timeout=timeout)
        return str(caught.value), time.monotonic() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


LATE = (
    f"the Hub did not answer the champion lookup of {REPO} in time (HF_HUB_ETAG_TIMEOUT=0.5 s a request, 1.5 s in "
    "all); nothing was pushed, retry later, or raise HF_HUB_ETAG_TIMEOUT"
)


@pytest.mark.parametrize(
    ("stalls", "where"),
    [("hang", INFO), ("hang", "README.md"), ("trickle", "README.md"), ("trickle", "eval_results.json")],
)
def test_a_hub_that_stalls_is_given_up_on_in_bounded_time(tmp_path: Path, stalls: str, where: str) -> None:
    state = HostileState(files=champion_files(tmp_path))
    getattr(state, stalls).add(where)
    with HostileHub(state) as hub:
        sentence, seconds, _ = refusal(hub, timeout=0.5)
    assert sentence == LATE
    assert seconds < 3 * 0.5 + 3, seconds  # the whole lookup's bound, the wait for the worker, load
    assert TOKEN not in sentence


def test_an_alias_bomb_in_the_card_is_refused_at_once(tmp_path: Path) -> None:
    files = champion_files(tmp_path)
    files["README.md"] = card_with_metadata(ALIAS_BOMB)
    assert len(files["README.md"]) < 500
    with HostileHub(HostileState(files=files)) as hub:
        sentence, seconds, peak = refusal(hub)
    assert sentence == (
        f"the champion {REPO}: the metadata of its README.md is refused: its aliases expand to more than 200,000 "
        f"values; a training config has a few dozen; {ADVICE}"
    )
    assert seconds < 4 and peak < 20_000_000, (seconds, peak)


@pytest.mark.parametrize("sized", [True, False])
def test_a_card_of_twenty_megabytes_is_not_read(tmp_path: Path, sized: bool) -> None:
    files = champion_files(tmp_path)
    files["README.md"] = card_with_metadata("notes: " + "x" * 20_000_000)
    state = HostileState(files=files, unsized=set() if sized else {"README.md"})
    with HostileHub(state) as hub:
        sentence, seconds, peak = refusal(hub)
    assert sentence == (
        f"the champion {REPO}: its README.md is more than 1,000,000 bytes, far more than Gym writes; {ADVICE}"
    )
    assert seconds < 4 and peak < 8_000_000, (seconds, peak)  # a megabyte and a chunk read, not twenty


def test_a_large_metadata_block_is_refused_before_parsing(tmp_path: Path) -> None:
    files = champion_files(tmp_path)
    files["README.md"] = card_with_metadata("notes:\n" + "- entry\n" * 40_000)  # 320 kB of YAML
    with HostileHub(HostileState(files=files)) as hub:
        sentence, seconds, _ = refusal(hub)
    assert sentence == (
        f"the champion {REPO}: the metadata of its README.md is more than 256,000 bytes, far more than a Gym "
        f"card holds; {ADVICE}"
    )
    assert seconds < 3, seconds


def test_a_compressed_answer_is_refused_unread(tmp_path: Path) -> None:
    import gzip

    files = champion_files(tmp_path)
    files["README.md"] = gzip.compress(card_with_metadata("notes: " + "x" * 50_000_000))  # 50 kB on the wire
    state = HostileState(files=files, headers={"README.md": {"Content-Encoding": "gzip"}})
    with HostileHub(state) as hub:
        sentence, seconds, peak = refusal(hub)
    assert sentence == (
        f"the champion {REPO}: the Hub sent its README.md compressed (gzip) although asked not to; "
        "nothing was pushed, retry later"
    )
    assert peak < 8_000_000


@pytest.mark.parametrize(
    ("results", "reason"),
    [
        (b'{"model": "out", "results": [{"task": "mmlu", "metric": "acc", "value": 0.5, "stderr": "0.04"}]}',
         'results[0].stderr is "0.04", not a number or null'),
        (b"[1, 2]", "is a list, not an object"),
        (b'{"model": "out", "results": [{"task": "mmlu", "metric": "acc", "value": 0.5, "stderr": Infinity}]}',
         "results[0].stderr is Infinity, not a finite number"),
        (b"{" * 5_000_001, "is more than 4,000,000 bytes, far more than Gym writes"),
    ],
)  # fmt: skip
def test_a_damaged_eval_results_json_of_the_champion_is_one_sentence(
    tmp_path: Path, results: bytes, reason: str
) -> None:
    files = {**champion_files(tmp_path), "eval_results.json": results}
    with HostileHub(HostileState(files=files)) as hub:
        sentence, _, _ = refusal(hub)
    assert sentence == f"the champion {REPO}: its eval_results.json {reason}; {ADVICE}"


@pytest.mark.parametrize("sha", ["../../../../escaped", "C" * 40, "c" * 39, ""])
def test_a_commit_id_that_is_no_commit_id_is_refused(tmp_path: Path, sha: str) -> None:
    with HostileHub(HostileState(sha=sha, files=champion_files(tmp_path))) as hub:
        sentence, _, _ = refusal(hub)
    assert sentence == (
        f"the champion {REPO}: the Hub did not say which commit it is at (a 40-digit hexadecimal id); "
        "nothing was pushed, retry later"
    )


def test_an_infinite_champion_score_is_no_score(tmp_path: Path) -> None:
    """`>= champion` against a card claiming -inf would always hold: such a score counts as none."""
    files = champion_files(tmp_path)
    files["README.md"] = files["README.md"].replace(b"value: 0.9", b"value: -.inf")
    assert b"-.inf" in files["README.md"]
    with HostileHub(HostileState(files=files)) as hub:
        sentence, _, _ = refusal(hub)
    assert (
        sentence == f"no champion to compare: the card of {REPO} has no eval results (model-index); {ADVICE}"
    )


# --- end to end: `gym deploy` as a user runs it, its time and its memory measured by the kernel ---


def project(tmp_path: Path) -> Path:
    """A run that scored mmlu.acc 0.7, gated on `>= champion` (the champion scores 0.9: the gate fails)."""
    (tmp_path / "data").mkdir(parents=True)
    (tmp_path / "data" / "train.jsonl").write_text('{"instruction": "hi", "output": "hello"}\n')
    (tmp_path / "gym.toml").write_text(
        '[project]\nname = "bot"\noutput_dir = "out"\n[model]\nname_or_path = "builtin:tiny"\n'
        '[[datasets]]\npath = "data/train.jsonl"\nformat = "alpaca"\n[eval]\ntasks = ["mmlu"]\n'
        f'[eval.gates]\nrules = ["mmlu.acc >= champion"]\n[hub]\nrepo_id = "{REPO}"\n'
    )
    (tmp_path / "out").mkdir()
    scores(0.7).write(tmp_path / "out")
    (tmp_path / "out" / "adapter_config.json").write_text("{}")
    return tmp_path


def deploy(folder: Path, hub: HostileHub, hf_home: Path, limit_s: float = 45) -> tuple[int, str, float, int]:
    """`gym deploy gym.toml` in ``folder``: (exit code, stderr, seconds, the process's peak RSS in bytes).

    The peak is the kernel's (``wait4``'s rusage of this one child, not of every child the suite started);
    the child may allocate at most 3 GB (RLIMIT_DATA) and is killed after ``limit_s``, so a regression
    fails here instead of exhausting the machine.
    """
    env = {"PATH": venv_path(), "HOME": str(folder), "HF_HOME": str(hf_home), "HF_ENDPOINT": hub.url,
           "HF_HUB_OFFLINE": "0", "HF_TOKEN": TOKEN, "HF_HUB_ETAG_TIMEOUT": "2", "COLUMNS": "400"}  # fmt: skip

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (3 * 2**30, 3 * 2**30))

    with tempfile.TemporaryFile() as err:
        started = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", "gym", "deploy", "gym.toml"], cwd=folder, env=env,
                                 stdout=subprocess.DEVNULL, stderr=err, preexec_fn=cap_memory)  # fmt: skip
        killer = threading.Timer(limit_s, child.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            killer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        err.seek(0)
        return child.returncode, err.read().decode(), seconds, usage.ru_maxrss * 1024


def baseline(tmp_path: Path) -> tuple[float, int]:
    """(seconds, peak RSS) of `gym deploy` whose gate fails against a well-behaved champion, measured just
    before the hostile run it is compared with (the machine's load drifts)."""
    folder = project(tmp_path / "baseline")
    with HostileHub(HostileState(files=champion_files(folder))) as hub:
        code, err, seconds, peak = deploy(folder, hub, folder / "hf")
        assert not [r for r in hub.state.requests if not r.startswith("GET ")]  # read, never written
    assert code == 1 and err.startswith("error: promotion gate 'mmlu.acc >= champion' failed"), err
    return seconds, peak


@pytest.mark.parametrize("hostile", ["never answers", "alias bomb", "20 MB of metadata", "a string stderr"])
def test_gym_deploy_against_a_hostile_champion_ends_in_bounded_time_and_memory(
    tmp_path: Path, hostile: str
) -> None:
    base_seconds, base_peak = baseline(tmp_path)
    folder = project(tmp_path / "hostile")
    files = champion_files(folder)
    state = HostileState(files=files)
    if hostile == "never answers":
        state.hang.add(INFO)
        expected = (
            f"error: the Hub did not answer the champion lookup of {REPO} in time (HF_HUB_ETAG_TIMEOUT=2 s a "
            "request, 6 s in all); nothing was pushed, retry later, or raise HF_HUB_ETAG_TIMEOUT"
        )
    elif hostile == "alias bomb":
        files["README.md"] = card_with_metadata(ALIAS_BOMB)
        expected = f"error: the champion {REPO}: the metadata of its README.md is refused: its aliases expand"
    elif hostile == "a string stderr":
        files["eval_results.json"] = files["eval_results.json"].replace(
            b'"stderr": 0.04', b'"stderr": "0.04"'
        )
        expected = (
            f'error: the champion {REPO}: its eval_results.json results[0].stderr is "0.04", not a number'
        )
    else:
        files["README.md"] = card_with_metadata("notes: " + "x" * 20_000_000)
        state.unsized.add("README.md")
        expected = f"error: the champion {REPO}: its README.md is more than 1,000,000 bytes"
    with HostileHub(state) as hub:
        code, err, seconds, peak = deploy(folder, hub, folder / "hf")
    assert code == 1, err
    assert err.startswith(expected) and err.count("\n") == 1 and "Traceback" not in err, err
    assert TOKEN not in err
    assert seconds < 2 * base_seconds + 6 + 5, (seconds, base_seconds)  # 3 x HF_HUB_ETAG_TIMEOUT, and load
    assert peak < base_peak + 100 * 2**20, (peak, base_peak)  # a card and its parse, not its expansion
    assert [r.split()[0] for r in hub.state.requests] == ["GET"] * len(hub.state.requests)  # nothing pushed
    assert (folder / "out" / "eval_results.json").is_file()


def test_a_hostile_etag_or_commit_writes_nothing_anywhere(tmp_path: Path) -> None:
    """huggingface_hub's cache names a blob after the answer's ETag: ``"../../../../../escaped"`` made
    ``hf_hub_download`` write the card five folders above the cache's blobs (here: ``tmp_path``). The lookup
    reads into memory, so no ETag or commit id names a file."""
    folder = project(tmp_path / "project")
    hf_home = tmp_path / "a" / "hf"  # its blobs folder is .../a/hf/hub/models--acme--bot/blobs
    escape = '"' + "../" * 5 + 'escaped"'
    state = HostileState(files=champion_files(folder), headers={name: {"ETag": escape, "X-Repo-Commit": "../../x"}
                                                            for name in ("README.md", "eval_results.json")})  # fmt: skip
    before = {p for p in tmp_path.rglob("*")}
    with HostileHub(state) as hub:
        code, err, _, _ = deploy(folder, hub, hf_home)
    assert code == 1 and err.startswith("error: promotion gate 'mmlu.acc >= champion' failed"), err
    written = {p for p in tmp_path.rglob("*")} - before
    assert not [p for p in written if "escaped" in p.name or p.is_relative_to(hf_home)], sorted(written)
    assert json.loads((folder / "out" / "gate_results.json").read_text())["champion"]["sha"] == "c" * 40
