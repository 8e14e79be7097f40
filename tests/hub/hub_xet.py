"""The Hub double's Xet side: the transfer path huggingface_hub takes by default since it ships ``hf_xet``.

huggingface_hub 1.20+ uploads every non-regular file through Xet without asking the LFS batch API
(``_upload_pipeline.py``, ``_commit_api._upload_xet_files``), and 1.x before it takes Xet when the batch
API answers ``"transfer": "xet"`` (what the Hub answers for its repos today, see :mod:`tests.hub.hub_lfs`).
Either way the client then talks to the Hub and to its CAS (content addressed storage):

- ``GET /api/{type}s/{repo}/xet-write-token/{revision}`` (and ``xet-read-token``): a short-lived CAS token,
  its expiry and the CAS URL, as headers (``X-Xet-Cas-Url``, ``X-Xet-Access-Token``,
  ``X-Xet-Token-Expiration``: what huggingface_hub's ``utils/_xet.py`` parses) and as the JSON body
  ``{"accessToken", "exp", "casUrl"}`` that hf_xet itself parses when it refreshes the token. A write
  token needs the same write access as a commit (401/403 otherwise).
- ``GET {cas}/v1/chunks/default-merkledb/{hash}``: global dedup; 404 here, nothing is shared.
- ``POST {cas}/v1/xorb-grants/default/{hash}``: hf_xet 1.8 first asks for an upload grant (a presigned
  URL, then ``xorb-commits``); a 404 there makes it upload the xorb to ``/v1/xorbs`` directly, which is
  what the double offers (xet-core ``api_changes/update_261006_xorb_upload_grants.md`` and
  ``xet_client/README.md``). Transfer reports go to ``POST /v1/telemetry`` on the CAS host, and are
  counted.
- ``POST {cas}/v1/xorbs/default/{hash}``: a xorb, i.e. a run of chunks, each behind an 8-byte header
  (version, compressed length, scheme, uncompressed length) and compressed with none, LZ4 (frame format)
  or byte-grouping-4 + LZ4, then an ``XETBLOB`` footer. The double decompresses every chunk on arrival
  and refuses a xorb it cannot read (400).
- ``POST {cas}/v2/shards`` answers 404, and hf_xet falls back to ``POST {cas}/v1/shards``: a shard (header
  tag ``HFRepoMetaData``, then file entries: the file hash, its segments as xorb hash + chunk range, and
  the metadata extension holding the file's sha256). The double rebuilds each file's bytes from the
  xorbs it holds (a xorb not uploaded first is a 400, as on the CAS), checks the sha256 the shard claims
  against those bytes, and stores the content under its sha256 in ``state.lfs_objects``: the commit's
  ``lfsFile`` entry is then checked against real uploaded content exactly as on the LFS path.
- Downloads of a file that came through Xet carry ``X-Xet-Hash`` and a ``Link: <xet-read-token>;
  rel="xet-auth"`` on the resolve answer (:func:`xet_download_headers`); hf_xet then asks
  ``{cas}/v2/reconstructions/{file hash}`` (404 here: it falls back to v1), gets the file's terms and the
  URL + byte range of each xorb slice, and fetches those with HTTP ``Range`` requests.

What is not checked: chunk, xorb and file *hashes* (BLAKE3-keyed Merkle hashes; no BLAKE3 in the dev
venv): a file is known by the hash its shard names, and its content by the sha256 of the rebuilt bytes.

Hashes in URLs and JSON use the CAS's string form: each 8-byte quarter of the 32-byte hash read as a
little-endian u64, printed as 16 hex digits.

Sources: the Xet protocol specification (https://huggingface.co/docs/xet/index: upload-protocol, api,
xorb, shard, download-protocol, auth), huggingface/xet-core (``xet_client/src/cas_client/remote_client.rs``
for the routes and the v2 -> v1 fallbacks, ``xet_client/src/cas_types/mod.rs`` for the JSON bodies,
``xet_core_structures/src/xorb_object/`` and ``.../metadata_shard/`` for the formats,
``xet_pkg/src/error.rs`` for the Python exceptions), and huggingface_hub 1.33's ``_upload_pipeline.py``,
``_commit_api.py``, ``utils/_xet.py``, ``file_download.py`` and ``utils/_detect_agent.py`` (which asks
``/api/agent-harnesses`` for the registry of AI-agent harnesses; the Hub's format is
``{"standardEnvVars": [...], "harnesses": {id: {"envVars": {...}}}}``,
https://huggingface.co/docs/hub/agents-overview#register-your-agent-harness).

Like :mod:`tests.hub.hub_lfs`, this module has no ``from __future__ import annotations`` (FastAPI must
see the real ``Request`` type).
"""

import hashlib
import re
import secrets
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from tests.hub.xet_formats import ShardFile, XetFormatError, XorbChunk, shard_files, xorb_chunks

XET_TOKEN_SECONDS = 3600
HARNESSES = {
    "standardEnvVars": ["AI_AGENT", "AGENT"],
    "harnesses": {
        "claude-code": {"envVars": {"CLAUDECODE": "1"}},
        "codex": {"envVars": {"CODEX_SANDBOX": "*"}},
    },
}


