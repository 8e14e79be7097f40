"""The pull-request comment (and step summary) for one config, always under GitHub's size limit.

The eval table is the model card's own (:func:`gym.hub.card.results_table_markdown`), so the PR, the
job summary and the card show the same numbers the same way. Text that comes from the PR (config
problems, the task YAML, logs) goes inside code fences longer than any backtick run in it, so it
cannot break out into markdown or HTML. A body that would pass GitHub's 65,536-character limit keeps
its head (status, problems, plan, results) and loses the middle of the YAML and the start of the log,
with a link to the workflow run where the full log is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gym.launch.report.outcome import ConfigOutcome, PlanView
from gym.markup import md_code, md_text

MAX_BODY = 65536  # GitHub's limit on an issue comment body, in characters
MARGIN = 512


def marker(config_path: str) -> str:
    """The hidden first line that identifies the sticky comment of ``config_path``."""
    safe = re.sub(r"[^\w./@+-]", "_", config_path)
    return f"<!-- gym-action config={safe} -->"


code = md_code  # names, ids, paths: shown verbatim in a code span (the action's own sentences are markdown)


def fence(text: str, lang: str = "text") -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}\n"


def _status(outcome: ConfigOutcome, sha: str = "") -> str:
    if outcome.issues:
        count = len(outcome.issues)
        return f"❌ {count} problem{'s' if count != 1 else ''} in the config"
    if outcome.gates is not None and outcome.gates.get("passed") is False:
        return "❌ promotion gates failed: not pushed"
    if outcome.error:
        return "❌ " + ("launch failed" if outcome.mode == "launch" else "cannot be planned")
    if outcome.launch is not None:
        return "🚀 launched" + (" and evaluated" if outcome.launch.results else "")
    job = outcome.job
    if job is not None and sha and job.sha == sha:
        return f"🔁 job {job.job_id} for this commit: {job.state}"
    return "✅ valid" + (", plan below" if outcome.plan else "")


def _plan_table(plan: PlanView) -> str:
    rows: list[tuple[str, str]] = []
    if plan.target == "cloud" and plan.provider == "hf-jobs":
        rows.append(("runs on", f"Hugging Face Jobs {code(plan.flavor)}, job labelled {code(plan.name)}"))
        rows.append(("spot", "no (Hugging Face Jobs has no spot instances)"))
        if plan.max_runtime:
            rows.append(("max runtime", plan.max_runtime))
        if plan.price:
            rows.append(("hourly price", plan.price))
    elif plan.target == "cloud":
        kind = "managed job (recovers from preemption)" if plan.managed else "cluster (autostops when idle)"
        rows.append(("runs on", f"SkyPilot {kind} {code(plan.name)}"))
        candidates = ", ".join(code(a) for a in plan.accelerators) or "—"
        rows.append(
            ("accelerators", candidates + (" (first available wins)" if len(plan.accelerators) > 1 else ""))
        )
        rows.append(("spot", "yes" if plan.use_spot else "no"))
        rows.append(("nodes", str(plan.num_nodes or 1)))
        if plan.infra:
            rows.append(("infra", code(plan.infra)))
        if plan.max_runtime:
            rows.append(("max runtime", plan.max_runtime))
        if plan.price:
            rows.append(("hourly price", plan.price))
    else:
        rows.append(("runs on", "this runner (`cloud: false`)"))
        rows.append(("stages", " → ".join(plan.stages)))
    rows.append(("secrets (names)", ", ".join(code(s) for s in plan.secrets) or "none"))
    table = "| | |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)
    notes = "".join(f"- {note}\n" for note in plan.notes)
    return table + ("\n" + notes if notes else "")


def _job_line(outcome: ConfigOutcome) -> str:
    job = outcome.job
    if job is None:
        return ""
    kind = "SkyPilot " + ("managed job" if job.managed else "cluster job")
    if job.provider == "hf-jobs":
        kind = "Hugging Face job"
    who = f" · approved by @{job.approved_by}" if job.approved_by else ""
    earlier = "".join(f"\n- earlier: {line}" for line in job.history[-5:])
    return (
        f"**Job:** {kind} {code(job.job_id)} · commit {code(job.sha[:12])} · "
        f"state **{job.state}**{who}{earlier}\n"
    )


def _results(outcome: ConfigOutcome) -> str:
    launch = outcome.launch
    if launch is None:
        return ""
    lines = [
        f"#### Run\n\n{launch.detail or 'launched'}"
        + (f" · job id {code(launch.job_id)}" if launch.job_id else "")
    ]
    if launch.results:
        from gym.eval.report import EvalReport, training_data_markdown
        from gym.hub.card import results_table_markdown

        report = EvalReport.from_dict({k: v for k, v in launch.results.items() if k != "gates"})
        base = f" (base {code(report.base_model)} → tuned)" if report.base_model else ""
        data = training_data_markdown(report.training_data)
        from gym.eval.judge import judge_markdown

        judge = judge_markdown(report.judge)  # [eval.judge]: win rates, intervals, disagreements (folded)
        lines.append(
            f"#### Evaluation{base}\n\n{results_table_markdown(report)}"
            + (f"\n{data}" if data else "")
            + (f"\n{judge}" if judge else "")
        )
        if outcome.gates is not None:
            lines.append(_gates(outcome.gates))
    elif outcome.ok:
        lines.append(
            "Evaluation results are not available yet: the job writes them to the model card when it finishes."
        )
    return "\n\n".join(lines) + "\n"


def _gates(data: dict) -> str:
    """The promotion gates: champion → this run → Δ, pass/fail per rule, and the model it would replace."""
    from gym.eval.gates import GateReport, gates_table_markdown

    gates = GateReport.from_dict(data)
    champion = gates.champion
    against = f" · champion {code(champion['repo'])} at {code(champion['sha'][:12])}" if champion else ""
    return f"#### Promotion gates{against}\n\n{md_text(gates.summary())}\n\n{gates_table_markdown(gates)}"


@dataclass
class _Section:
    title: str
    text: str
    lang: str
    keep_tail: bool  # logs: the end matters; YAML: the start


def _details(section: _Section) -> str:
    return f"<details><summary>{section.title}</summary>\n\n{fence(section.text, section.lang)}\n</details>\n"


def _shrink(section: _Section, budget: int, run_url: str) -> _Section:
    if len(section.text) <= budget:
        return section
    note = f"… truncated; the full text is in the workflow run{': ' + run_url if run_url else ''} …"
    keep = max(0, budget - len(note) - 2)
    text = (note + "\n" + section.text[-keep:]) if section.keep_tail else (section.text[:keep] + "\n" + note)
    return _Section(section.title, text, section.lang, section.keep_tail)


def render(outcome: ConfigOutcome, *, run_url: str = "", sha: str = "", limit: int = MAX_BODY) -> str:
    """The whole comment for one config; never longer than ``limit`` characters."""
    first = marker(outcome.path) + ("\n" + outcome.job.line() if outcome.job is not None else "")
    head = [first, f"### Gym · {code(outcome.path)} · {_status(outcome, sha)}", ""]
    head.append(f"**Mode:** {outcome.mode}\n")
    decisions = outcome.decisions or [outcome.reason]
    head.append("".join(f"- {line}\n" for line in decisions))
    job = _job_line(outcome)
    if job:
        head.append(job)
    if outcome.issues:
        head.append("#### Problems\n\n" + fence("\n".join(outcome.issues)))
    if outcome.error:
        head.append("#### Error\n\n" + fence(outcome.error))
    if outcome.plan is not None:
        head.append("#### Launch plan\n\n" + _plan_table(outcome.plan))
    results = _results(outcome)
    if results:
        head.append(results)
    footer = (
        "<sub>"
        + " · ".join(
            part
            for part in (
                f"[workflow run]({run_url})" if run_url else "",
                f"commit {code(sha[:12])}" if sha else "",
            )
            if part
        )
        + "</sub>\n"
    )
    sections = []
    if outcome.plan is not None and outcome.plan.task_yaml:
        if outcome.plan.provider == "hf-jobs":  # JobSpec.lines: secrets by name only
            sections.append(_Section("Hugging Face job spec", outcome.plan.task_yaml, "text", False))
        else:
            sections.append(
                _Section("SkyPilot task (secrets redacted)", outcome.plan.task_yaml, "yaml", False)
            )
    if outcome.log:
        sections.append(_Section("Log", "\n".join(outcome.log), "text", True))

    fixed = "\n".join(head) + "\n" + footer
    budget = limit - len(fixed) - MARGIN - 200 * len(sections)
    if sections:
        share = max(0, budget) // len(sections)
        spare = sum(max(0, share - len(s.text)) for s in sections)
        sections = [_shrink(s, share + spare, run_url) for s in sections]
    body = "\n".join(head) + "\n" + "".join(_details(s) + "\n" for s in sections) + footer
    if len(body) > limit:  # a huge problem list or results table: cut, keep the marker and a pointer
        tail = f"\n\n… comment truncated at {limit:,} characters; see the workflow run {run_url}\n"
        body = body[: limit - len(tail)] + tail
    return body
