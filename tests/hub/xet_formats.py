"""The Xet storage formats, read as the CAS reads them (for the Hub double's CAS, :mod:`tests.hub.hub_xet`).

- A **xorb** is a run of chunks, each behind an 8-byte header (version 0, compressed length as 3 bytes
  little-endian, compression scheme, uncompressed length as 3 bytes), compressed with none (0), LZ4 in
  the frame format (1) or byte-grouping-4 then LZ4 (2), followed by an ``XETBLOB`` footer.
- A **shard** starts with a 32-byte tag (``HFRepoMetaData`` and a magic sequence), its version and footer
  size (u64 each), then the file-info section: per file a 48-byte header (file hash, flags, number of
  segments), its segments (xorb hash, flags, unpacked bytes, chunk range [start, end) as u32s), its
  verification entries when flag bit 31 is set, and its metadata extension (the sha256) when bit 30 is
  set; the section ends with a bookend entry whose hash is all 0xFF.
- Hashes are four little-endian u64s; their string form (in URLs, in JSON, and for the sha256 of the
  metadata extension) prints each u64 as 16 hex digits.

Sources: the Xet protocol specification (https://huggingface.co/docs/xet/index: xorb, shard, api) and
huggingface/xet-core's ``xet_core_structures/src/xorb_object/`` (``xorb_chunk_format.rs``,
``compression_scheme.rs``, ``byte_grouping/bg4.rs``) and ``.../metadata_shard/`` (``shard_format.rs``,
``file_structs.rs``); the LZ4 frame format is https://github.com/lz4/lz4/blob/dev/doc/lz4_Frame_format.md.
Pure Python, as the dev venv has no lz4 package: the test files are small.
"""

import struct
from dataclasses import dataclass

SHARD_TAG = b"HFRepoMetaData\x00" + bytes([85, 105, 103, 69, 106, 123, 129, 87, 131, 165, 189, 217, 92, 205, 209, 74, 169])  # fmt: skip
BOOKEND = b"\xff" * 32
FILE_WITH_VERIFICATION = 1 << 31
FILE_WITH_METADATA_EXT = 1 << 30
ENTRY = 48  # every shard entry (file header, segment, verification, metadata ext) is 48 bytes


class XetFormatError(ValueError):
    """A xorb or shard the CAS cannot read."""


def cas_hex(raw: bytes) -> str:
    """The CAS's string form of a 32-byte hash (each u64 quarter little-endian, as hex)."""
    return "".join(f"{value:016x}" for value in struct.unpack("<4Q", raw))


def _lz4_length(src: bytes, i: int, length: int) -> tuple[int, int]:
    """An LZ4 length: a nibble of 15 goes on in the bytes that follow, while they are 255."""
    if length == 15:
        while True:
            more = src[i]
            i += 1
            length += more
            if more != 255:
                break
    return length, i


