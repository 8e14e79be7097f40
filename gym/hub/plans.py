"""Which Space hardware the owner's plan can have, read from the token's ``whoami`` before anything is paid for.

Since July 2026 the Hub answers HTTP 402 to a Gradio or Docker Space on free ``cpu-basic`` unless its owner
has PRO (a user) or a Team/Enterprise plan (an org); free personal accounts may host up to two ZeroGPU
(``zero-a10g``) Spaces instead, and paid hardware needs a payment method (403 without one). Gym's default
``space.hardware = "auto"`` therefore picks from the plan: a paid owner gets ``cpu-basic`` (served from GGUF
weights by llama.cpp), a free personal account ``zero-a10g``. An explicit flavour the owner cannot have is
refused here, in one sentence naming the plan, the hardware and the options, so that ``gym deploy --dry-run``,
the first stage of ``gym launch`` and the Action's plan say it before a GPU hour is spent.

The plan fields are those of ``/api/whoami-v2`` (``isPro`` and ``canPay`` of the user, ``plan`` and ``canPay``
of each org). ``gym validate`` never calls this: it stays offline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

AUTO = "auto"
FREE_CPU = "cpu-basic"
ZEROGPU = "zero-a10g"
PAID_ORG_PLANS = ("team", "enterprise", "plus", "pro")  # what whoami names a paid org plan

_WHOAMI: dict[str, dict[str, Any]] = {}  # token -> answer, for one process (never written anywhere)


class PlanError(ValueError):
    """The owner's plan cannot have the Space asked for; already one sentence, free of secrets."""


class PlanUnknown(PlanError):
    """The Hub could not be asked for the plan (unreachable, rate-limited, failing): nothing was refused."""


@dataclass(frozen=True)
class OwnerPlan:
    """The plan of the account that will own the Space."""

    namespace: str
    personal: bool  # the token's own user, else one of its orgs
    paid: bool  # PRO (user) or a Team/Enterprise plan (org)
    can_pay: bool  # a payment method on file

    @property
    def label(self) -> str:
        if self.personal:
            return f"{self.namespace} is a {'PRO' if self.paid else 'free personal'} account"
        return f"the organization {self.namespace} is on {'a paid' if self.paid else 'no paid'} plan"


def whoami(token: str) -> dict[str, Any]:
    """The Hub's ``whoami`` for ``token``, asked once per process; errors are one sentence without the token."""
    if token not in _WHOAMI:
        from huggingface_hub import HfApi

        try:
            _WHOAMI[token] = HfApi(token=token).whoami()
        except Exception as error:  # noqa: BLE001 - re-raised as a sentence without the token
            from gym.hub.space_errors import describe_hub_error, status_and_message

            sentence = describe_hub_error(error, "asking the Hub who the token belongs to", None)
            refused = status_and_message(error)[0] in (401, 403)
            raise (PlanError if refused else PlanUnknown)(sentence) from None
    return _WHOAMI[token]


def owner_plan(answer: dict[str, Any], namespace: str) -> OwnerPlan:
    """The plan of ``namespace`` as the token's ``whoami`` answer describes it."""
    user = answer.get("name", "")
    if namespace == user:
        return OwnerPlan(namespace, True, bool(answer.get("isPro")), bool(answer.get("canPay")))
    for org in answer.get("orgs") or []:
        if org.get("name") == namespace:
            paid = str(org.get("plan") or "").lower() in PAID_ORG_PLANS or bool(org.get("isEnterprise"))
            return OwnerPlan(namespace, False, paid, bool(org.get("canPay")))
    raise PlanError(
        f"the token belongs to {user}, who is not a member of {namespace}: it cannot create the Space there; "
        f"use a Space id under {user} or one of its organizations, or a token of a member of {namespace}"
    )


