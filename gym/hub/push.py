"""`gym deploy` (and the last stage of `gym launch`): push the model with its card, then create or
update its Space.

The model goes up as *one* commit holding exactly :func:`gym.hub.payload.model_files` (never
checkpoints or optimizer states). A private model's Space gets a token as its ``HF_TOKEN`` secret so
it can download the model: the read token named by ``space.hf_token_env``, or the push token only when
``space.reuse_push_token`` says so (never by default: it writes to the whole account). It also gets
the API key (``space.api_key_env``) that gates both its OpenAI routes and its chat.

The token is taken from ``--hf_token`` or the environment variable ``hub.token_env`` and handed only
to :class:`huggingface_hub.HfApi`. It is never printed, written or put in an exception: every Hub
error is re-raised as :class:`DeployError`, one sentence that says the outputs are kept.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.hub.payload import describe_push_error, has_weights, is_training_free, model_files
from gym.hub.space import SpaceSettings, describe_space_token, render_space

if TYPE_CHECKING:
    from gym.config import GymConfig


class DeployError(RuntimeError):
    """A deploy problem, already phrased for the user and free of secrets."""


def scrub(text: str, *secrets: str | None) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


@dataclass
class DeployPlan:
    model_dir: Path
    model_repo: str
    push: str  # "adapter" | "merged" | "none"
    model_private: bool
    space: SpaceSettings | None
    space_private: bool
    dry_run: bool
    token: str | None = field(default=None, repr=False)
    token_env: str = "HF_TOKEN"
    space_token_env: str | None = None  # the variable whose value the Space gets as HF_TOKEN
    training_free: bool = False
    config: GymConfig | None = field(default=None, repr=False)  # the run's, for the GGUF quality rows
    space_only: bool = False  # --space-only: the model repo is left as it is, only the Space is published
    wait: bool = True  # follow the Space's runtime until it runs (--no-wait skips)
    wait_timeout_s: float = 900.0
    hardware_note: str = ""  # how space.hardware was chosen (the owner's plan), for the plan

    @property
    def space_token(self) -> str | None:
        """The value the Space gets as HF_TOKEN (None: no secret)."""
        if self.space_token_env is None:
            return None
        if self.space_token_env == "--hf_token":
            return self.token
        return os.environ.get(self.space_token_env) or None

    @property
    def space_token_text(self) -> str:
        """Which token the Space gets as HF_TOKEN, by the variable's name (never its value)."""
        push_token = self.space_token_env is not None and self.space_token_env == self.token_env
        return describe_space_token(self.space_token_env, push_token=push_token)

    @property
    def is_adapter(self) -> bool:
        return (self.model_dir / "adapter_config.json").is_file()

    def lines(self) -> list[str]:
        kind = "LoRA adapter" if self.is_adapter else "model"
        if self.training_free:
            kind = "experience library + reference to its frozen base"
        what = {"none": "not pushed", "merged": f"{kind} merged into its base"}.get(self.push, kind)
        out = [
            f"model  {self.model_dir} → {self.model_repo} ({what}, {'private' if self.model_private else 'public'})"
        ]
        if self.space:
            served = (
                f"{self.space.backend}, GGUF {self.space.gguf}" if self.space.gguf else self.space.backend
            )
            out.append(
                f"space  {self.space.space_repo} (gradio + OpenAI API, {served}, "
                f"hardware {self.hardware_note or self.space.hardware}, secret ${self.space.api_key_env}"
                f"{'' if os.environ.get(self.space.api_key_env) else ' not set locally: API and chat open'})"
            )
            if self.space.weights_note:
                out.append(f"space  serves {'GGUF ' + self.space.gguf if self.space.gguf else 'the pushed weights'}: "
                           f"{self.space.weights_note}")  # fmt: skip
            if self.space.bundled:
                out.append(
                    f"space  reads the model from a copy of its weights in its own repo (private, like {self.model_repo}), "
                    "so it holds no token; to serve from the model repo instead, give it a read token with "
                    "--space-hf-token-env VAR (space.hf_token_env)"
                )
            else:
                out.append(f"space  {self.space_token_text}")
        out.append(f"token  {'from --hf_token' if self.token and self.token_env == '--hf_token' else '$' + self.token_env}"
                   f"{'' if self.token else ' (not set)'}")  # fmt: skip
        return out


