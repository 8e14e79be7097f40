"""One sentence for each way the Hub refuses a Space call (create, upload, secrets, hardware, restart).

The sentence names the *Space* repository, the cause and the fix, and says "retry" only where a retry can
help (429, 5xx, a network failure): a 402 (the plan) or a 403 (permissions, billing) comes back the same
however often it is retried. It never holds the token: only the variable's name. When the model was pushed
before the Space step failed, the sentence says so and how to finish (``gym deploy --space-only``).
"""

from __future__ import annotations

STEPS = {
    "create": "creating the Space",
    "upload": "uploading the Space's files to",
    "secret": "setting a secret of",
    "hardware": "requesting hardware for",
    "restart": "restarting",
    "runtime": "reading the runtime of",
}


def status_and_message(error: BaseException) -> tuple[int | None, str]:
    """The HTTP status of a Hub client error (None for a network failure) and the Hub's own message."""
    response = getattr(error, "response", None)
    status = getattr(response, "status_code", None)
    message = getattr(error, "server_message", None) or ""
    if not message and response is not None:
        try:
            message = response.headers.get("X-Error-Message", "") or ""
        except Exception:  # noqa: BLE001 - a response without headers has no message to add
            message = ""
    return status, " ".join(str(message).split())[:300]


def _network(error: BaseException) -> bool:
    name = type(error).__name__
    return "Connect" in name or "Timeout" in name or isinstance(error, (ConnectionError, TimeoutError))


def describe_hub_error(error: BaseException, doing: str, token_env: str | None) -> str:
    """A Hub call that is not about one repository (``whoami``): one sentence."""
    status, message = status_and_message(error)
    token = f"${token_env}" if token_env else "the Hub token"
    if status == 401:
        return f"the Hub refused {token} (401 unauthorized) while {doing}: create a new token and set it"
    if status is not None and status >= 500 or status == 429:
        return f"the Hub failed while {doing} (HTTP {status}); retry in a few minutes"
    if status is not None:
        return f"the Hub answered HTTP {status} while {doing}" + (f": {message}" if message else "")
    if _network(error):
        return f"cannot reach the Hub ({type(error).__name__}) while {doing}; retry when it is reachable"
    return f"{doing} failed ({type(error).__name__})"


def describe_space_error(
    error: BaseException,
    step: str,
    space_repo: str,
    *,
    token_env: str,
    hardware: str | None = None,
    model_pushed: str | None = None,
) -> str:
    """One sentence for a failed Space ``step`` (a key of :data:`STEPS`), naming ``space_repo``."""
    status, message = status_and_message(error)
    doing = (
        f"{STEPS.get(step, step)} {space_repo}" if step != "create" else f"creating the Space {space_repo}"
    )
    finish = "`gym deploy --space-only`" if model_pushed else "`gym deploy`"
    landed = f"; the model {model_pushed} was pushed, the Space was not updated" if model_pushed else ""
    said = f" ({message})" if message else ""
    if status == 401:
        cause = f"the Hub refused the token in ${token_env} (401 unauthorized) while {doing}"
        fix = f"set a valid write token, then run {finish}"
    elif status == 402:
        cause = (
            f"the Hub refused {space_repo} on {hardware or 'its hardware'} (HTTP 402: the owner's plan){said}"
        )
        fix = (
            'set space.hardware = "auto" (the free hardware the plan allows: zero-a10g for a free personal '
            f"account) or subscribe, then run {finish}; retrying as it is cannot help"
        )
    elif status == 403 and "payment" in message.lower():
        cause = (
            f"the Hub refused paid hardware {hardware or ''} for {space_repo} (HTTP 403: no payment method)"
        )
        fix = f'add one at https://huggingface.co/settings/billing or set space.hardware = "auto", then run {finish}'
    elif status == 403:
        cause = f"the token in ${token_env} may not write to {space_repo} (403 forbidden){said}"
        fix = f"use a write token of its owner (or a member of its organization), then run {finish}"
    elif status == 404:
        cause = f"the Hub does not know {space_repo} (404) while {doing}; it may have been deleted meanwhile"
        fix = f"run {finish} again to create it"
    elif status == 409:
        cause = f"the Hub answered 409 (conflict) while {doing}{said}: a repository of that name may exist as another type"
        fix = "choose another space.repo_id (or --space-id)"
    elif status == 429:
        cause = f"the Hub rate-limited {doing} (HTTP 429)"
        fix = f"retry {finish} in a few minutes"
    elif status is not None and status >= 500:
        cause = f"the Hub failed while {doing} (HTTP {status}, a server error)"
        fix = f"retry {finish} later"
    elif status is not None:
        cause = f"the Hub answered HTTP {status} while {doing}{said}"
        fix = f"fix what it says, then run {finish}"
    elif _network(error):
        cause = f"cannot reach the Hub ({type(error).__name__}) while {doing}"
        fix = f"retry {finish} when it is reachable"
    else:
        cause = f"{doing} failed ({type(error).__name__})"
        fix = f"run {finish} again"
    return f"{cause}{landed}; {fix}"
