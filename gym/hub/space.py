"""Render the Space folder from ``space_template/``: README header, app.py, requirements, gym itself.

The `gym` package is copied into the Space so it runs exactly the serving code of `gym serve`
(:mod:`gym.api`), pinned to the version that generated it, rather than a second implementation.
"""

from __future__ import annotations

import json
import shutil
import string
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gym.config.deploy import HubConfig, SpaceConfig


def _template_dir() -> Path:
    """``space_template/`` of a source checkout, else the copy a wheel installs under ``<prefix>/share``."""
    candidates = [
        Path(__file__).resolve().parents[2] / "space_template",
        Path(sys.prefix) / "share" / "zoo-gym" / "space_template",
    ]
    return next((path for path in candidates if (path / "app.py").is_file()), candidates[0])


TEMPLATE_DIR = _template_dir()
TAGS = ("gym", "openai-api", "text-generation", "chat")
# A CPU Space installs llama.cpp's bindings as a prebuilt CPU wheel (PyPI has only the source, which
# compiles for minutes); the version Gym's llama.cpp backend is tested with.
LLAMA_CPP_REQUIREMENTS = "\n".join(
    (
        "--extra-index-url https://abetlen.github.io/llama-cpp-python/whl/cpu",
        "--prefer-binary",
        "llama-cpp-python==0.3.36",
    )
)


ZEROGPU = "zero-a10g"
BUNDLE_DIR = "model"  # where a Space that carries its weights keeps them
# ZeroGPU Spaces import the `spaces` package (preinstalled there; listed so the app also starts elsewhere,
# where its decorator runs the function as it is).
ZEROGPU_REQUIREMENTS = "spaces"


@dataclass(frozen=True)
class SpaceSettings:
    model_repo: str
    space_repo: str
    hardware: str = "cpu-basic"
    backend: str = "transformers"
    api_key_env: str = "GYM_API_KEY"
    experiences: str | None = None  # a training-free GRPO library to carry into the Space
    card_repo: str | None = None  # the pushed repo (card, scores) when it is not what the Space loads
    gguf: str | None = None  # GGUF type the Space serves with llama.cpp (backend "llamacpp"), else None
    weights_note: str = ""  # how the served weights were chosen (space.cpu_format), for the plan
    bundled: bool = False  # the Space carries the served weights in its own repo (model/) and reads no repo
    revision: str | None = None  # the model commit the Space serves (gym deploy pins the one it pushed)

    @property
    def zerogpu(self) -> bool:
        """ZeroGPU hardware: a GPU is attached only inside ``@spaces.GPU`` functions, which the app must define."""
        return self.hardware == ZEROGPU

    @property
    def listed_repo(self) -> str:
        return self.card_repo or self.model_repo

    @property
    def host(self) -> str:
        return self.space_repo.lower().replace("/", "-").replace(".", "-").replace("_", "-") + ".hf.space"


def describe_space_token(token_env: str | None, *, push_token: bool) -> str:
    """Which token a Space gets as its HF_TOKEN secret, by the variable's name (never its value)."""
    if token_env is None:
        return "no HF_TOKEN secret (the model is public)"
    source = token_env if token_env.startswith("--") else f"${token_env}"
    if push_token:
        return (
            f"HF_TOKEN secret from {source}: the push token, which can write to the whole account "
            "(space.reuse_push_token)"
        )
    return f"HF_TOKEN secret from {source}: a read token (space.hf_token_env)"


def space_token_of(hub: HubConfig | None, space: SpaceConfig | None) -> str:
    """What the config's Space will get as HF_TOKEN ('' when the config publishes no Space)."""
    if hub is None or space is None:
        return ""
    if space.reuse_push_token:
        return describe_space_token(hub.token_env, push_token=True)
    return describe_space_token(space.hf_token_env, push_token=False)


# What the Hub builds a Gradio Space with: the README's python_version and sdk_version come from here, not
# from the deploying machine (whose Python or Gradio the Hub may not offer). Newest first; the Gradio
# versions are those Gym's Space app is tested with.
SPACE_PYTHON_VERSIONS = ("3.12", "3.11", "3.10")
SPACE_GRADIO_VERSIONS = ("6.31.0", "5.49.1")
# A dev build's Space installs these and carries the serving code (gym/hub/space_code.py).
SERVING_REQUIREMENTS = (
    "torch", "transformers>=4.56", "tokenizers", "safetensors", "peft>=0.17", "accelerate", "huggingface_hub",
    "fastapi>=0.110", "uvicorn>=0.29", "pydantic>=2.7,<3", "tomlkit>=0.12", "typer>=0.12", "rich>=13",
    "pyyaml>=6", "jinja2>=3.1", "pillow>=10",
)  # fmt: skip


