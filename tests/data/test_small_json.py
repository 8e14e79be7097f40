"""Small JSON files are read with the json module, and give exactly the examples `datasets` gives.

`datasets` builds an Arrow table (unifying every row's keys and nested shapes) before Gym converts
the rows; the json module hands over the rows as written. Both must reach the converters as the same
examples, for every format, or the cache key would no longer describe what is trained.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gym.data.sources as sources
from gym.config import load_config
from gym.data.loading import load_examples, load_local
from gym.data.report import DataError
from gym.data.sources import SalvagedRows

CASES = {  # fixture file: (format, extra dataset keys)
    "alpaca_en_demo.json": ("alpaca", ""),
    "glaive_toolcall_en_demo.json": ("sharegpt", 'columns = { messages = "conversations", tools = "tools" }'),
    "dpo_en_demo.json": ("preference", ""),
}


def _config(folder: Path, data: Path, fmt: str, extra: str = "") -> object:
    (folder / "gym.toml").write_text(
        '[project]\nname = "t"\n[model]\nname_or_path = "builtin:tiny"\ntemplate = "chatml"\n'
        f'[[datasets]]\npath = "{data}"\nformat = "{fmt}"\nmax_bad_fraction = 1.0\n{extra}\n'
        + ('[train]\nmethod = "dpo"\n' if fmt == "preference" else ""),
        encoding="utf-8",
    )
    return load_config(folder / "gym.toml")


def _both_ways(config, monkeypatch: pytest.MonkeyPatch):
    dataset = config.datasets[0]
    assert isinstance(load_local(dataset, config.base_dir), SalvagedRows)  # the json module read it
    fast = load_examples(dataset, config.base_dir)
    monkeypatch.setattr(sources, "SMALL_JSON_BYTES", 0)  # now every file is "large": `datasets` reads it
    assert not isinstance(load_local(dataset, config.base_dir), SalvagedRows)
    return fast, load_examples(dataset, config.base_dir)


@pytest.mark.parametrize("name", list(CASES))
def test_fixture_files_give_the_examples_datasets_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixtures_dir: Path, name: str
) -> None:
    fmt, extra = CASES[name]
    data = fixtures_dir / "llamafactory-data" / name
    (fast, fast_report), (slow, slow_report) = _both_ways(_config(tmp_path, data, fmt, extra), monkeypatch)
    assert len(fast) == len(slow) > 0
    assert [e.messages for e in fast] == [e.messages for e in slow]
    assert [(e.tools, e.chosen, e.rejected, e.index) for e in fast] == [
        (e.tools, e.chosen, e.rejected, e.index) for e in slow
    ]
    assert (fast_report.rows_read, fast_report.rows_kept) == (slow_report.rows_read, slow_report.rows_kept)


def test_rows_with_different_keys_and_shapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`datasets` fills a missing key with None and widens nested structs; the rows as written must agree."""
    rows = [
        {"instruction": "Name a colour.", "output": "Red."},
        {"instruction": "Add", "input": "2 and 3", "output": "5", "system": "Be brief."},
        {"instruction": "Greet", "input": "", "output": "Hi", "history": [["hello", "hey"]]},
        {"instruction": "", "output": "no question"},  # a bad row both ways
    ]
    data = tmp_path / "rows.json"
    data.write_text(json.dumps(rows), encoding="utf-8")
    (fast, fast_report), (slow, slow_report) = _both_ways(_config(tmp_path, data, "alpaca"), monkeypatch)
    assert [e.messages for e in fast] == [e.messages for e in slow]
    assert len(fast) == 3
    assert fast_report.bad == slow_report.bad


def test_not_an_array_of_objects_is_left_to_datasets(tmp_path: Path) -> None:
    """JSON Lines named .json, and a broken file, read (or fail in one sentence) as `datasets` words it."""
    lines = tmp_path / "lines.json"
    lines.write_text(
        '{"instruction": "a", "output": "b"}\n{"instruction": "c", "output": "d"}\n', encoding="utf-8"
    )
    config = _config(tmp_path, lines, "alpaca")
    assert not isinstance(load_local(config.datasets[0], config.base_dir), SalvagedRows)
    examples, _ = load_examples(config.datasets[0], config.base_dir)
    assert len(examples) == 2
    broken = tmp_path / "broken.json"
    broken.write_text('[{"instruction": "a", "output": "b"},', encoding="utf-8")
    config = _config(tmp_path, broken, "alpaca")
    with pytest.raises(DataError, match=r"dataset '.*': cannot read JSON file .*broken\.json"):
        load_examples(config.datasets[0], config.base_dir)
