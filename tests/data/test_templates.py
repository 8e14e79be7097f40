"""Chat templates: the registry, byte-identity with the models' official Jinja, loss masks, saving.

The official templates (each model's ``chat_template`` from its tokenizer_config.json, with its special
tokens in special_tokens.json) are read in place from ../shared/fixtures/official_chat_templates and
rendered as transformers renders them (``render_jinja_template``, the function under
``apply_chat_template``); Gym's named templates are rendered through ``render_chat``, the function
that builds training rows. Where the official template refuses a conversation, Gym's refuses too, except
for gemma's one documented extension (a system message goes before the first user turn).

chatml, vicuna and alpaca are generic formats without an official model template: they are compared
with the chujiezheng collection in ../shared/fixtures/chat_templates, which documents their use as
``open(f).read().replace('    ', '').replace('\\n', '')`` (its README).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jinja2 import TemplateError

from gym.config.sections import NAMED_TEMPLATES
from gym.data.templates import (
    IGNORE_INDEX,
    TEMPLATES,
    apply_template,
    get_template,
    render_chat,
    tokenize_with_mask,
)

pytestmark = pytest.mark.slow

# Each named template and the official template (and special-token entry) it must reproduce.
OFFICIAL = {
    "qwen3": "qwen3",
    "qwen2.5": "qwen2.5",
    "llama3": "llama3.0",
    "llama3.1": "llama3",
    "llama3.2": "llama3.2",
    "llama3.3": "llama3",
    "llama2": "llama2",
    "mistral": "mistral",
    "mistral-v0.3": "mistral",
    "mistral-v0.2": "mistral_v0.2",
    "mistral-v0.1": "mistral_v0.2",
    "mistral-legacy": "mistral_v0.2_legacy",
    "gemma": "gemma",
    "phi3": "phi3",
    "phi3.5": "phi3.5",
    "zephyr": "zephyr",
}
TOOL_TEMPLATES = ("qwen3", "qwen2.5", "llama3.1", "llama3.2", "llama3.3", "mistral", "mistral-v0.3")
GENERIC_FILES = {"chatml": "chatml.jinja", "vicuna": "vicuna.jinja", "alpaca": "alpaca.jinja"}
# The special tokens each model's tokenizer passes to its template (as in special_tokens.json), for the
# tests that run without the fixtures.
SPECIAL = {
    "chatml": {"eos_token": "<|im_end|>"},
    "qwen3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "qwen2.5": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    **dict.fromkeys(
        ("llama3", "llama3.1", "llama3.2", "llama3.3"),
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    ),
    **dict.fromkeys(
        ("llama2", "mistral", "mistral-v0.3", "mistral-v0.2", "mistral-v0.1", "mistral-legacy"),
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    ),
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"},
    **dict.fromkeys(
        ("phi3", "phi3.5"),
        {
            "bos_token": "<s>",
            "eos_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>",
            "unk_token": "<unk>",
        },
    ),
    "zephyr": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "vicuna": {"bos_token": "<s>", "eos_token": "</s>"},
    "alpaca": {"bos_token": "<s>", "eos_token": "</s>"},
}


def msg(role: str, content: str, **extra) -> dict:
    return {"role": role, "content": content, **extra}


def call(name: str, arguments, **extra) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}, **extra}


SYS = msg("system", "You are terse.")
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
BATTERY: dict[str, tuple[list[dict], list[dict] | None]] = {
    "single": ([msg("user", "Hi"), msg("assistant", "Hello!")], None),
    "system": ([SYS, msg("user", "Hi"), msg("assistant", "Hello!")], None),
    "multi": (
        [
            msg("user", "Reverse: a b c"),
            msg("assistant", "c b a"),
            msg("user", "x y?"),
            msg("assistant", "y x"),
        ],
        None,
    ),
    "system-open": ([SYS, msg("user", "Hi"), msg("assistant", "Hello!"), msg("user", "Thanks")], None),
    "prompt-only": ([msg("user", "Hi")], None),
    "whitespace": ([msg("user", "  padded \n"), msg("assistant", "\n  spaced answer  \n")], None),
    "unicode": ([SYS, msg("user", "Line 1\nLine 2 — ünï 🙂"), msg("assistant", 'Ça {"json": [1, 2]}')], None),
    "two-users": ([msg("user", "a"), msg("user", "b")], None),
    "late-system": ([msg("user", "a"), msg("assistant", "b"), SYS, msg("user", "c")], None),
    "tools-declared": ([SYS, msg("user", "Hi"), msg("assistant", "Hello!")], TOOLS),
    "tool-roundtrip": (
        [
            SYS,
            msg("user", "What is 2+3?"),
            msg("assistant", "", tool_calls=[call("add", {"a": 2, "b": 3})]),
            msg("tool", "5", name="add"),
            msg("assistant", "It is 5."),
        ],
        TOOLS,
    ),
    "parallel-tools": (
        [
            msg("user", "2+3 and 4+4?"),
            msg(
                "assistant",
                "Both.",
                tool_calls=[call("add", {"a": 2, "b": 3}), call("add", '{"a": 4, "b": 4}')],
            ),
            msg("tool", "5"),
            msg("tool", "8"),
            msg("assistant", "5 and 8.", reasoning_content="Two sums."),
        ],
        TOOLS,
    ),
    "reasoning": (
        [
            msg("user", "2+2?"),
            msg("assistant", "4", reasoning_content="Two and two."),
            msg("user", "3+3?"),
            msg("assistant", "6", reasoning_content="\nThree and three.\n"),
        ],
        None,
    ),
    "inline-think": ([msg("user", "Hm?"), msg("assistant", "<think>\nPonder.\n</think>\n\nAnswer.")], None),
}
VARIANTS = [{}, {"enable_thinking": False}, {"enable_thinking": True}]

# The conversations every official template is compared on, each with and without a generation prompt.
OFFICIAL_CASES: dict[str, tuple[list[dict], list[dict] | None]] = {
    "system-one-exchange": ([SYS, msg("user", "Hi"), msg("assistant", "Hello!")], None),
    "exchanges": (
        [m for k in range(3) for m in (msg("user", f"Question {k}?"), msg("assistant", f"Answer {k}."))],
        None,
    ),
    "system-exchanges": (
        [SYS, *[m for k in range(3) for m in (msg("user", f"Q{k}"), msg("assistant", f"A{k}"))]],
        None,
    ),
    "unicode": (
        [msg("user", "Line 1\nLine 2 — ünï 🙂 你好"), msg("assistant", 'Ça {"json": [1, 2]} — ok 👍')],
        None,
    ),
    "system-unicode": (
        [msg("system", "Réponds en français."), msg("user", "Ça va ?"), msg("assistant", "Oui.")],
        None,
    ),
    "prompt-after-turns": ([msg("user", "Hi"), msg("assistant", "Hello!"), msg("user", "And now?")], None),
    "system-prompt-after-turns": (
        [SYS, msg("user", "Hi"), msg("assistant", "Hello!"), msg("user", "And now?")],
        None,
    ),
    "padded": (
        [msg("system", "  Be brief. \n"), msg("user", "  padded \n"), msg("assistant", "\n answer  \n")],
        None,
    ),
    "empty-system": ([msg("system", ""), msg("user", "Hi"), msg("assistant", "Hello!")], None),
    "tool-call-and-result": (
        [
            SYS,
            msg("user", "What is 2+3?"),
            msg("assistant", "", tool_calls=[call("add", {"a": 2, "b": 3}, id="call00001")]),
            msg("tool", "5", name="add", tool_call_id="call00001"),
            msg("assistant", "It is 5."),
            msg("user", "And 4+4?"),
        ],
        TOOLS,
    ),
    "two-users": ([msg("user", "a"), msg("user", "b")], None),
    "late-system": ([msg("user", "a"), msg("assistant", "b"), SYS, msg("user", "c")], None),
    "assistant-first": ([msg("assistant", "Hi!"), msg("user", "Hello")], None),
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """The built-in tokenizer (ChatML template, ``<|im_end|>`` EOS, no BOS), built once per module."""
    from transformers import AutoTokenizer

    from gym.model.builtin import ensure_builtin

    return AutoTokenizer.from_pretrained(
        ensure_builtin("builtin:tiny", root=tmp_path_factory.mktemp("cache"))
    )


def official(fixtures_dir: Path, name: str) -> tuple[str, dict[str, str]]:
    """The official Jinja for a named template, and the special tokens its tokenizer passes (set ones only)."""
    folder = fixtures_dir / "official_chat_templates"
    if not folder.is_dir():
        pytest.skip(f"official chat templates not found at {folder} (the project's shared/fixtures folder)")
    key = OFFICIAL[name]
    tokens = json.loads((folder / "special_tokens.json").read_text(encoding="utf-8"))[key]
    special = {k: v for k, v in tokens.items() if k.endswith("_token") and v is not None}
    return (folder / f"{key}.jinja").read_text(encoding="utf-8"), special


def transformers_outcome(jinja: str, messages, tools, **kwargs) -> str | type:
    """The official rendering, as ``apply_chat_template(tokenize=False)`` renders it, or the refusal's type."""
    from transformers.utils.chat_template_utils import render_jinja_template

    try:
        return render_jinja_template([messages], tools=tools, chat_template=jinja, **kwargs)[0][0]
    except Exception as error:  # compare refusals too
        return type(error)