def plan_deploy(
    config_path: Path | None,
    *,
    model_path: Path | None = None,
    repo_id: str | None = None,
    space_id: str | None = None,
    push_to_hub: bool = False,
    token_flag: str | None = None,
    dry_run: bool = False,
    space_token_env: str | None = None,
    reuse_push_token: bool = False,
) -> DeployPlan:
    """Work out what to push where, from gym.toml and/or the flags, without touching the network."""
    config = None
    if config_path is None and model_path is None and Path("gym.toml").is_file():
        config_path = Path("gym.toml")
    if config_path is not None:
        from gym.config import ConfigError, config_from_args

        try:
            config = config_from_args(config_path)
        except ConfigError as error:
            raise DeployError("\n".join(str(issue) for issue in error.issues)) from None
    if config is None and not push_to_hub and not dry_run:
        raise DeployError(
            "nothing to deploy: add a [hub] table to gym.toml or pass --push_to_hub (--dry-run previews)"
        )
    return plan_from_config(
        config, model_path=model_path, repo_id=repo_id, space_id=space_id, push_to_hub=push_to_hub,
        token_flag=token_flag, dry_run=dry_run, space_token_env=space_token_env,
        reuse_push_token=reuse_push_token,
    )  # fmt: skip


def plan_from_config(
    config: GymConfig | None,
    *,
    model_path: Path | None = None,
    repo_id: str | None = None,
    space_id: str | None = None,
    push_to_hub: bool = False,
    token_flag: str | None = None,
    dry_run: bool = False,
    space_token_env: str | None = None,
    reuse_push_token: bool = False,
) -> DeployPlan:
    """The deploy plan of a loaded config (what `gym launch` calls at the end of a run).

    ``space_token_env`` and ``reuse_push_token`` are the command line's space.hf_token_env and
    space.reuse_push_token, for a model pushed without a gym.toml (they win over the file's).
    """
    hub, space_cfg = (config.hub, config.space) if config else (None, None)
    model_dir = (model_path or (config.output_path if config else None) or Path()).resolve()
    if not model_dir.is_dir():
        raise DeployError(f"{model_dir} does not exist: train first, or pass --model_path")
    if hub is None and not push_to_hub and not dry_run:
        raise DeployError(
            "nothing to deploy: add a [hub] table to gym.toml or pass --push_to_hub (--dry-run previews)"
        )
    token_env = hub.token_env if hub else "HF_TOKEN"
    token = token_flag or os.environ.get(token_env) or None
    repo = repo_id or (hub.repo_id if hub else None)
    if repo is None:
        repo = f"{_whoami(token) if not dry_run else '<you>'}/{model_dir.name}"
    private = hub.private if hub else True
    training_free = is_training_free(model_dir)
    served = repo
    if training_free:  # the Space serves the frozen base with the library; the repo holds no weights
        served = json.loads((model_dir / "training_free.json").read_text(encoding="utf-8"))["model"]
    space_repo = space_id or (space_cfg.repo_id if space_cfg else f"{repo}-chat")
    wants_space = space_cfg is not None or space_id is not None or config is None
    hardware, hardware_note = _hardware(
        space_cfg.hardware if space_cfg else "auto", space_repo, token, wants_space, dry_run
    )
    from gym.hub.gguf_deploy import choose_space_weights

    weights = choose_space_weights(hardware, space_cfg.backend if space_cfg else "transformers",
                                   space_cfg.cpu_format if space_cfg else "auto", model_dir, training_free)  # fmt: skip
    space = SpaceSettings(
        model_repo=served,
        space_repo=space_repo,
        hardware=hardware,
        backend=weights.backend,
        gguf=weights.gguf,
        weights_note=weights.why,
        api_key_env=space_cfg.api_key_env if space_cfg else "GYM_API_KEY",
        experiences=str(model_dir / "experiences.json") if (model_dir / "experiences.json").is_file() else None,
        card_repo=repo,
    )  # fmt: skip
    if config is not None and space_cfg is None and space_id is None:
        space = None  # a gym.toml without [space] asks for no Space; the bare command line gets one
    if space_token_env is not None:
        _check_variable_name(space_token_env)
    push_source = "--hf_token" if token_flag else token_env
    reuse = reuse_push_token or (space_cfg is not None and space_cfg.reuse_push_token and not space_token_env)
    read_env = space_token_env or (space_cfg.hf_token_env if space_cfg else None)
    space_token_env = push_source if reuse else read_env
    bundled = space is not None and private and space_token_env is None and not training_free
    if bundled and config is not None and space_cfg is not None:
        shown = push_source if token_flag else f"${push_source}"
        raise DeployError(
            f"the model {repo} is private, so its Space needs a token to read it: set space.hf_token_env "
            "(or --space-hf-token-env) to the variable holding a read token, or space.reuse_push_token = true "
            f"(or --reuse-push-token) to give the Space the push token ({shown}), "
            "which can write to the whole account"
        )
    if space is not None and bundled:  # the bare command line: the Space carries the weights, no token
        from dataclasses import replace

        space = replace(space, bundled=True)
    if space is None:
        space_token_env = None
    return DeployPlan(
        model_dir=model_dir, model_repo=repo, push=hub.push if hub else "adapter",
        model_private=private, space=space,
        space_private=(space_cfg.private if space_cfg else False) or bundled, dry_run=dry_run,
        token=token, token_env="--hf_token" if token_flag else token_env,
        space_token_env=space_token_env, training_free=training_free, config=config,
        hardware_note=hardware_note, wait=space_cfg.wait_minutes > 0 if space_cfg else True,
        wait_timeout_s=space_cfg.wait_minutes * 60 if space_cfg and space_cfg.wait_minutes else 900.0,
    )  # fmt: skip


