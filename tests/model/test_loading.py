"""load_tokenizer / load_model on builtin:tiny, and the one-sentence errors before training can start."""

from __future__ import annotations

import logging
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gym.config.loader import load_config
from gym.config.root import GymConfig
from gym.model.builtin import ensure_builtin
from gym.model.loading import ModelError, load_model, load_tokenizer, model_source, resolve_dtype

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def xdg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An XDG cache folder holding builtin:tiny, built once for the module."""
    root = tmp_path_factory.mktemp("xdg")
    ensure_builtin("builtin:tiny", root=root / "gym" / "builtin")
    return root


@pytest.fixture(autouse=True)
def _builtin_cache(xdg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))


def make_config(model: dict[str, Any] | None = None, **train: Any) -> GymConfig:
    return GymConfig.model_validate(
        {
            "project": {"name": "t"},
            "model": {"name_or_path": "builtin:tiny", **(model or {})},
            "datasets": [{"path": "data.jsonl", "format": "alpaca"}],
            "train": train,
        }
    )


def test_builtin_tokenizer_keeps_its_pad_and_takes_the_named_template() -> None:
    tokenizer = load_tokenizer(make_config({"template": "llama3"}))
    assert tokenizer.pad_token == "<|endoftext|>"
    assert "<|start_header_id|>" in tokenizer.chat_template


def test_missing_pad_token_falls_back_to_eos_and_says_so(
    xdg: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from transformers import AutoTokenizer

    folder = tmp_path / "nopad"
    tokenizer = AutoTokenizer.from_pretrained(ensure_builtin("builtin:tiny", root=xdg / "gym" / "builtin"))
    tokenizer.pad_token = None
    tokenizer.save_pretrained(folder)
    (folder / "config.json").write_text("{}")
    with caplog.at_level(logging.INFO, logger="gym.model.loading"):
        loaded = load_tokenizer(make_config({"name_or_path": str(folder)}))
    assert loaded.pad_token == loaded.eos_token == "<|im_end|>"
    assert "no pad token" in caplog.text and "<|im_end|>" in caplog.text


def test_relative_jinja_template_is_read_from_the_config_folder(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "mine.jinja").write_text(
        "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
    )
    (tmp_path / "gym.toml").write_text(
        textwrap.dedent(
            """\
            [project]
            name = "t"
            [model]
            name_or_path = "builtin:tiny"
            template = "templates/mine.jinja"
            [[datasets]]
            path = "data.jsonl"
            format = "alpaca"
            """
        )
    )
    tokenizer = load_tokenizer(load_config(tmp_path / "gym.toml"))
    assert tokenizer.chat_template.startswith("{% for m in messages %}[")


def test_model_loads_in_float32_on_cpu_for_training_or_eval() -> None:
    import torch

    assert resolve_dtype("auto") == (torch.bfloat16 if torch.cuda.is_available() else torch.float32)
    model = load_model(make_config())
    assert model.training and model.config.use_cache is False
    assert next(model.parameters()).dtype == resolve_dtype("auto")
    assert not load_model(make_config({"dtype": "bfloat16"}), for_training=False).training
    assert next(load_model(make_config({"dtype": "bfloat16"})).parameters()).dtype == torch.bfloat16


def test_bnb_4bit_loads_linear4bit_layers_on_cpu() -> None:
    pytest.importorskip("bitsandbytes", reason="bitsandbytes (the qlora extra) is not installed")
    import bitsandbytes as bnb

    model = load_model(make_config({"quantization": "bnb-4bit"}))
    q_proj = model.model.layers[0].self_attn.q_proj
    assert isinstance(q_proj, bnb.nn.Linear4bit)
    assert q_proj.weight.quant_state.quant_type == "nf4"
    assert q_proj.weight.quant_state.nested  # double quantization


def test_bnb_8bit_loads_linear8bit_layers_on_cpu() -> None:
    pytest.importorskip("bitsandbytes", reason="bitsandbytes (the qlora extra) is not installed")
    import bitsandbytes as bnb

    model = load_model(make_config({"quantization": "bnb-8bit"}))
    assert isinstance(model.model.layers[0].mlp.down_proj, bnb.nn.Linear8bitLt)


def test_missing_local_path_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"^model path '.*nowhere' does not exist; check model.name_or_path"):
        load_model(make_config({"name_or_path": str(tmp_path / "nowhere")}))
    with pytest.raises(ModelError, match="does not exist"):
        load_tokenizer(make_config({"name_or_path": "./models/missing-base"}))


def test_folder_that_is_not_a_model_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"^could not load model '.*' from .*: "):
        load_model(make_config({"name_or_path": str(tmp_path)}))


def test_hub_id_offline_and_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    name = "gym-tests/not-a-real-model-7f3a"
    assert model_source(make_config({"name_or_path": name})) == (name, True)
    for load in (load_tokenizer, load_model):
        with pytest.raises(ModelError) as caught:
            load(make_config({"name_or_path": name}))
        message = str(caught.value)
        assert message.startswith(f"model '{name}' is not in the local cache and the Hub cannot be reached; ")
        assert "\n" not in message


def test_bitsandbytes_missing_is_one_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # `import bitsandbytes` now raises ImportError
    with pytest.raises(
        ModelError, match=r"^train.adapter = 'qlora' needs the 'bitsandbytes' package, which is not"
    ):
        load_model(make_config(adapter="qlora"))
    with pytest.raises(
        ModelError, match=r"^model.quantization = 'bnb-8bit' needs the 'bitsandbytes' package"
    ):
        load_model(make_config({"quantization": "bnb-8bit"}))


@pytest.mark.parametrize(("quantization", "package"), [("gptq", "optimum"), ("awq", "gptqmodel")])
def test_gptq_and_awq_without_their_package(
    monkeypatch: pytest.MonkeyPatch, quantization: str, package: str
) -> None:
    monkeypatch.setitem(sys.modules, package, None)
    with pytest.raises(
        ModelError, match=rf"^model.quantization = '{quantization}' needs the '{package}' package"
    ):
        load_model(make_config({"quantization": quantization}))


class _Unreachable:
    """A loader failing the way huggingface_hub does after a DNS failure on a machine without network."""

    @staticmethod
    def from_pretrained(name: str, **kwargs: Any) -> Any:
        try:
            raise OSError("[Errno -2] Name or service not known")
        except OSError as cause:
            raise RuntimeError("Cannot send a request, as the client has been closed.") from cause


def test_hub_id_without_network_is_detected_without_offline_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    import gym.model.loading as loading

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    with pytest.raises(
        ModelError, match=r"^model 'org/name' is not in the local cache and the Hub cannot be reached"
    ):
        loading.from_pretrained(_Unreachable, make_config({"name_or_path": "org/name"}))
