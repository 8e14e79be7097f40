"""The Data tab: `gym data preview` in the browser (samples with trained tokens highlighted, bad rows,
a length histogram), computed from the config in the editor by the same functions the command uses."""

from __future__ import annotations

from typing import Any

from gym.webui.workspace import Workspace


def rich_html(*renderables: Any) -> str:
    """Rich renderables as inline-styled HTML: the terminal preview, colours and all."""
    import io

    from rich.console import Console

    console = Console(record=True, width=120, file=io.StringIO(), color_system="truecolor")
    console.print(*renderables)
    return console.export_html(
        inline_styles=True,
        code_format='<pre class="gym-preview" style="white-space:pre-wrap;font-family:monospace;'
        'font-size:13px;line-height:1.35">{code}</pre>',
    )


def histogram(lengths: list[int], bins: int = 12) -> Any:
    """Rows per token-length bucket, as a DataFrame for gr.BarPlot (labels sort in order)."""
    import pandas as pd

    if not lengths:
        return pd.DataFrame({"tokens": [], "rows": []})
    low, top = min(lengths), max(lengths)
    width = max(1, -(-(top - low + 1) // bins))
    digits = len(str(top))
    counts: dict[str, int] = {}
    for start in range(low - low % width, top + 1, width):
        counts[f"{start:0{digits}d}–{start + width - 1:0{digits}d}"] = 0
    for length in lengths:
        start = length // width * width
        counts[f"{start:0{digits}d}–{start + width - 1:0{digits}d}"] += 1
    return pd.DataFrame({"tokens": list(counts), "rows": list(counts.values())})


def bad_rows_markdown(prepared: Any) -> str:
    """Each dataset's rows read / kept / bad by reason, with where the bad ones are (file and row)."""
    parts = [f"**{report.dataset}**\n```\n{report.summary()}\n```" for report in prepared.reports]
    return "\n\n".join(parts) or "no datasets"


def preview(workspace: Workspace, text: str, count: int = 3) -> tuple[str, str, Any]:
    """(samples HTML, bad-row report markdown, length histogram) for the editor's config."""
    import pandas as pd

    empty = pd.DataFrame({"tokens": [], "rows": []})
    validation = workspace.validate(text)
    if not validation.ok:
        return (
            "",
            "✗ the config has problems (see the Config tab):\n\n"
            + "\n".join(f"- `{p}`" for p in validation.problems),
            empty,
        )
    config = validation.config
    from gym.quiet import quiet_libraries

    quiet_libraries()
    from gym.data.prepare import prepare_data
    from gym.data.preview import preview as render
    from gym.data.report import DataError
    from gym.model.loading import ModelError, load_tokenizer
    from gym.model.vision import model_vision

    try:
        tokenizer = load_tokenizer(config)
        prepared = prepare_data(config, tokenizer, vision=model_vision(config))
    except (DataError, ModelError) as error:
        return "", f"✗ error: {error}", empty
    html = rich_html(render(prepared, tokenizer, int(count)))
    return html, bad_rows_markdown(prepared), histogram(list(prepared.train["length"]))


def build(workspace: Workspace, editor: Any) -> None:
    import gradio as gr

    with gr.Row():
        count = gr.Slider(0, 20, value=3, step=1, label="Samples to show")
        button = gr.Button("Preview data", variant="primary", elem_id="preview")
    gr.Markdown("The same view as `gym data preview`: trained tokens highlighted in green.")
    report = gr.Markdown(elem_id="data-report")
    plot = gr.BarPlot(x="tokens", y="rows", title="Token length of training rows", label="Length histogram")
    samples = gr.HTML(elem_id="data-samples")
    button.click(lambda t, n: preview(workspace, t, n), [editor, count], [samples, report, plot],
                 api_name="preview")  # fmt: skip
