"""The Hub double's account plans: what ``whoami`` says about them, and which Spaces they may create.

Since July 2026 the Hub refuses, on creating a Space or requesting its hardware:

- a **Gradio or Docker Space on free ``cpu-basic``** for an owner without PRO (user) or a Team/Enterprise
  plan (org): HTTP 402 with "Static Spaces are free for everyone, but hosting Gradio and Docker Spaces on
  free cpu-basic requires a PRO subscription. Subscribe at https://huggingface.co/pro" (the body quoted in
  ed-donner/agents#1469 and huggingface/agents-course#733; huggingface/skills PR #218 rewrote its hardware
  tiers for it). Static Spaces stay free.
- **ZeroGPU (``zero-a10g``)**: free personal accounts may host up to 2, PRO users 10, Team/Enterprise
  orgs 50 (skills PR #218); an org without a paid plan none (hub-docs ``spaces-zerogpu.md``: orgs enable
  ZeroGPU through a Team or Enterprise plan). Refused with 402 as well.
- **paid hardware** without a payment method: 403 "You must add a payment method to your account to
  upgrade your space's hardware..." (the Hub's answer quoted by Wauplin in gradio-app/gradio#3804).

``whoami-v2`` answers ``isPro`` and ``canPay`` for the user and ``canPay`` and ``plan`` per org, the
fields of huggingface.js ``packages/hub/src/lib/who-am-i.ts``.
"""

from typing import Any

FREE_CPU = "cpu-basic"
ZEROGPU = "zero-a10g"
PAID_SDKS = ("gradio", "docker")
NEEDS_PRO = (
    "Static Spaces are free for everyone, but hosting Gradio and Docker Spaces on free cpu-basic requires a "
    "PRO subscription. Subscribe at https://huggingface.co/pro"
)
NEEDS_BILLING = (
    "You must add a payment method to your account to upgrade your space's hardware. Visit your billing "
    "settings to add one: https://huggingface.co/settings/billing"
)
ZEROGPU_LIMITS = {"free": 2, "pro": 10, "org": 50}


def whoami_answer(who: Any) -> dict[str, Any]:
    """``/api/whoami-v2`` for a :class:`tests.hub.hub_double.HubToken`, with the plan fields."""
    orgs = [
        {"type": "org", "name": org, "roleInOrg": "write", "canPay": who.can_pay,
         "plan": "team" if who.paid(org) else "free"}
        for org in who.orgs
    ]  # fmt: skip
    return {
        "type": "user",
        "name": who.user,
        "isPro": who.pro,
        "canPay": who.can_pay,
        "orgs": orgs,
        "auth": {"type": "access_token", "accessToken": {"displayName": "gym", "role": who.role}},
    }


def _zerogpu_spaces(state: Any, namespace: str, name: str) -> int:
    return sum(
        1
        for key, info in state.repos.items()
        if key.startswith(f"space:{namespace}/") and key != f"space:{namespace}/{name}"
        and info.get("hardware") == ZEROGPU
    )  # fmt: skip


def space_refusal(state: Any, who: Any, namespace: str, body: dict[str, Any]) -> tuple[int, str] | None:
    """The Hub's (status, message) for a Space ``namespace/body['name']`` on ``body['hardware']``, or None."""
    sdk = body.get("sdk") or "gradio"
    hardware = body.get("hardware") or FREE_CPU
    paid = who.paid(namespace)
    if hardware == FREE_CPU:
        return None if paid or sdk not in PAID_SDKS else (402, NEEDS_PRO)
    if hardware == ZEROGPU:
        personal = namespace == who.user
        if not personal and not paid:
            return (
                402,
                f"ZeroGPU Spaces in organizations need a Team or Enterprise plan: {namespace} has none",
            )
        limit = ZEROGPU_LIMITS["org" if not personal else "pro" if paid else "free"]
        if _zerogpu_spaces(state, namespace, body.get("name", "")) >= limit:
            return 402, f"You have reached the maximum number of ZeroGPU Spaces ({limit}) for {namespace}"
        return None
    return None if who.can_pay else (403, NEEDS_BILLING)
