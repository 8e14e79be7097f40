"""Which transfer path a hub test exercises for the files the Hub keeps outside git (weights, GGUF files).

- ``xet``: huggingface_hub's default whenever ``hf_xet`` is installed (it is a dependency on x86-64 and
  arm64): 1.20+ always, earlier 1.x when the LFS batch API answers ``"transfer": "xet"``, as the Hub and
  its double (:mod:`tests.hub.hub_xet`) do.
- ``lfs``: the LFS batch API and a PUT to storage (:mod:`tests.hub.hub_lfs`): what a client without
  ``hf_xet``, or with ``HF_HUB_DISABLE_XET=1`` (huggingface_hub's documented switch, ``constants.py``),
  takes.

The :func:`transfer` fixture runs a test once per path: it sets ``HF_HUB_DISABLE_XET`` for the processes
a test starts (``gym`` subprocesses inherit it) and the constant huggingface_hub read from it at import
for calls made in the test's own process. A test that does not ask for it takes the default, Xet.
"""

from __future__ import annotations

import pytest

STORAGE_ROUTE = {"xet": "xet-xorb", "lfs": "lfs-upload"}  # the double's `fail` key for a storage upload


@pytest.fixture(params=["xet", "lfs"])
def transfer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    from huggingface_hub import constants

    lfs = request.param == "lfs"
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1" if lfs else "0")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", lfs)
    return request.param


def uploads(state, transfer: str) -> list[str]:
    """The sha256 of each file content the Hub's storage took through ``transfer``, in order."""
    return state.lfs_uploads if transfer == "lfs" else state.xet.uploads
