"""Prices and GPU counts of Hugging Face Jobs flavors, for the plan (the table is :mod:`gym.config.job_flavors`).

The Hub's own list (``HfApi.list_jobs_hardware``, ``/api/jobs/hardware``) wins when a token is at hand:
``gym launch --cloud`` asks it before uploading anything, so a flavor the table lists but the account is not
offered is refused before anything runs.
"""

from __future__ import annotations

from gym.config.job_flavors import FLAVORS


def gpu_count(flavor: str) -> int:
    """GPUs of a flavor (0 for CPU), from its description ("4x L4 96 GB")."""
    what = FLAVORS[flavor][0]
    return int(what.split("x", 1)[0]) if "x " in what else 0


def price_line(flavor: str, hours: float) -> str:
    """The plan's price: per hour and, with a runtime bound, the most the run can cost."""
    what, price = FLAVORS[flavor]
    line = f"{flavor} ({what}): ${price:.2f}/h"
    if hours:
        line += f", at most ${price * hours:.2f} for compute.max_runtime_hours = {hours:g}"
    return line


def hub_flavors(api: object) -> dict[str, float] | None:
    """The flavors the Hub offers now (name -> USD/hour), or None when it cannot be asked."""
    try:
        listed = api.list_jobs_hardware()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - offline: the table above is the answer
        return None
    per_hour = {"second": 3600, "minute": 60, "hour": 1}
    return {
        str(item.name): float(getattr(item, "unit_cost_usd", 0) or 0)
        * per_hour.get(str(getattr(item, "unit_label", "")), 1)
        for item in listed
        if getattr(item, "name", None)
    }


def account_problem(api: object) -> str | None:
    """Why the token's account cannot run Jobs at all, in one sentence, else None (also when the Hub cannot
    be asked: the launch asks again). Jobs bill the account's credit balance ("available to any user or
    organization with a positive credit balance", huggingface_hub's Jobs guide); ``whoami-v2``'s ``canPay``
    says whether the account has a payment method to draw on."""
    try:
        who = api.whoami()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - unreachable or refused: the launch itself says so
        return None
    if who.get("canPay") is False:
        name = who.get("name", "this account")
        return (
            f"Hugging Face Jobs bill the account's credit balance and {name} has no payment method or credits "
            "(the Hub's whoami says canPay: false); add one at https://huggingface.co/settings/billing, or "
            'run on SkyPilot (compute.provider = "skypilot")'
        )
    return None
