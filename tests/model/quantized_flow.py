"""The quantized-base flow, run by tests/model/test_quantized.py in a Python that has GPTQModel.

1. builtin:tiny quantized to AWQ 4-bit by Gym's own quantizer (calibrated on the run's rows), reloaded.
2. `gym train` LoRA on that AWQ base (model.quantization = "awq", target_modules 'all-linear' resolved
   to the packed layers).
3. `gym export --merge` refused with one sentence; `gym serve` serves the adapter unmerged (openai client).
4. A full-precision LoRA run exported with `gym export --quantize gptq` (merge, quantize, reload).
Prints one JSON line of measurements.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def gym(*args: str) -> subprocess.CompletedProcess:
    """The `gym` command line in this process (it has imported GPTQModel once; a subprocess per command
    would import it again); stderr is the command's whole output, and an escaped exception is a failure."""
    import os

    from typer.testing import CliRunner

    from gym.cli import app

    os.chdir(ROOT)
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(list(args), result.exit_code, result.output, result.output)


def write_toml(name: str, model: str, quantization: str) -> Path:
    path = ROOT / f"{name}.toml"
    path.write_text(
        f"""
[project]
name = "{name}"
output_dir = "{name}-out"
[model]
name_or_path = "{model}"
template = "chatml"
quantization = "{quantization}"
dtype = "float32"
[[datasets]]
path = "data/train.jsonl"
format = "alpaca"
[train]
method = "sft"
adapter = "lora"
max_steps = 2
batch_size = 4
max_length = 64
"""
    )
    return path


def main() -> None:
    from gym.config import load_config
    from gym.data.builtin_datasets import write_reverse_dataset
    from gym.export.quantize import calibration_rows, quantize_folder
    from gym.model.builtin import resolve_model_path
    from gym.model.loading import load_tokenizer

    times: dict[str, float] = {}
    write_reverse_dataset(ROOT / "data", 32, 4)
    plain = load_config(write_toml("plain", "builtin:tiny", "none"))
    start = time.perf_counter()
    rows = calibration_rows(plain, load_tokenizer(plain))
    quantize_folder(Path(resolve_model_path("builtin:tiny")), ROOT / "tiny-awq", "awq", rows)
    times["quantize_awq_s"] = round(time.perf_counter() - start, 1)

    import shutil

    shutil.copytree(ROOT / "tiny-awq", ROOT / "broken-awq")
    weights = ROOT / "broken-awq" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:3000])
    write_toml("broken", str(ROOT / "broken-awq"), "awq")
    broken = gym("train", "broken.toml")
    assert broken.returncode == 1 and "Traceback" not in broken.stderr, broken.stderr[-2000:]
    assert f"the weights file {weights} is corrupt or truncated" in " ".join(broken.stderr.split()), (
        broken.stderr
    )

    write_toml("onawq", str(ROOT / "tiny-awq"), "awq")
    done = gym("train", "onawq.toml")
    assert done.returncode == 0, done.stderr[-2000:]
    adapter = json.loads((ROOT / "onawq-out" / "adapter_config.json").read_text())
    assert set(adapter["target_modules"]) >= {"q_proj", "v_proj", "down_proj"}, adapter["target_modules"]

    refused = gym("export", "onawq-out", "--merge")
    assert refused.returncode == 1 and "AWQ-quantized checkpoint" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and not (ROOT / "onawq-out-merged").exists()

    import openai

    from tests.api.conftest import server_env, start_server, stop

    url, process = start_server([str(ROOT / "onawq-out")], server_env(ROOT / "cache"))
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
        model = client.models.list().data[0].id
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Reverse: a b c"}], max_tokens=4, temperature=0
        )
        assert reply.choices[0].finish_reason in ("stop", "length")
    finally:
        stop(process)

    done = gym("train", "plain.toml")
    assert done.returncode == 0, done.stderr[-2000:]
    start = time.perf_counter()
    exported = gym("export", "plain-out", "--quantize", "gptq", "--config", "plain.toml")
    times["export_quantize_gptq_s"] = round(time.perf_counter() - start, 1)
    assert exported.returncode == 0, exported.stderr[-2000:]
    config = json.loads((ROOT / "plain-out-gptq" / "config.json").read_text())
    assert (
        config["quantization_config"]["quant_method"] == "gptq" and config["quantization_config"]["bits"] == 4
    )
    assert (ROOT / "plain-out-gptq" / "tokenizer.json").is_file()
    print(json.dumps(times))


if __name__ == "__main__":
    main()
