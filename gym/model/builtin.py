"""``builtin:tiny``: a small Llama and a byte-level BPE tokenizer that Gym builds offline.

Tests, the demo and anyone without network access need a real model that loads through
``AutoModelForCausalLM`` / ``AutoTokenizer`` exactly like a Hub checkpoint. Gym builds one
deterministically (fixed corpus, fixed seed) into a cache folder, so two builds are byte-identical and
a missing or half-written cache is simply rebuilt.

A Llama config on purpose: with a Qwen2 config, ``AutoTokenizer`` silently swaps in Qwen's own
pre-tokenizer and the BPE trained here would no longer match.
"""

from __future__ import annotations

import hashlib
import json
import random
import string
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gym.files import gym_cache_home, publish_folder
from gym.model.builtin_vl import TinyVLSpec, build_vl

BUILTIN_PREFIX = "builtin:"
MARKER = "gym_builtin.json"  # written last: a folder holding it is a finished build
PAD, EOS, IM_START = "<|endoftext|>", "<|im_end|>", "<|im_start|>"
EXTRA_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TinySpec:
    """Shape of the built-in model; part of the cache key, so a change rebuilds it."""

    vocab_size: int = 512
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 2048
    seed: int = 0
    recipe: int = 1  # bump when the corpus or the build steps change


BUILTIN_MODELS: dict[str, Any] = {"tiny": TinySpec(), "tiny-vl": TinyVLSpec()}


def corpus() -> list[str]:
    """The fixed training text of the tokenizer: prose, chat turns, spaced letters, digits, code."""
    rng = random.Random(1234)
    prose = (
        "Gym fine-tunes language models from one configuration file. A team commits gym.toml, "
        "the run is validated, trained on GPUs in any cloud, evaluated, and published with a model card. "
        "The quick brown fox jumps over the lazy dog. Reverse the letters, answer the question, "
        "summarise the text, translate the sentence, and explain your reasoning step by step. "
        "def main():\n    print('hello world')\n    return 0\n"
        '{"role": "user", "content": "What is 2 + 2?"} {"role": "assistant", "content": "4"}\n'
    )
    lines = [prose] * 4
    letters = string.ascii_lowercase
    for _ in range(3000):
        word = [rng.choice(letters) for _ in range(rng.randint(3, 12))]
        spaced = " ".join(word)
        lines.append(
            f"{IM_START}user\nReverse: {spaced}{EOS}\n{IM_START}assistant\n{' '.join(reversed(word))}{EOS}\n"
        )
        lines.append(f"{rng.randint(0, 99999)} + {rng.randint(0, 999)} = {''.join(word)} {word[0].upper()}")
    lines.append(" ".join(string.printable))
    return lines


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/gym/builtin`` (``~/.cache/gym/builtin`` by default)."""
    return gym_cache_home() / "builtin"


def spec_key(name: str, spec: Any) -> str:
    digest = hashlib.sha256(json.dumps(asdict(spec), sort_keys=True).encode()).hexdigest()[:12]
    return f"{name}-{digest}"


def build_tokenizer(spec: TinySpec):  # -> PreTrainedTokenizerFast
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=[PAD, IM_START, EOS, *EXTRA_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=None,
        bos_token=None,
        additional_special_tokens=[IM_START],
        chat_template=CHATML_TEMPLATE,
        model_max_length=spec.max_position_embeddings,
        clean_up_tokenization_spaces=False,
    )


def llama_config(spec: Any, tokenizer: Any) -> Any:
    """The tiny Llama's config for ``tokenizer``: the text model of builtin:tiny and of builtin:tiny-vl."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        dtype="float32",
    )


def build_model(spec: TinySpec, tokenizer):  # -> LlamaForCausalLM
    import torch
    from transformers import LlamaForCausalLM

    config = llama_config(spec, tokenizer)
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def build(name: str, target: Path) -> Path:
    """Build the built-in model ``name`` into ``target`` (a fresh folder) and return it."""
    spec = BUILTIN_MODELS[name]
    if isinstance(spec, TinyVLSpec):
        build_vl(spec, target)
    else:
        tokenizer = build_tokenizer(spec)
        model = build_model(spec, tokenizer)
        model.save_pretrained(target, safe_serialization=True)
        tokenizer.save_pretrained(target)
    (target / MARKER).write_text(
        json.dumps({"name": f"{BUILTIN_PREFIX}{name}", **asdict(spec)}, indent=2, sort_keys=True) + "\n"
    )
    return target


def ensure_builtin(name_or_path: str, root: Path | None = None) -> Path:
    """The cached folder of a ``builtin:NAME`` model, built first if missing.

    The build goes to a temporary sibling folder that is renamed into place only when complete, so an
    interrupted build never leaves a cache that looks valid, and two processes building at once agree.
    """
    name = name_or_path.removeprefix(BUILTIN_PREFIX)
    if name not in BUILTIN_MODELS:
        raise ValueError(
            f"unknown built-in model {name_or_path!r}; available: "
            + ", ".join(BUILTIN_PREFIX + n for n in BUILTIN_MODELS)
        )
    final = (root or cache_root()) / spec_key(name, BUILTIN_MODELS[name])
    if (final / MARKER).is_file():
        return final
    return publish_folder(final, lambda staging: build(name, staging), MARKER)


def resolve_model_path(name_or_path: str) -> str:
    """What ``from_pretrained`` should load: built-in models become their cache folder, the rest pass through."""
    if name_or_path.startswith(BUILTIN_PREFIX):
        return str(ensure_builtin(name_or_path))
    return name_or_path