def choose_hardware(plan: OwnerPlan, space_repo: str) -> str:
    """``space.hardware = "auto"``: the free hardware the owner's plan can host a Gradio Space on."""
    if plan.paid:
        return FREE_CPU
    if plan.personal:
        return ZEROGPU
    raise PlanError(
        f'space.hardware = "auto" has no free choice for {space_repo}: {plan.label}, and the Hub hosts Gradio '
        "Spaces of an organization on cpu-basic or ZeroGPU only with a Team or Enterprise plan; options: put the "
        "Space under your personal account (space.repo_id, ZeroGPU is free there), pick paid hardware such as "
        'space.hardware = "cpu-upgrade" (needs a payment method), or subscribe the organization'
    )


def hardware_refusal(plan: OwnerPlan, hardware: str, space_repo: str) -> str | None:
    """Why the Hub would refuse ``hardware`` for ``space_repo`` (one sentence), or None when it would not."""
    options = 'options: space.hardware = "auto" (the free hardware your plan allows)'
    if hardware == FREE_CPU and not plan.paid:
        return (
            f'space.hardware = "cpu-basic" would be refused for {space_repo} (HTTP 402): {plan.label}, and since '
            "July 2026 the Hub hosts Gradio Spaces on free cpu-basic only for PRO users and Team/Enterprise "
            f"organizations; {options}"
            + (', "zero-a10g" (up to two ZeroGPU Spaces free)' if plan.personal else "")
            + ", paid hardware with a payment method, or a PRO/Team subscription"
        )
    if hardware == ZEROGPU and not plan.personal and not plan.paid:
        return (
            f'space.hardware = "zero-a10g" would be refused for {space_repo} (HTTP 402): {plan.label}, and '
            f"organizations host ZeroGPU Spaces only with a Team or Enterprise plan; {options}, a Space under your "
            "personal account, or paid hardware with a payment method"
        )
    if hardware not in (FREE_CPU, ZEROGPU) and not plan.can_pay:
        return (
            f'space.hardware = "{hardware}" would be refused for {space_repo} (HTTP 403): it is paid hardware and '
            f"{plan.namespace} has no payment method on file; add one at https://huggingface.co/settings/billing, "
            f"or {options.removeprefix('options: ')}"
        )
    return None


def resolve_hardware(requested: str, space_repo: str, token: str | None) -> tuple[str, str]:
    """The hardware to deploy on and how it was chosen; raises :class:`PlanError` when the plan forbids it.

    Without a token nothing can be checked: ``auto`` stays ``auto`` (the caller renders for ``cpu-basic``
    and says so) and an explicit flavour is taken as written.
    """
    if token is None:
        if requested == AUTO:
            return AUTO, "auto: chosen from the owner's plan once a Hub token is set"
        return requested, f"{requested}: not checked against the owner's plan (no Hub token)"
    plan = owner_plan(whoami(token), space_repo.split("/")[0])
    if requested == AUTO:
        chosen = choose_hardware(plan, space_repo)
        return chosen, f"auto → {chosen}: {plan.label}"
    refusal = hardware_refusal(plan, requested, space_repo)
    if refusal is not None:
        raise PlanError(refusal)
    return requested, f"{requested}: allowed, {plan.label}"


def check_space_plan(config: Any) -> str | None:
    """Before any training: the run's Space must be one the owner's plan can have (:class:`PlanError` if not).

    Only a run that will push (``[hub]`` with ``push != "none"`` and a ``[space]``) with its token set is
    checked; returns how the hardware was chosen (or why it could not be checked: a Hub that does not answer
    refuses nothing), or None when there is nothing to check.
    """
    import os

    hub, space = config.hub, config.space
    if hub is None or space is None or hub.push == "none":
        return None
    token = os.environ.get(hub.token_env)
    if not token:
        return None
    try:
        hardware, note = resolve_hardware(space.hardware, space.repo_id, token)
    except PlanUnknown as error:  # the Hub did not answer: nothing was refused, the deploy asks again
        return f"{space.hardware!r}: not checked against the owner's plan ({error})"
    return note
