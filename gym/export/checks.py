"""A model folder checked for GGUF conversion before anything is allocated, created or written.

The converter sizes its work from config.json (the token list from ``vocab_size``, the tensor name map
from ``num_hidden_layers``, the rope factors from ``head_dim``) and from the safetensors headers. Those
are untrusted input: an absurd ``vocab_size`` or added-token id would grow a list until memory runs out,
a header that lies about a tensor would fail deep inside numpy. So every value the converter uses is read
here, typed, and compared with the tensor shapes the headers declare (headers only, no tensor data), and
the first disagreement is one sentence naming the file. Only a folder that passes is converted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym.export.files import ExportError, json_type, read_json_object, shown
from gym.export.safetensors_header import FLOAT_DTYPES, TensorInfo, read_header
from gym.export.tokenizer_checks import check_tokenizer

# HF architecture -> llama.cpp architecture (Mistral is converted as llama, as llama.cpp does)
ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
MAX_INDEX_BYTES = 16_000_000
UINT32_MAX = 2**32 - 1  # GGUF stores these hyperparameters as uint32
LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)")
RESTORE = "restore the config.json saved with these weights"


@dataclass(frozen=True)
class Shapes:
    """The checked hyperparameters that fix tensor shapes."""

    vocab: int
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class GGUFSource:
    """A model folder that passed every check: its config, llama.cpp architecture and safetensors files."""

    config: dict[str, Any]
    arch: str
    files: list[Path]
    special: Any  # gguf.SpecialVocab: special token ids, merges and chat template, read once here


def inspect_gguf_source(model_dir: Path) -> GGUFSource:
    """``model_dir`` checked for conversion (config values, safetensors headers, tokenizer), or ExportError."""
    path = model_dir / "config.json"
    if not path.exists() and not path.is_symlink():
        raise ExportError(
            f"{model_dir} holds no config.json; pass a merged model folder (gym export --merge)"
        )
    config = read_json_object(path)
    arch = _architecture(model_dir, path, config)
    shapes = _shapes(path, config)
    _check_rope(path, config)
    files = tensor_files(model_dir)
    tensors: dict[str, tuple[Path, TensorInfo]] = {}
    for file in files:
        for name, info in read_header(file).items():
            if name in tensors:
                raise ExportError(
                    f"{file}: holds tensor {name[:200]!r}, which {tensors[name][0].name} holds too"
                )
            tensors[name] = (file, info)
    _check_tensors(path, shapes, tensors)
    special = check_tokenizer(model_dir, shapes.vocab)
    return GGUFSource(config, arch, files, special)


def _architecture(model_dir: Path, path: Path, config: dict[str, Any]) -> str:
    names = config.get("architectures") or [config.get("model_type", "unknown")]
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ExportError(
            f"{path}: architectures is {shown(names)}, not a list of model class names; {RESTORE}"
        )
    arch = ARCHITECTURES.get(names[0])
    if arch is None:
        raise ExportError(
            f"GGUF export supports Llama, Mistral and Qwen2 models; {model_dir} is {names[0][:80]}"
        )
    return arch


def _whole(path: Path, config: dict[str, Any], key: str, default: int | None = None, low: int = 1) -> int:
    value = config.get(key)
    if value is None and default is not None:
        return default
    if value is None:
        raise ExportError(f"{path}: {key} is missing; {RESTORE}")
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= UINT32_MAX:
        raise ExportError(
            f"{path}: {key} is {shown(value)}, not a whole number from {low} to {UINT32_MAX:,}; {RESTORE}"
        )
    return value


def _number(path: Path, config: dict[str, Any], key: str, low: float = 0.0) -> None:
    value = config.get(key)
    if value is None:
        return
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < low
    ):
        raise ExportError(
            f"{path}: {key} is {shown(value)}, not a finite number of at least {low}; {RESTORE}"
        )


def _shapes(path: Path, config: dict[str, Any]) -> Shapes:
    heads = _whole(path, config, "num_attention_heads")
    hidden = _whole(path, config, "hidden_size")
    kv_heads = _whole(path, config, "num_key_value_heads", default=heads)
    head_dim = _whole(path, config, "head_dim", default=max(1, hidden // heads))
    if heads % kv_heads:
        raise ExportError(
            f"{path}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}; {RESTORE}"
        )
    if head_dim % 2:
        raise ExportError(
            f"{path}: the attention head size is {head_dim}, an odd number rotary embeddings cannot use; {RESTORE}"
        )
    _whole(path, config, "max_position_embeddings")
    _number(path, config, "rms_norm_eps")
    return Shapes(vocab=_whole(path, config, "vocab_size"), hidden=hidden, layers=_whole(path, config, "num_hidden_layers"),
                  intermediate=_whole(path, config, "intermediate_size"), heads=heads, kv_heads=kv_heads,
                  head_dim=head_dim)  # fmt: skip


def _check_rope(path: Path, config: dict[str, Any]) -> None:
    """The rope settings the converter reads: a supported type and finite, ordered factors."""
    for key in ("rope_parameters", "rope_scaling"):
        if config.get(key) is not None and not isinstance(config[key], dict):
            raise ExportError(f"{path}: {key} is a JSON {json_type(config[key])}, not an object; {RESTORE}")
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    kind = rope.get("rope_type") or rope.get("type") or "default"
    if kind not in ("default", "llama3"):
        raise ExportError(f"GGUF export does not convert rope scaling {shown(kind)} yet ({path})")
    _number(path, config, "rope_theta", low=1e-9)
    for key in (
        "rope_theta",
        "factor",
        "low_freq_factor",
        "high_freq_factor",
        "original_max_position_embeddings",
    ):
        _number(path, rope, key, low=1e-9)
    if kind == "llama3" and rope.get("high_freq_factor", 4.0) <= rope.get("low_freq_factor", 1.0):
        raise ExportError(f"{path}: rope high_freq_factor must be above low_freq_factor; {RESTORE}")


def tensor_files(model_dir: Path) -> list[Path]:
    """The safetensors files of ``model_dir``: the shards its index names (inside the folder), else one file."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists() or index.is_symlink():
        weight_map = read_json_object(index, MAX_INDEX_BYTES).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ExportError(f"{index}: weight_map is not an object of tensor names to shard file names")
        shards = sorted(set(weight_map.values()))
        for shard in shards:
            if not shard or Path(shard).name != shard or shard in (".", ".."):
                raise ExportError(
                    f"{index}: names shard {shard[:80]!r}, which is not a file name inside {model_dir}"
                )
        if not shards:
            raise ExportError(f"{index}: weight_map names no shard files")
        return [model_dir / shard for shard in shards]
    single = model_dir / "model.safetensors"
    if single.exists() or single.is_symlink():
        return [single]
    raise ExportError(
        f"{model_dir} holds no safetensors weights (model.safetensors); re-save it with safe_serialization"
    )


