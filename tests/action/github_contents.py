"""The GitHub double, plus what the scheduled bump job writes: a branch, a file commit and a pull request.

Routes (GitHub REST, as PyGithub calls them; docs.github.com "Git references", "Repository contents", "Pulls"):

- ``GET /repos/{repo}/git/ref/heads/{branch}`` (``Repository.get_git_ref``): ``{"ref", "object": {"sha"}}``;
- ``POST /repos/{repo}/git/refs`` (``create_git_ref``): 201, or 422 "Reference already exists";
- ``GET /repos/{repo}/contents/{path}`` (``get_contents``): the file of the default branch, base64, with
  its blob ``sha``;
- ``PUT /repos/{repo}/contents/{path}`` (``update_file``): a commit on ``branch`` when ``sha`` is the file's
  blob there (409 otherwise), answered ``{"content", "commit"}``;
- ``GET /repos/{repo}/pulls`` and ``POST /repos/{repo}/pulls`` (``get_pulls`` / ``create_pull``).

Writing a branch or a file needs ``contents: write`` and opening a pull request ``pull-requests: write``:
a token whose ``scopes`` lack them gets 403 "Resource not accessible by integration", as from GitHub.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from tests.action.github_server import FakeGitHub

FORBIDDEN = {
    "message": "Resource not accessible by integration",
    "documentation_url": "https://docs.github.com/rest",
}


def blob_sha(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class GitHubWithContents(FakeGitHub):
    """``branches``: name -> {path: bytes} (the default branch ``main`` is what the test puts there)."""

    branches: dict[str, dict[str, bytes]] = field(default_factory=lambda: {"main": {}})
    heads: dict[str, str] = field(default_factory=lambda: {"main": "c" * 40})
    opened: list[dict[str, Any]] = field(default_factory=list)  # the pull requests created, in order

    def _may(self, token: str, scope: str) -> bool:
        scopes = self.scopes.get(token)
        return scopes is None or scopes.get(scope) == "write"

    def handle(self, method: str, path: str, body: Any, token: str = "") -> tuple[int, Any]:
        rest = path.removeprefix(f"/repos/{self.repo}")
        if rest == path:
            return super().handle(method, path, body, token)
        routes = (
            ("GET", r"/git/ref/heads/(.+)", None, lambda branch: self._ref(branch)),
            ("POST", r"/git/refs", "contents", lambda: self._new_ref(body)),
            ("GET", r"/contents/(.+)", None, lambda name: self._file("main", name)),
            ("PUT", r"/contents/(.+)", "contents", lambda name: self._commit(name, body)),
            ("GET", r"/pulls", None, lambda: (200, [self._pull_json(p["number"]) for p in self.opened])),
            ("POST", r"/pulls", "pull-requests", lambda: self._open(body)),
        )
        for route_method, pattern, scope, answer in routes:
            match = re.fullmatch(pattern, rest)
            if match and route_method == method:
                if scope and (self.read_only or not self._may(token, scope)):
                    return 403, FORBIDDEN
                return answer(*match.groups())
        return super().handle(method, path, body, token)

    def _ref(self, branch: str) -> tuple[int, Any]:
        if branch not in self.heads:
            return 404, {"message": "Not Found"}
        url = f"{self.base}/repos/{self.repo}/git/refs/heads/{branch}"
        return 200, {
            "ref": f"refs/heads/{branch}",
            "url": url,
            "object": {"sha": self.heads[branch], "type": "commit", "url": url},
        }

    def _new_ref(self, body: dict[str, Any]) -> tuple[int, Any]:
        branch = str(body["ref"]).removeprefix("refs/heads/")
        if branch in self.heads:
            return 422, {"message": "Reference already exists"}
        source = next((name for name, sha in self.heads.items() if sha == body["sha"]), "main")
        self.heads[branch] = body["sha"]
        self.branches[branch] = dict(self.branches[source])
        return 201, self._ref(branch)[1]

    def _file_json(self, branch: str, name: str) -> dict[str, Any]:
        content = self.branches[branch][name]
        url = f"{self.base}/repos/{self.repo}/contents/{name}"
        return {"type": "file", "encoding": "base64", "name": name.rsplit("/", 1)[-1], "path": name, "size": len(content),
                "content": base64.b64encode(content).decode(), "sha": blob_sha(content), "url": url}  # fmt: skip

    def _file(self, branch: str, name: str) -> tuple[int, Any]:
        if name not in self.branches.get(branch, {}):
            return 404, {"message": "Not Found"}
        return 200, self._file_json(branch, name)

    def _commit(self, name: str, body: dict[str, Any]) -> tuple[int, Any]:
        branch = body.get("branch") or "main"
        files = self.branches.get(branch)
        if files is None:
            return 404, {"message": f"Branch {branch} not found"}
        if name in files and body.get("sha") != blob_sha(files[name]):
            return 409, {"message": f"{name} does not match {body.get('sha')}"}
        files[name] = base64.b64decode(body["content"])
        sha = hashlib.sha1(f"{branch}:{name}:{len(self.requests)}".encode()).hexdigest()
        self.heads[branch] = sha
        commit = {
            "sha": sha,
            "message": body["message"],
            "url": f"{self.base}/repos/{self.repo}/git/commits/{sha}",
        }
        return 200, {"content": self._file_json(branch, name), "commit": commit}

    def _open(self, body: dict[str, Any]) -> tuple[int, Any]:
        number = 100 + len(self.opened)
        pull = {
            "number": number,
            "head_ref": body["head"],
            "base": body["base"],
            "title": body["title"],
            "body": body["body"],
        }
        self.opened.append(pull)
        self.pulls[number] = {"head_repo": self.repo}
        return 201, self._pull_json(number)

    def _pull_json(self, number: int) -> dict[str, Any]:
        data = super()._pull_json(number)
        made = next((p for p in self.opened if p["number"] == number), None)
        if made is not None:
            data["head"] = {
                **data["head"],
                "ref": made["head_ref"],
                "sha": self.heads.get(made["head_ref"], "a" * 40),
            }
            data["title"], data["body"] = made["title"], made["body"]
        return data
