"""What happened to one config: validation problems, the plan, the launch. Rendered by :mod:`gym.launch.report.render`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.launch.report.sticky import RunState


@dataclass
class PlanView:
    """The launch plan as shown to a reviewer: where it runs, on what, and the checked task."""

    target: str  # "cloud" | "runner"
    name: str = ""
    accelerators: list[str] = field(default_factory=list)  # candidates, in preference order
    use_spot: bool | None = None
    managed: bool | None = None
    num_nodes: int | None = None
    infra: str | None = None
    secrets: list[str] = field(default_factory=list)  # names only
    notes: list[str] = field(default_factory=list)
    task_yaml: str = ""
    stages: list[str] = field(default_factory=list)
    price: str = ""  # hourly estimate from SkyPilot's cached catalog, or "unknown (why)"
    max_runtime: str = ""  # what bounds the run's duration
    provider: str = "skypilot"  # compute.provider: "skypilot" | "hf-jobs" (target "cloud")
    flavor: str = ""  # a Hugging Face Jobs flavor (provider "hf-jobs")


@dataclass
class LaunchOutcome:
    """What a launcher returns: the job id (cloud), a one-line detail, and eval_results.json if there is one."""

    job_id: str | None = None
    detail: str = ""
    results: dict[str, Any] | None = None


@dataclass
class ConfigOutcome:
    """Everything the comment, the step summary and the outputs say about one config."""

    path: str
    mode: str
    reason: str
    issues: list[str] = field(default_factory=list)
    plan: PlanView | None = None
    launch: LaunchOutcome | None = None
    error: str = ""  # a plan or launch failure, one sentence
    log: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)  # one line each: why it launched or did not
    job: RunState | None = None  # the job the comment describes (this run's launch, or the previous one)

    @property
    def gates(self) -> dict[str, Any] | None:
        """The promotion gates' outcome (gym/eval/gates.py's GateReport as JSON) when the run had gates."""
        gates = (self.launch.results or {}).get("gates") if self.launch is not None else None
        return gates if isinstance(gates, dict) else None

    @property
    def ok(self) -> bool:
        gates_failed = self.gates is not None and self.gates.get("passed") is False
        return not self.issues and not self.error and not gates_failed

    def as_json(self, comment_url: str = "") -> dict[str, Any]:
        return {
            "config": self.path,
            "mode": self.mode,
            "valid": not self.issues,
            "ok": self.ok,
            "launched": self.launch is not None,
            "job_id": self.launch.job_id if self.launch else (self.job.job_id if self.job else None),
            "sha": self.job.sha if self.job else None,
            "job_state": self.job.state if self.job else None,
            "comment_url": comment_url or None,
            "results": self.launch.results if self.launch else None,
        }
