"""`gym deploy` to a CPU Space: the model is converted to GGUF, pushed through the Hub double's LFS path,
and the Space and the card say it serves that file with llama.cpp (space.cpu_format).

Without llama-cpp-python (the main venv) the file is written but neither loaded nor measured, and the
output says so; in the `.venv-gguf` overlay (`make gguf`) the same deploy loads it, answers a prompt and
reports its quality against the full-precision model in the output, the card and gguf_quality.json.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.conftest import REPO, SERVE_MAIN, free_port, server_env
from tests.hub import test_deploy
from tests.hub.hub_double import HubDouble
from tests.hub.test_deploy import READ, TOKEN, write_config

lora_dir = test_deploy.lora_dir  # the module's LoRA run folder fixture

pytestmark = pytest.mark.slow
OVERLAY_PYTHON = REPO / ".venv-gguf" / "bin" / "python"
GGUF_NAME = "tiny-lora-q8_0.gguf"


def _cpu_config(folder: Path, cpu_format: str | None = None) -> Path:
    path = write_config(folder)
    text = path.read_text().replace('hardware = "t4-small"', 'hardware = "cpu-basic"')
    if cpu_format:
        text += f'cpu_format = "{cpu_format}"\n'
    path.write_text(text)
    return path


def _deploy(python: str, config: Path, cache_root: Path, hub: HubDouble) -> subprocess.CompletedProcess:
    env = server_env(cache_root, HF_HUB_OFFLINE="0", COLUMNS="400", HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN,
                     HF_READ_TOKEN=READ)  # fmt: skip
    return subprocess.run([python, str(SERVE_MAIN), "deploy", str(config)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def _tensor(reader, name: str):
    import gguf

    tensor = next(t for t in reader.tensors if t.name == name)
    return gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(
        tuple(reversed(tensor.shape.tolist()))
    )


def test_cpu_space_gets_a_q8_0_gguf_file_through_lfs_and_says_so(lora_dir: Path, tiny_dir: Path,
                                                                  cache_root: Path) -> None:  # fmt: skip
    gguf = pytest.importorskip("gguf", reason="the gguf package (train extra) converts the model")
    config = _cpu_config(lora_dir.parents[1])
    with HubDouble(TOKEN, free_port()) as hub:
        done = _deploy(sys.executable, config, cache_root, hub)
        assert done.returncode == 0, done.stdout + done.stderr
        out = done.stdout.splitlines()
        assert "space  serves GGUF q8_0: space.cpu_format = auto on CPU hardware cpu-basic" in out
        state = hub.state
        assert state.unknown == []
        files = state.files["model:acme/tiny-lora"]
        assert GGUF_NAME in files and GGUF_NAME in state.lfs_files["model:acme/tiny-lora"]
        assert state.commits.count("model:acme/tiny-lora") == 1  # weights, card and GGUF in one commit
        # the pushed file is the merged model: the LoRA touched only q_proj, so the embeddings are the base's
        local = lora_dir.parents[1] / "pushed.gguf"
        local.write_bytes(files[GGUF_NAME])
        reader = gguf.GGUFReader(local)
        assert bytes(reader.fields["general.architecture"].parts[-1]).decode() == "llama"
        from safetensors.numpy import load_file

        embed = load_file(tiny_dir / "model.safetensors")["model.embed_tokens.weight"]
        assert abs(_tensor(reader, "token_embd.weight") - embed).max() < 0.01 * abs(embed).max()
        space = state.files["space:acme/tiny-lora-chat"]
        assert json.loads(space["gym_space.json"])["backend"] == "llamacpp"
        requirements = space["requirements.txt"].decode().splitlines()
        assert "--extra-index-url https://abetlen.github.io/llama-cpp-python/whl/cpu" in requirements
        assert "llama-cpp-python==0.3.36" in requirements
        card = files["README.md"].decode()
        assert card.startswith("# tiny-lora\n\nA model card.\n")  # the run's card, kept
        assert f"The Space serves `{GGUF_NAME}` (GGUF q8_0) with llama.cpp on CPU" in card
        if importlib.util.find_spec("llama_cpp") is None:  # the main venv: written, not loaded or measured
            assert (
                f"not checked: llama-cpp-python is not installed (`make gguf`), so {GGUF_NAME} was not loaded"
                in out
            )
            assert "quality not measured: llama-cpp-python is not installed here (`make gguf`)" in out
            assert "gguf_quality.json" not in files


def test_gpu_space_and_transformers_format_keep_the_pushed_weights(lora_dir: Path, cache_root: Path,
                                                                   tmp_path: Path) -> None:  # fmt: skip
    config = write_config(tmp_path)  # t4-small
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "tiny-lora").symlink_to(lora_dir)
    done = subprocess.run([sys.executable, str(SERVE_MAIN), "deploy", str(config), "--dry-run"],
                          cwd=REPO, env=server_env(cache_root, COLUMNS="400"), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "gradio + OpenAI API, transformers, hardware t4-small" in done.stdout
    assert (
        "space  serves the pushed weights: GPU hardware t4-small keeps space.backend"
        in done.stdout.splitlines()
    )
    cpu = _cpu_config(tmp_path, "transformers")
    done = subprocess.run([sys.executable, str(SERVE_MAIN), "deploy", str(cpu), "--dry-run"],
                          cwd=REPO, env=server_env(cache_root, COLUMNS="400"), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "space  serves the pushed weights: space.cpu_format = transformers" in done.stdout.splitlines()


@pytest.mark.skipif(not OVERLAY_PYTHON.is_file(), reason="the .venv-gguf overlay with llama-cpp-python is "
                    "missing: run `make gguf`")  # fmt: skip
def test_cpu_space_deploy_checks_and_measures_the_gguf_in_the_overlay(lora_dir: Path, cache_root: Path,
                                                                      tmp_path: Path) -> None:  # fmt: skip
    probe = subprocess.run([str(OVERLAY_PYTHON), "-c", "import llama_cpp"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("the .venv-gguf overlay has no llama-cpp-python: run `make gguf`")
    config = _cpu_config(tmp_path)
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "tiny-lora").symlink_to(lora_dir)
    with HubDouble(TOKEN, free_port()) as hub:
        done = _deploy(str(OVERLAY_PYTHON), config, cache_root, hub)
        assert done.returncode == 0, done.stdout + done.stderr
        files = hub.state.files["model:acme/tiny-lora"]
    out = done.stdout.splitlines()
    assert any(line.startswith(f"checked: llama.cpp loaded {GGUF_NAME} and answered") for line in out), out
    quality = json.loads(files["gguf_quality.json"])
    assert quality["format"] == "gguf-q8_0" and quality["agreement"] >= 0.9
    assert quality["rows_source"] == "training rows of the run (it holds none out)" and quality["rows"] >= 1
    shown = f"quality  gguf-q8_0 vs full precision: token agreement {quality['agreement']:.1%}"
    assert any(line.startswith(shown) for line in out), out
    card = files["README.md"].decode()
    assert f"| {quality['agreement']:.1%} |" in card and f"{quality['perplexity_gguf']:.3f}" in card


def test_a_gguf_format_the_model_cannot_take_is_one_sentence(cache_root: Path, tmp_path: Path) -> None:
    model = tmp_path / "output" / "tiny-lora"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    config = _cpu_config(tmp_path, "gguf-q4_k_m")
    done = subprocess.run([sys.executable, str(SERVE_MAIN), "deploy", str(config), "--dry-run"], cwd=REPO,
                          env=server_env(cache_root, COLUMNS="400"), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        'error: space.cpu_format = "gguf-q4_k_m" cannot be served: GGUF export supports Llama, Mistral and Qwen2 '
        'models; tiny-lora is GPT2LMHeadModel; set it to "transformers"'
    )
    assert sorted(p.name for p in model.iterdir()) == ["config.json"]  # nothing written beside the model
