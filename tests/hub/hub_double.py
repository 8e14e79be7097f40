"""A local stand-in for the Hugging Face Hub, driven by ``huggingface_hub``: the routes `HfApi` calls for
create_repo, upload_folder / create_commit (preupload, the LFS batch API, commit), add_space_secret and
request_space_hardware, and the download side (repo info, ``tree``, ``resolve``) that ``snapshot_download`` and
``hf_hub_download`` use, recording what it got.

As strict as the Hub where Gym could get it wrong:

- **Tokens.** Each token belongs to a user and the orgs it is a member of, with a role (:class:`HubToken`).
  An unknown token is 401; a read token may read private repos of its namespaces but writes nothing
  (403); repos are created, and written, only in the user's own namespace or its orgs' (403 otherwise,
  with the Hub's message).
- **LFS.** Preupload answers ``lfs`` for what the Hub stores in LFS (``*.safetensors``, ``*.bin``... as in
  the default ``.gitattributes``, binary samples, files of 10 MB or more); the client must then ask the
  batch API (``/{repo}.git/info/lfs/objects/batch``), PUT each object to the returned href and commit
  an ``lfsFile`` entry whose sha256 and size match an uploaded object. Downloads of LFS files redirect to
  a CDN route with ``X-Linked-Etag``/``X-Linked-Size``, and return the uploaded bytes
  (:mod:`tests.hub.hub_lfs`).

Private repositories answer 401 without a token that may read them, as the Hub does. ``fail`` makes
the next calls to a route fail with a given HTTP status.

The module has no ``from __future__ import annotations``: FastAPI must see the real ``Request`` type of
the routes defined inside :func:`create_hub_app`.
"""

import base64
import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from tests.hub.hub_history import add_history_routes, no_revision, revision_view
from tests.hub.hub_lfs import add_lfs_routes, is_lfs
from tests.hub.hub_plans import space_refusal, whoami_answer
from tests.hub.hub_spaces import add_space_routes
from tests.hub.hub_xet import XetStore, add_xet_routes, xet_download_headers
from tests.launch.hf_jobs_double import add_job_routes

FORBIDDEN_WRITE = "Forbidden: pass `create_pr=1` as a query parameter to create a Pull Request"


@dataclass(frozen=True)
class HubToken:
    """Who a token is: its user, the orgs that user belongs to, the token's role (write or read), and the
    plans that decide which Spaces the Hub lets them create (:mod:`tests.hub.hub_plans`).

    ``pro``: the user's PRO subscription; ``can_pay``: a payment method on file (the user's and, here,
    its orgs'); ``paid_orgs``: the orgs on a Team or Enterprise plan (None: all of them).
    """

    user: str
    orgs: tuple[str, ...] = ()
    role: str = "write"
    pro: bool = True
    can_pay: bool = True
    paid_orgs: tuple[str, ...] | None = None

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.user, *self.orgs)

    def paid(self, namespace: str) -> bool:
        """Whether ``namespace`` (the user or one of its orgs) is on a paid plan (PRO, Team, Enterprise)."""
        if namespace == self.user:
            return self.pro
        return namespace in self.orgs and (self.paid_orgs is None or namespace in self.paid_orgs)


# The tests' usual identity: user `tester` (PRO, with a payment method), member of org `acme` on a Team
# plan (where the test configs push).
TESTER = HubToken("tester", orgs=("acme",))
# A free account as most users have one since July 2026: no PRO, no payment method, a free org.
FREE = HubToken("freebie", orgs=("freeorg",), pro=False, can_pay=False, paid_orgs=())