def outcome(jinja: str, messages, tools, **kwargs) -> str | type:
    """Gym's rendering (the training rows' path), or the exception type when the template refuses the input."""
    try:
        return render_chat(None, messages, jinja, tools=tools, **kwargs)
    except Exception as error:  # compare refusals too
        return type(error)


def folded_system(messages: list[dict]) -> list[dict]:
    """Gemma's documented extension: a system message's text and a blank line open the first user turn."""
    if not messages or messages[0]["role"] != "system":
        return messages
    system, first, *rest = messages
    return [{**first, "content": system["content"].strip() + "\n\n" + first["content"]}, *rest]


def test_registry_is_exactly_the_configurable_names() -> None:
    assert tuple(TEMPLATES) == NAMED_TEMPLATES
    assert set(OFFICIAL) | set(GENERIC_FILES) == set(NAMED_TEMPLATES)
    for name, template in TEMPLATES.items():
        assert (
            template.name == name and template.jinja.strip() and template.end_of_turn in template.stop_strings
        )


@pytest.mark.parametrize("name", list(OFFICIAL))
def test_named_template_renders_the_official_template_byte_for_byte(name: str, fixtures_dir: Path) -> None:
    theirs, special = official(fixtures_dir, name)
    ours = TEMPLATES[name].jinja
    dated = [{}, {"date_string": "03 Dec 2026"}] if name.startswith("llama3.") else [{}]
    rendered, mismatches = set(), []
    for case, (messages, tools) in OFFICIAL_CASES.items():
        for generation in (False, True):
            for variant in dated:
                kwargs = {**special, **variant, "add_generation_prompt": generation}
                expected = transformers_outcome(theirs, messages, tools, **kwargs)
                got = outcome(ours, messages, tools, **kwargs)
                if name == "gemma" and messages[0]["role"] == "system" and not isinstance(expected, str):
                    expected = transformers_outcome(theirs, folded_system(messages), tools, **kwargs)
                if isinstance(expected, str):
                    rendered.add(case)
                if got != expected:
                    mismatches.append(f"{case} gen={generation} {variant}:\n{expected!r}\n{got!r}")
    assert not mismatches, "\n".join(mismatches)
    required = {"exchanges", "unicode", "prompt-after-turns"}
    if name != "mistral-legacy":  # the one official template without a system role
        required.add("system-one-exchange")
    if name in TOOL_TEMPLATES:
        required.add("tool-call-and-result")
    assert required <= rendered  # the official template really rendered these (not two refusals)


