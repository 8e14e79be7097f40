"""`gym model build`: build (or find in the cache) a built-in model and show that it loads and generates."""

from __future__ import annotations

import shutil
import time

import typer

from gym.cli.output import console, errors

model_app = typer.Typer(
    help="Base models: build the offline built-in model, inspect models.", no_args_is_help=True
)


@model_app.command("build")
def build_command(
    name: str = typer.Argument("builtin:tiny", help="Built-in model to build."),
    prompt: str | None = typer.Option(None, "--prompt", "-p", help="Generate a reply to this user message."),
    force: bool = typer.Option(False, "--force", help="Rebuild even when the cache holds it."),
    max_new_tokens: int = typer.Option(16, help="Tokens to generate for --prompt."),
) -> None:
    """Build a built-in model offline into the cache, reload it with transformers, and optionally generate."""
    from gym.model.builtin import BUILTIN_MODELS, BUILTIN_PREFIX, cache_root, ensure_builtin, spec_key

    short = name.removeprefix(BUILTIN_PREFIX)
    if short not in BUILTIN_MODELS:
        errors.print(
            f"unknown built-in model {name!r}; available: "
            + ", ".join(BUILTIN_PREFIX + n for n in BUILTIN_MODELS),
            highlight=False,
        )
        raise typer.Exit(2)
    if force:
        shutil.rmtree(cache_root() / spec_key(short, BUILTIN_MODELS[short]), ignore_errors=True)
    started = time.perf_counter()
    with console.status(f"building {BUILTIN_PREFIX}{short} (tokenizer + model, offline)"):
        folder = ensure_builtin(name)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder)
    elapsed = time.perf_counter() - started
    parameters = sum(p.numel() for p in model.parameters())
    console.print(
        f"[green]✓[/green] {BUILTIN_PREFIX}{short}: {type(model).__name__}, {parameters:,} parameters, "
        f"vocabulary {len(tokenizer)}, ready in {elapsed:.1f}s",
        highlight=False,
    )
    console.print(f"  folder: {folder}", highlight=False)
    if prompt is not None:
        import torch

        inputs = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )
        with torch.no_grad():
            output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        reply = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        console.print(f"  user: {prompt}", highlight=False)
        console.print(f"  model (untrained weights): {reply!r}", highlight=False)
