"""GPTQ/AWQ: what needs no GPTQModel runs here; the quantize/train/serve/export flow runs in a Python that
has it (GPTQModel 7.6.0 would change numpy in the shared environment, so it lives in its own venv:
``GYM_QUANT_PYTHON`` or ``.venv-quant/bin/python``; see docs/quantized.md), and is skipped with the reason
when there is none."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gym.files import gym_cache_home
from gym.model.quantized import checkpoint_quantization, merge_refusal
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_quantized_checkpoints_are_recognised(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"quantization_config": {"quant_method": "gptq", "bits": 4}})
    )
    assert checkpoint_quantization(tmp_path) == "gptq"
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert checkpoint_quantization(tmp_path) is None
    sentence = merge_refusal("org/model-AWQ", "outputs/run", "awq")
    assert "AWQ-quantized" in sentence and "gym serve outputs/run" in sentence and "\n" not in sentence


def test_corrupt_weights_are_one_sentence_naming_the_file(tmp_path: Path) -> None:
    """A truncated safetensors file (the quantized case runs in quantized_flow.py) names the file."""
    import shutil

    from typer.testing import CliRunner

    from gym.cli import app
    from gym.model.builtin import ensure_builtin

    folder = tmp_path / "broken"
    shutil.copytree(ensure_builtin("builtin:tiny", root=tmp_path / "cache"), folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:3000])
    (tmp_path / "gym.toml").write_text(
        f"""
[project]
name = "q"
[model]
name_or_path = "{folder}"
template = "chatml"
[[datasets]]
path = "rows.jsonl"
format = "alpaca"
"""
    )
    (tmp_path / "rows.jsonl").write_text('{"instruction": "a", "output": "b"}\n')
    result = CliRunner().invoke(app, ["train", str(tmp_path / "gym.toml")])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert f"the weights file {weights} is corrupt or truncated" in " ".join(result.output.split())


def _quant_python() -> str | None:
    wanted = os.environ.get("GYM_QUANT_PYTHON") or str(REPO / ".venv-quant" / "bin" / "python")
    if not Path(wanted).is_file():
        return None
    # Installed, asked of the metadata: importing GPTQModel here costs 8 CPU-s the flow pays again, and an
    # install that is present but broken must fail the flow, not skip it.
    probe = subprocess.run(
        [wanted, "-c", "from importlib.metadata import version; version('gptqmodel'); version('optimum')"],
        capture_output=True, timeout=60,
    )  # fmt: skip
    return wanted if probe.returncode == 0 else None


def test_gptq_awq_quantize_train_serve_and_export(tmp_path: Path) -> None:
    python = _quant_python()
    if python is None:
        pytest.skip(
            "no Python with gptqmodel==7.6.0 and optimum: set GYM_QUANT_PYTHON or build .venv-quant "
            "(`make quant`, docs/quantized.md); GPTQModel changes numpy, so it stays out of the shared venv"
        )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "GYM_CACHE_DIR": str(tmp_path / "cache"),
        "GPTQMODEL_CPU_WORKERS": "2",
        # the kernels `make quant` compiled (Gym's cache as this process sees it: the flow's is a fresh one)
        "GPTQMODEL_TORCH_EXTENSIONS_DIR": str(gym_cache_home() / "gptqmodel-extensions"),
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        [python, str(Path(__file__).with_name("quantized_flow.py")), str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    print(done.stdout.strip().splitlines()[-1])