@dataclass
class XetStore:
    """What the CAS holds and who may use it."""

    # CAS token -> (scope, repo key, "repo key/path" of the file a read token was asked for, or "")
    tokens: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    xorbs: dict[str, bytes] = field(default_factory=dict)  # CAS hex -> serialized xorb
    chunks: dict[str, list[XorbChunk]] = field(default_factory=dict)
    files: dict[str, ShardFile] = field(default_factory=dict)  # file hash -> its shard entry
    by_sha256: dict[str, str] = field(default_factory=dict)  # sha256 -> file hash
    uploads: list[str] = field(default_factory=list)  # sha256 of each file a shard registered, in order
    reconstructions: list[str] = field(default_factory=list)  # file hash of each download
    telemetry: int = 0  # transfer reports received

    def content(self, file: ShardFile) -> bytes:
        parts = []
        for segment in file.segments:
            chunks = self.chunks.get(segment.xorb)
            if chunks is None:
                raise XetFormatError(f"xorb {segment.xorb} was not uploaded")
            if not 0 <= segment.first < segment.end <= len(chunks):
                raise XetFormatError(f"chunks {segment.first}..{segment.end} are not in xorb {segment.xorb}")
            data = b"".join(chunk.data for chunk in chunks[segment.first : segment.end])
            if len(data) != segment.size:
                raise XetFormatError(
                    f"a segment of xorb {segment.xorb} is {len(data)} bytes, not {segment.size}"
                )
            parts.append(data)
        return b"".join(parts)


def xet_download_headers(state: Any, key: str, path: str, sha256: str, base_url: str) -> dict[str, str]:
    """What the Hub's resolve answer adds for ``path`` of repo ``key`` ("type:owner/name") stored in Xet,
    so that the client reads it from the CAS: its Xet hash and where to get a read token. Empty for content
    that came through LFS. The token route carries the path (the Hub's does not need to): the double can
    then record each download in ``state.downloads`` as the CDN route does for LFS."""
    file_hash = state.xet.by_sha256.get(sha256)
    if file_hash is None:
        return {}
    kind, repo_id = key.split(":", 1)
    refresh = f"{base_url}api/{kind}s/{repo_id}/xet-read-token/main?path={quote(path, safe='')}"
    return {"X-Xet-Hash": file_hash, "Link": f'<{refresh}>; rel="xet-auth"'}