def test_gemma_starts_with_bos_and_phi3_ends_with_eos() -> None:
    """The two differences from the official templates that silently changed training rows."""
    exchange = [msg("user", "Hi"), msg("assistant", "Hello!")]
    gemma = render_chat(None, exchange, TEMPLATES["gemma"].jinja, **SPECIAL["gemma"])
    assert gemma == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
    phi3 = render_chat(None, exchange, TEMPLATES["phi3"].jinja, **SPECIAL["phi3"])
    assert phi3 == "<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n<|endoftext|>"


@pytest.mark.parametrize("name", list(GENERIC_FILES))
def test_generic_template_renders_like_the_collection(name: str, fixtures_dir: Path) -> None:
    text = (fixtures_dir / "chat_templates" / GENERIC_FILES[name]).read_text(encoding="utf-8")
    theirs = text if "{%-" in text else text.replace("    ", "").replace("\n", "")
    ours = TEMPLATES[name].jinja
    rendered, mismatches = 0, []
    for case, (messages, tools) in BATTERY.items():
        for generation in (True, False):
            kwargs = {**SPECIAL[name], "add_generation_prompt": generation}
            expected = outcome(theirs, messages, tools, **kwargs)
            got = outcome(ours, messages, tools, **kwargs)
            rendered += isinstance(expected, str)
            if got != expected:
                mismatches.append(f"{case} gen={generation}:\n{expected!r}\n{got!r}")
    assert not mismatches, "\n".join(mismatches)
    assert rendered >= 10  # the battery really exercised the template