def lz4_block(src: bytes, out: bytearray) -> None:
    """Decode one LZ4 block onto ``out`` (matches may reach into earlier blocks of the frame)."""
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        i += 1
        literals, i = _lz4_length(src, i, token >> 4)
        out += src[i : i + literals]
        i += literals
        if i >= n:
            return
        offset = src[i] | src[i + 1] << 8
        i += 2
        length, i = _lz4_length(src, i, token & 15)
        length += 4
        if offset == 0 or offset > len(out):
            raise XetFormatError("LZ4 match before the start of the data")
        start = len(out) - offset
        if offset >= length:
            out += out[start : start + length]
        else:  # an overlapping match repeats the last `offset` bytes
            out += (out[start:] * (length // offset + 1))[:length]


def lz4_frame(data: bytes) -> bytes:
    """Decode an LZ4 frame (https://github.com/lz4/lz4/blob/dev/doc/lz4_Frame_format.md)."""
    if data[:4] != b"\x04\x22\x4d\x18":
        raise XetFormatError("not an LZ4 frame")
    flags = data[4]
    pos = 7 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    out = bytearray()
    while True:
        (size,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if size == 0:
            break
        stored, size = size & 0x80000000, size & 0x7FFFFFFF
        block = data[pos : pos + size]
        if stored:
            out += block
        else:
            lz4_block(block, out)
        pos += size + (4 if flags & 0x10 else 0)
    return bytes(out)


def bg4_regroup(grouped: bytes) -> bytes:
    """Undo byte grouping 4: the input holds every 4th byte from offset 0, then 1, 2 and 3."""
    n = len(grouped)
    sizes = [n // 4 + (1 if k < n % 4 else 0) for k in range(4)]
    out, start = bytearray(n), 0
    for k, size in enumerate(sizes):
        out[k::4] = grouped[start : start + size]
        start += size
    return bytes(out)


@dataclass(frozen=True)
class XorbChunk:
    start: int  # byte range of the chunk (header included) within the serialized xorb
    end: int
    data: bytes  # uncompressed


def xorb_chunks(xorb: bytes) -> list[XorbChunk]:
    """Every chunk of a serialized xorb, decompressed; stops at the ``XETBLOB`` footer."""
    chunks: list[XorbChunk] = []
    pos = 0
    while pos < len(xorb) and not xorb.startswith(b"XETBLOB", pos):
        if pos + 8 > len(xorb) or xorb[pos] != 0:
            raise XetFormatError(f"bad chunk header at byte {pos}")
        compressed = int.from_bytes(xorb[pos + 1 : pos + 4], "little")
        scheme = xorb[pos + 4]
        size = int.from_bytes(xorb[pos + 5 : pos + 8], "little")
        body = xorb[pos + 8 : pos + 8 + compressed]
        if scheme == 0:
            data = body
        elif scheme == 1:
            data = lz4_frame(body)
        elif scheme == 2:
            data = bg4_regroup(lz4_frame(body))
        else:
            raise XetFormatError(f"unknown compression scheme {scheme}")
        if len(data) != size:
            raise XetFormatError(f"chunk at byte {pos} is {len(data)} bytes, its header says {size}")
        chunks.append(XorbChunk(pos, pos + 8 + compressed, data))
        pos += 8 + compressed
    if not chunks:
        raise XetFormatError("a xorb without chunks")
    return chunks


@dataclass(frozen=True)
class Segment:
    xorb: str  # CAS hex
    first: int  # chunk range [first, end) within the xorb
    end: int
    size: int  # unpacked bytes


@dataclass(frozen=True)
class ShardFile:
    file_hash: str  # CAS hex
    segments: tuple[Segment, ...]
    sha256: str | None  # hex, from the metadata extension


def shard_files(shard: bytes) -> list[ShardFile]:
    """The file entries of a serialized shard (its file-info section, up to the bookend)."""
    if not shard.startswith(SHARD_TAG):
        raise XetFormatError("not a shard (wrong magic number)")
    pos, files = 48, []
    while True:
        if pos + ENTRY > len(shard):
            raise XetFormatError("the shard's file section has no bookend")
        file_hash = shard[pos : pos + 32]
        flags, count = struct.unpack_from("<II", shard, pos + 32)
        pos += ENTRY
        if file_hash == BOOKEND:
            return files
        segments = []
        for _ in range(count):
            xorb = shard[pos : pos + 32]
            _flags, size, first, end = struct.unpack_from("<IIII", shard, pos + 32)
            segments.append(Segment(cas_hex(xorb), first, end, size))
            pos += ENTRY
        if flags & FILE_WITH_VERIFICATION:
            pos += ENTRY * count
        sha256 = None
        if flags & FILE_WITH_METADATA_EXT:
            sha256 = cas_hex(shard[pos : pos + 32])  # stored as a hash: u64 quarters, little-endian
            pos += ENTRY
        files.append(ShardFile(cas_hex(file_hash), tuple(segments), sha256))
