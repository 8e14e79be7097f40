"""The named chat templates: one plain dict, filled by :func:`register_template`.

``model.template`` in gym.toml names one of these (or a .jinja file, or ``auto`` for the tokenizer's
own). Each template's Jinja lives in ``jinja/NAME.jinja`` beside this module, so it is readable,
diffable and shipped as package data. A template named after a model is that model's own
``chat_template`` (from its ``tokenizer_config.json``) with ``{% generation %}`` markers added around
what carries loss: it renders the same text, byte for byte, with the model's special tokens (the test
suite checks every one against the official templates), so a model is trained on the format it is
served with. docs/templates.md says which name fits which model version, and the one extension
(gemma accepts a system message). chatml, vicuna and alpaca are generic formats (after
chujiezheng/chat_templates, MIT); they write ``eos_token`` where a turn ends.

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
            f"unknown chat template {name!r}{did_you_mean(name, TEMPLATES, 3)}; "
            f"known templates: {', '.join(TEMPLATES)} (or 'auto', or a path to a .jinja file)"
        ) from None


_EOS = {"end_of_turn": "</s>", "end_of_turn_is_eos": True}
_LLAMA3 = {"end_of_turn": "<|eot_id|>", "stop_strings": ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")}
_MISTRAL_V3 = "mistral-v0.3.jinja"
_MISTRAL_V1 = "mistral-v0.2.jinja"

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
    "llama3", **_LLAMA3, description="Llama-3-Instruct (the original 3.0 format, no dated header)"
)
register_template(
    "llama3.1", **_LLAMA3, description="Llama-3.1/3.3-Instruct: dated system header, tools (date_string)"
)
register_template(
    "llama3.2",
    **_LLAMA3,
    description="Llama-3.2-Instruct: dated system header (today, or date_string), tools",
)
register_template(
    "llama3.3",
    **_LLAMA3,
    jinja=read_jinja("llama3.1.jinja"),
    description="Llama-3.3-Instruct: the llama3.1 template",
)
register_template(
    "llama2", **_EOS, description="Llama-2-chat: <s>[INST] <<SYS>>...<</SYS>> ... [/INST] answer </s>"
)
register_template(
    "mistral",
    **_EOS,
    jinja=read_jinja(_MISTRAL_V3),
    description="Mistral-7B-Instruct-v0.3 (the mistral-v0.3 template): [INST] x[/INST] answer</s>, tools",
)
register_template(
    "mistral-v0.3", **_EOS, description="Mistral-7B-Instruct-v0.3: [INST] x[/INST] answer</s>, tools"
)
register_template(
    "mistral-v0.2",
    **_EOS,
    description="Mistral-7B-Instruct-v0.1/v0.2, Mixtral-8x7B-Instruct: <s> [INST] x [/INST] answer</s>",
)
register_template(
    "mistral-v0.1",
    **_EOS,
    jinja=read_jinja(_MISTRAL_V1),
    description="Mistral-7B-Instruct-v0.1: the mistral-v0.2 template",
)
register_template(
    "mistral-legacy",
    **_EOS,
    description="Mistral v0.2/Mixtral's first template (Dec 2023): [INST] x [/INST]answer</s>, no system",
)
register_template(
    "gemma",
    end_of_turn="<end_of_turn>",
    description="Gemma 2 instruct: <bos><start_of_turn>user|model ... <end_of_turn> (system folded into the first user turn)",
)
register_template(
    "phi3",
    end_of_turn="<|end|>",
    stop_strings=("<|end|>", "<|endoftext|>"),
    description="Phi-3-instruct: <|role|>\\n...<|end|>, EOS after the last turn",
)
register_template(
    "phi3.5",
    end_of_turn="<|end|>",
    stop_strings=("<|end|>", "<|endoftext|>"),
    description="Phi-3.5-mini-instruct: phi3 without an empty system turn",
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
