"""A recording GitHub REST API on 127.0.0.1: just the routes PyGithub calls for the action.

State is plain dicts the test fills (pulls, files, labels, comments, compares, commits, issue events,
collaborator roles); every request is recorded as (method, path, json body). ``user_login`` None makes
``GET /user`` answer 403 as it does for the Actions token, whose comments are by ``bot_login``.
``read_only`` answers writes with 403 like the read-only token GitHub gives a fork's pull request. URLs
in responses point back at this server, as PyGithub follows them.

As strict as GitHub where the action could get it wrong: every call must carry ``token`` (or one of
``extra_tokens``), else 401 ``Bad credentials`` (``Requires authentication`` without a token); lists are
paginated (``per_page`` default 30, at most 100, ``page``) with a ``Link`` header, so a client that reads
only the first page misses comment 31; a custom repository role (``custom_roles``: name -> base role)
answers the permission endpoint with its base (``permission`` "write", ``role_name`` the custom name).

Permissions, as GitHub checks them for the workflow's ``GITHUB_TOKEN`` and fine-grained tokens:
``scopes`` maps a token to what it was granted (``{"contents": "read", "pull-requests": "write"}``, the
``permissions:`` block of a workflow job); a route outside them answers 403 "Resource not accessible by
integration" (GitHub's words for an installation token that lacks the permission: creating a commit status
needs ``statuses: write`` — docs.github.com "Permissions required for GitHub Apps" and "Assigning permissions
to jobs"). A token without an entry in ``scopes`` has them all. ``owners`` maps a fine-grained personal
token to its owner: ``GET /user`` answers that login and the comments it creates are authored by it (a PAT
acts as its user), not by the Actions bot.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

PER_PAGE, MAX_PER_PAGE = 30, 100
# Which repository permission each route needs (any one of them; write covers read). Metadata routes
# (the repository, collaborator permissions) need none that a workflow can withhold.
ROUTE_SCOPES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"/pulls/\d+(/files)?", ("pull-requests",)),
    (r"/issues/\d+(/labels|/comments|/events)?", ("issues", "pull-requests")),
    (r"/issues/\d+/labels/[^/]+", ("issues", "pull-requests")),
    (r"/issues/comments/\d+", ("issues", "pull-requests")),
    (r"/compare/[^/]+", ("contents",)),
    (r"/commits/\w+", ("contents",)),
    (r"/statuses/\w+", ("statuses",)),
)
# The legacy `permission` field of the collaborator permission endpoint: maintain counts as write,
# triage as read (the finer role is only in `role_name`).
LEGACY_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
}


@dataclass
class Recorded:
    method: str
    path: str
    body: Any = None
    authorized: bool = False
    query: str = ""


@dataclass
class FakeGitHub:
    repo: str = "acme/models"
    token: str = ""
    extra_tokens: tuple[str, ...] = ()  # more tokens the API accepts (e.g. a job's report-back token)
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)  # number -> {"head_repo": str | None}
    files: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    labels: dict[int, list[str]] = field(default_factory=dict)
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    compares: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # "base...head" -> files
    commits: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    read_only: bool = False
    events: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # issue events (labeled, ...)
    roles: dict[str, str] = field(
        default_factory=dict
    )  # login -> role_name (admin, maintain, write, triage, read, or a key of custom_roles)
    custom_roles: dict[str, str] = field(default_factory=dict)  # custom role name -> its base role
    user_login: str | None = None  # GET /user: None -> 403 (an installation token, like GITHUB_TOKEN)
    bot_login: str = "github-actions[bot]"  # who comments created with the token are by
    scopes: dict[str, dict[str, str]] = field(default_factory=dict)  # token -> granted permissions (else all)
    owners: dict[str, str] = field(default_factory=dict)  # fine-grained personal token -> its owner's login
    statuses: list[dict[str, Any]] = field(default_factory=list)  # commit statuses, in order
    requests: list[Recorded] = field(default_factory=list)
    base: str = ""
    _next_id: int = 1000

    # -- helpers for assertions ------------------------------------------------------------------
    def calls(self, method: str, pattern: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]

    def apply_label(self, number: int, name: str, actor: str) -> int:
        """A person applies a label: it is on the PR and a `labeled` issue event records who did it."""
        if name not in self.labels.setdefault(number, []):
            self.labels[number].append(name)
        self._next_id += 1
        self.events.setdefault(number, []).append(
            {"id": self._next_id, "event": "labeled", "actor": actor, "label": name}
        )
        return self._next_id

    def add_comment(self, number: int, body: str, login: str) -> int:
        self._next_id += 1
        user = {"login": login, "type": "Bot" if login.endswith("[bot]") else "User"}
        self.comments.setdefault(number, []).append({"id": self._next_id, "body": body, "user": user})
        return self._next_id

    # -- JSON shapes -------------------------------------------------------------------------------
    def _repo_json(self, name: str | None = None) -> dict[str, Any]:
        name = name or self.repo
        return {"id": 1, "name": name.split("/")[1], "full_name": name, "url": f"{self.base}/repos/{name}",
                "html_url": f"https://github.example/{name}", "default_branch": "main",
                "fork": name != self.repo, "owner": {"login": name.split("/")[0], "type": "Organization"}}  # fmt: skip

    def _files_json(self, files: list[tuple[str, str]]) -> list[dict[str, Any]]:
        return [
            {"filename": f, "status": s, "sha": "0" * 40, "additions": 1, "deletions": 0, "changes": 1}
            for f, s in files
        ]

    def _comment_json(self, number: int, comment: dict[str, Any]) -> dict[str, Any]:
        cid = comment["id"]
        return {"id": cid, "body": comment["body"], "user": comment["user"],
                "url": f"{self.base}/repos/{self.repo}/issues/comments/{cid}",
                "html_url": f"https://github.example/{self.repo}/pull/{number}#issuecomment-{cid}",
                "issue_url": f"{self.base}/repos/{self.repo}/issues/{number}"}  # fmt: skip

    def _issue_json(self, number: int) -> dict[str, Any]:
        url = f"{self.base}/repos/{self.repo}/issues/{number}"
        return {"id": number, "number": number, "url": url, "comments_url": f"{url}/comments",
                "labels_url": f"{url}/labels{{/name}}", "state": "open", "title": "change gym.toml",
                "labels": [{"name": n} for n in self.labels.get(number, [])],
                "pull_request": {"url": f"{self.base}/repos/{self.repo}/pulls/{number}"}}  # fmt: skip

    def _pull_json(self, number: int) -> dict[str, Any]:
        pull = self.pulls[number]
        head = pull.get("head_repo", self.repo)
        return {"id": number, "number": number, "state": "open",
                "url": f"{self.base}/repos/{self.repo}/pulls/{number}",
                "issue_url": f"{self.base}/repos/{self.repo}/issues/{number}",
                "head": {"ref": "feature", "sha": "a" * 40, "repo": self._repo_json(head) if head else None},
                "base": {"ref": "main", "sha": "b" * 40, "repo": self._repo_json()}}  # fmt: skip

    def _event_json(self, number: int, event: dict[str, Any]) -> dict[str, Any]:
        return {"id": event["id"], "event": event["event"], "created_at": "2026-12-01T00:00:00Z",
                "url": f"{self.base}/repos/{self.repo}/issues/events/{event['id']}",
                "actor": {"login": event["actor"], "type": "User"},
                "label": {"name": event["label"], "color": "fff"}}  # fmt: skip

    def _permission_json(self, login: str) -> tuple[int, Any]:
        role = self.roles.get(login)
        if role is None:
            return 404, {"message": f"{login} is not a user"}
        base = LEGACY_PERMISSION[self.custom_roles.get(role, role)]  # an unknown role fails the test loudly
        return 200, {"permission": base, "role_name": role, "user": {"login": login}}

    def _unlabel(self, number: int, name: str) -> tuple[int, Any]:
        labels = self.labels.get(number, [])
        if name not in labels:
            return 404, {"message": "Label does not exist"}
        labels.remove(name)
        return 200, [{"name": x, "color": "fff"} for x in labels]

    # -- auth and pagination, as GitHub does them for every route --------------------------------
    def refusal(self, authorization: str) -> tuple[int, Any] | None:
        """401 unless the Authorization header carries an accepted token (``token x`` or ``Bearer x``)."""
        if not authorization:
            return 401, {"message": "Requires authentication", "documentation_url": "https://docs.github.com/rest",
                         "status": "401"}  # fmt: skip
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() in ("token", "bearer") and value in (self.token, *self.extra_tokens) and value:
            return None
        return 401, {
            "message": "Bad credentials",
            "documentation_url": "https://docs.github.com/rest",
            "status": "401",
        }

    def page(self, path: str, query: str, items: list[Any]) -> tuple[list[Any], str]:
        """One page of a list answer and its ``Link`` header (empty when everything fits on one page)."""
        params = {key: values[-1] for key, values in parse_qs(query).items()}
        per_page = min(max(int(params.get("per_page", PER_PAGE)), 1), MAX_PER_PAGE)
        number = max(int(params.get("page", 1)), 1)
        last = max((len(items) + per_page - 1) // per_page, 1)

        def url(page: int) -> str:
            return f"{self.base}{path}?{urlencode({**params, 'per_page': per_page, 'page': page})}"

        links = []
        if number < last:
            links += [f'<{url(number + 1)}>; rel="next"', f'<{url(last)}>; rel="last"']
        if number > 1:
            links += [f'<{url(1)}>; rel="first"', f'<{url(number - 1)}>; rel="prev"']
        return items[(number - 1) * per_page : number * per_page], ", ".join(links)

    def granted(self, token: str, method: str, rest: str) -> bool:
        """Whether ``token``'s permissions cover the route (see the module docstring)."""
        scopes = self.scopes.get(token)
        if scopes is None:
            return True
        write = method in ("POST", "PATCH", "PUT", "DELETE")
        need = next((names for pattern, names in ROUTE_SCOPES if re.fullmatch(pattern, rest)), ())
        levels = ("write",) if write else ("read", "write")
        return not need or any(scopes.get(name) in levels for name in need)

    # -- routing -----------------------------------------------------------------------------------
    def handle(self, method: str, path: str, body: Any, token: str = "") -> tuple[int, Any]:
        if path == "/user" and method == "GET":
            if token in self.owners:
                return 200, {"login": self.owners[token], "id": 2, "type": "User"}
            if self.user_login is None:
                return 403, {"message": "Resource not accessible by integration"}
            return 200, {"login": self.user_login, "id": 1, "type": "User"}
        prefix = f"/repos/{self.repo}"
        if not path.startswith(prefix):
            return 404, {"message": "Not Found"}
        rest = path[len(prefix) :]
        if method in ("POST", "PATCH", "PUT", "DELETE") and self.read_only:
            return 403, {"message": "Resource not accessible by integration"}
        if not self.granted(token, method, rest):
            return 403, {"message": "Resource not accessible by integration",
                         "documentation_url": "https://docs.github.com/rest", "status": "403"}  # fmt: skip
        routes = [
            ("GET", r"", lambda: (200, self._repo_json())),
            ("GET", r"/pulls/(\d+)", lambda n: (200, self._pull_json(int(n)))),
            ("GET", r"/pulls/(\d+)/files", lambda n: (200, self._files_json(self.files.get(int(n), [])))),
            ("GET", r"/issues/(\d+)", lambda n: (200, self._issue_json(int(n)))),
            ("GET", r"/issues/(\d+)/labels", lambda n: (200, [{"name": x, "color": "fff"} for x in self.labels.get(int(n), [])])),
            ("GET", r"/issues/(\d+)/comments", lambda n: (200, [self._comment_json(int(n), c) for c in self.comments.get(int(n), [])])),
            ("POST", r"/issues/(\d+)/comments", lambda n: self._create(int(n), body, token)),
            ("GET", r"/issues/(\d+)/events", lambda n: (200, [self._event_json(int(n), e) for e in self.events.get(int(n), [])])),
            ("DELETE", r"/issues/(\d+)/labels/([^/]+)", lambda n, name: self._unlabel(int(n), unquote(name))),
            ("GET", r"/collaborators/([^/]+)/permission", lambda login: self._permission_json(unquote(login))),
            ("PATCH", r"/issues/comments/(\d+)", lambda cid: self._edit(int(cid), body)),
            ("GET", r"/compare/([^/]+)", lambda spec: (200, {"files": self._files_json(self.compares.get(spec, []))})),
            ("GET", r"/commits/(\w+)", lambda sha: (200, {"sha": sha, "url": f"{self.base}{path}", "files": self._files_json(self.commits.get(sha, []))})),
            ("POST", r"/statuses/(\w+)", lambda sha: self._status(sha, body, path)),
        ]  # fmt: skip
        for route_method, pattern, answer in routes:
            match = re.fullmatch(pattern, rest)
            if match and route_method == method:
                return answer(*match.groups())
        return 404, {"message": "Not Found"}

    def _status(self, sha: str, body: dict[str, Any], path: str) -> tuple[int, Any]:
        status = {"id": len(self.statuses) + 1, "sha": sha, **body, "url": f"{self.base}{path}",
                  "created_at": "2026-01-01T00:00:00Z"}  # fmt: skip
        self.statuses.append(status)
        return 201, status

    def _create(self, number: int, body: dict[str, Any], token: str = "") -> tuple[int, Any]:
        self._next_id += 1
        owner = self.owners.get(token)  # a personal token comments as its owner
        login = owner or self.user_login or self.bot_login
        comment = {"id": self._next_id, "body": body["body"],
                   "user": {"login": login, "type": "User" if owner or self.user_login else "Bot"}}  # fmt: skip
        self.comments.setdefault(number, []).append(comment)
        return 201, self._comment_json(number, comment)

    def _edit(self, cid: int, body: dict[str, Any]) -> tuple[int, Any]:
        for number, comments in self.comments.items():
            for comment in comments:
                if comment["id"] == cid:
                    comment["body"] = body["body"]
                    return 200, self._comment_json(number, comment)
        return 404, {"message": "Not Found"}


def serve(state: FakeGitHub) -> tuple[ThreadingHTTPServer, str]:
    """Start the server on a free port of 127.0.0.1; returns it and its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            url = urlsplit(self.path)
            refused = state.refusal(self.headers.get("Authorization", ""))
            state.requests.append(Recorded(self.command, url.path, body, refused is None, url.query))
            token = self.headers.get("Authorization", "").partition(" ")[2]
            status, payload = refused or state.handle(self.command, url.path, body, token)
            link = ""
            if self.command == "GET" and status == 200 and isinstance(payload, list):
                payload, link = state.page(url.path, url.query, payload)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            if link:
                self.send_header("Link", link)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state.base