@dataclass
class HubState:
    tokens: dict[str, HubToken]
    repos: dict[str, dict[str, Any]] = field(default_factory=dict)  # "type:owner/name" -> info
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # "type:owner/name" -> path -> bytes
    lfs_files: dict[str, set[str]] = field(default_factory=dict)  # "type:owner/name" -> paths stored in LFS
    lfs_objects: dict[str, bytes] = field(default_factory=dict)  # sha256 -> uploaded content
    lfs_uploads: list[str] = field(default_factory=list)  # sha256 of each PUT, in order
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    hardware: dict[str, str] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    bad_auth: int = 0  # requests with a token the Hub does not know
    refused: list[str] = field(default_factory=list)  # "route repo: why" for each 403
    commits: list[str] = field(default_factory=list)  # "type:owner/name" per commit, in order
    fail: dict[str, list[int]] = field(default_factory=dict)  # route ("commit", "create") -> statuses
    downloads: list[str] = field(default_factory=list)
    xet: XetStore = field(default_factory=XetStore)  # the Xet CAS (tests.hub.hub_xet)
    run_spaces: bool = False  # build and start pushed Spaces (tests.hub.hub_spaces); off: they stay BUILDING
    space_env: dict[str, str] = field(default_factory=dict)  # extra environment of every Space started
    spaces: Any = None  # tests.hub.hub_spaces.SpaceRuntimes, set by create_hub_app
    jobs: Any = None  # tests.launch.hf_jobs_double.Jobs (Hugging Face Jobs), set by create_hub_app
    history: Any = None  # tests.hub.hub_history.History: each commit's files, for revisions and commit lists

    def sha(self, key: str) -> str:
        return f"{len([c for c in self.commits if c == key]):040x}"


