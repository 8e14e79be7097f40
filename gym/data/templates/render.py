"""Rendering conversations, and choosing which template a tokenizer carries.

Rendering goes through transformers' own ``render_jinja_template`` with the tokenizer's special
tokens as variables, exactly as ``tokenizer.apply_chat_template(..., tokenize=False)`` does: the
Jinja environment (sandbox, ``trim_blocks``/``lstrip_blocks``, ``tojson``, ``raise_exception``,
``{% generation %}``) is then the one every HF trainer and server uses, so text rendered here at
training time is the text the model sees at inference time. Gym's own named templates are rendered
the same way outside the sandbox (:mod:`gym.data.templates.trusted`), which is twice as fast.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from gym.data.templates.registry import TEMPLATES, get_template
from gym.data.templates.trusted import is_trusted, render_trusted, syntax_error

AUTO = "auto"
# transformers' {% generation %} tracker keeps what it records on the compiled template, so two threads
# must not render with it at once (rendering holds the GIL anyway: the lock costs no parallelism).
_TRANSFORMERS_RENDER = threading.Lock()


def template_source(name_or_path: str, base_dir: str | Path | None = None) -> str:
    """The Jinja text of a registered name or of a ``.jinja``/``.j2`` file (relative to ``base_dir``).

    A file is parsed here, so a syntax error is one sentence naming its line before any row is rendered
    (otherwise every row would fail to render, each with the same message).
    """
    if name_or_path in TEMPLATES:
        return TEMPLATES[name_or_path].jinja
    path = Path(name_or_path).expanduser()
    if base_dir is not None and not path.is_absolute():
        path = Path(base_dir) / path
    if name_or_path.endswith((".jinja", ".j2")) or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"chat template file not found: {path}")
        text = path.read_text(encoding="utf-8")
        error = syntax_error(text)
        if error is not None:
            line, message = error
            raise ValueError(f"chat template file {path} does not parse: line {line}: {message}")
        return text
    get_template(name_or_path)  # raises the 'unknown chat template' error with suggestions
    raise AssertionError("unreachable")


def tokenizer_template(tokenizer: Any, tools: list[dict[str, Any]] | None = None) -> str:
    """The tokenizer's own chat template (``model.template = "auto"``), or a clear error without one."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"model.template = 'auto' but the tokenizer of {getattr(tokenizer, 'name_or_path', '?')!r} has no "
            f"chat template; set model.template to one of {', '.join(TEMPLATES)} or to a .jinja file"
        )
    return tokenizer.get_chat_template(None, tools)


def apply_template(tokenizer: Any, name_or_path_or_auto: str, base_dir: str | Path | None = None) -> str:
    """Set ``tokenizer.chat_template`` to the chosen template and return its Jinja.

    Setting it on the tokenizer (rather than only rendering with it) means ``save_pretrained`` writes
    the template used in training next to the weights, so serving renders prompts the same way.
    ``"auto"`` keeps the tokenizer's own template and fails clearly when it has none.
    """
    if name_or_path_or_auto == AUTO:
        return tokenizer_template(tokenizer)
    jinja = template_source(name_or_path_or_auto, base_dir)
    tokenizer.chat_template = jinja
    return jinja


def render_chat(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    template: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    **template_kwargs: Any,
) -> str:
    """``messages`` rendered with ``template`` (Jinja text; None = the tokenizer's own) as HF would.

    ``template_kwargs`` become Jinja variables (``enable_thinking=False``, ``bos_token=...``) and
    override the tokenizer's special tokens, as in ``apply_chat_template``.
    """
    return _render(tokenizer, messages, template, tools, add_generation_prompt, False, template_kwargs)[0]


def render_chat_generation(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    template: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    **template_kwargs: Any,
) -> tuple[str, list[tuple[int, int]]]:
    """:func:`render_chat`, plus the character span of each ``{% generation %}`` block, in order.

    The text is the same as :func:`render_chat`'s (the markers write nothing); a template without
    markers yields no spans.
    """
    return _render(tokenizer, messages, template, tools, add_generation_prompt, True, template_kwargs)


def _render(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    template: str | None,
    tools: list[dict[str, Any]] | None,
    add_generation_prompt: bool,
    generation: bool,
    template_kwargs: dict[str, Any],
) -> tuple[str, list[tuple[int, int]]]:
    jinja = template if template is not None else tokenizer_template(tokenizer, tools)
    variables = {**getattr(tokenizer, "special_tokens_map", {}), **template_kwargs}
    if is_trusted(jinja) and all(isinstance(tool, dict) for tool in tools or ()):
        return render_trusted(jinja, messages, tools or None, add_generation_prompt, generation, variables)
    from transformers.utils.chat_template_utils import render_jinja_template

    with _TRANSFORMERS_RENDER:
        rendered, indices = render_jinja_template(
            conversations=[messages],
            tools=tools or None,
            chat_template=jinja,
            add_generation_prompt=add_generation_prompt,
            return_assistant_tokens_mask=generation,
            **variables,
        )
    return rendered[0], [tuple(span) for span in indices[0]] if generation else []
