"""Rendering Gym's own named templates without the Jinja sandbox.

transformers renders every chat template in an ``ImmutableSandboxedEnvironment``, because a template
may come from any Hub repository. The sandbox checks every attribute access (``message.role``,
``message.content`` ...), which is more than half of the time of rendering a conversation. The
templates in :data:`~gym.data.templates.registry.TEMPLATES` ship inside Gym's package, so they are
rendered here in a plain ``jinja2.Environment`` with exactly transformers' settings and helpers
(``trim_blocks``, ``lstrip_blocks``, ``loopcontrols``, ``tojson``, ``raise_exception``,
``strftime_now``, the ``{% generation %}`` tracker): the same text and spans, byte for byte (tested
against ``apply_chat_template``). Any other template (a user's .jinja, a tokenizer's own) still goes
through transformers and its sandbox.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime
from functools import lru_cache
from typing import Any

from gym.data.templates.registry import TEMPLATES


def is_trusted(template: str | None) -> bool:
    """Whether ``template`` is the Jinja of one of Gym's registered templates."""
    return template is not None and template in _registered()


@lru_cache(maxsize=1)
def _registered() -> frozenset[str]:
    return frozenset(named.jinja for named in TEMPLATES.values())


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:  # fmt: skip
    # transformers' override: Jinja's own tojson escapes HTML characters
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    import jinja2

    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


_DICT_ATTRIBUTES = frozenset(dir(dict))


@lru_cache(maxsize=1)
def _environment_class() -> type:
    import jinja2

    class DictFirstEnvironment(jinja2.Environment):
        """``message.role`` on a plain dict, answered as Jinja answers it, without the failed attribute lookup.

        Jinja's ``getattr`` tries the attribute first and falls back to the item, so every ``x.name`` on a
        conversation's dicts raised and caught an AttributeError (a quarter of rendering a tool-calling
        conversation). A plain dict has an attribute exactly when the name is one of ``dir(dict)``, so
        any other name goes straight to the item: the same value, or the same undefined.
        """

        def getattr(self, obj: Any, attribute: str) -> Any:
            if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
                try:
                    return obj[attribute]
                except KeyError:
                    return self.undefined(obj=obj, name=attribute)
            return super().getattr(obj, attribute)

    return DictFirstEnvironment


@lru_cache(maxsize=1)
def _generation_extension() -> type:
    import jinja2
    from jinja2.ext import Extension

    class Generation(Extension):
        """``{% generation %}`` ... ``{% endgeneration %}``: records each block's character span.

        What is being recorded is per thread (``blocks``, ``spans``), so threads may render at once.
        """

        tags = {"generation"}

        def __init__(self, environment: jinja2.Environment) -> None:
            super().__init__(environment)
            self.state = threading.local()

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation"), [], [], body).set_lineno(lineno)

        def _generation(self, caller: Any) -> str:
            text = caller()
            blocks, spans = getattr(self.state, "blocks", None), getattr(self.state, "spans", None)
            if blocks is not None and spans is not None:
                start = sum(len(block) for block in blocks)
                spans.append((start, start + len(text)))
            return text

    return Generation


def _environment() -> Any:
    """A plain environment with transformers' settings, tags and helpers (one per compiled template)."""
    from jinja2.ext import loopcontrols

    environment = _environment_class()(
        trim_blocks=True, lstrip_blocks=True, extensions=[_generation_extension(), loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    return environment


def syntax_error(template: str) -> tuple[int, str] | None:
    """``(line, message)`` of the first Jinja syntax error in ``template`` as transformers parses it, else None."""
    import jinja2

    try:
        _environment().parse(template)
    except jinja2.TemplateSyntaxError as error:
        return error.lineno, error.message or "syntax error"
    return None


@lru_cache(maxsize=32)
def _compiled(template: str) -> Any:
    environment = _environment()
    tracker = next(ext for ext in environment.extensions.values() if isinstance(ext, _generation_extension()))
    return environment.from_string(template), tracker


def render_trusted(
    template: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    add_generation_prompt: bool,
    generation: bool,
    variables: dict[str, Any],
) -> tuple[str, list[tuple[int, int]]]:
    """``messages`` rendered with a registered template, as ``render_jinja_template`` renders it."""
    compiled, tracker = _compiled(template)
    context = {
        **variables,
        "messages": messages,
        "tools": tools,
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
    }
    if not generation:
        return compiled.render(**context), []
    blocks: list[str] = []
    spans: list[tuple[int, int]] = []
    tracker.state.blocks, tracker.state.spans = blocks, spans
    try:
        for block in compiled.generate(**context):
            blocks.append(block)
    finally:
        tracker.state.blocks = tracker.state.spans = None
    return "".join(blocks), spans
