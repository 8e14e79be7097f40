"""The Hub double takes files outside git through the path the client picks, Xet or LFS, and the CAS
refuses what the Hub's CAS refuses; `gym deploy` tells a failed upload by its status on either path.

Run with the huggingface_hub of the dev venv (1.16) and of a fresh install (`make test-hub-latest`, 1.33).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import free_port
from tests.hub.hub_double import TESTER, HubDouble
from tests.hub.test_deploy import gym, lora_dir  # noqa: F401 - the trained adapter fixture
from tests.hub.test_deploy_tokens import model_only_config
from tests.hub.transfer import transfer, uploads  # noqa: F401 - the fixture

WRITE = "hf_" + "w" * 34
READ = "hf_" + "r" * 34


@pytest.fixture
def hub():
    with HubDouble({WRITE: TESTER, READ: dataclasses.replace(TESTER, role="read")}, free_port()) as double:
        yield double


def test_weights_take_the_clients_transfer_path_and_come_back_byte_for_byte(
    hub: HubDouble,
    transfer: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    from huggingface_hub import HfApi, hf_hub_download

    weights = os.urandom(200_000) + b"\0" * 70_000 + b"gym " * 60_000  # stored, zeros and text: each scheme
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    api = HfApi(endpoint=hub.url, token=WRITE)
    api.create_repo("acme/m", private=True)
    api.upload_folder(repo_id="acme/m", folder_path=folder)
    sha256 = hashlib.sha256(weights).hexdigest()
    assert uploads(hub.state, transfer) == [sha256]
    assert uploads(hub.state, "lfs" if transfer == "xet" else "xet") == []
    assert hub.state.files["model:acme/m"]["model.safetensors"] == weights
    assert hub.state.lfs_files["model:acme/m"] == {"model.safetensors"}

    got = hf_hub_download(
        "acme/m", "model.safetensors", endpoint=hub.url, token=READ, cache_dir=tmp_path / "c"
    )
    assert Path(got).read_bytes() == weights
    if transfer == "xet":  # read back from the CAS: reconstruction terms, then xorb ranges
        assert hub.state.xet.reconstructions == [hub.state.xet.by_sha256[sha256]]
    assert hub.state.downloads == ["model:acme/m/model.safetensors"]
    assert hub.state.unknown == [] and hub.state.bad_auth == 0  # /api/agent-harnesses, telemetry included


def test_the_cas_refuses_what_it_cannot_trust(hub: HubDouble) -> None:
    """No token, a read token writing, garbage for a xorb, a shard naming a xorb never uploaded."""
    from huggingface_hub import HfApi

    HfApi(endpoint=hub.url, token=WRITE).create_repo("acme/m")
    token_url = f"{hub.url}/api/models/acme/m/xet-write-token/main"
    assert httpx.get(token_url, headers={"authorization": f"Bearer {READ}"}).status_code == 403
    assert hub.state.refused == ["xet write token acme: read token"]
    assert httpx.get(token_url).status_code == 401
    granted = httpx.get(token_url, headers={"authorization": f"Bearer {WRITE}"})
    cas, token = granted.json()["casUrl"], granted.json()["accessToken"]
    assert granted.headers["X-Xet-Cas-Url"] == cas and granted.headers["X-Xet-Access-Token"] == token
    read = httpx.get(
        f"{hub.url}/api/models/acme/m/xet-read-token/main", headers={"authorization": f"Bearer {READ}"}
    ).json()["accessToken"]

    xorb_url = f"{cas}/v1/xorbs/default/{'ab' * 32}"
    assert httpx.post(xorb_url, content=b"\0" * 16).status_code == 401
    assert (
        httpx.post(xorb_url, content=b"\0" * 16, headers={"authorization": f"Bearer {read}"}).status_code
        == 403
    )
    garbage = httpx.post(
        xorb_url, content=b"\0\xff\0\0\7" + b"x" * 40, headers={"authorization": f"Bearer {token}"}
    )
    assert garbage.status_code == 400 and "xorb" in garbage.text

    tag = b"HFRepoMetaData\x00" + bytes(
        [85, 105, 103, 69, 106, 123, 129, 87, 131, 165, 189, 217, 92, 205, 209, 74, 169]
    )
    segment = b"\x01" * 32 + (0).to_bytes(4, "little") + (5).to_bytes(4, "little") + (0).to_bytes(4, "little")
    segment += (1).to_bytes(4, "little")
    entry = b"\x02" * 32 + (0).to_bytes(4, "little") + (1).to_bytes(4, "little") + bytes(8)
    shard = tag + (2).to_bytes(8, "little") + bytes(8) + entry + segment + b"\xff" * 32 + bytes(16)
    orphan = httpx.post(f"{cas}/v1/shards", content=shard, headers={"authorization": f"Bearer {token}"})
    assert orphan.status_code == 400 and "was not uploaded" in orphan.text
    assert hub.state.xet.files == {} and hub.state.lfs_objects == {}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("route", "status", "said"),
    [
        (
            "xet-write-token",
            401,
            "the Hub refused the token in $HF_TOKEN (401 unauthorized) while pushing acme/tiny-lora",
        ),
        ("xet-write-token", 403, "the token in $HF_TOKEN may not write to acme/tiny-lora (403 forbidden)"),
        (
            "xet-shard",
            503,
            "the Hub's file storage failed while uploading the weights of acme/tiny-lora (HTTP 503",
        ),
    ],
)
def test_a_failed_xet_upload_is_told_by_its_status(
    lora_dir: Path,  # noqa: F811
    cache_root: Path,
    route: str,
    status: int,
    said: str,
) -> None:
    """What hf_xet raises carries the status in its message only: not 'cannot reach the Hub'."""
    config = model_only_config(lora_dir)
    with HubDouble(WRITE, free_port()) as hub:
        hub.state.fail[route] = [status] * 20  # hf_xet retries a 5xx on its own (once here: see env)
        env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": WRITE, "HF_XET_CLIENT_RETRY_MAX_ATTEMPTS": "1"}
        failed = gym(["deploy", str(config)], cache_root, config.parent, **env)
        assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
        (sentence,) = re.findall(r"error: .*", failed.stderr)
        assert sentence.startswith(f"error: {said}") and sentence.endswith("retry with `gym deploy`" + (
            " later" if status >= 500 else "")), sentence  # fmt: skip
        assert WRITE not in failed.stdout + failed.stderr
        assert hub.state.commits == [] and hub.state.xet.uploads == []
