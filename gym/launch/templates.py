"""The SkyPilot task templates: train (train → eval → card → push), eval, and a vLLM server.

They live here as Python data, not as YAML package data, because the launcher fills them in code and
pyproject's package-data globs do not ship ``*.yaml``. ``sky_tasks/*.yaml`` are the user-facing copies,
each usable with ``sky launch`` by hand; a test keeps them equal to :func:`render` (regenerate them
with ``python -m gym.launch.templates sky_tasks``).

The run scripts read everything from environment variables (``GYM_CONFIG``, ``GYM_FLAGS``, ...) and
secrets only from the environment SkyPilot builds out of the task's ``secrets``: no value is ever
written into a script.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from gym import __version__

DEFAULT_MASTER_PORT = "29500"
# What a node installs: the release of this very version (the release workflow publishes it to PyPI).
PIP_SPEC = f"zoo-gym[train,eval]=={__version__}"

# Installs Gym once per machine: from the synced folder when it is Gym's own checkout, else from PyPI.
SETUP = """\
set -euo pipefail
if grep -qs '^name = "zoo-gym"' pyproject.toml; then
  python -m pip install -q -e ".[${GYM_EXTRAS:-train,eval}]"
else
  python -m pip install -q "${GYM_PIP_SPEC:-zoo-gym[train,eval]}"
fi
"""

# One process per GPU on every node. SkyPilot tells each node who it is (SKYPILOT_*); torchrun's static
# rendezvous on the first node's IP joins them. GYM_TRAIN_CMD replaces the command torchrun starts (a
# test seam, and a hook for custom entry points); by default every rank runs the local stage runner,
# `gym launch <config>`, which trains on all ranks and evaluates, writes the card and pushes on rank 0.
# GYM_MAX_RUNTIME_S (compute.max_runtime_hours) stops the whole run with coreutils' timeout (TERM, then
# KILL two minutes later); the job then fails with exit status 124 and stops billing.
TRAIN_RUN = """\
set -euo pipefail
LIMIT=()
if [ "${GYM_MAX_RUNTIME_S:-0}" -gt 0 ]; then
  LIMIT=(timeout --kill-after=120 "${GYM_MAX_RUNTIME_S}")
fi
NUM_NODES="${SKYPILOT_NUM_NODES:-1}"
NODE_RANK="${SKYPILOT_NODE_RANK:-0}"
GPUS="${SKYPILOT_NUM_GPUS_PER_NODE:-0}"
GPUS="${GPUS%%.*}"
NPROC=$(( ${GPUS:-0} > 0 ? ${GPUS:-0} : 1 ))
MASTER_ADDR="$(printf '%s\\n' "${SKYPILOT_NODE_IPS:-127.0.0.1}" | head -n1)"
if [ -n "${GYM_TRAIN_CMD:-}" ]; then
  eval "set -- ${GYM_TRAIN_CMD}"
else
  eval "set -- gym launch ${GYM_CONFIG:+\\"\\$GYM_CONFIG\\"} ${GYM_FLAGS:-}"
fi
echo "gym: node $NODE_RANK of $NUM_NODES starts $NPROC process(es)" >&2
if [ "$NUM_NODES" -gt 1 ] || [ "$NPROC" -gt 1 ]; then
  exec ${LIMIT[@]+"${LIMIT[@]}"} torchrun --nnodes="$NUM_NODES" --node_rank="$NODE_RANK" \\
    --nproc_per_node="$NPROC" --master_addr="$MASTER_ADDR" --master_port="${GYM_MASTER_PORT:-29500}" --no-python "$@"
fi
exec ${LIMIT[@]+"${LIMIT[@]}"} "$@"
"""

EVAL_RUN = """\
set -euo pipefail
eval "set -- gym eval ${GYM_CONFIG:+\\"\\$GYM_CONFIG\\"} ${GYM_FLAGS:-}"
exec "$@"
"""

SERVE_SETUP = """\
set -euo pipefail
python -m pip install -q "${VLLM_PIP_SPEC:-vllm}"
"""

# vLLM reads its API key from VLLM_API_KEY; copying it from the secret keeps it off the command line.
SERVE_RUN = """\
set -euo pipefail
if [ -n "${GYM_API_KEY:-}" ]; then export VLLM_API_KEY="$GYM_API_KEY"; fi
ARGS=(--host 0.0.0.0 --port 8000 --served-model-name "$BASE_MODEL")
if [ -n "${ADAPTER:-}" ]; then
  ARGS+=(--enable-lora --max-lora-rank "$MAX_LORA_RANK" --lora-modules "$SERVED_NAME=$ADAPTER")
