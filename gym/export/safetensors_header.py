"""The header of a safetensors file, read and checked without the safetensors library or torch.

The format (https://github.com/huggingface/safetensors, README "Format"): 8 bytes N (little-endian u64),
N bytes of a UTF-8 JSON object mapping tensor names to ``dtype``, ``shape`` and ``data_offsets`` into the
byte buffer that fills the rest of the file, plus an optional ``__metadata__`` string map. The Rust
reader refuses headers over 100,000,000 bytes, offsets that leave gaps or overlap, a size that disagrees
with shape times dtype, and a buffer whose length is not the last offset; the same rules are applied here
so a lying or truncated file gets one sentence before anything is allocated for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from gym.export.files import ExportError, json_type, parse_json, read_bytes, shown

MAX_HEADER_BYTES = 100_000_000  # the safetensors crate's MAX_HEADER_SIZE
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
               "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}  # fmt: skip
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")
NOT_SAFETENSORS = "the file is truncated or not safetensors; copy or re-save the model"


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Every tensor of the safetensors file ``path`` by name, after checking the header against the file."""
    prefix, size = read_bytes(path, limit=1 << 62, count=8)
    if size == 0:
        raise ExportError(f"{path}: is empty (0 bytes); the weights were never written, re-save the model")
    if size < 8:
        raise ExportError(f"{path}: is {size} bytes, too short for a safetensors header; {NOT_SAFETENSORS}")
    length = int.from_bytes(prefix, "little")
    if length > MAX_HEADER_BYTES or length > size - 8:
        raise ExportError(
            f"{path}: its header claims {length:,} bytes but the file holds {size - 8:,} after the length "
            f"field (safetensors allows at most {MAX_HEADER_BYTES:,}); {NOT_SAFETENSORS}"
        )
    raw, _ = read_bytes(path, limit=1 << 62, start=8, count=length)
    header = parse_json(path, raw, "a safetensors header (a JSON object) after its 8-byte length")
    if not isinstance(header, dict):
        raise ExportError(
            f"{path}: its header is a JSON {json_type(header)}, not an object; {NOT_SAFETENSORS}"
        )
    return _tensors(path, header, size - 8 - length)


def _tensors(path: Path, header: dict, buffer_bytes: int) -> dict[str, TensorInfo]:
    tensors: dict[str, TensorInfo] = {}
    spans: list[tuple[int, int, str]] = []
    for name, entry in header.items():
        if name == "__metadata__":
            if entry is not None and not isinstance(entry, dict):
                raise ExportError(f"{path}: its __metadata__ is a JSON {json_type(entry)}, not an object")
            continue
        where = f"{path}: tensor {name[:200]!r}"
        if not isinstance(entry, dict):
            raise ExportError(
                f"{where} is described by a JSON {json_type(entry)}, not an object; {NOT_SAFETENSORS}"
            )
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
            raise ExportError(f"{where} has dtype {shown(dtype)}, which safetensors does not define")
        if not isinstance(shape, list) or not all(_count(d) for d in shape):
            raise ExportError(f"{where} has shape {shown(shape)}, not a list of non-negative integers")
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_count(o) for o in offsets)
                or offsets[0] > offsets[1]):  # fmt: skip
            raise ExportError(
                f"{where} has data_offsets {shown(offsets)}, not [start, end]; {NOT_SAFETENSORS}"
            )
        if math.prod(shape) * DTYPE_BYTES[dtype] != offsets[1] - offsets[0]:
            raise ExportError(
                f"{where} claims shape {shape} of {dtype} ({math.prod(shape) * DTYPE_BYTES[dtype]:,} bytes) "
                f"but spans {offsets[1] - offsets[0]:,} bytes; {NOT_SAFETENSORS}"
            )
        spans.append((offsets[0], offsets[1], name))
        tensors[name] = TensorInfo(dtype, tuple(shape))
    end = 0
    for start, stop, name in sorted(spans):
        if start != end:
            raise ExportError(
                f"{path}: tensor {name[:200]!r} starts at byte {start:,} of the data, where {end:,} was "
                f"expected (the offsets overlap or leave a gap); {NOT_SAFETENSORS}"
            )
        end = stop
    if end != buffer_bytes:
        raise ExportError(
            f"{path}: its tensors span {end:,} bytes of data but the file holds {buffer_bytes:,}; {NOT_SAFETENSORS}"
        )
    return tensors


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
