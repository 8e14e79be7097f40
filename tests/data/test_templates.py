"""Chat templates: the registry, byte-identity with the models' own Jinja, loss masks, saving.

The fixtures in ../shared/fixtures/chat_templates are read in place. The chujiezheng collection
writes its templates one statement per line for readability and documents their use as
``open(f).read().replace('    ', '').replace('\\n', '')`` (its README); that is applied here to the
files that use no ``{%-`` whitespace control. qwen3.jinja and qwen2.5-instruct.jinja are the models'
own templates and are used as they are.

Raising: every named template mirrors its fixture's input checks (roles must alternate after an
optional first system message; llama2/mistral/gemma/vicuna/alpaca/chatml/llama3/phi3/zephyr have no
tool role). So the battery has no skipped combinations: where the fixture raises, ours must raise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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

FIXTURE_FILES = {
    "chatml": "chatml.jinja",
    "qwen3": "qwen3.jinja",
    "qwen2.5": "qwen2.5-instruct.jinja",
    "llama3": "llama-3-instruct.jinja",
    "llama2": "llama-2-chat.jinja",
    "mistral": "mistral-instruct.jinja",
    "gemma": "gemma-it.jinja",
    "phi3": "phi-3.jinja",
    "zephyr": "zephyr.jinja",
    "vicuna": "vicuna.jinja",
    "alpaca": "alpaca.jinja",
}
# The special tokens each model's tokenizer passes to its template.
SPECIAL = {
    "chatml": {"eos_token": "<|im_end|>"},
    "qwen3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "qwen2.5": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama2": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
    "phi3": {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
    "zephyr": {"bos_token": "<s>", "eos_token": "</s>"},
    "vicuna": {"bos_token": "<s>", "eos_token": "</s>"},
    "alpaca": {"bos_token": "<s>", "eos_token": "</s>"},
}


def msg(role: str, content: str, **extra) -> dict:
    return {"role": role, "content": content, **extra}


def call(name: str, arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


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


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """The built-in tokenizer (ChatML template, ``<|im_end|>`` EOS, no BOS), built once per module."""
    from transformers import AutoTokenizer

    from gym.model.builtin import ensure_builtin

    return AutoTokenizer.from_pretrained(
        ensure_builtin("builtin:tiny", root=tmp_path_factory.mktemp("cache"))
    )


def fixture_jinja(fixtures_dir: Path, name: str) -> str:
    text = (fixtures_dir / "chat_templates" / FIXTURE_FILES[name]).read_text(encoding="utf-8")
    return text if "{%-" in text else text.replace("    ", "").replace("\n", "")


def outcome(jinja: str, messages, tools, **kwargs) -> str | type:
    """The rendered text, or the exception type when the template refuses the input."""
    try:
        return render_chat(None, messages, jinja, tools=tools, **kwargs)
    except Exception as error:  # compare refusals too
        return type(error)


def test_registry_is_exactly_the_configurable_names() -> None:
    assert tuple(TEMPLATES) == NAMED_TEMPLATES
    for name, template in TEMPLATES.items():
        assert (
            template.name == name and template.jinja.strip() and template.end_of_turn in template.stop_strings
        )


@pytest.mark.parametrize("name", NAMED_TEMPLATES)
def test_named_template_renders_like_the_models_own(name: str, fixtures_dir: Path) -> None:
    theirs, ours = fixture_jinja(fixtures_dir, name), TEMPLATES[name].jinja
    rendered, mismatches = 0, []
    for case, (messages, tools) in BATTERY.items():
        for generation in (True, False):
            for variant in VARIANTS:
                kwargs = {**SPECIAL[name], **variant, "add_generation_prompt": generation}
                expected = outcome(theirs, messages, tools, **kwargs)
                got = outcome(ours, messages, tools, **kwargs)
                if isinstance(expected, str):
                    rendered += 1
                    if got != expected:
                        mismatches.append(f"{case} gen={generation} {variant}:\n{expected!r}\n{got!r}")
                elif isinstance(got, str):
                    mismatches.append(
                        f"{case} gen={generation} {variant}: fixture raises {expected}, ours renders"
                    )
    assert not mismatches, "\n".join(mismatches)
    assert rendered >= 30  # the battery really exercised the template


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
# end of turn (llama2 writes ' answer </s>'; mistral/vicuna ' answer</s>').
LEAD = {"llama2": " ", "mistral": " ", "vicuna": " "}
GAP = {"llama2": " "}


@pytest.mark.parametrize("name", [*NAMED_TEMPLATES, "auto"])
@pytest.mark.parametrize("system", [False, True], ids=["no-system", "system"])
def test_masks_cover_exactly_the_answers_and_their_end_of_turn(tokenizer, name: str, system: bool) -> None:
    answers = ["c b a", "It is 4.", "Done!"]
    messages = [SYS] if system else []
    for k, answer in enumerate(answers):
        messages += [msg("user", f"Question {k}: Reverse a b c"), msg("assistant", answer)]
    jinja = None if name == "auto" else TEMPLATES[name].jinja
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
        ValueError, match=r"unknown chat template 'qwen33' \(did you mean 'qwen3'\?\).*chatml"
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
