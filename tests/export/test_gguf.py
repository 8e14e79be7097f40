"""`gym export --gguf` and the converter under it: what the file holds, read back with the `gguf` package's
own reader against the safetensors weights; refusals as one sentence that leave no file behind; and, in
the `.venv-gguf` overlay (`make gguf`), llama.cpp loading the file, answering as the full-precision model
does, and the quality report that must catch a conversion that is not the model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.api.conftest import REPO, SERVE_MAIN, server_env

gguf = pytest.importorskip("gguf", reason="the gguf package (train extra) is not installed")

OVERLAY_PYTHON = REPO / ".venv-gguf" / "bin" / "python"
NO_OVERLAY = "the .venv-gguf overlay with llama-cpp-python is missing: run `make gguf`"


def overlay_python() -> str:
    if not OVERLAY_PYTHON.is_file():
        pytest.skip(NO_OVERLAY)
    if subprocess.run([str(OVERLAY_PYTHON), "-c", "import llama_cpp"], capture_output=True).returncode != 0:
        pytest.skip(NO_OVERLAY)
    return str(OVERLAY_PYTHON)


def export(python: str, args: list[str], cache_root: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(SERVE_MAIN), "export", *args], cwd=cwd, capture_output=True, text=True,
                          env=server_env(cache_root, COLUMNS="400", PYTHONPATH=str(REPO)), timeout=600)  # fmt: skip


def field(reader, key: str):
    value = reader.fields[key]
    part = value.parts[value.data[0]]
    return bytes(part).decode() if value.types[0] == gguf.GGUFValueType.STRING else part[0]


def tensor(reader, name: str):
    found = next(t for t in reader.tensors if t.name == name)
    return gguf.quants.dequantize(found.data, found.tensor_type).reshape(
        tuple(reversed(found.shape.tolist()))
    )


def test_q8_0_file_holds_the_weights_and_the_tokenizer(tiny_dir: Path, tmp_path: Path) -> None:
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer

    from gym.export import convert_to_gguf

    out = convert_to_gguf(tiny_dir, tmp_path / "tiny.gguf", "q8_0")
    reader = gguf.GGUFReader(out)
    assert field(reader, "general.architecture") == "llama"
    assert field(reader, "general.file_type") == gguf.LlamaFileType.MOSTLY_Q8_0
    assert field(reader, "llama.block_count") == 4 and field(reader, "llama.attention.head_count_kv") == 2
    weights = load_file(tiny_dir / "model.safetensors")
    for gguf_name, hf_name in (("token_embd.weight", "model.embed_tokens.weight"),
                               ("blk.3.ffn_down.weight", "model.layers.3.mlp.down_proj.weight")):  # fmt: skip
        expected = weights[hf_name]
        assert (
            next(t for t in reader.tensors if t.name == gguf_name).tensor_type
            == gguf.GGMLQuantizationType.Q8_0
        )
        assert abs(tensor(reader, gguf_name) - expected).max() <= abs(expected).max() / 100  # 8-bit blocks
    norm = weights["model.layers.0.input_layernorm.weight"]
    assert (tensor(reader, "blk.0.attn_norm.weight") == norm).all()  # 1-D tensors stay float32
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    tokens = reader.fields["tokenizer.ggml.tokens"]
    listed = [bytes(tokens.parts[i]).decode() for i in tokens.data]
    assert listed == tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    assert field(reader, "tokenizer.ggml.pre") == "gpt-2"  # a bare ByteLevel pre-tokenizer: GPT-2's regex
    assert field(reader, "tokenizer.ggml.eos_token_id") == tokenizer.eos_token_id
    assert [p.name for p in tmp_path.iterdir()] == ["tiny.gguf"]  # no temporary file left


def test_qwen2_folder_keeps_its_attention_biases(tiny_dir: Path, tmp_path: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from gym.export import convert_to_gguf

    folder = tmp_path / "qwen2"
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=520, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2))  # fmt: skip
    torch.nn.init.normal_(model.model.layers[1].self_attn.k_proj.bias)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_dir / name, folder / name)
    reader = gguf.GGUFReader(convert_to_gguf(folder, tmp_path / "qwen2.gguf", "f16"))
    assert field(reader, "general.architecture") == "qwen2"
    assert field(reader, "tokenizer.ggml.pre") == "gpt-2"
    bias = model.model.layers[1].self_attn.k_proj.bias.detach().numpy()
    assert (tensor(reader, "blk.1.attn_k.bias") == bias).all()
    tokens = reader.fields["tokenizer.ggml.tokens"]
    assert len(tokens.data) == 520 and bytes(tokens.parts[tokens.data[-1]]).decode() == "[PAD519]"


def test_refusals_are_one_sentence_and_leave_no_file(
    tiny_dir: Path, cache_root: Path, tmp_path: Path
) -> None:
    import sys

    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    done = export(sys.executable, [str(gpt2), "--gguf", "q8_0"], cache_root, tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert (
        done.stderr.strip()
        == f"error: GGUF export supports Llama, Mistral and Qwen2 models; {gpt2} is GPT2LMHeadModel"
    )
    no_tokenizer = tmp_path / "no-tokenizer"
    shutil.copytree(tiny_dir, no_tokenizer, ignore=shutil.ignore_patterns("tokenizer.json"))
    done = export(sys.executable, [str(no_tokenizer), "--gguf", "f16"], cache_root, tmp_path)
    assert done.returncode == 1 and done.stderr.strip() == (
        f"error: {no_tokenizer} has no tokenizer.json; GGUF export needs the fast tokenizer saved beside the weights"
    )
    done = export(sys.executable, [str(tiny_dir), "--gguf", "q3"], cache_root, tmp_path)
    assert (
        done.stderr.strip() == "error: --gguf must be one of f16, q8_0, q4_k_m, q5_k_m, q6_k, q4_0, got 'q3'"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpt2", "no-tokenizer"]  # nothing half-written
    assert sorted(p.name for p in no_tokenizer.parent.iterdir() if "gguf" in p.name) == []


@pytest.mark.slow
def test_export_loads_the_file_and_answers_as_the_full_precision_model(tiny_dir: Path, cache_root: Path,
                                                                       tmp_path: Path) -> None:  # fmt: skip
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gym.export.gguf_quality import PROMPTS, prompt_ids

    python = overlay_python()
    done = export(python, [str(tiny_dir), "--gguf", "f16", "-o", str(tmp_path / "tiny-f16.gguf")], cache_root,
                  tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    ids = prompt_ids(tokenizer, PROMPTS[0])
    out = model.generate(
        torch.tensor([ids]), max_new_tokens=16, do_sample=False, eos_token_id=tokenizer.eos_token_id
    )
    expected = tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True)
    lines = done.stdout.splitlines()
    assert f"checked: llama.cpp loaded tiny-f16.gguf and answered {PROMPTS[0]!r} with {expected!r}" in lines
    assert lines[-1] == f"✓ GGUF f16 model in {tmp_path / 'tiny-f16.gguf'}"


@pytest.mark.slow
def test_quality_report_is_high_for_faithful_files_and_falls_for_a_broken_one(tmp_path: Path,
                                                                             cache_root: Path) -> None:  # fmt: skip
    python = overlay_python()
    env = {**server_env(cache_root), "PYTHONPATH": str(REPO)}
    done = subprocess.run([python, str(Path(__file__).with_name("gguf_quality_flow.py")), str(tmp_path)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    reports = json.loads(done.stdout.strip().splitlines()[-1])
    f16, q8_0, broken = reports["f16"], reports["q8_0"], reports["broken"]
    assert f16["agreement"] >= 0.99 and abs(f16["perplexity_gguf"] / f16["perplexity_full"] - 1) < 0.01
    assert q8_0["agreement"] >= 0.9 and abs(q8_0["perplexity_gguf"] / q8_0["perplexity_full"] - 1) < 0.02
    assert broken["agreement"] < q8_0["agreement"] - 0.3 and broken["identical_answers"] == 0
    assert abs(broken["perplexity_gguf"] / broken["perplexity_full"] - 1) > 0.05
    assert broken["first_divergence"] == 0
    assert os.path.getsize(tmp_path / "q8_0.gguf") < os.path.getsize(tmp_path / "f16.gguf")
