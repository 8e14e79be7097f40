"""A damaged ``eval_results.json`` at the gates: `gym deploy` (and the gates stage of `gym launch`, which reads
it the same way) ends with exit code 1 and one sentence naming the file and what is wrong with it, never a
traceback, whatever the damage: bytes that are not JSON, a cut file, JSON of another shape, a key of the
wrong kind, a missing key, an infinite stderr, a number of 5,000 digits, nesting 100,000 deep, a FIFO.

The shape the file may have is restated here from the format documented in :mod:`gym.eval.report`, not
taken from the code under test, so a mutation counts as damage by the documentation's word.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gym.cli import app
from gym.eval.report import EvalReport, TaskScore

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
runner = CliRunner()
TOKEN = "hf_" + "E" * 34

ROW = {"task": "mmlu", "source": "lm-eval", "metric": "acc", "filter": "none", "value": 0.7, "stderr": 0.03,
       "samples": 100, "base_value": 0.4, "delta": 0.3, "higher_is_better": True, "n_shot": 5,
       "chat_template": False, "dataset": {"id": "cais/mmlu", "config": None, "split": "test"}}  # fmt: skip
REPORT = {"format": 1, "model": "out", "base_model": "base", "lm_eval_version": "0.4.9", "num_fewshot": 5,
          "limit": 100, "batch_size": 8, "wall_seconds": {"tuned": 1.5}, "training_data": {"rows_read": 3},
          "results": [ROW]}  # fmt: skip


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def table_of(check: Any) -> Any:
    return lambda value: isinstance(value, dict) and all(v is None or check(v) for v in value.values())


# What each key may hold, as the module docstring of gym.eval.report documents it.
ROW_KINDS = {
    "task": lambda v: isinstance(v, str), "metric": lambda v: isinstance(v, str),
    "source": lambda v: isinstance(v, str), "filter": lambda v: isinstance(v, str),
    "value": lambda v: v is None or is_number(v),
    "stderr": lambda v: v is None or (is_number(v) and math.isfinite(v)),
    "samples": lambda v: v is None or is_whole(v), "base_value": lambda v: v is None or is_number(v),
    "delta": lambda v: v is None or is_number(v), "higher_is_better": lambda v: v is None or isinstance(v, bool),
    "n_shot": lambda v: v is None or is_whole(v), "chat_template": lambda v: isinstance(v, bool),
    "dataset": table_of(lambda v: isinstance(v, str)),
}  # fmt: skip
REPORT_KINDS = {
    "model": lambda v: isinstance(v, str), "results": lambda v: isinstance(v, list),
    "base_model": lambda v: v is None or isinstance(v, str), "lm_eval_version": lambda v: isinstance(v, str),
    "num_fewshot": lambda v: v is None or is_whole(v), "limit": is_whole,
    "batch_size": lambda v: v is None or is_whole(v), "wall_seconds": table_of(is_number),
    "training_data": table_of(is_number),
}  # fmt: skip
REQUIRED = {"model", "results"}, {"task", "metric", "value"}

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12))
json_values = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8,
)  # fmt: skip


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """A report Gym wrote, damaged in one way: a key of the wrong kind, a key missing, or the text cut."""
    report = json.loads(json.dumps(REPORT))
    how = draw(st.sampled_from(["report key", "row key", "missing", "cut", "not an object", "row"]))
    if how in ("report key", "row key"):
        kinds = REPORT_KINDS if how == "report key" else ROW_KINDS
        key = draw(st.sampled_from(sorted(kinds)))
        target = report if how == "report key" else report["results"][0]
        target[key] = draw(json_values.filter(lambda v: not kinds[key](v)))
    elif how == "missing":
        top = draw(st.booleans())
        key = draw(st.sampled_from(sorted(REQUIRED[0 if top else 1])))
        del (report if top else report["results"][0])[key]
    elif how == "not an object":
        return json.dumps(draw(json_values.filter(lambda v: not isinstance(v, dict)))).encode()
    elif how == "row":
        report["results"].append(draw(json_values.filter(lambda v: not isinstance(v, dict))))
    else:
        text = json.dumps(REPORT, indent=2).encode()
        return text[: draw(st.integers(min_value=0, max_value=len(text) - 1))]
    return json.dumps(report).encode()  # NaN and Infinity written as Python's json writes them


@pytest.fixture
def gated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose run `out/` is gated by a threshold (no champion: nothing leaves the machine)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"instruction": "hi", "output": "hello"}\n')
    (tmp_path / "gym.toml").write_text(
        '[project]\nname = "bot"\noutput_dir = "out"\n[model]\nname_or_path = "builtin:tiny"\n'
        '[[datasets]]\npath = "data/train.jsonl"\nformat = "alpaca"\n[eval]\ntasks = ["mmlu"]\n'
        '[eval.gates]\nrules = ["mmlu.acc >= 0.5"]\n[hub]\nrepo_id = "acme/bot"\n'
    )
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "adapter_config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    return tmp_path


def refused(content: bytes) -> str:
    """`gym deploy` on a run whose eval_results.json holds ``content``: its one line (asserted one line)."""
    results = Path("out/eval_results.json")
    results.write_bytes(content)
    result = runner.invoke(app, ["deploy", "gym.toml"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1, result.output
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert results.read_bytes() == content  # nothing lost, nothing rewritten
    assert not Path("out/gate_results.json").exists()
    return lines[0]


def names_the_file(line: str) -> bool:
    return line.startswith("error: out/eval_results.json: ") and line.endswith(
        "; run `gym eval` again to rewrite it"
    )


def test_the_undamaged_file_passes_its_gate(gated: Path) -> None:
    """The same file unharmed is read, and the gate checked: the damage is what the sentences are about."""
    report = EvalReport.from_dict(json.loads(json.dumps(REPORT)))
    assert report.results[0] == TaskScore(**{k: v for k, v in ROW.items()})
    Path("out/eval_results.json").write_text(json.dumps({**REPORT, "results": [{**ROW, "value": 0.2}]}))
    result = runner.invoke(app, ["deploy", "gym.toml"])
    assert (
        result.exit_code == 1 and "promotion gate 'mmlu.acc >= 0.5' failed (short by 0.3000)" in result.output
    )


@FUZZ
@given(content=damaged())
def test_any_damage_is_one_sentence_naming_the_file(gated: Path, content: bytes) -> None:
    assert names_the_file(refused(content))


@FUZZ
@given(content=st.binary(max_size=64))
def test_bytes_that_are_not_a_report_are_one_sentence(gated: Path, content: bytes) -> None:
    assert names_the_file(refused(content))


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "is not JSON (Expecting value at line 1, column 1)"),
        (b"\xff\xfe{}", "is not UTF-8 text"),
        (b"[]", "is a list, not an object"),
        (b'{"model": "out"}', "has no 'results'"),
        (b'{"model": "out", "results": {}}', "results is an object, not a list"),
        (b'{"model": "out", "results": ["mmlu"]}', "results[0] is text, not an object"),
        (json.dumps({**REPORT, "results": [{**ROW, "stderr": "0.03"}]}).encode(),
         'results[0].stderr is "0.03", not a number or null'),
        (json.dumps({**REPORT, "results": [{**ROW, "stderr": math.inf}]}).encode(),
         "results[0].stderr is Infinity, not a finite number"),
        (json.dumps({**REPORT, "limit": True}).encode(), "limit is true, not a whole number"),
        (json.dumps({**REPORT, "results": [{**ROW, "samples": 1.5}]}).encode(),
         "results[0].samples is 1.5, not a whole number or null"),
        (b'{"model": "out", "results": [], "limit": ' + b"9" * 5000 + b"}", "holds a number too long to be a score"),
        (b"[" * 100_000 + b"]" * 100_000, "nests too deeply to be a report"),
    ],
)  # fmt: skip
def test_each_shape_of_damage_says_what_is_wrong(gated: Path, content: bytes, reason: str) -> None:
    assert refused(content) == f"error: out/eval_results.json: {reason}; run `gym eval` again to rewrite it"


def test_a_file_too_large_or_not_a_file_is_refused_unread(gated: Path) -> None:
    big = b'{"model": "out", "results": [], "pad": "' + b"x" * 4_000_000 + b'"}'
    assert refused(big) == (
        f"error: out/eval_results.json: is {len(big):,} bytes; an eval_results.json is read only up to 4 MB; "
        "run `gym eval` again to rewrite it"
    )
    Path("out/eval_results.json").unlink()
    os.mkfifo("out/eval_results.json")  # a reader of a FIFO blocks until a writer comes: it must not read
    result = subprocess.run([sys.executable, "-m", "gym", "deploy", "gym.toml"], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: eval.gates needs scores, but {gated / 'out'} has no eval_results.json: run `gym eval` first"
    ]
