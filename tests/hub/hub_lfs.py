"""The Hub double's LFS side: which files the Hub stores in LFS, the batch API, the storage the objects
are PUT to (a presigned URL: no token, but the bytes must hash to the object asked for), the verify
call, and the CDN that downloads of LFS files are redirected to.

Its routes are added to the app of :func:`tests.hub.hub_double.create_hub_app`, which passes its access
checks in. Like that module, this one has no ``from __future__ import annotations`` (FastAPI must see
the real ``Request`` type).
"""

import fnmatch
import hashlib
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

# The patterns of the .gitattributes the Hub puts in a new repo (filter=lfs), and its size limit for
# regular files: what preupload answers "lfs" for.
LFS_PATTERNS = (
    "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib", "*.lfs.*",
    "*.mlmodel", "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet", "*.pb",
    "*.pickle", "*.pkl", "*.pt", "*.pth", "*.rar", "*.safetensors", "saved_model/**/*", "*.tar.*", "*.tar",
    "*.tflite", "*.tgz", "*.wasm", "*.xz", "*.zip", "*.zst", "*tfevents*",
)  # fmt: skip
REGULAR_MAX = 10 * 1024 * 1024


def is_lfs(path: str, size: int, sample: bytes) -> bool:
    """Whether the Hub stores this file in LFS: a .gitattributes pattern, its size, or binary content."""
    name = path.rsplit("/", 1)[-1]
    patterns = any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(path, p) for p in LFS_PATTERNS)
    return patterns or size >= REGULAR_MAX or b"\0" in sample


def add_lfs_routes(
    app: Any,
    state: Any,
    *,
    writer: Callable[..., Any],
    error: Callable[..., Any],
    no_repo: Callable[[], Any],
    injected: Callable[[str], Any],
) -> None:
    """Add the LFS routes to ``app``; ``state`` is the double's :class:`tests.hub.hub_double.HubState`."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response

    async def lfs_batch(kind: str, owner: str, name: str, request: Request):
        allowed = writer(request, owner, "lfs batch")
        if isinstance(allowed, JSONResponse):
            return allowed
        if f"{kind}:{owner}/{name}" not in state.repos:
            return no_repo()
        body = await request.json()
        if "xet" in body.get("transfers", []):  # a client with hf_xet: the Hub stores it in Xet (hub_xet.py)
            objects = [{"oid": item["oid"], "size": item["size"]} for item in body["objects"]]
            return JSONResponse({"transfer": "xet", "objects": objects, "hash_algo": "sha256"},
                                media_type="application/vnd.git-lfs+json")  # fmt: skip
        if body.get("operation") != "upload" or "basic" not in body.get("transfers", ["basic"]):
            return error(422, "only the basic upload transfer is offered here")
        objects = []
        for item in body["objects"]:
            answer: dict[str, Any] = {"oid": item["oid"], "size": item["size"], "authenticated": True}
            if item["oid"] not in state.lfs_objects:  # objects the Hub already holds need no upload
                answer["actions"] = {
                    "upload": {"href": f"{request.base_url}lfs-upload/{item['oid']}/{item['size']}"},
                    "verify": {
                        "href": f"{request.base_url}{kind}s/{owner}/{name}.git/info/lfs/objects/verify"
                    },
                }
            objects.append(answer)
        return JSONResponse({"transfer": "basic", "objects": objects, "hash_algo": "sha256"},
                            media_type="application/vnd.git-lfs+json")  # fmt: skip

    @app.post("/{owner}/{name}.git/info/lfs/objects/batch")
    async def lfs_batch_model(owner: str, name: str, request: Request):
        return await lfs_batch("model", owner, name, request)

    @app.post("/{kind}s/{owner}/{name}.git/info/lfs/objects/batch")
    async def lfs_batch_typed(kind: str, owner: str, name: str, request: Request):
        return await lfs_batch(kind, owner, name, request)

    @app.put("/lfs-upload/{sha256}/{size}")
    async def lfs_upload(sha256: str, size: int, request: Request):
        """The presigned storage URL: no token, but the bytes must be the object the batch was asked for."""
        if (failure := injected("lfs-upload")) is not None:
            return failure
        content = await request.body()
        if len(content) != size or hashlib.sha256(content).hexdigest() != sha256:
            return Response(
                "<Error><Code>BadDigest</Code></Error>", status_code=400, media_type="application/xml"
            )
        state.lfs_objects[sha256] = content
        state.lfs_uploads.append(sha256)
        return Response(status_code=200)

    @app.post("/{kind}s/{owner}/{name}.git/info/lfs/objects/verify")
    async def lfs_verify(kind: str, owner: str, name: str, request: Request):
        allowed = writer(request, owner, "lfs verify")
        if isinstance(allowed, JSONResponse):
            return allowed
        body = await request.json()
        content = state.lfs_objects.get(body["oid"])
        if content is None or len(content) != body["size"]:
            return error(404, f"Object {body['oid']} not found")
        return {"oid": body["oid"], "size": body["size"]}

    @app.api_route("/cdn-lfs/{sha256}", methods=["GET", "HEAD"])
    async def cdn(sha256: str, request: Request, download: str = ""):
        content = state.lfs_objects.get(sha256)
        if content is None:
            return Response(status_code=404)
        if request.method == "GET":
            state.downloads.append(unquote(download))
        body = b"" if request.method == "HEAD" else content
        return Response(body, headers={"Content-Length": str(len(content)), "ETag": f'"{sha256}"'},
                        media_type="application/octet-stream")  # fmt: skip
