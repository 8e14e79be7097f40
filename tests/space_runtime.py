"""The Space as the Hub runs it: its folder's own ``requirements.txt`` installed into a fresh venv, then
``python app.py`` started the way the Gradio SDK runtime starts it (``GRADIO_SERVER_NAME=0.0.0.0``, the
port from ``PORT``).

The venv is built from the base interpreter, not the test venv, so a package the Space imports but does
not list makes it fail here as it would on the Hub. pip resolves the requirements from PyPI (and its
cache) and compiles their bytecode, as a Space's image build does; torch is held to the CPU wheel
pinned by ``constraints.txt``. A build takes a minute or two of CPU, so venvs are kept under
``.venv-space/`` (``GYM_SPACE_VENVS``), one per distinct requirements file, constraints file and Python:
a Space started from the same requirements reuses it, in this run or the next, and a changed
requirements file gets a new one. Nothing else is ever installed into them. ``make test`` builds the
venvs of the Spaces the suite starts before pytest does (``python -m tests.space_runtime``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

REPO = Path(__file__).resolve().parents[1]
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
ROOT = Path(os.environ.get("GYM_SPACE_VENVS") or REPO / ".venv-space")


@contextmanager
def _locked() -> Iterator[None]:
    """One builder at a time across pytest-xdist's workers (and concurrent runs)."""
    ROOT.mkdir(parents=True, exist_ok=True)
    with open(ROOT / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def venv_key(requirements: str) -> str:
    """What a Space venv is built from: its requirements, the pins it is held to, and the interpreter."""
    pins = (REPO / "constraints.txt").read_text(encoding="utf-8")
    blob = "\n".join((requirements, pins, sys.version, str(Path(sys.base_prefix).resolve())))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def space_python(space_folder: Path) -> Path:
    """The interpreter of a venv holding exactly what ``space_folder/requirements.txt`` asks for."""
    requirements = (space_folder / "requirements.txt").read_text(encoding="utf-8")
    folder = ROOT / venv_key(requirements)
    with _locked():  # another worker may be building it: wait, then reuse
        if not (folder / "ready").is_file():
            _build(folder, requirements)
    return folder / "bin" / "python"


def _build(folder: Path, requirements: str) -> None:
    venv.EnvBuilder(with_pip=True, symlinks=True, clear=True).create(folder)
    (folder / "requirements.txt").write_text(requirements, encoding="utf-8")
    done = subprocess.run(
        [str(folder / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "-r", str(folder / "requirements.txt"), "-c", str(REPO / "constraints.txt")],
        env=_clean_env(folder, Path(tempfile.gettempdir())), capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError("the Space's requirements.txt does not install:\n" + done.stderr[-4000:])
    (folder / "ready").touch()


def _clean_env(venv_folder: Path, home: Path) -> dict[str, str]:
    """No test-venv path, no PYTHONPATH: what a Space's container has, plus pip's own settings."""
    keep = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in ("LANG", "LC_ALL", "TZ")}
    return {**keep, "PATH": f"{venv_folder / 'bin'}{os.pathsep}{SYSTEM_PATH}", "HOME": str(home)}


@dataclass
class RunningSpace:
    process: subprocess.Popen
    url: str
    folder: Path
    log: Path

    def stop(self) -> str:
        """Stop the Space and return its log."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.log.read_text(encoding="utf-8", errors="replace")


def start_space(folder: Path, port: int, env: dict[str, str], home: Path) -> RunningSpace:
    """``python app.py`` in ``folder`` with the Space's fresh venv, its secrets and settings in ``env``."""
    python = space_python(folder)
    home.mkdir(parents=True, exist_ok=True)
    full = {**_clean_env(python.parent.parent, home), "GRADIO_SERVER_NAME": "0.0.0.0", "PORT": str(port),
            "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1", "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false", **env}  # fmt: skip
    full = {k: v for k, v in full.items() if not k.startswith("PIP_")}
    log = home / "space.log"
    with log.open("w") as output:
        process = subprocess.Popen([str(python), "app.py"], cwd=folder, env=full, stdout=output,
                                   stderr=subprocess.STDOUT)  # fmt: skip
    return RunningSpace(process, f"http://127.0.0.1:{port}", folder, log)


def wait_healthy(space: RunningSpace, timeout: float = 300) -> None:
    import httpx

    deadline = time.time() + timeout
    while time.time() < deadline:
        if space.process.poll() is not None:
            raise AssertionError("the Space exited:\n" + space.stop()[-4000:])
        try:
            if httpx.get(space.url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError("the Space never became healthy:\n" + space.stop()[-4000:])


def imports_from(space: RunningSpace) -> Path:
    """Where the running Space's interpreter finds ``gym``: its own copy, never the checkout or a wheel."""
    python = space_python(space.folder)
    probe = subprocess.run([str(python), "-c", "import gym, sys; print(gym.__file__); print(sys.prefix)"],
                           cwd=space.folder, env=_clean_env(python.parent.parent, space.folder),
                           capture_output=True, text=True, check=True)  # fmt: skip
    return Path(probe.stdout.splitlines()[0])


def api_answer(url: str, key: str, model: str, message: str, max_tokens: int) -> str:
    """The Space's /v1/chat/completions answer to one user message at temperature 0 (the reference)."""
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=120)
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": message}],
                                           max_tokens=max_tokens, temperature=0)  # fmt: skip
    return reply.choices[0].message.content or ""


def log_in(page, key: str) -> None:
    """The keyed chat's login form: any user name, the API key as password."""
    page.locator("input[type=password]").wait_for(timeout=60_000)
    page.locator("input").first.fill("reviewer")
    page.locator("input[type=password]").fill(key)
    page.get_by_role("button", name=re.compile("login", re.I)).click()
    # the chat replaces the form once the key is accepted
    page.locator("input[type=password]").wait_for(state="detached", timeout=60_000)


def _open_settings(page) -> None:
    """Open the chat's Settings accordion. A click that lands while the page is still hydrating is lost
    (the accordion stays shut), so click again until its first field shows, never toggling it shut."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    field = page.locator("input[type=number][aria-label='number input for Temperature']")
    for attempt in range(3):
        if not field.is_visible():
            page.get_by_text("Settings", exact=True).first.click()
        try:
            field.wait_for(state="visible", timeout=15_000)
            return
        except PlaywrightTimeout:
            if attempt == 2:
                raise


def chat_on_page(page, message: str, *, temperature: float = 0.0, max_tokens: int = 16) -> str:
    """Set the chat's Settings, send ``message`` from the page's box and return the reply it shows."""
    _open_settings(page)
    for label, value in (("Temperature", temperature), ("Max new tokens", max_tokens)):
        number = page.locator(f"input[type=number][aria-label='number input for {label}']")
        number.fill(f"{value:g}")
        number.press("Enter")
    box = page.locator("textarea").first
    box.fill(message)
    box.press("Enter")
    page.locator("[data-testid='bot']").last.wait_for(timeout=120_000)
    page.wait_for_function(
        "() => { const m = document.querySelectorAll(\"[data-testid='bot']\");"
        " return m.length && m[m.length - 1].innerText.length > 0; }",
        timeout=120_000,
    )
    shown, since = "", time.monotonic()
    while time.monotonic() - since < 3:  # streamed: the reply is whole once it stops changing
        page.wait_for_timeout(250)
        now = page.locator("[data-testid='bot']").last.inner_text()
        if now != shown:
            shown, since = now, time.monotonic()
    return shown


def gguf_space_settings() -> Any:
    """The GGUF Space tests/hub/test_space_gguf.py starts (an f16 file of builtin:tiny, llama.cpp backend)."""
    from gym.hub.space import SpaceSettings

    return SpaceSettings(model_repo="acme/tiny", space_repo="acme/tiny-chat", backend="llamacpp", gguf="f16")


def llama_cpp_wheel() -> Path | None:
    """The llama-cpp-python 0.3.36 wheel `make gguf` left in pip's cache (a GGUF Space's venv needs it:
    llama.cpp's prebuilt-wheel index cannot be reached from here), or None."""
    cache = Path.home() / ".cache" / "pip" / "wheels"
    return next(iter(sorted(cache.rglob("llama_cpp_python-0.3.36-*.whl"))), None) if cache.is_dir() else None


def llama_cpp_pip(wheel: Path) -> Any:
    """pip settings under which a GGUF Space's requirements install offline (a context manager): the
    cached wheel is found through PIP_FIND_LINKS, and the unreachable index is given up at once."""
    links = " ".join(filter(None, (os.environ.get("PIP_FIND_LINKS"), str(wheel.parent))))
    return mock.patch.dict(os.environ, {"PIP_FIND_LINKS": links, "PIP_RETRIES": "0"})


def main() -> None:
    """Build the venvs of the Spaces the suite starts, before a test run: the default (transformers)
    Space's, the ZeroGPU Space's (the same plus ``spaces``), and a GGUF Space's when llama-cpp-python's wheel is in pip's cache (else its test skips)."""
    from gym.hub.space import SpaceSettings, render_space

    default = SpaceSettings("acme/model", "acme/model-chat", "cpu-basic", "transformers", "GYM_API_KEY")
    zerogpu = SpaceSettings("acme/model", "acme/model-chat", "zero-a10g")  # its requirements add `spaces`
    wanted = [(default, nullcontext()), (zerogpu, nullcontext())]
    wheel = llama_cpp_wheel()
    if wheel is not None:
        wanted.append((gguf_space_settings(), llama_cpp_pip(wheel)))
    for settings, pip_settings in wanted:
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as scratch, pip_settings:
            folder = render_space(Path(scratch) / "space", settings)
            try:
                python = space_python(folder)
            except AssertionError as error:  # the Space test that needs it reports the same pip error
                print(f"Space venv ({settings.backend}) not built: {str(error).splitlines()[0]}")
                continue
        print(f"Space venv ({settings.backend}): {python.parent.parent} ({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
