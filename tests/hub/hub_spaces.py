"""The Hub double's Space runtime: what the Hub does with a Space after a commit, and how it tells about it.

After a commit to a Space repo (or a hardware request), the Hub builds the Space from its files and
starts it; ``HfApi.get_space_runtime`` reads ``GET /api/spaces/{owner}/{name}/runtime`` (``stage``,
``hardware.current``/``requested``, ``gcTimeout``, ``storage`` and, in ``raw``, the ``domains`` the Hub
routes to the app and an ``errorMessage`` for a failed start: huggingface_hub/_space_api.py,
``SpaceRuntime`` and ``SpaceStage``), and ``HfApi.fetch_space_logs`` reads the build and run logs as
server-sent events, ``data: {"data": "<line>", "timestamp": ...}`` per line, from
``GET /api/spaces/{id}/logs/build`` and ``/logs/run`` (huggingface_hub/hf_api.py, ``fetch_space_logs``
and ``_fetch_space_logs_sse``; the same routes as the Hub's own log viewer).

With ``HubState.run_spaces`` on, this double does it for real, in a background thread per push:

- ``CONFIG_ERROR`` when README.md has no YAML header naming the sdk, ``NO_APP_FILE`` without its app file;
- ``BUILDING``: the Space's files in a fresh folder and a venv from *its* requirements.txt
  (:func:`tests.space_runtime.space_python`, cached under .venv-space by requirements hash); pip's error
  lines become the build log and the stage ``BUILD_ERROR``;
- ``APP_STARTING``: ``python app.py`` (:func:`tests.space_runtime.start_space`) with the Space's secrets as
  environment variables and ``HF_ENDPOINT`` pointing at this double; its output is the run log; an app
  that exits is ``RUNTIME_ERROR`` ("Exit code: N. Reason: <its last line>"); one whose port answers is
  ``RUNNING``, with the domain ``127.0.0.1:PORT`` (the Hub's is ``<owner>-<name>.hf.space``, served over https).
- On ``zero-a10g`` the Hub starts only an app that defines an ``@spaces.GPU`` function: the ``spaces``
  package records each decorated function (``spaces/zero/decorator.py``, ``decorated_cache``) and reports
  to ZeroGPU when the Gradio app launches only if it holds one (``spaces/zero/__init__.py``, ``startup``);
  otherwise the Space fails with "No @spaces.GPU function detected". That code runs only with ZeroGPU's
  CUDA build of torch (``spaces/zero/torch/static.py`` reads ``torch.version.cuda``), so the double finds
  the decorated functions in the Space's Python source instead (:func:`gpu_functions`), then runs the app
  off ZeroGPU, where ``spaces.GPU`` returns the function unchanged and it runs on CPU.

With it off (the default: a run costs a minute of CPU), a pushed Space stays ``BUILDING`` and its build
log says why: the double never claims ``RUNNING`` for a Space it did not run, so a client that waits for
it times out; tests that deploy a Space without checking it say so (``gym deploy --no-wait``).
"""

# no `from __future__ import annotations`: FastAPI must see the real Request type of the routes below
import ast
import json
import re
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NOT_RUN = "the Hub double builds and runs Spaces only with HubState.run_spaces (tests/hub/hub_spaces.py)"
NO_GPU_FUNCTION = "No @spaces.GPU function detected"
START_TIMEOUT_S = 300