def space_versions() -> tuple[str, str]:
    """(python_version, sdk_version) for the Space README: the deploying machine's when the Hub offers them."""
    from importlib.metadata import PackageNotFoundError, version

    local_python = f"{sys.version_info.major}.{sys.version_info.minor}"
    python = local_python if local_python in SPACE_PYTHON_VERSIONS else SPACE_PYTHON_VERSIONS[0]
    try:
        local_gradio = version("gradio")
    except PackageNotFoundError:
        local_gradio = ""
    gradio = local_gradio if local_gradio in SPACE_GRADIO_VERSIONS else SPACE_GRADIO_VERSIONS[0]
    return python, gradio


def _requirements(gradio: str) -> tuple[str, str]:
    """What the Space installs Gym's serving code from: the released package, or a copy plus its needs."""
    from gym import __version__
    from gym.hub.space_code import is_released

    if is_released(__version__):
        return f"Gym {__version__} from the package index", f"zoo-gym[space]=={__version__}\ngradio=={gradio}"
    lines = (*SERVING_REQUIREMENTS, f"gradio=={gradio}")
    return (
        f"Gym {__version__} is not on the package index: its serving code is copied beside app.py",
        "\n".join(lines),
    )


def render_space(
    out_dir: str | Path,
    settings: SpaceSettings,
    template_dir: Path = TEMPLATE_DIR,
    bundle: dict[str, Path] | None = None,
) -> Path:
    """Write the Space into ``out_dir`` (replacing its gym/ copy) and return it; ``bundle``: the weights a
    Space serving a private model without a token carries (``SpaceSettings.bundled``)."""
    if not (template_dir / "app.py").is_file():
        raise FileNotFoundError(f"Space template not found at {template_dir}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    python, gradio = space_versions()
    how, requirements = _requirements(gradio)
    values = {
        "title": settings.space_repo.split("/")[-1],
        "sdk_version": gradio,
        "python_version": python,
        "model_repo": settings.listed_repo,
        "hardware": settings.hardware
        if settings.hardware != "auto"
        else "cpu-basic",  # a rendering without a plan
        "tags": "\n".join(f"  - {tag}" for tag in TAGS),
        "space_host": settings.host,
        "api_key_env": settings.api_key_env,
        "served_model_name": settings.listed_repo,
        "how": how,
        "requirements": requirements,
        "extra": "\n".join(
            filter(
                None,
                (
                    {"vllm": "vllm", "llamacpp": LLAMA_CPP_REQUIREMENTS}.get(settings.backend, ""),
                    ZEROGPU_REQUIREMENTS if settings.zerogpu else "",
                ),
            )
        ),
    }
    for name in ("README.md", "requirements.txt"):
        text = string.Template((template_dir / name).read_text(encoding="utf-8")).substitute(values)
        (out / name).write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    shutil.copy2(template_dir / "app.py", out / "app.py")
    config = {
        "model": settings.model_repo,
        "served_model_name": settings.listed_repo,
        "backend": settings.backend,
        "api_key_env": settings.api_key_env,  # the *name* of the secret; its value never leaves the env
        "title": values["title"],
        "zerogpu": settings.zerogpu,  # generation runs inside @spaces.GPU functions (gym/api/zerogpu.py)
    }
    if settings.revision and not settings.bundled:
        config["revision"] = settings.revision
    if settings.experiences:
        shutil.copy2(settings.experiences, out / "experiences.json")
        config["experiences"] = "experiences.json"
    shutil.rmtree(out / "gym", ignore_errors=True)
    if not requirements.startswith("zoo-gym"):
        from gym.hub.space_code import copy_serving_code

        copy_serving_code(out)
    if bundle:
        _bundle_weights(out, bundle, config)
    (out / "gym_space.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return out


def _bundle_weights(out: Path, bundle: dict[str, Path], config: dict) -> None:
    """A private model served from the Space's own (private) repo: its files under ``model/``, no token."""
    folder = out / BUNDLE_DIR
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for name, path in bundle.items():
        shutil.copy2(path, folder / name)
    config["model"] = BUNDLE_DIR