def add_xet_routes(
    app: Any,
    state: Any,
    *,
    writer: Callable[..., Any],
    readable: Callable[..., Any],
    error: Callable[..., Any],
    no_repo: Callable[[], Any],
    missing: Callable[[], Any],
    injected: Callable[[str], Any],
) -> None:
    """Add the Xet token routes, the CAS and ``/api/agent-harnesses`` to ``app``; ``state`` is the
    double's :class:`tests.hub.hub_double.HubState`, whose ``xet`` is a :class:`XetStore`."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response

    store: XetStore = state.xet

    @app.get("/api/agent-harnesses")
    async def agent_harnesses():
        return HARNESSES

    def grant(request: Request, key: str, scope: str, download: str = "") -> JSONResponse:
        token = "xet_" + secrets.token_hex(16)
        store.tokens[token] = (scope, key, download)
        expiry = int(time.time()) + XET_TOKEN_SECONDS
        cas = f"{request.base_url}cas"
        headers = {"X-Xet-Cas-Url": cas, "X-Xet-Access-Token": token, "X-Xet-Token-Expiration": str(expiry)}
        return JSONResponse({"accessToken": token, "exp": expiry, "casUrl": cas}, headers=headers)

    @app.get("/api/{kind}s/{owner}/{name}/xet-write-token/{revision:path}")
    async def write_token(kind: str, owner: str, name: str, revision: str, request: Request):
        """A CAS write token: the same write access as a commit."""
        key = f"{kind}:{owner}/{name}"
        allowed = writer(request, owner, "xet write token")
        refused = allowed if isinstance(allowed, JSONResponse) else injected("xet-write-token")
        if refused is not None:
            return refused
        return grant(request, key, "write") if key in state.repos else no_repo()

    @app.get("/api/{kind}s/{owner}/{name}/xet-read-token/{revision:path}")
    async def read_token(kind: str, owner: str, name: str, revision: str, request: Request, path: str = ""):
        """A CAS read token for whoever may read the repo (a private one is a 401 otherwise)."""
        key = f"{kind}:{owner}/{name}"
        allowed = readable(key, request)
        return (
            allowed
            if isinstance(allowed, JSONResponse)
            else grant(request, key, "read", f"{key}/{path}" if path else "")
            if allowed
            else missing()
        )

    def cas_caller(request: Request, scope: str) -> JSONResponse | None:
        """None when the request carries a CAS token of ``scope`` (a write token also reads)."""
        held = store.tokens.get(request.headers.get("authorization", "").removeprefix("Bearer "))
        if held is None:
            return JSONResponse({"error": "invalid or expired xet token"}, status_code=401)
        if scope == "write" and held[0] != "write":
            return JSONResponse({"error": "this xet token may not write"}, status_code=403)
        return None

    @app.get("/cas/v1/chunks/{prefix}/{chunk}")
    async def global_dedup(prefix: str, chunk: str, request: Request):
        return cas_caller(request, "read") or Response(status_code=404)

    @app.post("/cas/v1/xorb-grants/{prefix}/{xorb}")
    async def xorb_grant(prefix: str, xorb: str, request: Request):
        return Response(status_code=404)  # no upload grants here: hf_xet 1.8 then POSTs to /v1/xorbs

    @app.post("/v1/telemetry")
    async def telemetry(request: Request):
        store.telemetry += 1  # hf_xet reports each transfer to the CAS host's /v1/telemetry
        return Response(status_code=204)

    @app.post("/cas/v1/xorbs/{prefix}/{xorb}")
    async def upload_xorb(prefix: str, xorb: str, request: Request):
        if (refused := cas_caller(request, "write")) is not None:
            return refused
        if (failure := injected("xet-xorb")) is not None:
            return failure
        body = await request.body()
        try:
            chunks = xorb_chunks(body)
        except (XetFormatError, IndexError, struct.error) as bad:
            return JSONResponse({"error": f"xorb {xorb}: {bad}"}, status_code=400)
        inserted = xorb not in store.xorbs
        store.xorbs[xorb], store.chunks[xorb] = body, chunks
        return {"was_inserted": inserted}

    @app.post("/cas/v2/shards")
    async def upload_shard_v2(request: Request):
        return Response(status_code=404)  # not offered here: hf_xet falls back to v1

    @app.post("/cas/v1/shards")
    async def upload_shard(request: Request):
        if (refused := cas_caller(request, "write")) is not None:
            return refused
        if (failure := injected("xet-shard")) is not None:
            return failure
        try:
            files = shard_files(await request.body())
            contents = [(file, store.content(file)) for file in files]
        except (XetFormatError, IndexError, struct.error) as bad:
            return JSONResponse({"error": f"shard: {bad}"}, status_code=400)
        for file, content in contents:
            sha256 = hashlib.sha256(content).hexdigest()
            if file.sha256 is not None and file.sha256 != sha256:
                return JSONResponse(
                    {"error": f"file {file.file_hash}: sha256 does not match"}, status_code=400
                )
        for file, content in contents:
            sha256 = hashlib.sha256(content).hexdigest()
            store.files[file.file_hash] = file
            store.by_sha256[sha256] = file.file_hash
            state.lfs_objects[sha256] = content
            store.uploads.append(sha256)
        return {"result": 1}

    @app.get("/cas/v2/reconstructions/{file_hash}")
    async def reconstruction_v2(file_hash: str, request: Request):
        return Response(status_code=404)  # not offered here: hf_xet falls back to v1

    @app.get("/cas/v1/reconstructions/{file_hash}")
    async def reconstruction(file_hash: str, request: Request):
        if (refused := cas_caller(request, "read")) is not None:
            return refused
        if (failure := injected("xet-reconstruction")) is not None:
            return failure
        file = store.files.get(file_hash)
        if file is None:
            return JSONResponse({"error": "file not found"}, status_code=404)
        size = sum(segment.size for segment in file.segments)
        first, last = 0, size - 1
        if match := re.fullmatch(r"bytes=(\d+)-(\d+)", request.headers.get("range", "")):
            first, last = int(match[1]), min(int(match[2]), size - 1)
            if first >= size:
                return Response(status_code=416)
        store.reconstructions.append(file_hash)
        download = store.tokens[request.headers["authorization"].removeprefix("Bearer ")][2]
        if download and first == 0:  # a download, not the next range of one
            state.downloads.append(download)
        terms, fetch, offset, into_first = [], {}, 0, 0
        for segment in file.segments:
            if offset + segment.size > first and offset <= last:
                if not terms:
                    into_first = first - offset
                chunks = store.chunks[segment.xorb]
                span = {"start": segment.first, "end": segment.end}
                terms.append({"hash": segment.xorb, "unpacked_length": segment.size, "range": span})
                url_range = {"start": chunks[segment.first].start, "end": chunks[segment.end - 1].end - 1}
                fetch.setdefault(segment.xorb, []).append(
                    {
                        "range": span,
                        "url": f"{request.base_url}cas/xorb-data/{segment.xorb}",
                        "url_range": url_range,
                    }
                )
            offset += segment.size
        return {"offset_into_first_range": into_first, "terms": terms, "fetch_info": fetch}

    @app.get("/cas/xorb-data/{xorb}")
    async def xorb_data(xorb: str, request: Request):
        """The presigned URL of a stored xorb: bytes by HTTP range."""
        body = store.xorbs.get(xorb)
        if body is None:
            return Response(status_code=404)
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", request.headers.get("range", ""))
        if match is None:
            return Response(body, media_type="application/octet-stream")
        first, last = int(match[1]), min(int(match[2]), len(body) - 1)
        headers = {"Content-Range": f"bytes {first}-{last}/{len(body)}"}
        return Response(
            body[first : last + 1], status_code=206, headers=headers, media_type="application/octet-stream"
        )