@pytest.mark.parametrize("name", ["qwen3", "chatml", "auto"])
def test_render_chat_is_apply_chat_template(tokenizer, name: str) -> None:
    """Same text as ``apply_chat_template``: same Jinja environment, same special-token variables."""
    messages, tools = BATTERY["tool-roundtrip"] if name == "qwen3" else BATTERY["multi"]
    jinja = None if name == "auto" else TEMPLATES[name].jinja
    hf = tokenizer.apply_chat_template(messages, chat_template=jinja, tools=tools, tokenize=False)
    assert render_chat(tokenizer, messages, jinja, tools=tools) == hf


@pytest.mark.parametrize("name", NAMED_TEMPLATES)
def test_named_templates_render_outside_the_sandbox_exactly_as_transformers(name: str) -> None:
    """Gym's own templates skip the Jinja sandbox (gym/data/templates/trusted.py): same text, same
    generation spans and same refusals as transformers' sandboxed ``render_jinja_template``."""
    from transformers.utils.chat_template_utils import render_jinja_template

    from gym.data.templates.render import render_chat_generation
    from gym.data.templates.trusted import is_trusted

    jinja = TEMPLATES[name].jinja
    assert is_trusted(jinja) and not is_trusted(jinja + " ")
    compared = 0
    for case, (messages, tools) in BATTERY.items():
        for generation in (True, False):
            for variant in VARIANTS:
                kwargs = {**SPECIAL[name], **variant}
                try:
                    texts, spans = render_jinja_template(
                        [messages], tools=tools, chat_template=jinja, return_assistant_tokens_mask=True,
                        add_generation_prompt=generation, **kwargs,
                    )  # fmt: skip
                    expected: object = (texts[0], [tuple(span) for span in spans[0]])
                except Exception as error:
                    expected = type(error)
                try:
                    got: object = render_chat_generation(None, messages, jinja, tools, generation, **kwargs)
                except Exception as error:
                    got = type(error)
                assert got == expected, f"{name} {case} gen={generation} {variant}"
                compared += isinstance(expected, tuple) and bool(expected[1])
    assert compared >= 10  # generation spans really compared, not only refusals


def labelled_spans(tokenizer, input_ids: list[int], labels: list[int]) -> list[str]:
    """The decoded text of each contiguous run of loss-carrying tokens."""
    runs: list[list[int]] = [[]]
    for token, label in zip(input_ids, labels, strict=True):
        assert label in (IGNORE_INDEX, token)
        if label != IGNORE_INDEX:
            runs[-1].append(token)
        elif runs[-1]:
            runs.append([])
    return [tokenizer.decode(run) for run in runs if run]


# How each template writes an answer after its generation prompt: leading text, and text before the
# end of turn (llama2 writes ' answer </s>'; mistral/vicuna ' answer</s>'; mistral-legacy 'answer</s>').
LEAD = dict.fromkeys(("llama2", "mistral", "mistral-v0.3", "mistral-v0.2", "mistral-v0.1", "vicuna"), " ")
GAP = {"llama2": " "}


