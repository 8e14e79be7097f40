"""`gym deploy` against a Hub that checks who may write where, and takes weights only through its file
storage (LFS or Xet, whichever the client takes: the test runs on both)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

import pytest

from tests.api.conftest import free_port
from tests.hub.hub_double import TESTER, HubDouble, HubToken
from tests.hub.test_deploy import gym, lora_dir  # noqa: F401 - the module's trained adapter fixture
from tests.hub.transfer import STORAGE_ROUTE, transfer, uploads  # noqa: F401 - the fixture

WRITE = "hf_" + "W" * 34
READ = "hf_" + "R" * 34
OUTSIDER = "hf_" + "O" * 34  # a write token of a user who is not a member of acme

CONFIG = """\
[project]
name = "tiny-lora"
output_dir = "output/tiny-lora"

[model]
name_or_path = "builtin:tiny"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"

[hub]
repo_id = "acme/tiny-lora"
"""


def model_only_config(run: Path) -> Path:
    """A gym.toml beside the trained adapter ``run`` that pushes the model and no Space."""
    folder = run.parents[1]
    (folder / "data").mkdir(exist_ok=True)
    (folder / "data" / "train.jsonl").write_text('{"instruction": "hi", "output": "hello"}\n')
    config = folder / "gym-model-only.toml"
    config.write_text(CONFIG)
    return config


@pytest.mark.slow
def test_push_needs_a_write_token_of_the_namespace_and_sends_weights_to_storage(
    lora_dir: Path,  # noqa: F811
    cache_root: Path,
    transfer: str,  # noqa: F811
) -> None:
    config = model_only_config(lora_dir)
    folder = config.parent
    tokens = {WRITE: TESTER, READ: dataclasses.replace(TESTER, role="read"), OUTSIDER: HubToken("outsider")}
    with HubDouble(tokens, free_port()) as hub:
        for token in (READ, OUTSIDER):
            refused = gym(["deploy", str(config)], cache_root, folder, HF_ENDPOINT=hub.url, HF_TOKEN=token)
            assert refused.returncode == 1, refused.stdout
            assert refused.stderr.splitlines() == [
                f"error: the token in $HF_TOKEN may not write to acme/tiny-lora (403 forbidden): use a token with "
                f"write access to its owner; the run's outputs stay in {lora_dir}; retry with `gym deploy`"
            ]
            assert token not in refused.stdout + refused.stderr
        assert hub.state.repos == {} and hub.state.commits == [] and uploads(hub.state, transfer) == []
        assert hub.state.refused == ["create acme: read token", "create acme: not its namespace"]

        hub.state.fail[STORAGE_ROUTE[transfer]] = [403]  # the storage refuses the object (an expired URL)
        stored = gym(["deploy", str(config)], cache_root, folder, HF_ENDPOINT=hub.url, HF_TOKEN=WRITE)
        assert stored.returncode == 1 and "Traceback" not in stored.stderr
        assert re.findall(r"error: .*", stored.stderr) == [  # after the upload's progress bar
            f"error: the Hub's file storage answered HTTP 403 while uploading the weights of acme/tiny-lora; "
            f"the run's outputs stay in {lora_dir}; retry with `gym deploy`"
        ]
        assert hub.state.commits == []  # no commit points at weights that never arrived

        done = gym(["deploy", str(config)], cache_root, folder, HF_ENDPOINT=hub.url, HF_TOKEN=WRITE)
        assert done.returncode == 0, done.stdout + done.stderr
        weights = (lora_dir / "adapter_model.safetensors").read_bytes()
        assert uploads(hub.state, transfer) == [hashlib.sha256(weights).hexdigest()]
        assert hub.state.lfs_files["model:acme/tiny-lora"] == {"adapter_model.safetensors"}
        assert hub.state.files["model:acme/tiny-lora"]["adapter_model.safetensors"] == weights
        assert hub.state.bad_auth == 0 and hub.state.unknown == []
