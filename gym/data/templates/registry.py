"""The named chat templates: one plain dict, filled by :func:`register_template`.

``model.template`` in gym.toml names one of these (or a .jinja file, or ``auto`` for the tokenizer's
own). Each template's Jinja lives in ``jinja/NAME.jinja`` beside this module, so it is readable,
diffable and shipped as package data; the test suite renders every one against the models' own
templates (``../shared/fixtures/chat_templates``) and requires byte-identical text.

Provenance: the chatml, llama3, llama2, mistral, gemma, phi3, zephyr, vicuna and alpaca formats follow
chujiezheng/chat_templates (MIT); qwen2.5 and qwen3 follow Qwen's own templates (Apache-2.0).
Templates that close a turn with the tokenizer's EOS write ``eos_token`` rather than a literal
``</s>``, so a model trained with them learns to emit the token that ``generate`` stops on.

Only the standard library is imported here: ``gym validate`` may import the registry without
paying for transformers.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from gym.config.suggest import did_you_mean


@dataclass(frozen=True)
class ChatTemplate:
    """A named template: its Jinja, and what ends an assistant turn (for stop criteria and checks).

    ``end_of_turn`` is the string the template's own model closes an assistant turn with. When
    ``end_of_turn_is_eos`` is true the Jinja writes ``eos_token`` there, so with another tokenizer the
    turn ends with that tokenizer's EOS: use :meth:`end_of_turn_for`.
    """

    name: str
    jinja: str
    end_of_turn: str
    stop_strings: tuple[str, ...] = ()
    description: str = ""
    end_of_turn_is_eos: bool = False

    def end_of_turn_for(self, tokenizer: Any) -> str:
        """The end-of-turn string this template renders with ``tokenizer``."""
        if self.end_of_turn_is_eos and getattr(tokenizer, "eos_token", None):
            return tokenizer.eos_token
        return self.end_of_turn


TEMPLATES: dict[str, ChatTemplate] = {}


def read_jinja(filename: str) -> str:
    """The text of a packaged ``jinja/`` file (works from a wheel, a zip or an editable install)."""
    return resources.files(__package__).joinpath("jinja", filename).read_text(encoding="utf-8")


def register_template(
    name: str,
    *,
    end_of_turn: str,
    jinja: str | None = None,
    stop_strings: tuple[str, ...] = (),
    description: str = "",
    end_of_turn_is_eos: bool = False,
) -> ChatTemplate:
    """Add a template under ``name``; its Jinja defaults to the packaged ``jinja/NAME.jinja``."""
    if name in TEMPLATES:
        raise ValueError(f"chat template {name!r} is already registered")
    template = ChatTemplate(
        name=name,
        jinja=jinja if jinja is not None else read_jinja(f"{name}.jinja"),
        end_of_turn=end_of_turn,
        stop_strings=tuple(stop_strings) or (end_of_turn,),
        description=description,
        end_of_turn_is_eos=end_of_turn_is_eos,
    )
    TEMPLATES[name] = template
    return template


def get_template(name: str) -> ChatTemplate:
    """The registered template ``name``, or a ValueError that lists the names (and a near miss)."""
    try:
        return TEMPLATES[name]
    except KeyError:
        raise ValueError(
            f"unknown chat template {name!r}{did_you_mean(name, TEMPLATES)}; "
            f"known templates: {', '.join(TEMPLATES)} (or 'auto', or a path to a .jinja file)"
        ) from None


_EOS = {"end_of_turn": "</s>", "end_of_turn_is_eos": True}

register_template(
    "chatml",
    end_of_turn="<|im_end|>",
    description="ChatML: <|im_start|>role\\n...<|im_end|> (Qwen1.5/2, Yi, Orca-2)",
)
register_template(
    "qwen3",
    end_of_turn="<|im_end|>",
    stop_strings=("<|im_end|>", "<|endoftext|>"),
    description="Qwen3: ChatML with <think> blocks, tools and enable_thinking",
)
register_template(
    "qwen2.5",
    end_of_turn="<|im_end|>",
    stop_strings=("<|im_end|>", "<|endoftext|>"),
    description="Qwen2.5-Instruct: ChatML with Qwen's default system prompt and tools",
)
register_template(
    "llama3",
    end_of_turn="<|eot_id|>",
    stop_strings=("<|eot_id|>", "<|end_of_text|>"),
    description="Llama-3/3.1-Instruct: <|start_header_id|>role<|end_header_id|> ... <|eot_id|>",
)
register_template(
    "llama2", **_EOS, description="Llama-2-chat: <s>[INST] <<SYS>>...<</SYS>> ... [/INST] answer </s>"
)
register_template("mistral", **_EOS, description="Mistral-instruct: [INST] ... [/INST] answer</s>")
register_template(
    "gemma", end_of_turn="<end_of_turn>", description="Gemma-it: <start_of_turn>user|model ... <end_of_turn>"
)
register_template(
    "phi3",
    end_of_turn="<|end|>",
    stop_strings=("<|end|>", "<|endoftext|>"),
    description="Phi-3-instruct: <|role|>\\n...<|end|>",
)
register_template("zephyr", **_EOS, description="Zephyr: <|role|>\\n...</s>")
register_template(
    "vicuna", **_EOS, stop_strings=("</s>", "\nUSER:"), description="Vicuna: USER: ... ASSISTANT: ...</s>"
)
register_template(
    "alpaca",
    **_EOS,
    stop_strings=("</s>", "### Instruction:"),
    description="Alpaca: ### Instruction: / ### Response:",
)