def _hardware(
    requested: str, space_repo: str, token: str | None, wanted: bool, dry_run: bool
) -> tuple[str, str]:
    """space.hardware checked against the owner's plan (``auto`` chosen from it); one sentence if refused.

    Without a token (a dry run) ``auto`` is shown as such and the Space is rendered for cpu-basic; a dry run
    that cannot ask the Hub says so instead of failing (a real deploy fails: it would fail anyway).
    """
    if not wanted:
        return ("cpu-basic" if requested == "auto" else requested), ""
    from gym.hub.plans import PlanError, PlanUnknown, resolve_hardware

    try:
        hardware, note = resolve_hardware(requested, space_repo, token)
    except PlanUnknown as error:
        if not dry_run:
            raise DeployError(str(error)) from None
        hardware, note = requested, f"{requested}: not checked against the owner's plan ({error})"
    except PlanError as error:
        raise DeployError(str(error)) from None
    return ("cpu-basic" if hardware == "auto" else hardware), note


def _check_variable_name(name: str) -> None:
    """--space-hf-token-env takes a variable's name; a pasted token is refused without being echoed."""
    from pydantic import TypeAdapter, ValidationError

    from gym.config.base import EnvVarName

    try:
        TypeAdapter(EnvVarName).validate_python(name)
    except ValidationError as error:
        raise DeployError(f"--space-hf-token-env: {error.errors()[0]['msg']}") from None


def _whoami(token: str | None) -> str:
    if not token:
        raise DeployError("no Hub token: set $HF_TOKEN (or hub.token_env) or pass --hf_token")
    from huggingface_hub import HfApi

    try:
        return HfApi(token=token).whoami()["name"]
    except Exception as error:  # noqa: BLE001 - re-raised without the token
        raise DeployError(
            scrub(f"cannot ask the Hub who you are: {type(error).__name__}: {error}", token)
        ) from None


def run_deploy(plan: DeployPlan, space_dir: Path | None = None, echo: Callable[[str], None] = print) -> None:
    """Render the Space, then (unless a dry run) settle the Space, push the model, publish the Space.

    Raises :class:`DeployError` (one sentence, no secret) on any failure; nothing in the model
    folder is changed, so the same command retries (``--space-only`` once the model is pushed).
    """
    for line in plan.lines():
        echo(line)
    with tempfile.TemporaryDirectory(prefix="gym-space-") as scratch:
        folder = space_dir or Path(scratch) / "space"
        if plan.dry_run:
            if plan.space:
                render_space(folder, plan.space)
            where = f"; Space rendered in {folder}" if space_dir and plan.space else ""
            echo(f"dry run: nothing was sent{where}")
            return
        if not plan.token:
            raise DeployError(f"no Hub token: set ${plan.token_env} or pass --hf_token")
        if plan.space is not None and plan.space_token_env and not plan.space_token:
            raise DeployError(
                f"the model {plan.model_repo} is private and its Space needs a read token: set "
                f"${plan.space_token_env} (space.hf_token_env)"
            )
        secrets = (
            plan.token,
            plan.space_token,
            os.environ.get(plan.space.api_key_env) if plan.space else None,
        )
        try:
            _deploy(plan, folder, Path(scratch), echo)
        except DeployError:
            raise
        except Exception as error:  # noqa: BLE001 - the Hub client's errors are phrased, never echoed
            message = describe_push_error(error, repo=plan.model_repo, token_env=plan.token_env,
                                          folder=plan.model_dir)  # fmt: skip
            raise DeployError(scrub(message, *secrets)) from None


def _gguf_files(plan: DeployPlan, source: Path, files: dict[str, Path], scratch: Path,
                echo: Callable[[str], None]) -> dict[str, Path]:  # fmt: skip
    """The GGUF file a CPU Space serves, the card that says so (with its quality) and the quality figures."""
    from gym.hub.gguf_deploy import build_gguf, card_with_serving, quality_file

    assert plan.space is not None and plan.space.gguf is not None
    name = f"{plan.model_repo.split('/')[-1]}-{plan.space.gguf}.gguf"
    (scratch / "gguf").mkdir()
    artifact = build_gguf(source, plan.space.gguf, name, scratch / "gguf", plan.config, echo)
    out = {name: artifact.path}
    if plan.push != "none":
        out["README.md"] = card_with_serving(files.get("README.md"), artifact, plan.model_repo.split("/")[-1],
                                             scratch / "gguf" / "README.md")  # fmt: skip
    quality = quality_file(artifact, scratch / "gguf" / "gguf_quality.json")
    if quality is not None:
        out[quality.name] = quality
    return out