def _expected(
    shapes: Shapes,
) -> tuple[dict[str, tuple[tuple[int, ...], str]], dict[str, tuple[tuple[int, ...], str]]]:
    """Tensor name (or per-layer suffix) -> (shape, how the config gives it), for Llama/Mistral/Qwen2."""
    s = shapes
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    row = ((s.vocab, s.hidden), "(vocab_size, hidden_size)")
    top = {
        "model.embed_tokens.weight": row,
        "lm_head.weight": row,
        "model.norm.weight": ((s.hidden,), "(hidden_size,)"),
    }
    per_layer = {
        "self_attn.q_proj.weight": ((q, s.hidden), "(num_attention_heads * head_dim, hidden_size)"),
        "self_attn.k_proj.weight": ((kv, s.hidden), "(num_key_value_heads * head_dim, hidden_size)"),
        "self_attn.v_proj.weight": ((kv, s.hidden), "(num_key_value_heads * head_dim, hidden_size)"),
        "self_attn.o_proj.weight": ((s.hidden, q), "(hidden_size, num_attention_heads * head_dim)"),
        "mlp.gate_proj.weight": ((s.intermediate, s.hidden), "(intermediate_size, hidden_size)"),
        "mlp.up_proj.weight": ((s.intermediate, s.hidden), "(intermediate_size, hidden_size)"),
        "mlp.down_proj.weight": ((s.hidden, s.intermediate), "(hidden_size, intermediate_size)"),
        "input_layernorm.weight": ((s.hidden,), "(hidden_size,)"),
        "post_attention_layernorm.weight": ((s.hidden,), "(hidden_size,)"),
    }
    optional = {
        "self_attn.q_proj.bias": ((q,), "(num_attention_heads * head_dim,)"),
        "self_attn.k_proj.bias": ((kv,), "(num_key_value_heads * head_dim,)"),
        "self_attn.v_proj.bias": ((kv,), "(num_key_value_heads * head_dim,)"),
    }
    return top, {**per_layer, **optional}


def _check_tensors(path: Path, shapes: Shapes, tensors: dict[str, tuple[Path, TensorInfo]]) -> None:
    top, per_layer = _expected(shapes)
    for name, (file, info) in tensors.items():
        if name.endswith("rotary_emb.inv_freq"):
            continue  # recomputed by llama.cpp, never converted
        if info.dtype not in FLOAT_DTYPES or not all(info.shape):
            raise ExportError(f"{file}: tensor {name[:200]!r} is {info.dtype} of shape {list(info.shape)}; "
                              f"GGUF export converts non-empty floating-point weights ({', '.join(FLOAT_DTYPES)})")  # fmt: skip
        expected = top.get(name)
        layer = LAYER.fullmatch(name)
        if layer is not None:
            if int(layer[1]) >= shapes.layers:
                raise ExportError(f"{path}: num_hidden_layers is {shapes.layers}, but {file.name} holds "
                                  f"{name[:200]}; {RESTORE}")  # fmt: skip
            expected = per_layer.get(layer[2])
        if expected is not None and info.shape != expected[0]:
            raise ExportError(f"{path} does not describe the weights: {file.name} holds {name[:200]} of shape "
                              f"{list(info.shape)}, where {expected[1]} is {list(expected[0])}; {RESTORE}")  # fmt: skip
    for name in _required(shapes.layers, list(per_layer)[:9]):  # stops at the first one missing
        if name not in tensors:
            if name.startswith("model.layers."):
                raise ExportError(
                    f"{path}: num_hidden_layers is {shapes.layers}, but the weights hold no {name}; {RESTORE}"
                )
            raise ExportError(
                f"the weights hold no {name}, which {path} describes; the safetensors files are not this model's"
            )


def _required(layers: int, suffixes: list[str]) -> Iterator[str]:
    """The tensors every Llama/Mistral/Qwen2 model holds, generated so a huge layer count costs nothing."""
    yield "model.embed_tokens.weight"
    for layer in range(layers):
        for suffix in suffixes:
            yield f"model.layers.{layer}.{suffix}"
