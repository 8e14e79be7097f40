"""The champion: the model the ``[hub]`` repository holds now, and the scores its card records.

Scores come from the card's ``model-index`` (what the Hub shows); the settings they were measured with
and their standard errors from the ``eval_results.json`` Gym pushes beside it. Everything is read at
the commit the repository's ``main`` points to, through huggingface_hub's HTTP session, and that commit
is recorded so the promoted card can say which model it replaced.

What the Hub answers is input from the network, read with bounds (docs/gates.md, "The champion"):

- **time**: each request waits at most ``HF_HUB_ETAG_TIMEOUT`` seconds (huggingface_hub's setting, 10 by
  default) for the next bytes, and the whole lookup ends after three times that;
- **size**: the repository's info, the card and ``eval_results.json`` are read up to :data:`MAX_INFO_BYTES`,
  :data:`MAX_CARD_BYTES` and :data:`~gym.eval.report.MAX_RESULTS_BYTES`, the card's YAML metadata up to
  :data:`MAX_METADATA_BYTES`, and compressed answers are refused (a small gzip or brotli body can stand for
  gigabytes);
- **expansion**: the metadata is parsed by :class:`~gym.config.migrate.bounded_yaml.BoundedLoader`, the
  loader that bounds `gym init --from` input, so an alias bomb is refused rather than walked;
- **the disk**: nothing is written. ``hf_hub_download`` would name cache files after the answer's
  ``ETag`` and commit id, which a hostile endpoint can make a path out of the cache (huggingface_hub
  issue #4086 is the same class of bug for file names); the files are read into memory instead, and the
  commit id must be 40 hexadecimal digits.

Every failure is a :class:`GateError`: one sentence, never the token, and the gate that needs the
champion blocks the push.
"""

from __future__ import annotations

import importlib
import math
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from gym.eval.gates import Champion, GateError
from gym.eval.judge.answers import ANSWERS_FILE, MAX_ANSWERS_BYTES
from gym.eval.report import MAX_RESULTS_BYTES, EvalReport, ResultsError

ADVICE = "push this run with `gym deploy --force` to replace it, or remove the champion gates from eval.gates.rules"
MAX_INFO_BYTES = 2_000_000  # the repository's info: a Gym model repository lists a few dozen files
MAX_CARD_BYTES = 1_000_000  # README.md: a Gym card is a few kilobytes
MAX_METADATA_BYTES = 256_000  # its YAML block: parsed at ~0.3 MB/s, so well under a second
COMMIT = re.compile(r"[0-9a-f]{40}")
RETRY = "nothing was pushed, retry later"


class _Refused(Exception):
    """A bound was hit; ``args[0]`` is the end of the sentence (what, and what to do)."""


def read_champion(
    repo: str,
    token: str | None,
    token_env: str = "HF_TOKEN",
    *,
    endpoint: str | None = None,
    timeout: float | None = None,
) -> Champion | None:
    """The champion of ``repo``; None when the repository does not exist yet (a first deployment).

    ``endpoint`` defaults to huggingface_hub's (``HF_ENDPOINT``), ``timeout`` (seconds a request may wait
    for the next bytes) to its ``HF_HUB_ETAG_TIMEOUT``; the whole lookup ends after three times ``timeout``.

    Raises :class:`GateError` (one sentence, no token) when it exists but its scores cannot be used.
    """
    if not token:
        raise GateError(
            f"champion gates read {repo} with the token in ${token_env}, which is not set; set it, or remove the "
            "champion gates from eval.gates.rules"
        )
    import httpx
    from huggingface_hub import constants
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError

    timeout = float(timeout if timeout is not None else constants.HF_HUB_ETAG_TIMEOUT)
    reader = _Reader(token, endpoint or constants.ENDPOINT, timeout)
    try:
        return _in_time(lambda: _read(repo, reader), reader.deadline)
    except RepositoryNotFoundError:
        return None
    except GateError:
        raise
    except _Refused as refusal:
        raise GateError(f"the champion {repo}: {refusal.args[0]}") from None
    except EntryNotFoundError:
        raise GateError(f"no champion to compare: {repo} lost its card while it was read; retry") from None
    except (httpx.TimeoutException, _client().TimeoutException):
        raise GateError(_late(repo, timeout)) from None
    except Exception as error:  # noqa: BLE001 - network and HTTP errors: one sentence, never the token
        status = getattr(getattr(error, "response", None), "status_code", None)
        how = f"HTTP {status}" if status else type(error).__name__
        raise GateError(f"cannot read the champion {repo} from the Hub ({how}); {RETRY}") from None