def gpu_functions(folder: Path) -> list[str]:
    """``file:function`` for each function of the Space decorated with ``spaces.GPU`` (bare or called)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        bare_gpu = any(isinstance(node, ast.ImportFrom) and node.module == "spaces"
                       and any(alias.name == "GPU" for alias in node.names) for node in ast.walk(tree))  # fmt: skip
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for decorator in node.decorator_list:
                target = ast.unparse(decorator.func if isinstance(decorator, ast.Call) else decorator)
                if target == "spaces.GPU" or (bare_gpu and target == "GPU"):
                    found.append(f"{path.relative_to(folder)}:{node.name}")
    return found


def _header(readme: bytes | None) -> dict[str, str]:
    """The README's YAML header, flat keys only (all a Space's runtime needs here)."""
    text = (readme or b"").decode("utf-8", "replace")
    match = re.match(r"---\n(.*?)\n---", text, re.S)
    if not match:
        return {}
    pairs = (
        line.split(":", 1) for line in match.group(1).splitlines() if ":" in line and not line.startswith(" ")
    )
    return {key.strip(): value.strip().strip('"') for key, value in pairs}


@dataclass
class SpaceRun:
    stage: str = "BUILDING"
    hardware: str | None = None
    build_log: list[str] = field(default_factory=list)
    run_log: list[str] = field(default_factory=list)
    error: str = ""
    port: int | None = None
    generation: int = 0
    running: Any = None  # tests.space_runtime.RunningSpace


class SpaceRuntimes:
    """The Spaces of one Hub double: their stage, logs and processes."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.runs: dict[str, SpaceRun] = {}
        self.root = Path(tempfile.mkdtemp(prefix="hub-double-spaces-"))
        self.lock = threading.Lock()

    def pushed(self, repo: str, hub_url: str) -> None:
        """A commit or a hardware request: (re)build and (re)start the Space from what the repo holds now."""
        with self.lock:
            run = self.runs.setdefault(repo, SpaceRun())
            self._stop(run)
            run.generation += 1
            run.stage, run.error, run.port, run.run_log = "BUILDING", "", None, []
            run.hardware = self.state.hardware.get(repo) or self.state.repos.get(f"space:{repo}", {}).get(
                "hardware"
            )
            run.build_log = [NOT_RUN] if not self.state.run_spaces else []
            if not self.state.run_spaces:
                return
            files = dict(self.state.files.get(f"space:{repo}", {}))
            secrets = dict(self.state.secrets.get(repo, {}))
            args = (repo, run.generation, files, secrets, hub_url)
        threading.Thread(target=self._build_and_start, args=args, daemon=True).start()

    def _set(self, repo: str, generation: int, **changes: Any) -> bool:
        """Apply ``changes`` unless a newer push superseded this run; False when it did."""
        with self.lock:
            run = self.runs[repo]
            if run.generation != generation:
                return False
            for key, value in changes.items():
                setattr(run, key, value)
            return True

    def _build_and_start(self, repo: str, generation: int, files: dict[str, bytes], secrets: dict[str, str],
                         hub_url: str) -> None:  # fmt: skip
        from tests.space_runtime import space_python, start_space

        header = _header(files.get("README.md"))
        if header.get("sdk") not in ("gradio", "docker", "static", "streamlit"):
            self._set(repo, generation, stage="CONFIG_ERROR", error="Missing configuration in README: sdk")
            return
        app_file = header.get("app_file", "app.py")
        if app_file not in files:
            self._set(repo, generation, stage="NO_APP_FILE")
            return
        folder = self.root / f"{repo.replace('/', '--')}-{generation}"
        for path, content in files.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_bytes(content)
        self._set(repo, generation, build_log=["Installing the Space's requirements.txt ..."])
        try:
            python = space_python(folder)
        except AssertionError as error:  # pip's own error lines are the build log
            lines = [line for line in str(error).splitlines()[1:] if line.strip()]
            self._set(repo, generation, stage="BUILD_ERROR", build_log=lines, error="Build failed")
            return
        self._set(repo, generation, build_log=[f"Built the Space's environment: {python.parent.parent.name}"])
        with self.lock:
            hardware = self.runs[repo].hardware
        if hardware == "zero-a10g" and not gpu_functions(folder):
            self._set(repo, generation, stage="RUNTIME_ERROR", error=NO_GPU_FUNCTION,
                      run_log=[f"ZeroGPU: {NO_GPU_FUNCTION}"])  # fmt: skip
            return
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        # no SPACE_ID: with it Gradio serves as behind the Hub's https proxy, which this loopback http is not
        env = {**self.state.space_env, **secrets, "HF_ENDPOINT": hub_url}
        running = start_space(folder, port, env, home=folder.with_name(folder.name + "-home"))
        if not self._set(repo, generation, stage="APP_STARTING", running=running):
            running.stop()
            return
        self._watch(repo, generation, running, port)

    def _watch(self, repo: str, generation: int, running: Any, port: int) -> None:
        """APP_STARTING until the port answers (RUNNING), RUNTIME_ERROR when the app exits, at any time."""
        deadline, up = time.monotonic() + START_TIMEOUT_S, False
        while True:
            code = running.process.poll()
            log = running.log.read_text(encoding="utf-8", errors="replace").splitlines()
            if code is not None:
                reason = next((line for line in reversed(log) if line.strip()), "")
                self._set(repo, generation, stage="RUNTIME_ERROR", run_log=log,
                          error=f"Exit code: {code}. Reason: {reason}")  # fmt: skip
                return
            if not up:
                with socket.socket() as sock:
                    up = sock.connect_ex(("127.0.0.1", port)) == 0
                if up and not self._set(repo, generation, stage="RUNNING", port=port, run_log=log):
                    return
                if not up and time.monotonic() > deadline:
                    running.stop()
                    continue
            if not self._set(repo, generation, run_log=log):
                return
            time.sleep(0.5)

    def runtime(self, repo: str) -> dict[str, Any]:
        with self.lock:
            run = self.runs.get(repo) or SpaceRun(stage="NO_APP_FILE")
            data: dict[str, Any] = {
                "stage": run.stage,
                "hardware": {"current": run.hardware if run.stage == "RUNNING" else None,
                             "requested": run.hardware},
                "storage": None, "gcTimeout": 172800, "replicas": {"current": 1, "requested": 1},
                "devMode": False, "sha": self.state.sha(f"space:{repo}"),
            }  # fmt: skip
            if run.stage == "RUNNING":
                data["domains"] = [{"domain": f"127.0.0.1:{run.port}", "stage": "READY"}]
            if run.error:
                data["errorMessage"] = run.error
            return data

    def log(self, repo: str, kind: str) -> list[str]:
        with self.lock:
            run = self.runs.get(repo) or SpaceRun()
            return list(run.build_log if kind == "build" else run.run_log)

    @staticmethod
    def _stop(run: SpaceRun) -> None:
        if run.running is not None:
            run.running.stop()
            run.running = None

    def close(self) -> None:
        with self.lock:
            for run in self.runs.values():
                run.generation += 1  # any build still going stops at its next step
                self._stop(run)
        shutil.rmtree(self.root, ignore_errors=True)


