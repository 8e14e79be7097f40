"""PPO: the arithmetic by hand, then end to end on builtin:tiny (reward rises, KL starts at 0, exact resume)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from gym.config import load_config
from gym.train.ppo import core as ppo_core
from gym.train.runner import run_training

pytestmark = pytest.mark.slow

# Dense and decided by the sampled ids alone (half the vocabulary scores): learnable in a few steps.
REWARD_MODULE = """
def low_ids(prompts, completions, completion_ids, **kwargs):
    return [sum(i < 256 for i in ids) / max(len(ids), 1) for ids in completion_ids]
"""
REWARD = "gym_test_ppo_reward:low_ids"  # a unique module name: imported modules are cached


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))


def _config(
    folder: Path,
    *,
    adapter: str = "full",
    steps: int = 12,
    lr: float = 2e-3,
    save_steps: int | None = None,
    reward: str = REWARD,
    ppo_extra: str = "",
    resume: str = "auto",
    batch: int = 16,
    gas: int = 1,
    train_extra: str = "",
    data_extra: str = "",
    ppo_epochs: int = 4,
    completion: int = 4,
):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gym_test_ppo_reward.py").write_text(REWARD_MODULE)
    rows = [{"prompt": f"Say ok {i}", "answer": "ok"} for i in range(32)]
    (folder / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "gym.toml").write_text(
        f"""
