"""A local stand-in for the Hugging Face Hub: the HTTP routes `HfApi` calls for create_repo,
upload_folder / create_commit (preupload + commit), add_space_secret and request_space_hardware, and
the download side (repo info, ``resolve``) that ``snapshot_download`` and ``hf_hub_download`` use,
recording what it got.

Every file is answered as a "regular" (non-LFS) upload, so commits carry their content inline and
the double can check exactly what was uploaded. Private repositories answer 401 without the token,
as the Hub does. ``fail`` makes the next calls to a route fail with a given HTTP status.
"""

import base64
import json
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class HubState:
    token: str
    repos: dict[str, dict[str, Any]] = field(default_factory=dict)  # "type:owner/name" -> info
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # "type:owner/name" -> path -> bytes
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    hardware: dict[str, str] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    bad_auth: int = 0
    commits: list[str] = field(default_factory=list)  # "type:owner/name" per commit, in order
    fail: dict[str, list[int]] = field(default_factory=dict)  # route ("commit", "create") -> statuses
    downloads: list[str] = field(default_factory=list)
    readers: list[str] = field(default_factory=list)  # read-only tokens: may download, never write

    def sha(self, key: str) -> str:
        return f"{len([c for c in self.commits if c == key]):040x}"


def create_hub_app(state: HubState):
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI()

    def authorized(request: Request) -> bool:
        ok = request.headers.get("authorization") == f"Bearer {state.token}"
        state.bad_auth += not ok
        return ok

    def denied() -> JSONResponse:
        return JSONResponse({"error": "Invalid credentials"}, status_code=401)

    def injected(route: str) -> JSONResponse | None:
        pending = state.fail.get(route)
        if pending:
            return JSONResponse({"error": "injected failure"}, status_code=pending.pop(0))
        return None

    def readable(key: str, request: Request) -> bool:
        info = state.repos.get(key)
        if info is None:
            return False
        if info.get("visibility") == "private" or info.get("private"):
            header = request.headers.get("authorization", "")
            return any(header == f"Bearer {token}" for token in state.readers) or authorized(request)
        return True

    def missing() -> JSONResponse:
        return JSONResponse(
            {"error": "Repository not found"}, status_code=401, headers={"X-Error-Code": "RepoNotFound"}
        )

    @app.get("/api/whoami-v2")
    async def whoami(request: Request):
        return {"type": "user", "name": "tester", "orgs": []} if authorized(request) else denied()

    @app.post("/api/repos/create")
    async def create(request: Request):
        if not authorized(request):
            return denied()
        if (failure := injected("create")) is not None:
            return failure
        body = await request.json()
        kind = body.get("type") or "model"
        repo_id = f"{body.get('organization') or 'tester'}/{body['name']}"
        key = f"{kind}:{repo_id}"
        if key in state.repos:
            return JSONResponse(
                {"error": "You already created this repo", "url": f"/{repo_id}"}, status_code=409
            )
        state.repos[key] = body
        prefix = "" if kind == "model" else f"{kind}s/"
        return {"url": f"{request.base_url}{prefix}{repo_id}", "name": repo_id}

    @app.post("/api/validate-yaml")
    async def validate_yaml(request: Request):
        return {"errors": [], "warnings": []}

    @app.post("/api/{kind}s/{owner}/{name}/preupload/{revision}")
    async def preupload(kind: str, owner: str, name: str, revision: str, request: Request):
        if not authorized(request):
            return denied()
        body = await request.json()
        stored = state.files.get(f"{kind}:{owner}/{name}", {})

        def oid(path: str) -> str | None:  # git's blob sha1 of what the repo holds, as the Hub answers it
            if path not in stored:
                return None
            import hashlib

            content = stored[path]
            return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()

        files = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": oid(f["path"])}
                 for f in body["files"]]  # fmt: skip
        return {"files": files, "commitOid": "0" * 40}

    @app.post("/api/{kind}s/{owner}/{name}/commit/{revision}")
    async def commit(kind: str, owner: str, name: str, revision: str, request: Request):
        if not authorized(request):
            return denied()
        if (failure := injected("commit")) is not None:
            return failure
        key = f"{kind}:{owner}/{name}"
        if key not in state.repos:
            return JSONResponse(
                {"error": "Repository not found"}, status_code=404, headers={"X-Error-Code": "RepoNotFound"}
            )
        stored = state.files.setdefault(key, {})
        for line in (await request.body()).splitlines():
            item = json.loads(line)
            if item["key"] == "file":
                stored[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            elif item["key"] != "header":
                state.unknown.append(f"commit op {item['key']}")
        state.commits.append(key)
        prefix = "" if kind == "model" else f"{kind}s/"
        return {
            "commitUrl": f"{request.base_url}{prefix}{owner}/{name}/commit/{state.sha(key)}",
            "commitOid": state.sha(key),
        }

    @app.get("/api/{kind}s/{owner}/{name}/revision/{revision:path}")
    @app.get("/api/{kind}s/{owner}/{name}")
    async def info(kind: str, owner: str, name: str, request: Request, revision: str = "main"):
        key = f"{kind}:{owner}/{name}"
        if not readable(key, request):
            return missing()
        files = state.files.get(key, {})
        return {
            "id": f"{owner}/{name}",
            "sha": state.sha(key),
            "private": state.repos[key].get("visibility") == "private",
            "siblings": [{"rfilename": path} for path in sorted(files)],
        }

    async def resolve(kind: str, owner: str, name: str, path: str, request: Request):
        from fastapi.responses import Response

        key = f"{kind}:{owner}/{name}"
        if not readable(key, request):
            return missing()
        content = state.files.get(key, {}).get(path)
        if content is None:
            return JSONResponse(
                {"error": "Entry not found"}, status_code=404,
                headers={"X-Error-Code": "EntryNotFound", "X-Repo-Commit": state.sha(key)},
            )  # fmt: skip
        import hashlib

        if request.method == "GET":
            state.downloads.append(f"{key}/{path}")
        headers = {"X-Repo-Commit": state.sha(key), "ETag": f'"{hashlib.sha1(content).hexdigest()}"',
                   "Content-Length": str(len(content))}  # fmt: skip
        body = b"" if request.method == "HEAD" else content
        return Response(body, headers=headers, media_type="application/octet-stream")

    @app.api_route("/spaces/{owner}/{name}/resolve/{revision}/{path:path}", methods=["GET", "HEAD"])
    async def resolve_space(owner: str, name: str, revision: str, path: str, request: Request):
        return await resolve("space", owner, name, path, request)

    @app.api_route("/datasets/{owner}/{name}/resolve/{revision}/{path:path}", methods=["GET", "HEAD"])
    async def resolve_dataset(owner: str, name: str, revision: str, path: str, request: Request):
        return await resolve("dataset", owner, name, path, request)

    @app.api_route("/{owner}/{name}/resolve/{revision}/{path:path}", methods=["GET", "HEAD"])
    async def resolve_model(owner: str, name: str, revision: str, path: str, request: Request):
        return await resolve("model", owner, name, path, request)

    @app.post("/api/spaces/{owner}/{name}/secrets")
    async def secret(owner: str, name: str, request: Request):
        if not authorized(request):
            return denied()
        body = await request.json()
        state.secrets.setdefault(f"{owner}/{name}", {})[body["key"]] = body["value"]
        return {}

    @app.post("/api/spaces/{owner}/{name}/hardware")
    async def hardware(owner: str, name: str, request: Request):
        if not authorized(request):
            return denied()
        flavor = (await request.json())["flavor"]
        state.hardware[f"{owner}/{name}"] = flavor
        return {
            "stage": "BUILDING",
            "hardware": {"current": None, "requested": flavor},
            "storage": None,
            "gcTimeout": None,
        }

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "HEAD"])
    async def other(path: str, request: Request):
        state.unknown.append(f"{request.method} /{path}")
        return JSONResponse({"error": "not implemented by the test double"}, status_code=404)

    return app


class HubDouble:
    """Run the double with uvicorn on 127.0.0.1 in a background thread."""

    def __init__(self, token: str, port: int) -> None:
        import uvicorn

        self.state = HubState(token=token)
        config = uvicorn.Config(create_hub_app(self.state), host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.url = f"http://127.0.0.1:{port}"
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "HubDouble":
        import time

        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
