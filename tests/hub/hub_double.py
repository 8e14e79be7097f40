"""A local stand-in for the Hugging Face Hub: the HTTP routes `HfApi` calls for create_repo,
upload_folder (preupload + commit), add_space_secret and request_space_hardware, recording what it got.

Every file is answered as a "regular" (non-LFS) upload, so commits carry their content inline and
the double can check exactly what was uploaded.
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

    @app.get("/api/whoami-v2")
    async def whoami(request: Request):
        return {"type": "user", "name": "tester", "orgs": []} if authorized(request) else denied()

    @app.post("/api/repos/create")
    async def create(request: Request):
        if not authorized(request):
            return denied()
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
        files = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in body["files"]]
        return {"files": files, "commitOid": "0" * 40}

    @app.post("/api/{kind}s/{owner}/{name}/commit/{revision}")
    async def commit(kind: str, owner: str, name: str, revision: str, request: Request):
        if not authorized(request):
            return denied()
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
        prefix = "" if kind == "model" else f"{kind}s/"
        return {
            "commitUrl": f"{request.base_url}{prefix}{owner}/{name}/commit/{'1' * 40}",
            "commitOid": "1" * 40,
        }

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
