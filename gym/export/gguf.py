"""HF model folder -> one GGUF file that llama.cpp loads: the weights CPU Spaces decode fastest.

Tensors are streamed: every tensor's name, type and size go into the header first, then each tensor is
read from safetensors, converted in row chunks and written, so peak memory is one tensor, not the
model. f16 and q8_0 are written here with the ``gguf`` package; the K-quants (q4_k_m, ...) go through
llama.cpp's own quantizer (``llama_model_quantize``) from an f16 file. Before anything is allocated or
created, the folder's config, safetensors headers and tokenizer are checked against each other
(:mod:`gym.export.checks`). The result is written under a temporary name, optionally checked there, and
renamed into place, so a failure never leaves a file that looks finished (nor replaces an old one).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gym.export.checks import ARCHITECTURES, GGUFSource, inspect_gguf_source  # noqa: F401 (re-exported)
from gym.export.files import ExportError
from gym.export.output import new_parents

# Python-side quant types, then those llama.cpp's quantizer makes from an f16 file.
PYTHON_QUANTS = ("f16", "q8_0")
LLAMA_CPP_QUANTS = {"q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M", "q5_k_m": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
                    "q6_k": "LLAMA_FTYPE_MOSTLY_Q6_K", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0"}  # fmt: skip
GGUF_QUANTS = (*PYTHON_QUANTS, *LLAMA_CPP_QUANTS)
CHUNK_BYTES = 64 * 1024 * 1024  # float32 rows converted at once


class GGUFError(ExportError):
    """A model that cannot be exported to GGUF; the message is the one sentence the user sees."""


def checked_source(model_dir: Path) -> GGUFSource:
    """``model_dir`` checked for conversion (:mod:`gym.export.checks`); GGUFError with the sentence if not."""
    try:
        return inspect_gguf_source(model_dir)
    except ExportError as error:
        raise GGUFError(str(error)) from None


def convert_to_gguf(model_dir: str | Path, out_path: str | Path, quant: str = "q8_0", progress: bool = False,
                    check: Callable[[Path], None] | None = None, source: GGUFSource | None = None) -> Path:  # fmt: skip
    """Write the merged HF model in ``model_dir`` to ``out_path`` as GGUF with weights in ``quant``.

    ``check`` is called on the finished file under its temporary name; only if it returns is the file
    renamed to ``out_path``. ``source`` is the folder already checked by :func:`checked_source`.
    """
    model_dir, out_path = Path(model_dir), Path(out_path)
    if quant not in GGUF_QUANTS:
        raise GGUFError(f"unknown GGUF type {quant!r}; choose one of {', '.join(GGUF_QUANTS)}")
    source = source or checked_source(model_dir)
    partial = out_path.with_name(f".{out_path.name}.partial-{os.getpid()}")
    with new_parents(out_path):
        try:
            if quant in PYTHON_QUANTS:
                _write(source, model_dir, partial, quant, progress, out_path.stem)
            else:
                f16 = out_path.with_name(f".{out_path.name}.f16-{os.getpid()}")
                try:
                    _write(source, model_dir, f16, "f16", progress, out_path.stem)
                    _llama_cpp_quantize(f16, partial, quant)
                finally:
                    f16.unlink(missing_ok=True)
            if check is not None:
                check(partial)
            os.replace(partial, out_path)
        finally:
            partial.unlink(missing_ok=True)
    return out_path


def _llama_cpp_quantize(source: Path, target: Path, quant: str) -> None:
    try:
        import llama_cpp
    except ImportError:
        raise GGUFError(
            f"GGUF {quant} needs llama.cpp's quantizer from llama-cpp-python; run `make gguf` "
            "(or pip install 'zoo-gym[gguf]'), or choose f16 or q8_0"
        ) from None
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, LLAMA_CPP_QUANTS[quant])
    params.nthread = os.cpu_count() or 1
    if llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), params) != 0:
        raise GGUFError(f"llama.cpp could not quantize {source.name} to {quant}")


def _rope(config: dict[str, Any]) -> dict[str, Any]:
    rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    rope.setdefault("rope_theta", config.get("rope_theta", 10000.0))
    rope["rope_type"] = rope.get("rope_type") or rope.get("type") or "default"
    return rope


def _head_dim(config: dict[str, Any]) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def _write_hparams(writer: Any, config: dict[str, Any], arch: str, name: str) -> None:
    rope = _rope(config)
    if rope["rope_type"] not in ("default", "llama3"):
        raise GGUFError(f"GGUF export does not convert rope scaling {rope['rope_type']!r} yet")
    writer.add_name(name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config.get("num_key_value_heads", config["num_attention_heads"]))
    writer.add_layer_norm_rms_eps(config.get("rms_norm_eps", 1e-6))
    writer.add_rope_freq_base(float(rope["rope_theta"]))
    head_dim = _head_dim(config)
    writer.add_rope_dimension_count(head_dim)
    if head_dim != config["hidden_size"] // config["num_attention_heads"]:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_vocab_size(config["vocab_size"])


def _llama3_rope_factors(config: dict[str, Any]) -> Any:
    """llama.cpp's per-frequency factors for Llama 3.1+ rope scaling (the rope_freqs tensor)."""
    import numpy as np

    rope, dim = _rope(config), _head_dim(config)
    factor, low, high = (
        rope.get("factor", 8.0),
        rope.get("low_freq_factor", 1.0),
        rope.get("high_freq_factor", 4.0),
    )
    old_context = rope.get("original_max_position_embeddings", 8192)
    factors = []
    for freq in 1.0 / (rope["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float32) / dim)):
        wavelen = 2 * math.pi / freq
        if wavelen < old_context / high:
            factors.append(1.0)
        elif wavelen > old_context / low:
            factors.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, dtype=np.float32)


def _permute(weights: Any, n_head: int) -> Any:
    """HF's rotate-half q/k rows into llama.cpp's interleaved rope order (llama only; qwen2 uses neox)."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _source_tensors(source: GGUFSource) -> Iterator[tuple[str, Callable[[], Any], tuple]]:
    """(GGUF name, loader of the float32 array, shape) for every tensor, in file order."""
    import gguf
    from safetensors import safe_open

    config, arch = source.config, source.arch
    name_map = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch.upper()), config["num_hidden_layers"])
    n_head = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads", n_head)
    for file in source.files:
        with safe_open(file, framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open is not iterable)
                if key.endswith("rotary_emb.inv_freq"):
                    continue
                target = name_map.get_name(key, try_suffixes=(".weight", ".bias"))
                if target is None:
                    raise GGUFError(f"GGUF export does not know where tensor {key} of {file.name} goes")
                heads = (
                    n_head
                    if key.endswith("q_proj.weight")
                    else n_kv
                    if key.endswith("k_proj.weight")
                    else None
                )
                if arch != "llama":
                    heads = None

                def load(key: str = key, file: Path = file, heads: int | None = heads) -> Any:
                    with safe_open(file, framework="pt") as reader:
                        array = reader.get_tensor(key).float().numpy()
                    return _permute(array, heads) if heads else array

                yield target, load, tuple(handle.get_slice(key).get_shape())
    if arch == "llama" and _rope(config)["rope_type"] == "llama3":
        factors = _llama3_rope_factors(config)
        yield gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", lambda: factors, factors.shape


def _tensor_type(shape: tuple, quant: str) -> Any:
    import gguf

    Q = gguf.GGMLQuantizationType
    if len(shape) < 2:
        return Q.F32  # norms and biases stay float32, as llama.cpp expects
    if quant == "q8_0" and shape[-1] % gguf.GGML_QUANT_SIZES[Q.Q8_0][0] == 0:
        return Q.Q8_0
    return Q.F16


def _convert(array: Any, qtype: Any) -> Any:
    """``array`` in ``qtype``, quantized CHUNK_BYTES of rows at a time."""
    import gguf
    import numpy as np

    Q = gguf.GGMLQuantizationType
    if qtype == Q.F32:
        return np.ascontiguousarray(array, dtype=np.float32)
    if qtype == Q.F16:
        return np.ascontiguousarray(array, dtype=np.float16)
    rows = array.reshape(-1, array.shape[-1])
    step = max(1, CHUNK_BYTES // (rows.shape[1] * 4))
    parts = [
        gguf.quants.quantize(rows[start : start + step], qtype) for start in range(0, rows.shape[0], step)
    ]
    return np.concatenate(parts).reshape(gguf.quants.quant_shape_to_byte_shape(array.shape, qtype))


def _nbytes(shape: tuple, qtype: Any) -> int:
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[qtype]
    return math.prod(shape) // block * size


def _write(source: GGUFSource, model_dir: Path, path: Path, quant: str, progress: bool, name: str) -> None:
    import gguf
    import numpy as np

    from gym.export.gguf_vocab import write_vocab

    config, arch = source.config, source.arch
    tensors = list(_source_tensors(source))
    writer = gguf.GGUFWriter(path, arch)
    try:
        _write_hparams(writer, config, arch, name)
        file_type = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[quant]
        writer.add_file_type(file_type)
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        write_vocab(writer, model_dir, arch, config["vocab_size"], source.special)
        plan = []
        for name, load, shape in tensors:
            qtype = _tensor_type(shape, quant)
            nbytes = _nbytes(shape, qtype)
            if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
                dtype = np.float32 if qtype == gguf.GGMLQuantizationType.F32 else np.float16
                writer.add_tensor_info(name, shape, np.dtype(dtype), nbytes)
            else:
                byte_shape = gguf.quants.quant_shape_to_byte_shape(shape, qtype)
                writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=qtype)
            plan.append((name, load, qtype, nbytes))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        from tqdm import tqdm

        total = sum(item[3] for item in plan)
        with tqdm(total=total, unit="B", unit_scale=True, desc=f"GGUF {quant}", disable=not progress) as bar:
            for _name, load, qtype, nbytes in plan:
                data = _convert(load(), qtype)
                writer.write_tensor_data(data)
                bar.update(nbytes)
        writer.flush()
    finally:
        writer.close()
