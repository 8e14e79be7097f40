"""`gym init --recipe`: the recipes in examples/recipes/ validate, name the official template Gym knows for
their model, cover the methods and adapters people use, and each becomes a SkyPilot task SkyPilot accepts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from typer.testing import CliRunner

from gym.cli import app
from gym.config import load_config
from gym.config.sections import NAMED_TEMPLATES
from gym.config.starter import recipe_folder, recipes
from tests.conftest import REPO
from tests.launch.conftest import sky_env  # noqa: F401  (a fixture)

RECIPES = sorted((REPO / "examples" / "recipes").glob("*.toml"))
# model family (as the Hub id starts) -> the template Gym ships for it ("auto": Gym has none; the tokenizer's own)
OFFICIAL = {
    "Qwen/Qwen3-": "qwen3",
    "meta-llama/Llama-3.1-": "llama3.1",
    "meta-llama/Llama-3.2-": "llama3.2",
    "google/gemma-3-": "gemma",
    "mistralai/Mistral-7B-Instruct-v0.3": "mistral-v0.3",
    "microsoft/Phi-4": "auto",
    "microsoft/phi-4": "auto",
    "Qwen/Qwen2.5-VL-": "auto",  # the processor's template places the image tokens
}
runner = CliRunner()


def test_the_recipes_are_the_files_in_examples() -> None:
    assert recipe_folder() == REPO / "examples" / "recipes"
    assert list(recipes()) == [path.stem for path in RECIPES]
    assert 12 <= len(RECIPES) <= 16


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_each_recipe_validates_with_its_official_template_and_a_gpu(path: Path) -> None:
    config = load_config(path)
    family = next(prefix for prefix in OFFICIAL if config.model.name_or_path.startswith(prefix))
    assert config.model.template == OFFICIAL[family]
    assert config.model.template == "auto" or config.model.template in NAMED_TEMPLATES
    assert config.compute is not None and config.compute.accelerators and config.compute.max_runtime_hours
    assert (config.train.adapter == "qlora") == (config.model.quantization == "bnb-4bit")
    assert config.project.name == path.stem.replace(".", "-")
    assert path.read_text().startswith(f"# {recipes()[path.stem]}\n")


def test_the_recipes_cover_the_models_methods_and_adapters_people_tune() -> None:
    configs = [load_config(path) for path in RECIPES]
    assert {c.train.method for c in configs} == {"sft", "dpo", "grpo", "kto"}
    assert {c.train.adapter for c in configs} == {"lora", "qlora", "full"}
    families = {next(p for p in OFFICIAL if c.model.name_or_path.startswith(p)) for c in configs}
    assert {f.split("/")[0] for f in families} >= {"Qwen", "meta-llama", "google", "mistralai", "microsoft"}
    assert any("VL" in c.model.name_or_path for c in configs)  # a vision-language recipe


def test_init_recipe_alone_lists_each_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    outcome = runner.invoke(app, ["init", "--recipe"])
    assert outcome.exit_code == 0, outcome.output
    lines = outcome.output.splitlines()
    for name, summary in recipes().items():
        assert sum(line.startswith(f"{name} ") for line in lines) == 1
        assert any(line.startswith(name) and line.endswith(summary) for line in lines), name
    assert not (tmp_path / "gym.toml").exists()  # listing writes nothing


def test_init_recipe_writes_it_under_the_folders_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "support-bot"
    folder.mkdir()
    monkeypatch.chdir(folder)
    outcome = runner.invoke(app, ["init", "--recipe", "qwen3-1.7b-grpo-lora"])
    assert outcome.exit_code == 0, outcome.output
    assert "wrote gym.toml (recipe qwen3-1.7b-grpo-lora)" in outcome.output
    written = (folder / "gym.toml").read_text()
    source = (REPO / "examples" / "recipes" / "qwen3-1.7b-grpo-lora.toml").read_text()
    assert written == source.replace('name = "qwen3-1-7b-grpo-lora"', 'name = "support-bot"')  # comments kept
    config = load_config(folder / "gym.toml")
    assert config.project.name == "support-bot" and config.train.grpo.loss_type == "dapo"


def test_an_unknown_recipe_is_one_sentence_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    outcome = runner.invoke(app, ["init", "--recipe", "qwen3-8b-sft"])
    assert outcome.exit_code == 2
    assert " ".join(outcome.output.split()) == (
        "--recipe: no recipe named 'qwen3-8b-sft' (did you mean 'qwen3-8b-sft-qlora', 'qwen3-4b-sft-lora' or "
        "'qwen3-0.6b-sft-full'?); `gym init --recipe` lists them"
    )
    assert not (tmp_path / "gym.toml").exists()


def test_a_recipe_never_overwrites_without_force(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gym.toml").write_text("# mine\n")
    outcome = runner.invoke(app, ["init", "--recipe", "gemma3-1b-sft-full"])
    assert outcome.exit_code == 1 and "already exists; pass --force" in outcome.output
    assert (tmp_path / "gym.toml").read_text() == "# mine\n"


DRY_RUN_ALL = """
import json, sys
from pathlib import Path
import yaml
from gym.config import load_config
from gym.launch.cloud import launch_cloud
tasks = {}
for name in sys.argv[1:]:
    path = Path(name)
    shown = []
    launch_cloud(load_config(path), path, dryrun=True, env={}, echo=shown.append, warn=lambda line: None)
    tasks[path.stem] = yaml.safe_load(shown[-1])
print(json.dumps(tasks))
"""


def test_every_recipe_is_a_task_skypilot_accepts(tmp_path: Path, sky_env: dict[str, str]) -> None:  # noqa: F811
    """What `gym launch --cloud --dryrun` does for each recipe (SkyPilot's own parser), in one process."""
    done = subprocess.run([sys.executable, "-c", DRY_RUN_ALL, *map(str, RECIPES)], cwd=tmp_path, env=sky_env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    tasks = json.loads(done.stdout.splitlines()[-1])
    for path in RECIPES:
        task, compute = tasks[path.stem], tomllib.loads(path.read_text())["compute"]
        offered = [c["accelerators"] for c in task["resources"].get("any_of", [task["resources"]])]
        assert offered == compute["accelerators"], path.stem
        assert task["envs"]["GYM_CONFIG"] == path.name and task["name"].startswith(
            f"gym-{path.stem.replace('.', '-')}"
        )


def test_a_written_recipe_dry_runs_through_the_cli(tmp_path: Path, sky_env: dict[str, str]) -> None:  # noqa: F811
    folder = tmp_path / "my-run"
    folder.mkdir()
    wrote = subprocess.run([sys.executable, "-m", "gym", "init", "--recipe", "llama3.1-8b-sft-qlora"], cwd=folder,
                           env=sky_env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    done = subprocess.run([sys.executable, "-m", "gym", "launch", "--cloud", "--dryrun"], cwd=folder, env=sky_env,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "name: gym-my-run" in done.stdout and "accelerators: L4:1" in done.stdout