fi
exec vllm serve "$BASE_MODEL" "${ARGS[@]}"
"""

TRAIN: dict[str, Any] = {
    "name": "gym-train",
    "workdir": ".",
    "num_nodes": 1,
    "resources": {"accelerators": "A100:1", "disk_size": 256},
    "envs": {
        "GYM_CONFIG": "gym.toml",
        "GYM_FLAGS": "",
        "GYM_PIP_SPEC": PIP_SPEC,
        "GYM_EXTRAS": "train,eval",
        "GYM_MASTER_PORT": DEFAULT_MASTER_PORT,
        "GYM_EMIT_RESULTS": "1",
    },
    "setup": SETUP,
    "run": TRAIN_RUN,
}

EVAL: dict[str, Any] = {
    "name": "gym-eval",
    "workdir": ".",
    "resources": {"accelerators": "A100:1", "disk_size": 256},
    "envs": {"GYM_CONFIG": "gym.toml", "GYM_FLAGS": "", "GYM_PIP_SPEC": PIP_SPEC, "GYM_EXTRAS": "train,eval"},
    "setup": SETUP,
    "run": EVAL_RUN,
}

SERVE: dict[str, Any] = {
    "name": "gym-serve",
    "resources": {"accelerators": ["L4:1", "A10G:1", "A100:1"], "ports": 8000},
    "envs": {
        "BASE_MODEL": "Qwen/Qwen3-0.6B",
        "ADAPTER": "my-org/support-bot",
        "SERVED_NAME": "gym",
        "MAX_LORA_RANK": "64",
        "VLLM_PIP_SPEC": "vllm",
    },
    "service": {
        "readiness_probe": {
            "path": "/v1/chat/completions",
            "post_data": {
                "model": "gym",
                "messages": [{"role": "user", "content": "ping"}],
                "max_tokens": 1,
            },
            "headers": {"Authorization": "Bearer $GYM_API_KEY"},
            "initial_delay_seconds": 1200,
        },
        "replicas": 1,
    },
    "setup": SERVE_SETUP,
    "run": SERVE_RUN,
}

HEADERS = {
    "train": """\
# Gym: train -> eval -> model card -> push, on any cloud SkyPilot has enabled.
# `gym launch --cloud gym.toml` fills this template from [compute]; to run it by hand instead:
#   sky jobs launch sky_tasks/train.yaml --env GYM_CONFIG=gym.toml --secret HF_TOKEN
# (--secret NAME reads the value from your environment; add WANDB_API_KEY etc. the same way).
# Several nodes: add --num-nodes N; each node starts torchrun from SkyPilot's SKYPILOT_* variables.
# Checkpoints that survive preemption: mount a bucket and point the run at it, e.g.
#   file_mounts: {/checkpoints: {source: s3://my-bucket/gym, mode: MOUNT_CACHED}}
# (MOUNT_CACHED, not MOUNT: a plain MOUNT supports neither appends nor random writes, which Gym needs)
#   --env GYM_FLAGS="--output_dir /checkpoints/my-run"   (train.resume = "auto" picks up from there)
# The run ends on rank 0 with the push of the model and its Space when gym.toml has [hub] (add
# --secret GYM_API_KEY and, for a private model, the Space's read token named by space.hf_token_env).
""",
    "eval": """\
# Gym: evaluate a trained run with lm-eval (`gym eval`), on one cloud machine.
#   sky launch -c gym-eval sky_tasks/eval.yaml --env GYM_CONFIG=gym.toml --secret HF_TOKEN --down
# Mount the training run's checkpoint bucket and pass --env GYM_FLAGS="--output_dir /checkpoints/my-run"
# to evaluate what a cloud training run wrote there.
""",
    "serve": """\
# Gym: serve a trained adapter with vLLM's OpenAI-compatible server (chat at /v1/chat/completions).
#   sky serve up sky_tasks/serve.yaml --env BASE_MODEL=Qwen/Qwen3-0.6B --env ADAPTER=my-org/support-bot \\
#     --secret HF_TOKEN --secret GYM_API_KEY
# or, one machine without autoscaling: sky launch -c gym-serve sky_tasks/serve.yaml ...
# ADAPTER is the Hub repository (or path) of the LoRA adapter, requested as model "gym"; set MAX_LORA_RANK
# to at least train.lora.r. For a merged model (hub.push = "merged"), set BASE_MODEL to it and ADAPTER="".
# GYM_API_KEY, when given, is the key clients (and the readiness probe) must send.
""",
}

TEMPLATES: dict[str, dict[str, Any]] = {"train": TRAIN, "eval": EVAL, "serve": SERVE}


def template(name: str) -> dict[str, Any]:
    """A deep copy of one template, safe to fill in."""
    return copy.deepcopy(TEMPLATES[name])


def dump_yaml(data: dict[str, Any]) -> str:
    """YAML with scripts as literal blocks and keys in the order written, so it reads like a hand-made file."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, represent_str)
    return yaml.dump(data, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=110)


def render(name: str) -> str:
    """The text of ``sky_tasks/<name>.yaml``."""
    return HEADERS[name] + "\n" + dump_yaml(TEMPLATES[name])


def write_user_copies(folder: Path) -> list[Path]:
    """Regenerate the ``sky_tasks/`` copies from the templates."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in TEMPLATES:
        path = folder / f"{name}.yaml"
        path.write_text(render(name), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":  # pragma: no cover - maintenance helper
    for written_path in write_user_copies(Path(sys.argv[1] if len(sys.argv) > 1 else "sky_tasks")):
        print(written_path)