def _in_time(work: Callable[[], Champion], deadline: float) -> Champion:
    """``work()``'s result, or httpx's ReadTimeout once ``deadline`` passed: a Hub that sends its headers one
    slow line at a time, or redirects again and again, is not bounded by a per-read timeout alone. The
    abandoned request ends by itself (its reads are bounded too); nothing waits for it."""
    import httpx

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["champion"] = work()
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread as it is
            outcome["error"] = error

    worker = threading.Thread(target=run, name="gym-champion-lookup", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()) + 0.5)
    if worker.is_alive():
        raise httpx.ReadTimeout("the lookup's time is up")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["champion"]


def _late(repo: str, timeout: float) -> str:
    return (
        f"the Hub did not answer the champion lookup of {repo} in time (HF_HUB_ETAG_TIMEOUT={timeout:g} s a "
        f"request, {3 * timeout:g} s in all); {RETRY}, or raise HF_HUB_ETAG_TIMEOUT"
    )


def _read(repo: str, reader: _Reader) -> Champion:
    import json

    from huggingface_hub import hf_hub_url

    try:
        info = json.loads(reader.get(f"{reader.endpoint}/api/models/{repo}", "info", MAX_INFO_BYTES))
    except (ValueError, RecursionError):  # not JSON, a number too long, nested too deeply
        raise _Refused(f"the Hub's answer about it is not JSON; {RETRY}") from None
    sha = info.get("sha") if isinstance(info, dict) else None
    if not isinstance(sha, str) or not COMMIT.fullmatch(sha):
        raise _Refused(f"the Hub did not say which commit it is at (a 40-digit hexadecimal id); {RETRY}")
    siblings = info.get("siblings")
    files = (
        {s.get("rfilename") for s in siblings if isinstance(s, dict)} if isinstance(siblings, list) else set()
    )
    if "README.md" not in files:
        raise GateError(f"no champion to compare: {repo} has no model card with eval results; {ADVICE}")
    card = reader.get(hf_hub_url(repo, "README.md", revision=sha, endpoint=reader.endpoint), "README.md",
                      MAX_CARD_BYTES)  # fmt: skip
    scores = _card_scores(card)
    if not scores:
        raise GateError(
            f"no champion to compare: the card of {repo} has no eval results (model-index); {ADVICE}"
        )
    if "eval_results.json" not in files:
        raise GateError(
            f"the card of {repo} has scores but no eval_results.json with the settings they were measured with, "
            f"so no gate can be compared fairly with it; {ADVICE}"
        )
    url = hf_hub_url(repo, "eval_results.json", revision=sha, endpoint=reader.endpoint)
    try:
        report = EvalReport.parse(reader.get(url, "eval_results.json", MAX_RESULTS_BYTES))
    except ResultsError as error:
        raise _Refused(f"its eval_results.json {error}; {ADVICE}") from None
    for row in report.results:  # the card is what the Hub shows: its values are the champion's
        row.value = scores.get((row.task, row.metric))
    answers = None  # [eval.judge]: its recorded answers, judged against this run's (gym/eval/judge/run.py)
    if ANSWERS_FILE in files:
        url = hf_hub_url(repo, ANSWERS_FILE, revision=sha, endpoint=reader.endpoint)
        answers = reader.get(url, ANSWERS_FILE, MAX_ANSWERS_BYTES)
    return Champion(repo=repo, sha=sha, report=report, judge_answers=answers)


