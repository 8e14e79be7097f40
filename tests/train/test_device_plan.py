"""One device decision (gym/model/device.py) and one switch, ``train.cpu_kernels`` / ``GYM_CPU_KERNELS``.

With the switch off, a CPU run builds what a GPU node builds: PEFT's own LoRA layers, transformers'
attention, the padded collator, Trainer's own clipping. With it on, Gym's CPU kernels replace them and
one SFT step gives the same loss and gradients.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gym.config import load_config
from tests.conftest import VALID

ROWS = "".join(f'{{"instruction": "say {word}", "output": "{word} {word}"}}\n' for word in "abcdefgh" * 2)


def write_config(folder: Path, extra: str = "") -> Path:
    (folder / "data").mkdir(exist_ok=True)
    (folder / "data" / "train.jsonl").write_text(ROWS)
    path = folder / "gym.toml"
    path.write_text(
        VALID
        + "max_steps = 2\nbatch_size = 4\nlogging_steps = 1\nsave_steps = 100\nlora.dropout = 0.0\n"
        + extra
    )
    return path


def built_trainer(folder: Path) -> Any:
    """The SFT trainer exactly as `gym train` builds it (model, adapter, collator) for this environment."""
    import torch

    from gym.data.prepare import prepare_data
    from gym.model.adapters import apply_adapter
    from gym.model.loading import load_model, load_tokenizer
    from gym.train.methods.sft import build_sft
    from gym.train.registry import TrainContext

    config = load_config(write_config(folder))
    tokenizer = load_tokenizer(config)

    def model() -> Any:
        torch.manual_seed(0)
        adapted = apply_adapter(load_model(config, for_training=True), config)
        for name, parameter in adapted.named_parameters():  # lora_B non-zero: every gradient carries signal
            if "lora_B" in name:
                torch.nn.init.normal_(parameter, std=0.05)
        return adapted

    return build_sft(TrainContext(config, model, tokenizer, prepare_data(config, tokenizer), folder / "ckpt"))


def lora_layer_classes(model: Any) -> set[type]:
    return {type(module) for module in model.modules() if hasattr(module, "lora_A")}


@pytest.mark.parametrize(
    ("version", "lowest", "first_untested", "inside"),
    [
        ("0.21.2", "0.21", "0.22", True),
        ("0.21", "0.21", "0.22", True),
        ("0.22.0", "0.21", "0.22", False),
        ("0.22.0.dev0", "0.21", "0.22", False),
        ("0.20.9", "0.21", "0.22", False),
        ("5.17.0", "5.17", "5.18", True),
        ("5.17.0rc1", "5.17", "5.18", True),
        ("6.0.0", "5.17", "5.18", False),
        ("4.57.1", "5.17", "5.18", False),
    ],
)
def test_a_hook_runs_only_inside_the_versions_it_was_tested_on(
    version: str, lowest: str, first_untested: str, inside: bool
) -> None:
    from gym.model.device import version_in_range

    assert version_in_range(version, lowest, first_untested) is inside


def test_the_installed_libraries_are_inside_every_hook_range() -> None:
    """The suite runs inside every hook's range (the pinned venv and `make test-latest` alike): a guard
    that closes on a release the suite runs on turns the CPU kernels off untested."""
    from gym.model.device import HOOK_RANGES, hook_note

    assert [hook_note(hook) for hook in HOOK_RANGES] == [None] * len(HOOK_RANGES)


def test_the_pinned_releases_are_inside_every_hook_range_and_pyproject_caps_none_of_them() -> None:
    """pins.txt is what `make test` installs; pyproject leaves those libraries open above (a cap would have
    to name a release proven broken)."""
    import re

    import tomllib

    from gym.model.device import HOOK_RANGES, version_in_range

    repo = Path(__file__).resolve().parents[2]
    pins = dict(line.split("==") for line in (repo / "pins.txt").read_text().splitlines() if "==" in line)
    for hook, (package, lowest, first_untested) in HOOK_RANGES.items():
        assert version_in_range(pins[package], lowest, first_untested), (hook, pins[package])
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    requirements = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    capped = [r for r in requirements if re.split(r"[<>=!~\[ ]", r)[0].lower() in pins and "<" in r]
    assert capped == []


@pytest.mark.parametrize(
    ("setting", "env", "kernels", "source"),
    [
        ("", None, True, "train.cpu_kernels = 'auto'"),
        ("cpu_kernels = false\n", None, False, "train.cpu_kernels = false"),
        ("cpu_kernels = true\n", None, True, "train.cpu_kernels = true"),
        ("cpu_kernels = true\n", "0", False, "GYM_CPU_KERNELS=0"),
        ("cpu_kernels = false\n", "auto", True, "GYM_CPU_KERNELS=auto"),
    ],
)
def test_the_switch_and_its_environment_override_decide_once_on_cpu(
    tmp_path: Path, setting: str, env: str | None, kernels: bool, source: str
) -> None:
    from gym.model.device import plan_device

    config = load_config(write_config(tmp_path, setting))
    plan = plan_device(config, {} if env is None else {"GYM_CPU_KERNELS": env}, device="cpu")
    assert (plan.device, plan.cpu_kernels, plan.cpu_kernels_source) == ("cpu", kernels, source)
    assert plan.attention == ("gym-packed (padding-free SFT)" if kernels else "transformers' own")
    assert plan.threads == ("one per usable core" if kernels else "torch's default")


def test_off_leaves_torch_its_default_threads_unless_a_number_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gym.model.cpu_kernels.threads import fixed_threads, make_tuner_skips, usable_cores

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    config = load_config(write_config(tmp_path, 'cpu_threads = "fastest"\n'))
    assert fixed_threads(config) is None and make_tuner_skips(config, 100)  # GYM_CPU_KERNELS=0 (conftest)
    monkeypatch.setenv("GYM_CPU_KERNELS", "1")
    assert fixed_threads(config) == usable_cores()
    monkeypatch.setenv("GYM_CPU_KERNELS", "0")
    pinned = load_config(write_config(tmp_path, "cpu_threads = 3\n"))
    assert fixed_threads(pinned) == 3


def test_auto_is_off_on_a_gpu_and_true_there_is_refused_at_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gym.config.errors import ConfigError
    from gym.model.device import plan_device
    from gym.train.runner import device_plan

    monkeypatch.delenv("GYM_CPU_KERNELS")
    assert not plan_device(load_config(write_config(tmp_path)), {}, device="cuda").cpu_kernels
    path = write_config(tmp_path, "cpu_kernels = true\n")
    line = path.read_text().splitlines().index("cpu_kernels = true") + 1
    with pytest.raises(ConfigError) as refused:
        device_plan(load_config(path), device="cuda")
    assert str(refused.value) == (
        f"{refused.value.issues[0].source}:{line}:15: train.cpu_kernels: "
        "true turns on Gym's CPU-only kernels, but this machine has a CUDA GPU; use 'auto' or false"
    )


def test_a_bad_switch_value_is_one_sentence_and_trains_nothing(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gym.cli import app

    path = write_config(tmp_path, 'cpu_kernels = "yes"\n')
    line = path.read_text().splitlines().index('cpu_kernels = "yes"') + 1
    result = CliRunner().invoke(app, ["train", str(path)])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert (
        f":{line}:15: train.cpu_kernels: expected 'auto', true or false, got the string \"yes\""
        in result.output
    )
    path.write_text(path.read_text().replace('cpu_kernels = "yes"\n', ""))
    result = CliRunner().invoke(app, ["train", str(path)], env={"GYM_CPU_KERNELS": "maybe"})
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "GYM_CPU_KERNELS='maybe' is not one of 0, 1 or auto" in " ".join(result.output.split())
    assert not (tmp_path / "outputs").exists() and not any(tmp_path.glob("**/checkpoints"))


@pytest.mark.slow
def test_the_plan_is_in_the_header_and_in_train_results(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gym.train.runner import run_training

    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))
    result = run_training(load_config(write_config(tmp_path)), show_progress=False)
    header = " ".join(capfd.readouterr().err.split())
    recorded = json.loads((Path(result.output_dir) / "train_results.json").read_text())["device"]
    assert recorded["device"] == "cpu" and recorded["cpu_kernels"] is False
    assert recorded["cpu_kernels_source"] == "GYM_CPU_KERNELS=0"  # tests/train/conftest.py: the GPU path
    assert recorded["attention"] == "transformers' own" and recorded["threads"] == "torch's default"
    assert result.hardware == recorded["hardware"] != ""
    assert (
        f"device: cpu ({recorded['hardware']}), float32, attention transformers' own, "
        "CPU kernels off (the GPU path) [GYM_CPU_KERNELS=0], threads torch's default"
    ) in header


@pytest.mark.slow
def test_off_trains_peft_layers_and_transformers_attention_on_trains_the_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from peft.tuners.lora.layer import Linear

    from gym.model.cpu_kernels.packed_attention import NAME
    from gym.train.collate import PackedCollator, PadCollator

    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "off").mkdir()
    off = built_trainer(tmp_path / "off")
    off.train()
    assert lora_layer_classes(off.model) == {Linear}  # PEFT's own class, exactly
    assert off.model.get_base_model().config._attn_implementation == "sdpa"
    assert type(off.data_collator) is PadCollator and not off.gym_cpu_clip and not off.gym_length_groups

    monkeypatch.setenv("GYM_CPU_KERNELS", "1")
    (tmp_path / "on").mkdir()
    on = built_trainer(tmp_path / "on")
    on.train()
    assert {cls.__name__ for cls in lora_layer_classes(on.model)} == {"CpuLoraLinear"}
    assert all(issubclass(cls, Linear) for cls in lora_layer_classes(on.model))
    assert on.model.get_base_model().config._attn_implementation == NAME
    assert type(on.data_collator) is PackedCollator and on.gym_cpu_clip and on.gym_length_groups


@pytest.mark.slow
def test_one_step_through_the_switch_has_the_same_loss_and_gradients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kernels on (merged-weight LoRA products, packed attention, padding-free rows) against kernels off
    (PEFT's layers, SDPA, a padded batch), from the same weights and rows."""
    import torch

    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))
    torch.manual_seed(1)
    rows = []
    for n in (9, 60, 14, 58, 11):
        ids = torch.randint(3, 500, (n,)).tolist()
        rows.append({"input_ids": ids, "labels": [-100] * (n // 3) + ids[n // 3 :]})
    trained = sum(sum(1 for label in row["labels"][1:] if label != -100) for row in rows)

    def step(name: str, switch: str) -> tuple[Any, dict[str, Any]]:
        monkeypatch.setenv("GYM_CPU_KERNELS", switch)
        (tmp_path / name).mkdir()
        trainer = built_trainer(tmp_path / name)
        trainer.model.train()
        loss = trainer.training_step(trainer.model, trainer.data_collator(rows), num_items_in_batch=trained)
        grads = {k: p.grad.clone() for k, p in trainer.model.named_parameters() if p.requires_grad}
        return loss.detach(), grads

    reference_loss, reference = step("off", "0")
    loss, grads = step("on", "1")
    torch.testing.assert_close(loss, reference_loss, rtol=1e-5, atol=1e-6)
    assert grads.keys() == reference.keys() and any("lora_A" in name for name in grads)
    for name, grad in reference.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
