"""Training rows against the models' official chat templates, token for token.

A tokenizer carrying a model's special tokens (the built-in tokenizer with that model's BOS/EOS/PAD/UNK
and turn markers added as special tokens, a post-processor that adds BOS as the real ones do, and the
official ``chat_template``) goes through Gym's data preparation (``prepare_data``). Each kept row must
decode to exactly what transformers renders with the official template, BOS and EOS included and BOS
once; ``model.template = "auto"`` (the official template on the tokenizer, masked by rendering
prefixes) must give the same ``input_ids`` and ``labels`` as the matching name (masked by its
generation markers). Official templates are read in place from ../shared/fixtures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym.config import load_config
from gym.data.prepare import prepare_data
from gym.data.templates import IGNORE_INDEX

pytestmark = pytest.mark.slow

LLAMA3 = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"]
# name -> (official file and special-token entry, the model's turn markers that are special tokens)
FAMILIES = {
    "gemma": ("gemma", ["<start_of_turn>", "<end_of_turn>"]),
    "phi3": ("phi3", ["<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]),
    "mistral": ("mistral", ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]"]),
    "mistral-v0.2": ("mistral_v0.2", ["[INST]", "[/INST]"]),
    "llama3": ("llama3.0", LLAMA3),
    "llama3.1": ("llama3", LLAMA3),
    "llama2": ("llama2", ["[INST]", "[/INST]"]),
    "qwen2.5": ("qwen2.5", ["<|im_start|>"]),
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            },
        },
    }
]


def turn(role: str, content: str, **extra) -> dict:
    return {"role": role, "content": content, **extra}


SYSTEM = turn("system", "Réponds brièvement.")
ROWS = [
    {"messages": [turn("user", "Ça va ? 🙂"), turn("assistant", "Oui — très bien, merci.")]},
    {
        "messages": [
            turn("user", "Reverse: a b c"),
            turn("assistant", "c b a"),
            turn("user", "Now 1 2 3"),
            turn("assistant", "3 2 1"),
        ]
    },
]
WITH_SYSTEM = [{"messages": [SYSTEM, *row["messages"]]} for row in ROWS]
TOOL_ROW = {
    "messages": [
        turn("user", "What is 2+3?"),
        turn(
            "assistant",
            "",
            tool_calls=[{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}],
        ),
        turn("tool", "5"),
        turn("assistant", "It is 5."),
    ],
    "tools": TOOLS,
}


def rows_for(name: str) -> list[dict]:
    rows = ROWS if name == "gemma" else [*ROWS, *WITH_SYSTEM]  # official Gemma refuses a system message
    return [*rows, TOOL_ROW] if name in ("llama3.1", "qwen2.5") else rows


@pytest.fixture(scope="module")
def builtin_folder() -> Path:
    """The built-in tokenizer's folder, from the cache that ``builtin:tiny`` loads from (built once)."""
    from gym.model.builtin import ensure_builtin

    return ensure_builtin("builtin:tiny")


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "gym-cache"))


def model_tokenizer(folder: Path, jinja: str, special: dict[str, str], markers: list[str]):
    """The built-in tokenizer dressed as the model's: its special tokens, BOS added as its own tokenizer adds it."""
    from tokenizers import AddedToken, processors
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.add_special_tokens(special)
    tokenizer.add_tokens([AddedToken(marker, special=True, normalized=False) for marker in markers])
    if tokenizer.bos_token is not None:
        bos = (tokenizer.bos_token, tokenizer.bos_token_id)
        tokenizer.backend_tokenizer.post_processor = processors.Sequence(
            [
                processors.ByteLevel(trim_offsets=False),
                processors.TemplateProcessing(
                    single=f"{bos[0]} $A", pair=f"{bos[0]} $A $B", special_tokens=[bos]
                ),
            ]
        )
        assert tokenizer("x")["input_ids"][0] == tokenizer.bos_token_id  # as a real Llama/Gemma tokenizer
    tokenizer.chat_template = jinja
    return tokenizer


def prepared_rows(folder: Path, rows: list[dict], template: str, tokenizer) -> list[dict]:
    (folder / "rows.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    (folder / "gym.toml").write_text(
        f'[project]\nname = "t"\n[model]\nname_or_path = "builtin:tiny"\ntemplate = "{template}"\n'
        '[[datasets]]\npath = "rows.jsonl"\nformat = "openai"\n[train]\nmax_length = 1024\n'
    )
    prepared = prepare_data(load_config(folder / "gym.toml"), tokenizer, use_cache=False)
    assert sum(report.rows_bad for report in prepared.reports) == 0
    return sorted(prepared.train, key=lambda row: row["index"])


@pytest.mark.parametrize("name", list(FAMILIES))
def test_prepared_rows_decode_to_the_official_rendering(
    name: str, fixtures_dir: Path, builtin_folder: Path, tmp_path: Path
) -> None:
    from transformers.utils.chat_template_utils import render_jinja_template

    official_dir = fixtures_dir / "official_chat_templates"
    if not official_dir.is_dir():
        pytest.skip(
            f"official chat templates not found at {official_dir} (the project's shared/fixtures folder)"
        )
    key, markers = FAMILIES[name]
    entry = json.loads((official_dir / "special_tokens.json").read_text(encoding="utf-8"))[key]
    special = {k: v for k, v in entry.items() if k.endswith("_token") and v is not None}
    jinja = (official_dir / f"{key}.jinja").read_text(encoding="utf-8")
    tokenizer = model_tokenizer(builtin_folder, jinja, special, markers)
    rows = rows_for(name)

    named = prepared_rows(tmp_path, rows, name, tokenizer)
    assert tokenizer.chat_template != jinja  # the named template was put on the tokenizer
    tokenizer.chat_template = jinja
    auto = prepared_rows(tmp_path, rows, "auto", tokenizer)

    assert len(named) == len(auto) == len(rows)
    for source, row, auto_row in zip(rows, named, auto, strict=True):
        official = render_jinja_template(
            [source["messages"]], tools=source.get("tools"), chat_template=jinja, **special
        )[0][0]
        ids = list(row["input_ids"])
        assert tokenizer.decode(ids, skip_special_tokens=False) == official
        for kind in ("bos", "eos"):  # each written once where the template writes it, never added again
            token = special.get(f"{kind}_token")
            if token is not None:
                assert ids.count(getattr(tokenizer, f"{kind}_token_id")) == official.count(token)
        if official.startswith(special.get("bos_token") or "\0"):
            assert ids[0] == tokenizer.bos_token_id and ids[1] != tokenizer.bos_token_id
        if official.endswith(special["eos_token"]):
            assert ids[-1] == tokenizer.eos_token_id
        assert (ids, list(row["labels"])) == (list(auto_row["input_ids"]), list(auto_row["labels"]))
        trained = [token for token, label in zip(ids, row["labels"], strict=True) if label != IGNORE_INDEX]
        answers = [m for m in source["messages"] if m["role"] == "assistant" and m["content"]]
        assert all(m["content"] in tokenizer.decode(trained) for m in answers)
        assert tokenizer.bos_token_id not in trained and len(trained) < len(ids)