@pytest.mark.parametrize("name", [*NAMED_TEMPLATES, "auto"])
@pytest.mark.parametrize("system", [False, True], ids=["no-system", "system"])
def test_masks_cover_exactly_the_answers_and_their_end_of_turn(tokenizer, name: str, system: bool) -> None:
    answers = ["c b a", "It is 4.", "Done!"]
    messages = [SYS] if system else []
    for k, answer in enumerate(answers):
        messages += [msg("user", f"Question {k}: Reverse a b c"), msg("assistant", answer)]
    jinja = None if name == "auto" else TEMPLATES[name].jinja
    if name == "mistral-legacy" and system:  # the official template has no system role
        with pytest.raises(TemplateError, match="Conversation roles must alternate"):
            tokenize_with_mask(tokenizer, messages, jinja)
        return
    input_ids, labels = tokenize_with_mask(tokenizer, messages, jinja)
    eot = "<|im_end|>" if name == "auto" else get_template(name).end_of_turn_for(tokenizer)
    expected = [f"{LEAD.get(name, '')}{a}{GAP.get(name, '')}{eot}" for a in answers]
    if name == "qwen3":  # the turn after the last user query keeps an (empty) thinking block
        expected[-1] = f"<think>\n\n</think>\n\n{answers[-1]}{eot}"
    assert labelled_spans(tokenizer, input_ids, labels) == expected
    assert (
        input_ids == tokenizer(render_chat(tokenizer, messages, jinja), add_special_tokens=False)["input_ids"]
    )


QWEN3_AGENT = [
    SYS,
    msg("user", "What is 2+3?"),
    msg("assistant", "", reasoning_content="Use the tool.", tool_calls=[call("add", {"a": 2, "b": 3})]),
    msg("tool", "5"),
    msg("assistant", "It is 5.", reasoning_content="Read it."),
    msg("user", "Thanks"),
    msg("assistant", "Welcome.", reasoning_content="Be polite."),
]
TOOL_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>'


@pytest.mark.parametrize(
    ("kwargs", "last"),
    [
        ({}, "<think>\nBe polite.\n</think>\n\nWelcome.<|im_end|>"),
        ({"enable_thinking": True}, "<think>\nBe polite.\n</think>\n\nWelcome.<|im_end|>"),
    ],
)
def test_qwen3_masks_with_tools_and_dropped_reasoning(tokenizer, kwargs: dict, last: str) -> None:
    """Earlier turns lose their reasoning once a later user query exists: the search fallback."""
    ids, labels = tokenize_with_mask(tokenizer, QWEN3_AGENT, TEMPLATES["qwen3"].jinja, tools=TOOLS, **kwargs)
    assert labelled_spans(tokenizer, ids, labels) == [TOOL_CALL, "It is 5.<|im_end|>", last]


def test_qwen3_masks_without_thinking(tokenizer) -> None:
    """enable_thinking=False: the empty thinking block is part of the prompt, not of the answer."""
    messages = [
        m if m["role"] != "assistant" else {k: v for k, v in m.items() if k != "reasoning_content"}
        for m in QWEN3_AGENT
    ]
    ids, labels = tokenize_with_mask(
        tokenizer, messages, TEMPLATES["qwen3"].jinja, tools=TOOLS, enable_thinking=False
    )
    assert labelled_spans(tokenizer, ids, labels) == [TOOL_CALL, "It is 5.<|im_end|>", "Welcome.<|im_end|>"]