def _card_scores(card: bytes) -> dict[tuple[str, str], float]:
    """(task, metric) -> value from the card's ``model-index``; :class:`_Refused` past a bound."""
    import yaml
    from huggingface_hub.repocard import REGEX_YAML_BLOCK
    from huggingface_hub.repocard_data import model_index_to_eval_results

    from gym.config.migrate.bounded_yaml import BoundedLoader, TooLarge

    try:
        text = card.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused(f"its README.md is not UTF-8 text; {ADVICE}") from None
    match = REGEX_YAML_BLOCK.search(text)
    block = match.group(2) if match else ""
    if len(block.encode("utf-8")) > MAX_METADATA_BYTES:
        raise _Refused(
            f"the metadata of its README.md is more than {MAX_METADATA_BYTES:,} bytes, far more than a Gym card "
            f"holds; {ADVICE}"
        )
    try:
        metadata = yaml.load(block, Loader=BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except TooLarge as error:
        raise _Refused(f"the metadata of its README.md is refused: {error}; {ADVICE}") from None
    except (yaml.YAMLError, RecursionError):
        raise _Refused(f"the metadata of its README.md is not YAML that can be read; {ADVICE}") from None
    model_index = metadata.get("model-index") if isinstance(metadata, dict) else None
    if not model_index:
        return {}
    try:
        _, results = model_index_to_eval_results(model_index)
    except (KeyError, TypeError, AttributeError, ValueError):
        raise _Refused(f"the model-index of its README.md is not the Hub's format; {ADVICE}") from None
    return {
        (str(r.dataset_name or r.task_name), str(r.metric_type)): float(r.metric_value)
        for r in results
        if isinstance(r.metric_value, (int, float))
        and not isinstance(r.metric_value, bool)
        and math.isfinite(r.metric_value)  # an infinite champion score would make `>= champion` always hold
    }


class _Reader:
    """GETs through huggingface_hub's session (its headers, proxies, offline mode), each bounded in bytes and
    all of them together in time."""

    def __init__(self, token: str, endpoint: str, timeout: float) -> None:
        from huggingface_hub.utils import build_hf_headers

        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self.deadline = time.monotonic() + 3 * timeout
        # identity: a compressed body is refused below rather than inflated without bound
        self.headers = {**build_hf_headers(token=token), "Accept-Encoding": "identity"}

    def get(self, url: str, name: str, cap: int) -> bytes:
        """The body of ``url`` (at most ``cap`` bytes); huggingface_hub's errors for HTTP errors."""
        import httpx
        from huggingface_hub.utils import get_session, hf_raise_for_status

        left = self.deadline - time.monotonic()
        if left <= 0:
            raise httpx.ReadTimeout("the lookup's time is up")
        with get_session().stream(
            "GET", url, headers=self.headers, timeout=min(self.timeout, left)
        ) as response:
            if response.status_code >= 400:  # huggingface_hub's error, from at most 64 kB of the answer
                hf_raise_for_status(_bounded_copy(response, self._body(response, 65_536, strict=False)))
            encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise _Refused(
                    f"the Hub sent its {name} compressed ({encoding}) although asked not to; {RETRY}"
                )
            declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > cap:
                raise _Refused(_too_large(name, cap))
            return self._body(response, cap, strict=True, name=name)

    def _body(self, response: Any, cap: int, *, strict: bool, name: str = "") -> bytes:
        import httpx

        chunks, size = [], 0
        for chunk in response.iter_raw():
            if time.monotonic() > self.deadline:
                raise httpx.ReadTimeout("the lookup's time is up")
            size += len(chunk)
            if size > cap:
                if strict:
                    raise _Refused(_too_large(name, cap))
                break
            chunks.append(chunk)
        return b"".join(chunks)


def _too_large(name: str, cap: int) -> str:
    return f"its {name} is more than {cap:,} bytes, far more than Gym writes; {ADVICE}"


def _client() -> Any:
    """The HTTP client module huggingface_hub's session is built on: httpx in 1.x, its fork httpx2 in 2.x.
    Its exceptions and response class are the ones hf_raise_for_status and the session raise and read."""
    from huggingface_hub.utils import get_session

    return importlib.import_module(type(get_session()).__module__.split(".")[0])


def _bounded_copy(response: Any, body: bytes) -> Any:
    """``response`` with ``body`` as its whole content, for hf_raise_for_status to read its error from: a
    response of the session's own client, whose ``raise_for_status`` raises the error it catches."""
    client = importlib.import_module(type(response).__module__.split(".")[0])
    headers = [(k, v) for k, v in response.headers.items()
               if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]  # fmt: skip
    return client.Response(response.status_code, headers=headers, content=body, request=response.request)


def read_repo_file(repo: str, path: str, token: str | None, *, revision: str = "main",
                   cap: int = MAX_RESULTS_BYTES, timeout: float | None = None) -> bytes:  # fmt: skip
    """One file of the model ``repo`` at ``revision``, read with the champion lookup's bounds (the lineage of a
    push diffs against the champion's eval_results.json). Raises huggingface_hub's errors for HTTP errors,
    httpx's for the network, and ``_Refused`` past a bound."""
    from huggingface_hub import constants, hf_hub_url

    wait = float(timeout if timeout is not None else constants.HF_HUB_ETAG_TIMEOUT)
    reader = _Reader(token or None, constants.ENDPOINT, wait)  # type: ignore[arg-type]
    return reader.get(hf_hub_url(repo, path, revision=revision, endpoint=reader.endpoint), path, cap)
