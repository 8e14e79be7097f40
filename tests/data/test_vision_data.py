"""Image rows: mllm_demo, sharegpt and OpenAI image parts prepared for a vision-language model; bad
images and text-only models refused with a sentence naming the file and row."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym.cli import app
from gym.config import load_config
from gym.data.prepare import prepare_data
from gym.data.report import DataError
from gym.data.templates import IGNORE_INDEX
from gym.model.loading import load_tokenizer
from gym.model.vision import model_vision

pytestmark = pytest.mark.slow
IMAGE_TOKENS = 16  # builtin:tiny-vl: (32 / 8) ** 2


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "gym-cache"))


def _png(colour: tuple[int, int, int], size: tuple[int, int] = (20, 12)) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def _config(folder: Path, data: str, *, model: str = "builtin:tiny-vl", fmt: str = "openai", extra: str = ""):
    (folder / "gym.toml").write_text(
        f"""
[project]
name = "vl"
[model]
name_or_path = "{model}"
template = "chatml"
[[datasets]]
path = "{data}"
format = "{fmt}"
{extra}
[train]
method = "sft"
max_length = 512
"""
    )
    return load_config(folder / "gym.toml")


def _image_id(tokenizer) -> int:
    return tokenizer.convert_tokens_to_ids("<image>")


def test_mllm_demo_loads_with_its_images_and_masks_answers_only(tmp_path: Path, fixtures_dir: Path) -> None:
    data = fixtures_dir / "llamafactory-data" / "mllm_demo.json"
    config = _config(tmp_path, str(data))
    tokenizer = load_tokenizer(config)
    prepared = prepare_data(config, tokenizer, vision=model_vision(config))
    rows = json.loads(data.read_text())
    assert len(prepared.train) == len(rows) == 6
    image_id = _image_id(tokenizer)
    for row, source in zip(prepared.train, rows, strict=True):
        assert [Path(p).name for p in row["images"]] == [Path(p).name for p in source["images"]]
        assert all(Path(p).is_absolute() and Path(p).is_file() for p in row["images"])
        images = [i for i, t in enumerate(row["input_ids"]) if t == image_id]
        assert len(images) == IMAGE_TOKENS * len(source["images"])
        assert all(row["labels"][i] == IGNORE_INDEX for i in images), "an image token carries loss"
        trained = tokenizer.decode(
            [t for t, lab in zip(row["input_ids"], row["labels"], strict=True) if lab != IGNORE_INDEX]
        )
        answers = [m["content"] for m in source["messages"] if m["role"] == "assistant"]
        assert all(answer in trained for answer in answers)
        assert not any(
            m["content"].replace("<image>", "") in trained for m in source["messages"] if m["role"] == "user"
        )
        assert row["length"] == len(row["input_ids"])


def test_openai_image_parts_and_sharegpt_images_column(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "red.png").write_bytes(_png((255, 0, 0)))
    url = "data:image/png;base64," + base64.b64encode(_png((0, 0, 255))).decode()
    openai_rows = [
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": url}},
                        {"type": "text", "text": "Colour?"},
                        {"type": "image", "image": "img/red.png"},
                    ],
                },
                {"role": "assistant", "content": "blue then red"},
            ]
        }
    ]
    (tmp_path / "openai.jsonl").write_text("".join(json.dumps(r) + "\n" for r in openai_rows))
    config = _config(tmp_path, "openai.jsonl")
    tokenizer = load_tokenizer(config)
    row = prepare_data(config, tokenizer, vision=model_vision(config)).train[0]
    assert len(row["images"]) == 2 and row["images"][1].endswith("red.png")
    assert sum(t == _image_id(tokenizer) for t in row["input_ids"]) == 2 * IMAGE_TOKENS

    sharegpt = [
        {
            "conversations": [{"from": "human", "value": "What colour?"}, {"from": "gpt", "value": "red"}],
            "images": ["img/red.png"],
        }
    ]
    (tmp_path / "sharegpt.json").write_text(json.dumps(sharegpt))
    config = _config(tmp_path, "sharegpt.json", fmt="sharegpt")
    row = prepare_data(config, tokenizer, vision=model_vision(config)).train[0]
    # no <image> marker in the text: the image goes before the first user message
    ids = row["input_ids"]
    first = ids.index(_image_id(tokenizer))
    assert ids[first : first + IMAGE_TOKENS] == [_image_id(tokenizer)] * IMAGE_TOKENS
    assert "What colour?" in tokenizer.decode(ids[first + IMAGE_TOKENS :])


def _bad_rows_dataset(folder: Path) -> Path:
    (folder / "ok.png").write_bytes(_png((0, 255, 0)))
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not an image")
    (folder / "big.png").write_bytes(_png((0, 0, 0), size=(400, 300)))

    def row(text: str, images: list[str]) -> dict:
        return {
            "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "green"}],
            "images": images,
        }

    rows = [row("<image>Colour?", ["ok.png"])] * 6 + [
        row("<image>Colour?", ["broken.png"]),
        row("<image>Colour?", ["missing.png"]),
        row("<image><image>Colour?", ["ok.png"]),
        row("<image>Colour?", ["big.png"]),
    ]
    (folder / "rows.json").write_text(json.dumps(rows))
    return folder / "rows.json"


def test_bad_images_are_counted_with_file_and_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gym.data.vision as vision

    monkeypatch.setattr(vision, "MAX_PIXELS", 100_000)  # big.png is 120,000 pixels
    _bad_rows_dataset(tmp_path)
    config = _config(tmp_path, "rows.json", extra="max_bad_fraction = 0.5")
    prepared = prepare_data(config, load_tokenizer(config), vision=model_vision(config))
    assert len(prepared.train) == 6
    report = prepared.reports[0]
    assert report.bad == {
        "unreadable image": 1,
        "missing image file": 1,
        "image count mismatch": 1,
        "image too large": 1,
    }
    by_reason = {reason: examples[0] for reason, examples in report.examples.items()}
    assert by_reason["unreadable image"].index == 6 and "broken.png" in by_reason["unreadable image"].detail
    assert (
        by_reason["missing image file"].index == 7 and "missing.png" in by_reason["missing image file"].detail
    )
    assert by_reason["image count mismatch"].index == 8
    assert "2 <image> markers but 1 images" in by_reason["image count mismatch"].detail
    assert by_reason["image too large"].index == 9 and "400x300" in by_reason["image too large"].detail

    strict = _config(tmp_path, "rows.json", extra="max_bad_fraction = 0.1")
    with pytest.raises(DataError) as error:
        prepare_data(strict, load_tokenizer(strict), use_cache=False, vision=model_vision(strict))
    message = str(error.value)
    assert "4 of 10 rows are bad" in message and "rows.json row" in message


def test_text_only_model_refuses_image_rows_at_validate_and_preview(tmp_path: Path) -> None:
    (tmp_path / "red.png").write_bytes(_png((255, 0, 0)))
    rows = [
        {
            "messages": [
                {"role": "user", "content": "<image>Colour?"},
                {"role": "assistant", "content": "red"},
            ],
            "images": ["red.png"],
        }
    ]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    _config(tmp_path, "rows.json", model="builtin:tiny")
    runner = CliRunner()
    for command in (["validate"], ["data", "preview"]):
        result = runner.invoke(app, [*command, str(tmp_path / "gym.toml")])
        assert result.exit_code == 1, result.output
        assert "has rows with images" in result.output or "rows have images" in result.output
        assert "'builtin:tiny' is a text-only model" in result.output
        assert "Traceback" not in result.output


def test_preview_shows_image_sizes_and_image_tokens(tmp_path: Path) -> None:
    (tmp_path / "red.png").write_bytes(_png((255, 0, 0), size=(40, 30)))
    rows = [
        {
            "messages": [
                {"role": "user", "content": "<image>Colour?"},
                {"role": "assistant", "content": "red"},
            ],
            "images": ["red.png"],
        }
    ]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    _config(tmp_path, "rows.json")
    result = CliRunner().invoke(app, ["data", "preview", str(tmp_path / "gym.toml")], terminal_width=120)
    assert result.exit_code == 0, result.output
    assert "1 image(s), 16 image tokens" in result.output
    assert "red.png 40x30" in result.output
    assert "<image ×16>" in result.output


def test_image_rows_are_found_from_the_arrow_column() -> None:
    """expand_images skips text-only data by reading the images column once, whatever Arrow typed it."""
    from datasets import Dataset

    from gym.data.vision import has_image_rows

    assert has_image_rows(Dataset.from_dict({"images": [[], ["a.png"], []]}))
    assert not has_image_rows(Dataset.from_dict({"images": [[], []]}))  # list<null>
    assert not has_image_rows(Dataset.from_dict({"images": [None, None]}))  # null
    assert not has_image_rows(Dataset.from_dict({"images": [["a.png"]]}).select([]))  # no rows


def test_image_rows_prepared_without_the_model_layer_are_refused_not_dropped(tmp_path: Path) -> None:
    """Data never loads a processor itself: a caller that passes no ``vision`` gets the text-only refusal."""
    (tmp_path / "red.png").write_bytes(_png((255, 0, 0)))
    rows = [{"messages": [{"role": "user", "content": "<image>Colour?"}, {"role": "assistant", "content": "red"}],
             "images": ["red.png"]}]  # fmt: skip
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    config = _config(tmp_path, "rows.json")
    with pytest.raises(DataError, match=r"1 rows have images \(first: row 0\)"):
        prepare_data(config, load_tokenizer(config), use_cache=False)
    assert model_vision(config).known() is True  # the model reads images: only the caller left it out


def test_a_copied_project_gets_its_own_image_paths_not_the_cached_ones(tmp_path: Path) -> None:
    """The same rows in another folder hash alike, but the prepared rows hold absolute image paths: the
    copy must get paths into its own folder, also once the first folder is gone."""
    import shutil

    first, second = tmp_path / "first", tmp_path / "second"
    (first / "images").mkdir(parents=True)
    (first / "images" / "red.png").write_bytes(_png((220, 30, 30)))
    row = {"messages": [{"role": "user", "content": [{"type": "image", "image": "images/red.png"},
                                                     {"type": "text", "text": "Colour?"}]},
                        {"role": "assistant", "content": "red"}]}  # fmt: skip
    (first / "train.jsonl").write_text(json.dumps(row) + "\n")
    config = _config(first, "train.jsonl")
    tokenizer = load_tokenizer(config)
    assert prepare_data(config, tokenizer, vision=model_vision(config)).train[0]["images"] == [
        str(first / "images" / "red.png")
    ]
    shutil.copytree(first, second)
    shutil.rmtree(first)
    copied = _config(second, "train.jsonl")
    (image,) = prepare_data(copied, tokenizer, vision=model_vision(copied)).train[0]["images"]
    assert image == str(second / "images" / "red.png") and Path(image).is_file()
