"""The commented starter gym.toml that `gym init` writes (it validates as written)."""

from __future__ import annotations

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

# [compute]                          # where `gym launch --cloud` runs (SkyPilot)
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
