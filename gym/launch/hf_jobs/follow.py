"""A Hugging Face job seen from a later process: follow it to its end, ask how it is, cancel it.

The Action launches a job in one workflow run and asks about it (or cancels it for a newer approved
commit) in another, on a fresh runner: the job id it recorded in its sticky comment is all it has. A job
is the recorded one only when the Hub still has that id *and* its ``gym-run`` label is the recorded name
(:func:`gym.launch.task.run_name`: repository + config), so a job of another config or repository is
never reported as ours, nor cancelled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gym.launch.hf_jobs.jobs import ENDED, ended_sentence

Echo = Callable[[str], None]
RUN_LABEL = "gym-run"


def _api(token: str | None) -> Any:
    from huggingface_hub import HfApi

    return HfApi(token=token)


def _phrase(error: BaseException, doing: str) -> str:
    from gym.hub.space_errors import describe_hub_error

    return describe_hub_error(error, doing, "HF_TOKEN")


def _inspect(api: Any, job_id: str) -> Any | None:
    """The job, or None when the Hub has no such job (404)."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        return api.inspect_job(job_id=job_id)
    except HfHubHTTPError as error:
        if getattr(error.response, "status_code", None) == 404:
            return None
        raise


def follow_job(job_id: str, token: str | None, echo: Echo = print) -> tuple[dict[str, Any] | None, str]:
    """Stream the job's log until it ends; its eval results (the marked line ``gym launch`` prints with
    ``GYM_EMIT_RESULTS=1``) or None, and how it ended in one sentence (a timeout named as ``TIMEOUT``)."""
    from gym.launch.results import MARKER, results_from_lines
    from gym.launch.task import LaunchError

    api = _api(token)
    lines: list[str] = []
    try:
        for line in api.fetch_job_logs(job_id=job_id, follow=True):
            lines.append(line)
            if MARKER not in line:
                echo(line)
        job = api.inspect_job(job_id=job_id)
    except Exception as error:  # noqa: BLE001 - one sentence, no token
        raise LaunchError(_phrase(error, f"following Hugging Face job {job_id}")) from None
    return results_from_lines(lines), ended_sentence(job) or f"job {job_id} {job.status.stage}"


def job_state(job_id: str, name: str, token: str | None) -> tuple[str, bool] | None:
    """How the recorded job is now (its stage, or how it ended) and whether it ended; None when the Hub has
    no job of that id carrying ``name`` as its ``gym-run`` label."""
    from gym.launch.task import LaunchError

    try:
        job = _inspect(_api(token), job_id)
    except Exception as error:  # noqa: BLE001
        raise LaunchError(_phrase(error, f"asking about Hugging Face job {job_id}")) from None
    if job is None or (job.labels or {}).get(RUN_LABEL) != name:
        return None
    stage = str(job.status.stage if job.status else "")
    return (ended_sentence(job) or stage, stage in ENDED)


def cancel_own_job(job_id: str, name: str, token: str | None) -> bool:
    """Cancel the recorded job if it is ours and still runs; False when there was nothing of ours to cancel."""
    from gym.launch.task import LaunchError

    state = job_state(job_id, name, token)
    if state is None or state[1]:
        return False
    try:
        _api(token).cancel_job(job_id=job_id)
    except Exception as error:  # noqa: BLE001
        raise LaunchError(_phrase(error, f"cancelling Hugging Face job {job_id}")) from None
    return True
