"""An hourly price for the plan, from SkyPilot's catalog as it is cached on this machine, never the network.

SkyPilot keeps each cloud's price list as a CSV under ``~/.sky/catalogs/<version>/<cloud>/vms.csv``
and downloads it on first use. The action asks the catalog only about clouds whose CSV is already
there (a runner that restores ``~/.sky/catalogs`` from a cache, or a self-hosted one), so planning a
pull request never waits on a download; with nothing cached the price is said to be unknown.

For each candidate accelerator the estimate is the cheapest instance SkyPilot would pick for it
(:func:`sky.catalog.get_instance_type_for_accelerator`, then :func:`sky.catalog.get_hourly_cost`,
spot or on-demand as the config says), times the number of nodes. SkyPilot itself takes whichever
candidate is available and cheapest, so the range across candidates is what a maintainer approves.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class PriceEstimate:
    """Per candidate accelerator: its cheapest cached offer, or why there is none."""

    per_candidate: dict[str, str] = field(default_factory=dict)  # "A100:1" -> "$3.67/h (aws p4d.24xlarge)"
    low: float | None = None
    high: float | None = None
    unknown: str = ""  # why no price at all

    def summary(self, nodes: int, max_hours: float = 0) -> str:
        """One line: the hourly range for all nodes and, with a runtime limit, the most a run can cost."""
        if self.low is None or self.high is None:
            return f"unknown ({self.unknown})"
        span = f"${self.low:,.2f}/h" if self.low == self.high else f"${self.low:,.2f}–${self.high:,.2f}/h"
        line = f"≈ {span} for {nodes} node{'s' if nodes > 1 else ''} (cheapest cached offer per candidate)"
        if max_hours:
            line += f", at most ≈ ${self.high * max_hours:,.2f} for {max_hours:g} h"
        return line


def _cached_clouds() -> list[str]:
    """Clouds with a price list on disk, found without importing SkyPilot (which takes seconds)."""
    root = Path(os.path.expanduser(os.environ.get("SKY_RUNTIME_DIR", "~"))) / ".sky" / "catalogs"
    return sorted({path.parent.name for path in root.glob("*/*/vms.csv")})


def _split(accelerator: str) -> tuple[str, float]:
    name, _, count = accelerator.partition(":")
    try:
        return name, float(count) if count else 1.0
    except ValueError:
        return name, 1.0


def estimate(accelerators: list[str], *, use_spot: bool, num_nodes: int, infra: str | None) -> PriceEstimate:
    """The hourly price range of the candidates on the cached catalogs (``infra`` narrows the cloud)."""
    result = PriceEstimate()
    wanted = (infra or "").split("/")
    cloud, region = wanted[0].lower(), (wanted[1] if len(wanted) > 1 and wanted[1] else None)
    cached = _cached_clouds()
    clouds = [c for c in cached if not cloud or c == cloud]
    if not clouds:
        where = f"for {cloud} " if cloud else ""
        result.unknown = f"no SkyPilot price catalog {where}is cached on this runner"
        return result
    try:
        import sky.catalog as catalog
        import sky.catalog.common as common
    except ImportError:
        result.unknown = "SkyPilot is not installed here"
        return result
    clouds = [c for c in clouds if os.path.exists(common.get_catalog_path(f"{c}/vms.csv"))]
    if not clouds:
        result.unknown = "the cached price catalogs are for another SkyPilot version"
        return result
    prices: list[float] = []
    for accelerator in accelerators:
        name, count = _split(accelerator)
        best: tuple[float, str, str] | None = None
        for each in clouds:
            try:
                types, _ = catalog.get_instance_type_for_accelerator(
                    name, count, use_spot=use_spot, region=region, clouds=each
                )
                for instance in types or []:
                    cost = catalog.get_hourly_cost(instance, use_spot, region, None, clouds=each)
                    if best is None or cost < best[0]:
                        best = (cost, each, instance)
            except Exception:  # a cloud's catalog that cannot answer: another may
                continue
        if best is None:
            result.per_candidate[accelerator] = f"not in the cached catalogs ({', '.join(clouds)})"
            continue
        hourly = best[0] * num_nodes
        prices.append(hourly)
        kind = "spot" if use_spot else "on-demand"
        result.per_candidate[accelerator] = f"${hourly:,.2f}/h {kind} ({best[1]} {best[2]})"
    if prices:
        result.low, result.high = min(prices), max(prices)
    else:
        result.unknown = f"none of the accelerators is in the cached catalogs ({', '.join(clouds)})"
    return result
