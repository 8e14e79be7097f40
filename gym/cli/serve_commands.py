"""`gym serve`, `gym deploy` and `gym export`: the commands that put a trained model in front of users.

Everything heavy (torch, transformers, fastapi, huggingface_hub) is imported inside the commands.
Tokens come from the environment (``hub.token_env``) or ``--hf_token`` and are never printed: every
error raised while talking to the Hub is scrubbed of the token before it is shown.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from gym.cli.output import console, errors


def _fail(message: str, code: int = 1) -> typer.Exit:
    errors.print(message, markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def serve(
    model: str = typer.Argument(
        ..., metavar="MODEL_PATH_OR_GYM_TOML", help="Model folder, builtin:NAME, gym.toml or Hub id."
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Interface to bind (0.0.0.0 exposes it to the network)."
    ),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    backend: str = typer.Option(
        "transformers",
        "--backend",
        help="transformers | vllm | sglang | llamacpp (a .gguf file or a folder holding one)",
    ),
    api_key_env: str = typer.Option(
        "GYM_API_KEY",
        "--api-key-env",
        help="Environment variable whose value, when set, clients must send as their API key.",
    ),
    served_model_name: str | None = typer.Option(
        None, "--served-model-name", help="The model id clients send."
    ),
    max_batch_size: int = typer.Option(32, "--max-batch-size", help="Most sequences decoded together."),
    device: str | None = typer.Option(
        None, "--device", help="cpu, cuda, ... (default: cuda when available)."
    ),
    experiences: Path | None = typer.Option(
        None,
        "--experiences",
        help="A training-free GRPO library (e.g. experiences/latest.json) put in every chat's system prompt.",
    ),
    tool_parser: str | None = typer.Option(
        None,
        "--tool-parser",
        help="How the model writes tool calls: hermes (Qwen2.5/Qwen3 <tool_call>) or llama3_json "
        "(default: read from the chat template).",
    ),
    max_request_mb: float = typer.Option(
        4.0,
        "--max-request-mb",
        min=0.001,
        help="Larger request bodies are refused with HTTP 413 (so are more than 4,096 messages, 100,000 JSON "
        "values or 64 levels of nesting, with a 400; docs/serving.md).",
    ),
    fetch_remote_images: bool = typer.Option(
        False,
        "--fetch-remote-images",
        help="Let a vision-language model's server download http(s) image_url parts itself (up to 20 MB "
        "and 8 URLs per request). Off by default: the server fetches on a client's behalf; loopback, "
        "private, link-local and cloud metadata addresses are refused even then (see --allow-image-hosts).",
    ),
    image_fetch_timeout: float = typer.Option(
        10.0,
        "--image-fetch-timeout",
        min=0.1,
        help="Seconds one remote image may take in all (connect, redirects, body), however slowly it arrives.",
    ),  # fmt: skip
    allow_image_hosts: str | None = typer.Option(
        None,
        "--allow-image-hosts",
        envvar="GYM_ALLOW_IMAGE_HOSTS",
        help="Comma-separated hosts, addresses or networks (images.lan, 10.0.0.0/8, 127.0.0.1) that "
        "--fetch-remote-images may reach although they are not public.",
    ),  # fmt: skip
    access_log: bool = typer.Option(
        False, "--access-log", help="Log one line per request (credential query values masked)."
    ),
) -> None:
    """Serve a model over an OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models)."""
    from gym.engine.backend import BACKEND_NAMES, BackendUnavailable

    if backend not in BACKEND_NAMES:
        raise _fail(f"--backend: expected one of {', '.join(BACKEND_NAMES)}, got {backend!r}", 2)
    from gym.api.tools.parsers import TOOL_PARSERS

    if tool_parser is not None and tool_parser not in TOOL_PARSERS:
        raise _fail(f"--tool-parser: expected one of {', '.join(TOOL_PARSERS)}, got {tool_parser!r}", 2)
    from gym.api.remote_images import FetchPolicy, parse_allow_list

    image_fetch = FetchPolicy.build(parse_allow_list(allow_image_hosts), image_fetch_timeout)
    system_prompt, note = None, ""
    if experiences is not None:
        from gym.train.experiences import load_experiences, render_system_prompt

        try:
            learned = load_experiences(experiences)
        except ValueError as error:
            raise _fail(f"--experiences: {error}", 2) from None
        system_prompt, note = render_system_prompt(learned), f", {len(learned)} experiences"
    from gym.api.factory import build_serving_app

    try:
        app = build_serving_app(model, backend, os.environ.get(api_key_env) or None, served_model_name,
                                max_batch_size=max_batch_size, device=device,
                                system_prompt=system_prompt, tool_parser=tool_parser,
                                max_request_bytes=int(max_request_mb * 1024 * 1024),
                                fetch_remote_images=fetch_remote_images, image_fetch=image_fetch)  # fmt: skip
    except BackendUnavailable as error:
        raise _fail(f"error: {error}") from None
    except (ValueError, FileNotFoundError, OSError) as error:
        raise _fail(f"error: cannot load {model}: {error}") from None
    import uvicorn

    key_note = f"API key required (from ${api_key_env})" if os.environ.get(api_key_env) else "no API key"
    console.print(
        f"serving [bold]{app.state.backend.model_id}[/bold] on http://{host}:{port}/v1 ({backend}, {key_note}{note})"
    )
    uvicorn.run(app, host=host, port=port, log_config=_log_config(access_log))


def _log_config(access_log: bool) -> dict:
    """uvicorn's logging, quiet but for warnings, plus (``--access-log``) one line per request."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"credentials": {"()": "gym.api.accesslog.RedactCredentials"}}
    config["handlers"]["access"]["filters"] = ["credentials"]
    config["loggers"]["uvicorn.error"]["level"] = "WARNING"
    config["loggers"]["uvicorn.access"]["level"] = "INFO" if access_log else "WARNING"
    return config


