"""1,000 requests from 16 concurrent clients in a second process: no 5xx, still healthy, batched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import API_KEY

pytestmark = pytest.mark.slow


def test_concurrent_load_is_batched(server: str) -> None:
    client = Path(__file__).with_name("load_client.py")
    done = subprocess.run(
        [sys.executable, str(client), server, API_KEY, "16", "1000", "4"],
        capture_output=True, text=True, timeout=240, check=True,
    )  # fmt: skip
    statuses = json.loads(done.stdout.strip().splitlines()[-1])
    assert statuses == {"200": 1000}, statuses
    health = httpx.get(server + "/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert health.json()["max_batch_size"] > 1, health.json()