def test_apply_template_round_trips_through_save_pretrained(tokenizer, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    own = tokenizer.chat_template
    custom = tmp_path / "mine.jinja"
    custom.write_text(TEMPLATES["gemma"].jinja, encoding="utf-8")
    try:
        for choice, expected in [
            ("qwen3", TEMPLATES["qwen3"].jinja),
            ("mine.jinja", custom.read_text()),
            ("auto", None),
        ]:
            jinja = apply_template(tokenizer, choice, base_dir=tmp_path)
            expected = expected or jinja
            assert tokenizer.chat_template == jinja == expected
            tokenizer.save_pretrained(tmp_path / f"saved-{choice}")
            assert AutoTokenizer.from_pretrained(tmp_path / f"saved-{choice}").chat_template == expected
    finally:
        tokenizer.chat_template = own


def test_auto_without_a_template_and_unknown_names_fail_clearly(tokenizer, tmp_path: Path) -> None:
    own = tokenizer.chat_template
    try:
        tokenizer.chat_template = None
        with pytest.raises(ValueError, match="has no chat template"):
            apply_template(tokenizer, "auto")
    finally:
        tokenizer.chat_template = own
    with pytest.raises(
        ValueError, match=r"unknown chat template 'qwen33' \(did you mean 'qwen3' or 'qwen2\.5'\?\).*chatml"
    ):
        apply_template(tokenizer, "qwen33")
    with pytest.raises(FileNotFoundError, match="missing.jinja"):
        apply_template(tokenizer, "missing.jinja", base_dir=tmp_path)
    assert tokenizer.chat_template == own


def spans_outcome(spans_fn, name: str, messages, tools, **kwargs) -> tuple | type:
    """(text, spans) as the labelled strings, or the exception type when the template refuses."""
    try:
        text, spans = spans_fn(None, messages, TEMPLATES[name].jinja, tools, **kwargs)
    except Exception as error:  # compare refusals too
        return type(error)
    return text, [text[start:end] for start, end in spans]


EQUIVALENCE_EXTRA: dict[str, tuple[list[dict], list[dict] | None]] = {
    "agent": (QWEN3_AGENT, TOOLS),
    "agent-no-tools-declared": (QWEN3_AGENT, None),
    "three-exchanges": (
        [SYS, *[m for k in range(3) for m in (msg("user", f"Q{k}"), msg("assistant", f"A{k}"))]],
        None,
    ),
    "reasoning-then-tools": (
        [
            msg("user", "2+3?"),
            msg("assistant", "", reasoning_content="\nTool.\n", tool_calls=[call("add", {"a": 2, "b": 3})]),
            msg("tool", "5"),
            msg("assistant", "\n5.", reasoning_content="Read."),
        ],
        TOOLS,
    ),
    "content-and-two-calls": (
        [
            msg("user", "sums"),
            msg(
                "assistant",
                "On it.",
                tool_calls=[call("add", {"a": 1, "b": 1}), call("add", {"a": 2, "b": 2})],
            ),
            msg("tool", "2"),
            msg("tool", "4"),
            msg("assistant", "2 and 4."),
        ],
        TOOLS,
    ),
}


@pytest.mark.parametrize("name", NAMED_TEMPLATES)
def test_generation_markers_label_what_prefix_rendering_labels(name: str) -> None:
    """One render with ``{% generation %}`` gives the spans the prefix-diff search finds, everywhere.

    The named templates carry markers so that a row costs one render; the prefix-diff path stays the
    definition of the masks (it is the one used for templates without trusted markers, and where a
    template leaves a turn unmarked: qwen3's non-empty thinking with enable_thinking false).
    """
    from gym.data.templates import assistant_spans
    from gym.data.templates.masks import _marked, _marker_spans, _prefix_spans, probe_end_of_turn

    jinja = TEMPLATES[name].jinja
    assert _marked(jinja)
    marked, mismatches = 0, []
    for case, (messages, tools) in {**BATTERY, **EQUIVALENCE_EXTRA}.items():
        for variant in VARIANTS:
            kwargs = {**SPECIAL[name], **variant}
            for end_of_turn in (None, probe_end_of_turn(None, jinja, **kwargs)):
                kw = {"end_of_turn": end_of_turn, **kwargs}
                expected = spans_outcome(_prefix_spans, name, messages, tools, **kw)
                got = spans_outcome(assistant_spans, name, messages, tools, **kw)
                if got != expected:
                    mismatches.append(f"{case} {variant} eot={end_of_turn!r}:\n{expected!r}\n{got!r}")
                if isinstance(expected, tuple) and expected[1]:
                    marked += _marker_spans(None, messages, jinja, tools, **kw) is not None
    assert not mismatches, "\n".join(mismatches)
    assert marked >= 20  # the markers, not the fallback, labelled most of the battery
