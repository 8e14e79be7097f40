"""The Hub double refuses what the Hub refuses, driven by huggingface_hub as Gym drives it.

Binary files go through the LFS batch API and come back byte for byte; a token writes only where its
user may (its own namespace and its orgs), a read token writes nothing, an unknown token is a 401.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.api.conftest import free_port
from tests.hub.hub_double import TESTER, HubDouble
from tests.hub.transfer import transfer, uploads  # noqa: F401 - the fixture

WRITE = "hf_" + "w" * 34
READ = "hf_" + "r" * 34


@pytest.fixture
def hub():
    tokens = {WRITE: TESTER, READ: dataclasses.replace(TESTER, role="read")}
    with HubDouble(tokens, free_port()) as double:
        yield double


def _api(hub: HubDouble, token: str | None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)


def test_binary_files_go_to_storage_and_download_byte_for_byte(
    hub: HubDouble,
    tmp_path: Path,
    transfer: str,  # noqa: F811
) -> None:
    from huggingface_hub import hf_hub_download

    weights = os.urandom(4096) + b"\0"
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    api = _api(hub, WRITE)
    api.create_repo("acme/m", private=True)
    api.upload_folder(repo_id="acme/m", folder_path=folder)
    sha256 = hashlib.sha256(weights).hexdigest()
    assert uploads(hub.state, transfer) == [sha256]  # the weights through LFS or Xet, nothing else
    assert hub.state.lfs_files["model:acme/m"] == {"model.safetensors"}
    got = hf_hub_download(
        "acme/m", "model.safetensors", endpoint=hub.url, token=READ, cache_dir=tmp_path / "c"
    )
    assert Path(got).read_bytes() == weights
    assert "model:acme/m/model.safetensors" in hub.state.downloads

    (folder / "config.json").write_text('{"model_type": "qwen2"}')
    xorbs = set(hub.state.xet.xorbs)
    api.upload_folder(repo_id="acme/m", folder_path=folder)  # same weights: the Hub has the object already
    assert (
        hub.state.lfs_uploads == ([sha256] if transfer == "lfs" else []) and set(hub.state.xet.xorbs) == xorbs
    )
    assert hub.state.commits.count("model:acme/m") == 2  # (a Xet client may name the file in a shard again)


def test_a_commit_must_match_an_uploaded_object(hub: HubDouble) -> None:
    """What the old double accepted: weights inline as a regular file, or an LFS pointer to nothing."""
    import httpx

    _api(hub, WRITE).create_repo("acme/m")
    url, auth = f"{hub.url}/api/models/acme/m/commit/main", {"authorization": f"Bearer {WRITE}"}
    header = json.dumps({"key": "header", "value": {"summary": "up", "description": ""}})
    inline = json.dumps(
        {"key": "file", "value": {"path": "model.safetensors", "content": "AAAA", "encoding": "base64"}}
    )
    pointer = json.dumps({"key": "lfsFile", "value": {"path": "model.safetensors", "algo": "sha256",
                                                      "oid": "ab" * 32, "size": 3}})  # fmt: skip
    for line, status in ((inline, 400), (pointer, 422)):
        answer = httpx.post(url, content=f"{header}\n{line}\n", headers=auth)
        assert answer.status_code == status, answer.text
    assert hub.state.commits == [] and hub.state.files.get("model:acme/m", {}) == {}


def test_tokens_write_only_where_their_user_may(hub: HubDouble, tmp_path: Path) -> None:
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    assert _api(hub, WRITE).whoami()["name"] == "tester"
    with pytest.raises(HfHubHTTPError) as unknown:
        _api(hub, "hf_" + "x" * 34).whoami()
    assert unknown.value.response.status_code == 401 and hub.state.bad_auth == 1

    with pytest.raises(HfHubHTTPError) as elsewhere:
        _api(hub, WRITE).create_repo("someone-else/m")
    assert elsewhere.value.response.status_code == 403
    assert 'You don\'t have the rights to create a model under the namespace "someone-else"' in str(
        elsewhere.value
    )

    with pytest.raises(HfHubHTTPError) as read_create:
        _api(hub, READ).create_repo("acme/r")
    assert read_create.value.response.status_code == 403 and "model:acme/r" not in hub.state.repos

    _api(hub, WRITE).create_repo("acme/m", private=True)
    (tmp_path / "README.md").write_text("# m\n")
    with pytest.raises(HfHubHTTPError) as read_write:
        _api(hub, READ).upload_file(
            path_or_fileobj=tmp_path / "README.md", path_in_repo="README.md", repo_id="acme/m"
        )
    assert read_write.value.response.status_code == 403 and hub.state.commits == []
    assert hub.state.refused[-1] == "preupload acme: read token"

    assert (
        _api(hub, READ).model_info("acme/m").id == "acme/m"
    )  # a read token reads its namespace's private repo
    with pytest.raises(RepositoryNotFoundError):
        _api(hub, None).model_info("acme/m")  # without a token a private repo does not exist


def test_spaces_are_refused_as_the_hub_refuses_them_per_plan() -> None:
    """A free account: no Gradio Space on cpu-basic (402), two ZeroGPU Spaces, no paid hardware (403);
    its free org gets no ZeroGPU either; a static Space is free for everyone. A PRO user gets them all."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    from tests.hub.hub_double import FREE

    free, pro = "hf_" + "f" * 34, "hf_" + "p" * 34
    with HubDouble({free: FREE, pro: dataclasses.replace(TESTER, user="prouser")}, free_port()) as hub:
        api = HfApi(endpoint=hub.url, token=free)
        who = api.whoami()
        assert (who["isPro"], who["canPay"], who["orgs"][0]["plan"]) == (False, False, "free")

        def refused(call) -> tuple[int, str]:
            with pytest.raises(HfHubHTTPError) as caught:
                call()
            return caught.value.response.status_code, caught.value.server_message or ""

        status, message = refused(
            lambda: api.create_repo("freebie/chat", repo_type="space", space_sdk="gradio")
        )
        assert status == 402 and "requires a PRO subscription" in message
        api.create_repo("freebie/page", repo_type="space", space_sdk="static")
        for name in ("z1", "z2"):
            api.create_repo(
                f"freebie/{name}", repo_type="space", space_sdk="gradio", space_hardware="zero-a10g"
            )
        status, message = refused(
            lambda: api.create_repo(
                "freebie/z3", repo_type="space", space_sdk="gradio", space_hardware="zero-a10g"
            )
        )
        assert status == 402 and "maximum number of ZeroGPU Spaces (2)" in message
        status, _ = refused(
            lambda: api.create_repo(
                "freeorg/z", repo_type="space", space_sdk="gradio", space_hardware="zero-a10g"
            )
        )
        assert status == 402
        status, message = refused(lambda: api.request_space_hardware("freebie/z1", "t4-small"))
        assert status == 403 and "payment method" in message
        status, _ = refused(lambda: api.request_space_hardware("freebie/z1", "cpu-basic"))
        assert status == 402
        assert hub.state.hardware == {
            "freebie/z1": "zero-a10g",
            "freebie/z2": "zero-a10g",
        }  # nothing refused kept

        paid = HfApi(endpoint=hub.url, token=pro)
        paid.create_repo("prouser/chat", repo_type="space", space_sdk="gradio")
        paid.request_space_hardware("prouser/chat", "t4-small")
        assert hub.state.hardware["prouser/chat"] == "t4-small"