def _deploy(plan: DeployPlan, space_folder: Path, scratch: Path, echo: Callable[[str], None]) -> None:
    """The Space settled first (what the Hub may refuse), then the model, then the Space's files."""
    from huggingface_hub import HfApi

    from gym.hub.space_deploy import prepare_space, publish_space

    api = HfApi(token=plan.token)
    if plan.space is not None:
        prepare_space(api, plan, echo)
    source, files, gguf = _payload(plan, scratch, echo)
    pushed = model_commit = None
    if plan.space_only:
        if not api.repo_exists(plan.model_repo):
            raise DeployError(
                f"--space-only: the model {plan.model_repo} is not on the Hub yet; run `gym deploy` without it"
            )
    elif files:
        model_commit = _push_model(api, plan, files, gguf, echo)
        pushed = plan.model_repo
    if plan.space is None:
        return
    bundle = _space_bundle(plan, source, files, gguf) if plan.space.bundled else None
    from dataclasses import replace

    # the Space serves the commit just pushed, and says so (gym_space.json "revision"; gym rollback moves it)
    render_space(space_folder, replace(plan.space, revision=model_commit), bundle=bundle)
    publish_space(api, plan, space_folder, echo, model_pushed=pushed)


def _payload(
    plan: DeployPlan, scratch: Path, echo: Callable[[str], None]
) -> tuple[Path, dict[str, Path], dict[str, Path]]:
    """The folder the weights come from, the files the model repo gets, and the GGUF files among them."""
    source = plan.model_dir
    if plan.push == "merged" and plan.is_adapter:
        from gym.export.merge import merge_adapter

        echo("merging the adapter into its base ...")
        source = merge_adapter(plan.model_dir, scratch / "merged")
    files = model_files(source, extra_from=plan.model_dir if source != plan.model_dir else None)
    if plan.push != "none" and not has_weights(files) and not plan.training_free:
        raise DeployError(
            f"{plan.model_dir} holds no model (no adapter_config.json or config.json): train first"
        )
    gguf = _gguf_files(plan, source, files, scratch, echo) if plan.space and plan.space.gguf else {}
    if plan.push == "none":
        files = {}
    files.update(gguf)
    return source, files, gguf


def _space_bundle(
    plan: DeployPlan, source: Path, files: dict[str, Path], gguf: dict[str, Path]
) -> dict[str, Path]:
    """What a Space serving its own copy of a private model carries: the GGUF file and tokenizer it serves,
    or the weights (adapter or full) with their tokenizer; no card, scores or checkpoints."""
    from gym.hub.payload import CARD

    weights = files or model_files(source)
    if gguf:
        from gym.hub.payload import TOKENIZER, WEIGHTS

        keep = set(TOKENIZER) | {"config.json", "generation_config.json"}
        weights = {n: p for n, p in weights.items() if n in keep and n not in WEIGHTS[2:]} | {
            n: p for n, p in gguf.items() if n.endswith(".gguf")
        }
    return {name: path for name, path in weights.items() if name not in CARD and "/" not in name}


def _push_model(
    api: Any, plan: DeployPlan, files: dict[str, Path], gguf: dict[str, Path], echo: Callable[[str], None]
) -> str:
    """Push ``files`` as one commit whose title names the git commit (gym/hub/lineage.py); its id."""
    from huggingface_hub import CommitOperationAdd

    from gym.hub.lineage import push_stamp

    lineage = push_stamp(plan, files)  # the card and eval_results.json with the run's source
    api.create_repo(plan.model_repo, private=plan.model_private, exist_ok=True)
    operations: list = [
        CommitOperationAdd(path_in_repo=name, path_or_fileobj=lineage.files.get(name) or str(path))
        for name, path in files.items()
    ]
    if gguf:  # the Space serves the one .gguf file of the repo: an earlier deploy's other type goes
        from huggingface_hub import CommitOperationDelete

        stale = [n for n in api.list_repo_files(plan.model_repo) if n.endswith(".gguf") and n not in gguf]
        operations += [CommitOperationDelete(path_in_repo=name) for name in stale]
    commit = api.create_commit(plan.model_repo, operations=operations, commit_message=lineage.title,
                               commit_description=lineage.description)  # fmt: skip
    echo(f"pushed {plan.model_repo} ({len(files)} files): {lineage.title}, Hub commit {commit.oid}")
    return str(commit.oid)