def create_hub_app(state: HubState):
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    app = FastAPI()

    def error(status: int, message: str, code: str | None = None) -> JSONResponse:
        headers = {"X-Error-Message": message, **({"X-Error-Code": code} if code else {})}
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    def caller(request: Request) -> HubToken | None | JSONResponse:
        """The token's identity, None without a token, or the Hub's 401 for a token it does not know."""
        header = request.headers.get("authorization", "")
        if not header:
            return None
        token = state.tokens.get(header.removeprefix("Bearer "))
        if token is None:
            state.bad_auth += 1
            return error(401, "Invalid credentials in Authorization header")
        return token

    def writer(
        request: Request, namespace: str, route: str, refusal: str = FORBIDDEN_WRITE
    ) -> HubToken | JSONResponse:
        """A write token whose user may write to ``namespace``, else the Hub's 401/403."""
        who = caller(request)
        if isinstance(who, JSONResponse):
            return who
        if who is None:
            return error(401, "Invalid username or password.")
        if who.role != "write" or namespace not in who.namespaces:
            state.refused.append(
                f"{route} {namespace}: {'read token' if who.role != 'write' else 'not its namespace'}"
            )
            return error(403, refusal)
        return who

    def injected(route: str) -> JSONResponse | None:
        pending = state.fail.get(route)
        if pending:
            return JSONResponse({"error": "injected failure"}, status_code=pending.pop(0))
        return None

    def readable(key: str, request: Request) -> bool | JSONResponse:
        info = state.repos.get(key)
        if info is None:
            return False
        if info.get("visibility") == "private" or info.get("private"):
            who = caller(request)
            if isinstance(who, JSONResponse):
                return who
            return who is not None and key.split(":", 1)[1].split("/")[0] in who.namespaces
        return True

    def missing() -> JSONResponse:
        return error(401, "Repository not found", "RepoNotFound")

    def no_repo() -> JSONResponse:
        return error(404, "Repository not found", "RepoNotFound")

    @app.get("/api/whoami-v2")
    async def whoami(request: Request):
        who = caller(request)
        if isinstance(who, JSONResponse):
            return who
        if who is None:
            return error(401, "Invalid username or password.")
        return whoami_answer(who)

    @app.post("/api/repos/create")
    async def create(request: Request):
        body = await request.json()
        kind = body.get("type") or "model"
        who = caller(request)
        if isinstance(who, JSONResponse):
            return who
        namespace = body.get("organization") or (who.user if who else "")
        message = f'You don\'t have the rights to create a {kind} under the namespace "{namespace}"'
        allowed = writer(request, namespace, "create", message)
        if isinstance(allowed, JSONResponse):
            return allowed
        if (failure := injected("create")) is not None:
            return failure
        repo_id = f"{namespace}/{body['name']}"
        key = f"{kind}:{repo_id}"
        if key in state.repos:
            return JSONResponse(
                {"error": "You already created this repo", "url": f"/{repo_id}"}, status_code=409
            )
        if kind == "space" and (refusal := space_refusal(state, allowed, namespace, body)) is not None:
            state.refused.append(f"create {repo_id}: {refusal[1]}")
            return error(*refusal)
        state.repos[key] = body
        if kind == "space" and body.get("hardware"):  # create_repo(space_hardware=...) requests it at once
            state.hardware[repo_id] = body["hardware"]
        prefix = "" if kind == "model" else f"{kind}s/"
        return {"url": f"{request.base_url}{prefix}{repo_id}", "name": repo_id}

    @app.post("/api/validate-yaml")
    async def validate_yaml(request: Request):
        return {"errors": [], "warnings": []}

    def oid(key: str, path: str) -> str | None:
        """What the repo holds at ``path`` as preupload answers it: sha256 for LFS, git's blob sha1 else."""
        content = state.files.get(key, {}).get(path)
        if content is None:
            return None
        if path in state.lfs_files.get(key, set()):
            return hashlib.sha256(content).hexdigest()
        return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()

    @app.post("/api/{kind}s/{owner}/{name}/preupload/{revision}")
    async def preupload(kind: str, owner: str, name: str, revision: str, request: Request):
        allowed = writer(request, owner, "preupload")
        if isinstance(allowed, JSONResponse):
            return allowed
        key = f"{kind}:{owner}/{name}"
        if key not in state.repos:
            return no_repo()
        files = []
        for f in (await request.json())["files"]:
            lfs = is_lfs(f["path"], f["size"], base64.b64decode(f["sample"]))
            files.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False,
                          "oid": oid(key, f["path"])})  # fmt: skip
        return {"files": files, "commitOid": state.sha(key)}

    add_lfs_routes(app, state, writer=writer, error=error, no_repo=no_repo, injected=injected)
    add_xet_routes(app, state, writer=writer, readable=readable, error=error, no_repo=no_repo, missing=missing,
                   injected=injected)  # fmt: skip
    state.spaces = add_space_routes(app, state, readable=readable, missing=missing)
    state.jobs = add_job_routes(app, state, caller=caller, writer=writer, error=error, injected=injected)
    state.history = add_history_routes(app, state, readable=readable, missing=missing, error=error)

    @app.post("/api/{kind}s/{owner}/{name}/commit/{revision}")
    async def commit(kind: str, owner: str, name: str, revision: str, request: Request):
        allowed = writer(request, owner, "commit")
        if isinstance(allowed, JSONResponse):
            return allowed
        if (failure := injected("commit")) is not None:
            return failure
        key = f"{kind}:{owner}/{name}"
        if key not in state.repos:
            return no_repo()
        changes: dict[str, bytes] = {}
        lfs_paths: set[str] = set()
        deleted: set[str] = set()
        header: dict[str, Any] = {}
        for line in (await request.body()).splitlines():
            item = json.loads(line)
            value = item["value"]
            if item["key"] == "file":
                if is_lfs(value["path"], 0, b""):  # the .gitattributes of the repo: a pointer is required
                    path = value["path"]
                    return error(
                        400,
                        f"Your push was rejected because it contains binary files: {path} goes through LFS",
                    )
                changes[value["path"]] = base64.b64decode(value["content"])
            elif item["key"] == "lfsFile":
                content = state.lfs_objects.get(value["oid"])
                if value.get("algo") != "sha256" or content is None or len(content) != value["size"]:
                    return error(422, f"LFS object {value['oid']} of {value['path']} was not uploaded")
                changes[value["path"]] = content
                lfs_paths.add(value["path"])
            elif item["key"] == "deletedFile":
                deleted.add(value["path"])
            elif item["key"] == "header":
                header = value
            else:
                state.unknown.append(f"commit op {item['key']}")
        if (conflict := state.history.refusal(key, header, state.sha(key))) is not None:
            return error(*conflict)
        stored = state.files.setdefault(key, {})
        stored.update(changes)
        for path in deleted:
            stored.pop(path, None)
        kept = state.lfs_files.setdefault(key, set())
        kept.difference_update(changes)
        kept.difference_update(deleted)
        kept.update(lfs_paths)
        state.commits.append(key)
        state.history.record(key, state.sha(key), header, allowed.user, stored, kept)
        if kind == "space":  # the Hub rebuilds and restarts a Space on each commit
            state.spaces.pushed(f"{owner}/{name}", str(request.base_url).rstrip("/"))
        prefix = "" if kind == "model" else f"{kind}s/"
        return {
            "commitUrl": f"{request.base_url}{prefix}{owner}/{name}/commit/{state.sha(key)}",
            "commitOid": state.sha(key),
        }

    @app.get("/api/{kind}s/{owner}/{name}/revision/{revision:path}")
    @app.get("/api/{kind}s/{owner}/{name}")
    async def info(kind: str, owner: str, name: str, request: Request, revision: str = "main"):
        key = f"{kind}:{owner}/{name}"
        allowed = readable(key, request)
        if isinstance(allowed, JSONResponse):
            return allowed
        if not allowed:
            return missing()
        if (view := revision_view(state, key, revision)) is None:
            return no_revision(error, revision)
        files, lfs, commit_sha = view

        def sibling(path: str) -> dict[str, Any]:
            entry: dict[str, Any] = {"rfilename": path, "size": len(files[path])}
            if path in lfs:
                entry["lfs"] = {"sha256": hashlib.sha256(files[path]).hexdigest(), "size": len(files[path]),
                                "pointerSize": 134}  # fmt: skip
            return entry

        return {
            "id": f"{owner}/{name}",
            "sha": commit_sha,
            "private": state.repos[key].get("visibility") == "private",
            "siblings": [sibling(path) for path in sorted(files)],
        }

    @app.get("/api/{kind}s/{owner}/{name}/tree/{revision}")
    async def tree(
        kind: str, owner: str, name: str, revision: str, request: Request, recursive: bool = False
    ):
        """The repo's files and folders, as ``list_repo_tree`` reads them (``snapshot_download`` of
        huggingface_hub 1.x+ lists a repo this way before downloading it)."""
        key = f"{kind}:{owner}/{name}"
        allowed = readable(key, request)
        if isinstance(allowed, JSONResponse):
            return allowed
        if not allowed:
            return missing()
        if (view := revision_view(state, key, revision)) is None:
            return no_revision(error, revision)
        files, lfs, _ = view

        def blob(content: bytes) -> str:
            return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()

        entries: list[dict[str, Any]] = []
        folders: set[str] = set()
        for path in sorted(files):
            parts = path.split("/")
            folders.update("/".join(parts[:depth]) for depth in range(1, len(parts)))
            if len(parts) > 1 and not recursive:
                continue
            content = files[path]
            entry: dict[str, Any] = {"type": "file", "path": path, "size": len(content), "oid": blob(content)}
            if path in lfs:
                sha256 = hashlib.sha256(content).hexdigest()
                pointer = (
                    f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {len(content)}\n"
                )
                entry["oid"] = blob(pointer.encode())
                entry["lfs"] = {"oid": sha256, "size": len(content), "pointerSize": len(pointer)}
            entries.append(entry)
        shown = sorted(folders) if recursive else sorted(f for f in folders if "/" not in f)
        entries += [{"type": "directory", "path": f, "oid": blob(f.encode()), "size": 0} for f in shown]
        return entries

    async def resolve(kind: str, owner: str, name: str, path: str, request: Request, revision: str = "main"):
        key = f"{kind}:{owner}/{name}"
        allowed = readable(key, request)
        if isinstance(allowed, JSONResponse):
            return allowed
        if not allowed:
            return missing()
        if (view := revision_view(state, key, revision)) is None:
            return no_revision(error, revision)
        files, lfs, commit_sha = view
        content = files.get(path)
        if content is None:
            return JSONResponse(
                {"error": "Entry not found"}, status_code=404,
                headers={"X-Error-Code": "EntryNotFound", "X-Repo-Commit": state.sha(key)},
            )  # fmt: skip
        if path in lfs:  # the Hub redirects LFS files to its CDN
            sha256 = hashlib.sha256(content).hexdigest()
            # served from another origin, as the Hub's CDN is: a client stops at this redirect for metadata
            cdn = str(request.base_url).replace("://127.0.0.1:", "://localhost:", 1)
            where = f"{cdn}cdn-lfs/{sha256}?download={quote(f'{key}/{path}', safe='')}"
            headers = {"Location": where, "X-Repo-Commit": commit_sha, "X-Linked-Etag": f'"{sha256}"',
                       "X-Linked-Size": str(len(content)), "ETag": f'"{hashlib.sha1(content).hexdigest()}"'}  # fmt: skip
            headers.update(xet_download_headers(state, key, path, sha256, str(request.base_url)))
            return Response(status_code=302, headers=headers)
        if request.method == "GET":
            state.downloads.append(f"{key}/{path}")
        headers = {"X-Repo-Commit": commit_sha, "ETag": f'"{hashlib.sha1(content).hexdigest()}"',
                   "Content-Length": str(len(content))}  # fmt: skip
        body = b"" if request.method == "HEAD" else content
        return Response(body, headers=headers, media_type="application/octet-stream")

    @app.api_route("/spaces/{owner}/{name}/resolve/{revision}/{path:path}", methods=["GET", "HEAD"])
    async def resolve_space(owner: str, name: str, revision: str, path: str, request: Request):
        return await resolve("space", owner, name, path, request, revision)

    @app.api_route("/datasets/{owner}/{name}/resolve/{revision}/{path:path}", methods=["GET", "HEAD"])
    async def resolve_dataset(owner: str, name: str, revision: str, path: str, request: Request):
        return await resolve("dataset", owner, name, path, request, revision)

    @app.api_route("/{owner}/{name}/resolve/{revision}/{path:path}", methods=["GET", "HEAD"])
    async def resolve_model(owner: str, name: str, revision: str, path: str, request: Request):
        return await resolve("model", owner, name, path, request, revision)

    @app.post("/api/spaces/{owner}/{name}/secrets")
    async def secret(owner: str, name: str, request: Request):
        allowed = writer(request, owner, "secrets")
        if isinstance(allowed, JSONResponse):
            return allowed
        if (failure := injected("secrets")) is not None:
            return failure
        if f"space:{owner}/{name}" not in state.repos:
            return no_repo()
        body = await request.json()
        state.secrets.setdefault(f"{owner}/{name}", {})[body["key"]] = body["value"]
        if state.files.get(f"space:{owner}/{name}"):  # the Hub restarts a Space whose secrets change
            state.spaces.pushed(f"{owner}/{name}", str(request.base_url).rstrip("/"))
        return {}

    @app.post("/api/spaces/{owner}/{name}/hardware")
    async def hardware(owner: str, name: str, request: Request):
        allowed = writer(request, owner, "hardware")
        if isinstance(allowed, JSONResponse):
            return allowed
        if f"space:{owner}/{name}" not in state.repos:
            return no_repo()
        flavor = (await request.json())["flavor"]
        body = {**state.repos[f"space:{owner}/{name}"], "hardware": flavor, "name": name}
        if (refusal := space_refusal(state, allowed, owner, body)) is not None:
            state.refused.append(f"hardware {owner}/{name}: {refusal[1]}")
            return error(*refusal)
        changed = (
            state.hardware.get(f"{owner}/{name}", state.repos[f"space:{owner}/{name}"].get("hardware"))
            != flavor
        )
        state.hardware[f"{owner}/{name}"] = flavor
        state.repos[f"space:{owner}/{name}"]["hardware"] = flavor
        if changed and state.files.get(f"space:{owner}/{name}"):  # new hardware: a restart
            state.spaces.pushed(f"{owner}/{name}", str(request.base_url).rstrip("/"))
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
    """Run the double with uvicorn on 127.0.0.1 in a background thread.

    ``tokens`` maps each token the Hub knows to its :class:`HubToken`; a single string is a write token
    of :data:`TESTER` (user ``tester``, member of org ``acme``).
    """

    def __init__(self, tokens: str | Mapping[str, HubToken], port: int) -> None:
        import uvicorn

        known = {tokens: TESTER} if isinstance(tokens, str) else dict(tokens)
        self.state = HubState(tokens=known)
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
        self.state.spaces.close()
        self.state.jobs.close()