[project]
name = "t"
output_dir = "out"
[model]
name_or_path = "builtin:tiny"
template = "chatml"
[[datasets]]
path = "data.jsonl"
format = "prompt"
{data_extra}
[train]
method = "ppo"
adapter = "{adapter}"
max_steps = {steps}
learning_rate = {lr}
batch_size = {batch}
gradient_accumulation_steps = {gas}
max_length = 64
logging_steps = 1
save_steps = {save_steps or steps}
warmup_ratio = 0.0
lr_scheduler = "constant"
resume = "{resume}"
{train_extra}
[train.lora]
r = 8
alpha = 16
[train.ppo]
kl_coef = 0.01
ppo_epochs = {ppo_epochs}
temperature = 1.0
max_completion_length = {completion}
{ppo_extra}
[train.grpo]
reward = ['{reward}']
"""
    )
    return load_config(folder / "gym.toml")


def _history(folder: Path, step: int) -> list[dict]:
    state = folder / "out" / "checkpoints" / f"checkpoint-{step}" / "trainer_state.json"
    return json.loads(state.read_text())["log_history"]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


# -- the arithmetic -------------------------------------------------------------------------------


def test_gae_matches_a_hand_computed_example() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 99.0]])
    values = torch.tensor([[0.1, 0.2, 0.3], [0.1, 0.2, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # row 2 ended after two tokens
    advantages, returns = ppo_core.gae(rewards, values, mask, gamma=0.9, lam=0.5)
    # row 1: A2 = 1 - .3 = .7; A1 = (.9*.3 - .2) + .45*.7 = .385; A0 = (.9*.2 - .1) + .45*.385 = .25325
    # row 2: the padding's reward and value are ignored: A1 = 2 - .2 = 1.8; A0 = .08 + .45*1.8 = .89
    expected = torch.tensor([[0.25325, 0.385, 0.7], [0.89, 1.8, 0.0]])
    assert torch.allclose(advantages, expected, atol=1e-6)
    assert torch.allclose(returns, torch.tensor([[0.35325, 0.585, 1.0], [0.99, 2.0, 0.0]]), atol=1e-6)


def test_policy_loss_clips_the_ratio_only_against_the_advantage() -> None:
    ratios = torch.tensor([[1.5, 1.5, 0.5, 0.5]])
    advantages = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    old = torch.zeros_like(ratios)
    mask = torch.ones_like(ratios)
    per_token = []
    for i in range(4):
        one = torch.zeros_like(mask)
        one[0, i] = 1.0
        loss, clipped = ppo_core.policy_loss(ratios.log(), old, advantages, one, clip_range=0.2)
        per_token.append((round(loss.item(), 6), clipped.item()))
    # max(-A r, -A clip(r)): a gain beyond the clip is capped, a loss never is
    assert per_token == [(-1.2, 1.0), (1.5, 0.0), (-0.5, 0.0), (0.8, 1.0)]
    loss, _ = ppo_core.policy_loss(ratios.log(), old, advantages, mask, clip_range=0.2)
    assert math.isclose(loss.item(), (-1.2 + 1.5 - 0.5 + 0.8) / 4, abs_tol=1e-6)


def test_value_loss_takes_the_worse_of_clipped_and_unclipped() -> None:
    old, returns = torch.tensor([[0.0, 0.0, 0.0]]), torch.tensor([[1.0, 1.0, 5.0]])
    values = torch.tensor([[1.0, 0.1, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third token is padding
    loss, clipped = ppo_core.value_loss(values, old, returns, mask, clip_range=0.2)
    # token 1: the step to 1.0 is clipped to 0.2, (0.2 - 1)^2 = .64; token 2: within the clip, .81
    assert math.isclose(loss.item(), 0.5 * (0.64 + 0.81) / 2, abs_tol=1e-6)
    assert math.isclose(clipped.item(), 0.5)


def test_kl_penalty_is_per_token_and_the_score_lands_on_the_last_real_token() -> None:
    logprobs = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -2.0, -3.0]])
    ref = torch.tensor([[-1.5, -1.0, -0.5], [-1.0, -2.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    rewards, kl = ppo_core.kl_penalised_rewards(torch.tensor([2.0, 3.0]), logprobs, ref, mask, kl_coef=0.1)
    assert torch.allclose(kl, torch.tensor([[0.5, 0.0, -0.5], [0.0, 0.0, 0.0]]))
    assert torch.allclose(rewards, torch.tensor([[-0.05, 0.0, 2.05], [3.0, 0.0, 0.0]]))


def test_whitening_ignores_padding() -> None:
    values = torch.tensor([[1.0, 3.0, 100.0]])
    white = ppo_core.masked_whiten(values, torch.tensor([[1.0, 1.0, 0.0]]))
    assert torch.allclose(white, torch.tensor([[-1.0, 1.0, 0.0]]), atol=1e-4)


# -- end to end on builtin:tiny -------------------------------------------------------------------


def test_ppo_mean_reward_rises_and_kl_starts_at_zero(tmp_path: Path) -> None:
    result = run_training(_config(tmp_path, steps=12), show_progress=False)
    assert result.steps == 12 and result.method == "ppo"
    history = _history(tmp_path, 12)
    assert [entry["step"] for entry in history] == list(range(1, 13))
    assert abs(history[0]["kl"]) < 1e-5, history[0]  # the policy is the reference before any update
    rewards = [entry["reward"] for entry in history]
    assert _mean(rewards[-3:]) > _mean(rewards[:3]) + 0.15, rewards
    assert len(result.loss_curve) == 12 and all(math.isfinite(loss) for _, loss in result.loss_curve)
    assert (tmp_path / "out" / "model.safetensors").is_file()
    assert (tmp_path / "out" / "checkpoints" / "checkpoint-12" / "gym_complete.json").is_file()


def test_ppo_lora_resumes_exactly_from_a_checkpoint(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    straight = tmp_path / "straight"
    result = run_training(
        _config(straight, adapter="lora", steps=4, lr=1e-2, save_steps=2), show_progress=False
    )
    assert result.steps == 4
    history = _history(straight, 4)
    assert abs(history[0]["kl"]) < 1e-5, history[0]  # adapters disabled = the reference
    checkpoint = straight / "out" / "checkpoints" / "checkpoint-2"
    assert (checkpoint / "gym_complete.json").is_file()

    resumed = tmp_path / "resumed"
    config = _config(resumed, adapter="lora", steps=4, lr=1e-2, save_steps=2, resume=str(checkpoint))
    again = run_training(config, show_progress=False)
    assert again.resumed_from == str(checkpoint) and again.steps == 4
    first = load_file(str(straight / "out" / "adapter_model.safetensors"))
    second = load_file(str(resumed / "out" / "adapter_model.safetensors"))
    assert first.keys() == second.keys() and first
    assert all(torch.equal(first[name], second[name]) for name in first)
    assert _history(resumed, 4)[-1]["reward"] == history[-1]["reward"]


def test_ppo_samples_at_most_train_ppo_max_completion_length_tokens(tmp_path: Path) -> None:
    # The random tiny model almost never samples EOS: without the bound its completions would run to the
    # default 256 tokens (and past max_length).
    config = _config(tmp_path, steps=1, batch=4, ppo_epochs=1, completion=2)
    assert config.train.grpo.max_completion_length == 256  # the GRPO key stays at its default
    assert run_training(config, show_progress=False).steps == 1
    (entry,) = [entry for entry in _history(tmp_path, 1) if "completion_length" in entry]
    assert 0 < entry["completion_length"] <= 2, entry


def test_ppo_scores_with_a_reward_model(tmp_path: Path) -> None:
    from transformers import AutoModelForSequenceClassification

    from gym.model.builtin import resolve_model_path

    torch.manual_seed(0)
    scorer = AutoModelForSequenceClassification.from_pretrained(
        resolve_model_path("builtin:tiny"), num_labels=1
    )
    scorer.save_pretrained(tmp_path / "rm")  # an untrained score head: only the plumbing is checked
    config = _config(tmp_path, steps=2, ppo_extra=f"reward_model = '{tmp_path / 'rm'}'")
    assert run_training(config, show_progress=False).steps == 2
    assert all(math.isfinite(entry["reward"]) for entry in _history(tmp_path, 2))


@pytest.mark.parametrize(
    ("reward", "ppo_extra", "message"),
    [
        ("no_such_module:score", "", "module 'no_such_module' was not found"),
        (REWARD, "reward_model = 'no/such/rm'", "is not a folder"),
    ],
)
def test_ppo_without_a_usable_reward_fails_with_one_sentence(
    tmp_path: Path, reward: str, ppo_extra: str, message: str
) -> None:
    config = _config(tmp_path, steps=1, reward=reward, ppo_extra=ppo_extra)
    with pytest.raises(ValueError, match="has no usable reward") as error:
        run_training(config, show_progress=False)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert "train.ppo.reward_model" in str(error.value)
    assert not (tmp_path / "out" / "checkpoints").exists()


def test_ppo_accumulates_gradients_over_micro_batches(tmp_path: Path) -> None:
    # batch_size 4 x gradient_accumulation_steps 2: each step samples 8 of the 32 prompts in two micro-batches
    # and takes one optimizer step per PPO epoch on their summed gradients (it used to ignore the key).
    result = run_training(_config(tmp_path, steps=2, batch=4, gas=2), show_progress=False)
    assert result.steps == 2
    history = [entry for entry in _history(tmp_path, 2) if "reward" in entry]
    assert [entry["epoch"] for entry in history] == [0.25, 0.5]  # 8 prompts per step
    scheduler = torch.load(
        tmp_path / "out" / "checkpoints" / "checkpoint-2" / "scheduler.pt", weights_only=True
    )
    assert scheduler["last_epoch"] == 2 * 4  # steps x ppo_epochs optimizer steps, not x micro-batches


def test_ppo_reports_to_trackers_and_scores_held_out_prompts(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        steps=4,
        train_extra='report_to = ["tensorboard"]\neval_steps = 2',
        data_extra="eval_fraction = 0.25",
    )
    result = run_training(config, show_progress=False)
    held = result.eval
    assert held is not None and held["rows"] == 8
    assert [point["step"] for point in held["curve"]] == [0, 2, 4]
    assert 0.0 <= held["initial"]["reward"] <= 1.0 and 0.0 <= held["final"]["reward"] <= 1.0
    assert abs(held["curve"][0]["kl"]) < 1e-5  # before any update the policy is the reference

    logged = _tensorboard_scalars(tmp_path / "out" / "checkpoints")
    assert {"train/reward", "train/loss", "eval/reward"} <= set(logged), sorted(logged)
    assert [step for step, _ in logged["train/reward"]] == [1, 2, 3, 4]


def _tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value)]}`` from the TFRecord event files under ``folder`` (tensorboardX's own protos)."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    found: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(folder.rglob("events.out.tfevents.*")):
        data, offset = path.read_bytes(), 0
        while offset + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 12 + length + 4  # length, its crc, the record, its crc
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    found.setdefault(value.tag, []).append((event.step, value.simple_value))
    return found