def add_space_routes(app: Any, state: Any, *, readable: Any, missing: Any) -> SpaceRuntimes:
    """Register the runtime and log routes; returns the runtimes the commit and hardware routes notify."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, StreamingResponse

    runtimes = SpaceRuntimes(state)

    async def allowed(owner: str, name: str, request: Request) -> JSONResponse | None:
        ok = readable(f"space:{owner}/{name}", request)
        if isinstance(ok, JSONResponse):
            return ok
        return None if ok else missing()

    async def runtime(owner: str, name: str, request: Request):
        refused = await allowed(owner, name, request)
        return refused or runtimes.runtime(f"{owner}/{name}")

    async def logs(owner: str, name: str, kind: str, request: Request):
        refused = await allowed(owner, name, request)
        if refused is not None:
            return refused
        if kind not in ("build", "run"):
            return JSONResponse({"error": "Not Found"}, status_code=404)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        events = [f"data: {json.dumps({'data': line + chr(10), 'timestamp': stamp})}\n\n"
                  for line in runtimes.log(f"{owner}/{name}", kind)]  # fmt: skip
        return StreamingResponse(iter(events), media_type="text/event-stream")

    app.add_api_route("/api/spaces/{owner}/{name}/runtime", runtime, methods=["GET"])
    app.add_api_route("/api/spaces/{owner}/{name}/logs/{kind}", logs, methods=["GET"])
    return runtimes
