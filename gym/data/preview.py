"""What `gym data preview` shows: samples as the model sees them, with the trained tokens marked.

Everything shown comes from the user's data, so it is printed literally: never read as rich markup,
control characters (ANSI escapes) made visible rather than sent to the terminal.

The point is to make a wrong template or a wrong format impossible to miss: the loss-carrying
tokens are highlighted, so a model about to learn the prompt (or never to stop) shows at a glance,
and every row that did not make it in is counted with its reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gym.data.templates import IGNORE_INDEX
from gym.failures import printable

if TYPE_CHECKING:
    from gym.data.prepare import PreparedData

LOSS_STYLE = "bold black on green"
CONTEXT_STYLE = "dim"


def highlighted(tokenizer: Any, input_ids: list[int], labels: list[int]) -> Text:
    """The decoded sample, runs of loss-carrying tokens in :data:`LOSS_STYLE`."""
    text = Text()
    run: list[int] = []
    trained = False
    for token, label in zip([*input_ids, None], [*labels, None], strict=True):
        is_trained = label is not None and label != IGNORE_INDEX
        if token is None or (run and is_trained != trained):
            text.append(
                printable(tokenizer.decode(run, skip_special_tokens=False)),
                LOSS_STYLE if trained else CONTEXT_STYLE,
            )
            run = []
        if token is not None:
            run.append(token)
            trained = is_trained
    return text


def sample_panels(prepared: PreparedData, tokenizer: Any, count: int) -> list[Panel]:
    from gym.data.vision import collapse_image_runs, image_lines

    rows = prepared.train.select(range(min(count, len(prepared.train))))
    panels = []
    for number, row in enumerate(rows, start=1):
        trained = sum(1 for label in row["labels"] if label != IGNORE_INDEX)
        title = (
            f"sample {number} · {row['source']} row {row['index']} · {row['length']} tokens, {trained} trained"
            + (f" · {row['status']}" if row["status"] != "ok" else "")
        )
        body = highlighted(tokenizer, row["input_ids"], row["labels"])
        images = row.get("images") or []
        if images:
            body = Text.assemble(
                image_lines(images, row["input_ids"], prepared.settings), "\n", collapse_image_runs(body)
            )
        panels.append(Panel(body, title=Text(printable(title)), title_align="left"))
    return panels


def stats_table(prepared: PreparedData) -> Table:
    stats = prepared.stats
    table = Table(title="tokens (training split)", show_header=False)
    table.add_column(style="bold cyan")
    table.add_column(justify="right")
    read = sum(r.rows_read for r in prepared.reports)
    kept = sum(r.rows_kept for r in prepared.reports)
    held_out = len(prepared.eval) if prepared.eval is not None else 0
    table.add_row("rows read", f"{read:,}")
    table.add_row("rows kept", f"{kept:,} ({len(prepared.train):,} train, {held_out:,} held out)")
    table.add_row("bad rows", f"{sum(r.rows_bad for r in prepared.reports):,}")
    skipped = sum(r.rows_skipped for r in prepared.reports)
    table.add_row(
        "skipped (too long)", f"{skipped:,}" + (f" ({skipped / read:.1%})" if read and skipped else "")
    )
    table.add_row("truncated (oldest turns dropped)", f"{stats.truncated:,}")
    table.add_row("length p50 / p95 / max", f"{stats.p50} / {stats.p95} / {stats.max}")
    table.add_row("whole length p95 (before fitting)", f"{stats.full_p95:,}")
    limit = stats.limit or prepared.settings.get("max_length", "?")
    reserve = prepared.settings.get("reserve") or 0
    table.add_row(
        "max_length",
        f"{prepared.settings.get('max_length', '?')}" + (f" ({limit} for prompts)" if reserve else ""),
    )
    share = stats.loss_tokens / stats.tokens if stats.tokens else 0.0
    table.add_row("tokens trained / total", f"{stats.loss_tokens:,} / {stats.tokens:,} ({share:.0%})")
    table.add_row(
        "cache", Text(printable(f"{'reused' if prepared.from_cache else 'written'}: {prepared.cache_dir}"))
    )
    return table


def preview(prepared: PreparedData, tokenizer: Any, count: int) -> Group:
    """Everything `gym data preview` prints, as one renderable."""
    legend = Text.assemble(("trained tokens", LOSS_STYLE), "  ", ("context (no loss)", CONTEXT_STYLE))
    return Group(legend, *sample_panels(prepared, tokenizer, count), *prepared.reports, stats_table(prepared))
