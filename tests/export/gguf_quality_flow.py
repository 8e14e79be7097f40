"""Run in the `.venv-gguf` overlay by test_gguf.py: the quality report of three GGUF forms of a tiny model.

The model is builtin:tiny with an output layer of its own: with tied embeddings a random-weight model
mostly repeats its last input token whatever its layers hold, which no broken file would disturb. f16
and q8_0 are faithful conversions; "broken" is a q8_0 conversion of a copy whose output rows were
shuffled, as a converter that writes a tensor in the wrong order would: a file that is not the model,
whose agreement must fall. Prints JSON.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gym.export import convert_to_gguf
from gym.export.gguf_quality import PROMPTS, builtin_rows, measure_quality
from gym.model.builtin import ensure_builtin

PROMPT_SET = PROMPTS[:4]
ANSWER_TOKENS = 16


def main(work: Path) -> None:
    tiny = ensure_builtin("builtin:tiny")
    rows = builtin_rows(AutoTokenizer.from_pretrained(tiny), 4)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny, tie_word_embeddings=False)
    torch.nn.init.normal_(model.lm_head.weight, std=0.02)
    untied, broken = work / "untied", work / "broken"
    model.save_pretrained(untied)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        weight = model.lm_head.weight
        weight.copy_(weight[torch.randperm(weight.shape[0], generator=generator)])
    model.save_pretrained(broken)
    for folder in (untied, broken):
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            shutil.copy(tiny / name, folder / name)
    reports = {}
    for name, folder, quant in (("f16", untied, "f16"), ("q8_0", untied, "q8_0"), ("broken", broken, "q8_0")):
        path = convert_to_gguf(folder, work / f"{name}.gguf", quant)
        report = measure_quality(untied, path, f"gguf-{quant}", rows, "rows of Gym's built-in text",
                                 answer_tokens=ANSWER_TOKENS, prompts=PROMPT_SET)  # fmt: skip
        reports[name] = report.to_json()
    print(json.dumps(reports))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
