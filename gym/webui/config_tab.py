"""The Config tab: gym.toml in an editor and as a form, validated live, saved with comments kept."""

from __future__ import annotations

from typing import Any

from gym.config.sections import NAMED_TEMPLATES
from gym.webui.workspace import FORM_KEYS, SaveError, Workspace, apply_form, form_values

CHOICES: dict[str, list[str]] = {
    "model.template": list(NAMED_TEMPLATES),  # every name `gym validate` accepts
    "datasets.0.format": ["alpaca", "sharegpt", "openai", "preference", "kto", "text", "prompt"],
    "train.method": ["sft", "pt", "dpo", "kto", "rm", "ppo", "grpo"],
    "train.adapter": ["lora", "qlora", "dora", "full", "freeze"],
}
NUMBERS = {"train.learning_rate", "train.epochs", "train.max_steps", "train.batch_size", "train.max_length",
           "train.lora.r"}  # fmt: skip


def check(workspace: Workspace, text: str) -> tuple[str, str]:
    """(validation markdown, CLI line) for the editor's text."""
    return workspace.validate(text).markdown(), workspace.command_line(text)


def save(workspace: Workspace, text: str) -> str:
    try:
        return "✓ " + workspace.save(text)
    except SaveError as error:
        return f"✗ {error}"


def status_line(workspace: Workspace) -> str:
    if workspace.load_error:
        return f"✗ {workspace.load_error}"
    if not workspace.path.exists():
        return f"`{workspace.display}` does not exist yet: the editor holds `gym init`'s starter; Save creates it"
    return f"opened `{workspace.display}`"


def reload(workspace: Workspace, from_disk: bool = True) -> tuple[Any, ...]:
    """(editor text, status line, form values...): from disk, or the version this UI last read or saved."""
    if from_disk:
        workspace.reload()
    text = workspace.editor_text()
    return (text, status_line(workspace), *form_values(text))


def build(workspace: Workspace, demo: Any) -> Any:
    """The tab's components; returns the editor (other tabs read the text being edited)."""
    import gradio as gr

    text = workspace.editor_text()
    status = gr.Markdown(status_line(workspace), elem_id="config-status")
    with gr.Row():
        with gr.Column(scale=3):
            editor = gr.Code(value=text, language=None, lines=28, label=workspace.display, elem_id="editor")
        with gr.Column(scale=2):
            fields = []
            values = form_values(text)
            for (label, key), value in zip(FORM_KEYS, values, strict=True):
                if key in CHOICES:
                    field = gr.Dropdown(
                        CHOICES[key], value=value or None, label=label, allow_custom_value=True
                    )
                elif key in NUMBERS:
                    field = gr.Number(value=value if value != "" else None, label=label)
                else:
                    field = gr.Textbox(value=str(value), label=label, max_lines=1)
                fields.append(field)
    with gr.Row():
        validate_button = gr.Button("Validate")
        save_button = gr.Button("Save", variant="primary", elem_id="save")
        diff_button = gr.Button("Show diff")
        reload_button = gr.Button("Reload from disk")
    result = gr.Markdown(elem_id="validation")
    command = gr.Code(language="shell", label="Equivalent command line", interactive=False, lines=1)
    diff = gr.Code(language=None, label="Changes since the file was opened", interactive=False, visible=True)
    saved = gr.Markdown(elem_id="save-result")

    editor.change(lambda t: check(workspace, t), editor, [result, command], api_visibility="private")
    validate_button.click(lambda t: check(workspace, t), editor, [result, command], api_name="validate")
    save_button.click(lambda t: save(workspace, t), editor, saved, api_name="save").then(
        lambda t: check(workspace, t), editor, [result, command], api_visibility="private"
    )
    diff_button.click(workspace.diff, editor, diff, api_name="diff")
    reload_button.click(lambda: reload(workspace), None, [editor, status, *fields], api_name="reload")

    # a page (re)load shows the file as this UI last read or saved it, never the text it was built with
    def on_load() -> tuple[Any, ...]:
        opened = reload(workspace, from_disk=False)
        return (*opened, *check(workspace, opened[0]))

    demo.load(on_load, None, [editor, status, *fields, result, command], api_visibility="private")

    for (_, key), field in zip(FORM_KEYS, fields, strict=True):

        def edit(current: str, value: Any, key: str = key) -> tuple[str, str]:
            try:
                return apply_form(current, key, value), ""
            except SaveError as error:
                return current, f"✗ {error}"
            except Exception as error:  # noqa: BLE001 - the editor's TOML does not parse: it says where
                return current, f"✗ fix the editor first: {str(error).splitlines()[0]}"

        field.input(edit, [editor, field], [editor, saved], api_visibility="private")
    return editor
