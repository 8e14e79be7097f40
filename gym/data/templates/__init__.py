"""Chat templates: the named registry, rendering through transformers, and assistant-only loss masks.

``model.template`` picks the Jinja: a registered name (:data:`TEMPLATES`), a ``.jinja`` file, or
``auto`` for the tokenizer's own. :func:`apply_template` puts it on the tokenizer (so it is saved with
the weights); :func:`tokenize_with_mask` turns a conversation into ``input_ids`` and ``labels`` that
train on assistant turns only, for any template.
"""

from gym.data.templates.masks import (
    IGNORE_INDEX,
    assistant_spans,
    labels_for_spans,
    probe_end_of_turn,
    tokenize_with_mask,
)
from gym.data.templates.registry import TEMPLATES, ChatTemplate, get_template, read_jinja, register_template
from gym.data.templates.render import AUTO, apply_template, render_chat, template_source, tokenizer_template

__all__ = [
    "AUTO",
    "IGNORE_INDEX",
    "TEMPLATES",
    "ChatTemplate",
    "apply_template",
    "assistant_spans",
    "get_template",
    "labels_for_spans",
    "probe_end_of_turn",
    "read_jinja",
    "register_template",
    "render_chat",
    "template_source",
    "tokenize_with_mask",
    "tokenizer_template",
]
