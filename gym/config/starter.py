"""The commented starter gym.toml that `gym init` writes (it validates as written), and the recipes that
`gym init --recipe NAME` starts from: a gym.toml per model, method and adapter that people tune now."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from gym.config.root import FORMATS_BY_METHOD

STARTER_DATA = {
    "alpaca": "data/train.jsonl",
    "text": "data/corpus.jsonl",
    "preference": "data/preferences.jsonl",
    "kto": "data/feedback.jsonl",
    "prompt": "data/prompts.jsonl",
}

STARTER = """\
# gym.toml: one file describes the whole fine-tuning run.
# Check it with `gym validate`; every key is documented in docs/gym-toml.md (or `gym schema`).

[project]
name = "{name}"                     # lowercase letters, digits and '-'
# output_dir = "outputs/{name}"     # default

[model]
name_or_path = "{model}"            # Hub id, local folder, or "builtin:tiny" (offline demo model)
template = "{template}"                    # "auto" = the tokenizer's own chat template, or qwen3, chatml, llama3, ...
# dtype = "auto"                     # auto | bfloat16 | float16 | float32
# quantization = "none"              # none | bnb-4bit | bnb-8bit | gptq | awq

[[datasets]]
path = "{data}"             # .json .jsonl .csv .parquet file or folder, relative to this file
# hub = "org/dataset"               # or a Hub dataset id (exactly one of path / hub)
format = "{fmt}"                    # alpaca | sharegpt | openai | preference | kto | text | prompt
# max_samples = 1000
# eval_fraction = 0.05

[train]
method = "{method}"                      # sft | pt | dpo | kto | rm | ppo | grpo
adapter = "{adapter}"                    # lora | qlora | dora | full | freeze
epochs = 3.0
learning_rate = {lr}
batch_size = 4
gradient_accumulation_steps = 4
max_length = 2048
# max_steps = -1                     # > 0 overrides epochs
# resume = "auto"                    # resume from the latest checkpoint in output_dir
# report_to = ["tensorboard"]

[train.lora]
r = 16
alpha = 32
dropout = 0.05
target_modules = "all-linear"
{method_section}
[eval]
tasks = []                           # e.g. ["mmlu", "cmmlu"] or paths to lm-eval task YAML files
# num_fewshot = 5
# limit = 0                          # 0 = every sample
# baseline = true                    # also score the base model and report the delta

# [compute]                          # where `gym launch --cloud` runs
# provider = "skypilot"              # any cloud, spot with recovery, multi-node; "hf-jobs": only a Hub token,
#                                    # one machine of up to 8 GPUs, no spot (then flavor = "l4x1"; docs/hf-jobs.md)
# accelerators = ["A100:1", "L4:1"]
# use_spot = false
# checkpoint_bucket = "s3://my-bucket/gym"

# [hub]
# repo_id = "my-org/{name}"
# token_env = "HF_TOKEN"             # the token itself stays in the environment

# [space]
# repo_id = "my-org/{name}-chat"
# hardware = "auto"
"""

METHOD_SECTIONS = {
    "dpo": "\n[train.dpo]\nbeta = 0.1\n",
    "kto": "\n[train.kto]\nbeta = 0.1\n",
    "grpo": '\n[train.grpo]\ngroup_size = 5\nreward = ["exact_match"]\nmax_completion_length = 256\n'
    "# training_free = true             # weights frozen; an experience library learns instead\n",
    "ppo": '\n[train.grpo]\nreward = ["exact_match"]          # PPO uses these rewards unless train.ppo.reward_model is set\n',
}


def starter_toml(name: str = "my-model", model: str = "Qwen/Qwen3-0.6B", method: str = "sft") -> str:
    """Starter file text for ``method`` on ``model``."""
    fmt = FORMATS_BY_METHOD[method][0]
    return STARTER.format(
        name=name,
        model=model,
        template="chatml" if model == "builtin:tiny" else "auto",
        data=STARTER_DATA.get(fmt, "data/train.jsonl"),
        fmt=fmt,
        method=method,
        adapter="full" if model == "builtin:tiny" else "lora",
        lr="3e-3" if model == "builtin:tiny" else "2e-4",
        method_section=METHOD_SECTIONS.get(method, ""),
    )


# Recipes: examples/recipes/NAME.toml in a source checkout, <prefix>/share/zoo-gym/recipes in a wheel.
RECIPE_PLACES = (
    Path(__file__).resolve().parents[2] / "examples" / "recipes",
    Path(sys.prefix) / "share" / "zoo-gym" / "recipes",
)


def recipe_folder() -> Path:
    """Where the recipes are (the first place that holds any)."""
    return next((place for place in RECIPE_PLACES if any(place.glob("*.toml"))), RECIPE_PLACES[0])


def recipes() -> dict[str, str]:
    """Recipe name -> its one-line summary (the file's first comment line), sorted by name."""
    found = {}
    for path in sorted(recipe_folder().glob("*.toml")):
        first = path.read_text(encoding="utf-8").splitlines()[0] if path.stat().st_size else ""
        found[path.stem] = first.removeprefix("#").strip()
    return found


class UnknownRecipe(ValueError):
    """A recipe name that is not one of :func:`recipes`."""


def recipe_toml(name: str, project: str) -> str:
    """The recipe's text with ``project.name`` set to ``project`` (its comments kept)."""
    from gym.config.suggest import did_you_mean

    known = recipes()
    if name not in known:
        raise UnknownRecipe(
            f"--recipe: no recipe named {name!r}{did_you_mean(name, list(known), 3)}; "
            "`gym init --recipe` lists them"
        )
    text = (recipe_folder() / f"{name}.toml").read_text(encoding="utf-8")
    return re.sub(r'(?m)^(\[project\]\nname = )"[^"\n]*"', rf'\g<1>"{project}"', text, count=1)