def export(
    path: Path = typer.Argument(..., help="A LoRA output folder (adapter_config.json)."),
    merge: bool = typer.Option(False, "--merge", help="Merge the adapter into its base model."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Where to save (default: PATH-merged)."),
    quantize: str | None = typer.Option(
        None,
        "--quantize",
        help="gptq or awq: merge, then quantize to 4 bits calibrated on the run's training rows.",
    ),
    config: Path | None = typer.Option(
        None, "--config", help="The run's gym.toml, for --quantize's calibration rows (default ./gym.toml)."
    ),
    gguf: str | None = typer.Option(
        None,
        "--gguf",
        help="q8_0, q4_k_m, q5_k_m, q6_k, q4_0 or f16: merge, write one GGUF file for llama.cpp "
        "(default PATH-TYPE.gguf), load it and answer one prompt.",
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace an existing output (never a file of the model folder read)."
    ),
) -> None:
    """Export a trained model; with --merge, base + LoRA adapter merged into plain weights."""
    if gguf is not None:
        if quantize is not None or merge:
            raise _fail("error: --gguf writes its own merged file; pass it without --merge or --quantize", 2)
        _export_gguf(path, gguf, output, overwrite)
        return
    if quantize is not None:
        _export_quantized(path, quantize, output, config, overwrite)
        return
    if not merge:
        raise _fail("nothing to do: pass --merge to merge the LoRA adapter into its base model", 2)
    from gym.export.merge import export_merged

    target = output or path.with_name(path.name + "-merged")
    try:
        export_merged(path, target, overwrite)
    except (ValueError, OSError) as error:
        raise _fail(f"error: {error}") from None
    console.print(f"[green]✓[/green] merged {path} into {target}")


def _export_gguf(path: Path, quant: str, output: Path | None, overwrite: bool) -> None:
    from gym.export.files import ExportError
    from gym.export.gguf_export import export_gguf

    echo = lambda line: console.print(line, markup=False, highlight=False)  # noqa: E731
    try:
        target = export_gguf(path, quant, output, echo, overwrite)
    except (ExportError, OSError) as error:
        raise _fail(f"error: {error}") from None
    console.print(f"[green]✓[/green] GGUF {quant} model in {target}", highlight=False, soft_wrap=True)


def _export_quantized(
    path: Path, method: str, output: Path | None, config_path: Path | None, overwrite: bool
) -> None:
    """`gym export --quantize`: merge (an adapter folder) or take the full weights, quantize, reload."""
    from gym.config import ConfigError, load_config
    from gym.data.report import DataError
    from gym.export.output import FOLDER, check_output, source_folders
    from gym.export.quantize import METHODS, QuantizeError, export_quantized
    from gym.model.loading import ModelError

    if method not in METHODS:
        raise _fail(f"error: --quantize must be one of {', '.join(METHODS)}, got {method!r}", 2)
    target = output or path.with_name(f"{path.name}-{method}")
    try:
        check_output(target, source_folders(path), overwrite, FOLDER)
    except ValueError as error:
        raise _fail(f"error: {error}") from None
    config_path = config_path or Path("gym.toml")
    if not config_path.is_file():
        raise _fail(
            f"error: --quantize calibrates on the run's training rows; pass --config with the run's gym.toml "
            f"({config_path} does not exist)", 2
        )  # fmt: skip
    try:
        export_quantized(path, method, target, load_config(config_path), console.status)
    except ConfigError as error:
        raise _fail(f"error: {error}") from None
    except (ValueError, OSError, QuantizeError, DataError, ModelError) as error:
        raise _fail(f"error: {error}") from None
    console.print(
        f"[green]✓[/green] {method.upper()} 4-bit model in {target} (reloaded and checked)", soft_wrap=True
    )


def deploy(
    config: Path | None = typer.Argument(
        None, help="gym.toml with \\[hub] and \\[space] (default ./gym.toml if present)."
    ),
    model_path: Path | None = typer.Option(
        None, "--model_path", "--model-path", help="Model folder to push (default: the run's output_dir)."
    ),
    hf_token: str | None = typer.Option(
        None, "--hf_token", "--hf-token", help="Hub token (default: $hub.token_env).", show_default=False
    ),
    push_to_hub: bool = typer.Option(
        False, "--push_to_hub", "--push-to-hub", help="Push without a gym.toml \\[hub] table."
    ),
    repo_id: str | None = typer.Option(
        None, "--repo-id", help="Model repository (default: hub.repo_id, else USER/FOLDER)."
    ),
    space_id: str | None = typer.Option(
        None, "--space-id", help="Space repository (default: space.repo_id, else REPO-chat)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Render the Space folder and print the plan; touch no network."
    ),
    space_dir: Path | None = typer.Option(
        None, "--space-dir", help="Where to render the Space (default: a temporary folder)."
    ),
    force: bool = typer.Option(
        False, "--force", help="Push even when a promotion gate (\\[eval.gates]) fails; the card records it."
    ),
    space_hf_token_env: str | None = typer.Option(
        None,
        "--space-hf-token-env",
        help="Variable holding the read token the Space gets as HF_TOKEN (space.hf_token_env).",
    ),
    reuse_push_token: bool = typer.Option(
        False,
        "--reuse-push-token",
        help="Give the Space the push token (write access) as HF_TOKEN (space.reuse_push_token).",
    ),
    space_only: bool = typer.Option(
        False, "--space-only", help="Leave the model repo as it is; create or update only the Space."
    ),
    no_wait: bool = typer.Option(
        False, "--no-wait", help="Do not follow the Space until it runs and answers (space.wait_minutes = 0)."
    ),
    wait_timeout: float | None = typer.Option(
        None,
        "--wait-timeout",
        help="Seconds to follow the Space (default: space.wait_minutes, else 900).",
        show_default=False,
    ),
) -> None:
    """Push the model and its card to the Hub and create or update its Space (Gradio chat + OpenAI API)."""
    from gym.hub.push import DeployError, plan_deploy, run_deploy

    try:
        plan = plan_deploy(config, model_path=model_path, repo_id=repo_id, space_id=space_id,
                           push_to_hub=push_to_hub, token_flag=hf_token, dry_run=dry_run,
                           space_token_env=space_hf_token_env, reuse_push_token=reuse_push_token)  # fmt: skip
        if space_only:
            if plan.space is None:
                raise DeployError(
                    "--space-only: this deploy has no Space (add a [space] table or pass --space-id)"
                )
            plan.space_only = True
        if no_wait or wait_timeout is not None:
            plan.wait, plan.wait_timeout_s = not no_wait, wait_timeout or plan.wait_timeout_s
        echo = lambda line: console.print(line, markup=False, highlight=False)  # noqa: E731
        if not dry_run and not space_only:  # the gates guard the model push; --space-only pushes no model
            from gym.hub.promotion import gate_deploy

            gated = config if config is not None or model_path is not None else Path("gym.toml")
            gate_deploy(gated if gated and gated.is_file() else None, plan.model_dir, force=force,
                        token=plan.token, echo=echo)  # fmt: skip
        run_deploy(plan, space_dir=space_dir, echo=echo)
    except (DeployError, ValueError) as error:
        raise _fail(f"error: {error}") from None


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.command()(deploy)
    app.command()(export)
