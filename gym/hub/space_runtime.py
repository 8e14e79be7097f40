"""After `gym deploy` pushed a Space: follow its runtime until it runs or fails, then ask it one question.

A push is not a deploy: the Hub builds the Space from its ``requirements.txt`` and starts ``app.py``
afterwards, and either can fail (a requirement that does not install is ``BUILD_ERROR``, an app that
exits is ``RUNTIME_ERROR``, a README header the Hub rejects is ``CONFIG_ERROR``; on ZeroGPU an app
without an ``@spaces.GPU`` function is a ``RUNTIME_ERROR`` too). :func:`follow_space` polls
:meth:`huggingface_hub.HfApi.get_space_runtime` with a bounded wait and prints a progress line, so
`gym deploy` (and the Action's comment and commit status, which report its exit) says what the user
will find:

- ``RUNNING``: the Space's URL, read from the runtime's ``domains`` (the address the Hub routes to the
  app), and one chat request through the Space's own OpenAI-compatible API at temperature 0, whose
  first line is printed: a Space that runs but cannot answer is not reported as deployed.
- a failed stage: the last lines of the build or run log (``HfApi.fetch_space_logs``) in a
  :class:`gym.hub.push.DeployError`, so the command exits 1.
- still waiting after the limit: a :class:`DeployError` naming the stage, the seconds waited and where
  the logs are.

Tokens and the Space's API key are handed to the clients only, and scrubbed from whatever is printed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

FAILED = ("BUILD_ERROR", "RUNTIME_ERROR", "CONFIG_ERROR")
LOG_LINES = 12  # the log lines a failure shows
POLL_S = 2.0
PROGRESS_EVERY_S = 30.0  # a progress line at least this often while the stage stays the same
QUESTION = "Say hello in one short sentence."


def space_url(runtime_raw: dict[str, Any], space_repo: str) -> str:
    """Where the running app answers: the runtime's first domain (https; http only for a loopback address,
    which is how a local stand-in of the Hub names its app), else the Hub's usual ``*.hf.space`` host."""
    domains = [d.get("domain") for d in runtime_raw.get("domains") or [] if isinstance(d, dict)]
    domain = next((d for d in domains if d), None)
    if domain is None:
        domain = space_repo.lower().replace("/", "-").replace(".", "-").replace("_", "-") + ".hf.space"
    loopback = domain.split(":")[0] in ("127.0.0.1", "localhost")
    return f"{'http' if loopback else 'https'}://{domain}"


def _log_tail(api: Any, space_repo: str, build: bool, secrets: tuple[str | None, ...]) -> list[str]:
    """The last lines of the Space's build (or run) log; [] when the Hub gives none."""
    from gym.hub.push import scrub

    try:
        lines = [line.rstrip("\n") for line in api.fetch_space_logs(space_repo, build=build)]
    except Exception:  # noqa: BLE001 - no log is a shorter message, not a second failure
        return []
    return [scrub(line, *secrets) for line in lines if line.strip()][-LOG_LINES:]


def _failure(api: Any, space_repo: str, stage: str, raw: dict[str, Any], secrets: tuple[str | None, ...]):
    from gym.hub.push import DeployError, scrub

    build = stage == "BUILD_ERROR"
    what = {"BUILD_ERROR": "failed to build", "RUNTIME_ERROR": "failed to start",
            "CONFIG_ERROR": "has a configuration the Hub rejects"}[stage]  # fmt: skip
    reason = scrub(str(raw.get("errorMessage") or ""), *secrets).strip()
    tail = _log_tail(api, space_repo, build, secrets)
    log = "build" if build else "run"
    sentence = (
        f"the Space {space_repo} {what} ({stage}{': ' + reason if reason else ''}); fix it and run `gym deploy` "
        f"again (its {log} log: {api.endpoint}/spaces/{space_repo}?logs={'build' if build else 'container'})"
    )
    lines = [f"  {line}" for line in tail]
    return DeployError("\n".join([sentence, *([f"last lines of its {log} log:", *lines] if lines else [])]))


def ask_space(url: str, model: str, api_key: str | None, timeout_s: float = 120) -> str:
    """The Space's answer to one chat message through its OpenAI-compatible API, at temperature 0."""
    import openai

    client = openai.OpenAI(
        base_url=url + "/v1", api_key=api_key or "unused", max_retries=1, timeout=timeout_s
    )
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": QUESTION}],
                                           max_tokens=16, temperature=0)  # fmt: skip
    return reply.choices[0].message.content or ""


def follow_space(
    api: Any,
    space_repo: str,
    *,
    model: str,
    timeout_s: float,
    echo: Callable[[str], None] = print,
    api_key: str | None = None,
    secrets: tuple[str | None, ...] = (),
    poll_s: float = POLL_S,
) -> str:
    """Wait (at most ``timeout_s``) for the Space to run, then ask it one question; return its URL.

    ``model`` is the name the Space's API serves; ``api_key`` the value of its API key secret (None when
    the Space is open). Raises :class:`gym.hub.push.DeployError` on a failed stage, an unanswered
    question or a timeout, with ``secrets`` (and the key) scrubbed from the message.
    """
    from gym.hub.push import DeployError, scrub

    hidden = (*secrets, api_key)
    started = time.monotonic()
    shown, shown_at = "", 0.0
    while True:
        elapsed = time.monotonic() - started
        try:
            runtime = api.get_space_runtime(space_repo)
            stage, raw = str(runtime.stage), dict(runtime.raw)
        except Exception as error:  # noqa: BLE001 - a failed poll is retried until the limit
            stage, raw = f"unknown ({type(error).__name__})", {}
        if stage != shown or elapsed - shown_at >= PROGRESS_EVERY_S:
            echo(f"Space {space_repo}: {stage} ({elapsed:.0f} s)")
            shown, shown_at = stage, elapsed
        if stage == "RUNNING":
            break
        if stage in FAILED:
            raise _failure(api, space_repo, stage, raw, hidden)
        if elapsed >= timeout_s:
            raise DeployError(
                f"the Space {space_repo} is still {stage} after {elapsed:.0f} s; the push landed, so follow it at "
                f"{api.endpoint}/spaces/{space_repo} (its logs there) or wait longer with --wait-timeout SECONDS"
            )
        time.sleep(poll_s)
    url = space_url(raw, space_repo)
    echo(f"Space {space_repo} RUNNING at {url}")
    try:
        answer = ask_space(url, model, api_key)
    except Exception as error:  # noqa: BLE001 - phrased, never a traceback
        raise DeployError(
            scrub(
                f"the Space {space_repo} is RUNNING but its API at {url}/v1 did not answer a chat request "
                f"({type(error).__name__}: {error}); see its run log at {api.endpoint}/spaces/{space_repo}",
                *hidden,
            )  # fmt: skip
        ) from None
    first = (answer.strip().splitlines() or [""])[0]
    echo(f"Space {space_repo} answered a chat request: {scrub(first, *hidden)!r}")
    return url
