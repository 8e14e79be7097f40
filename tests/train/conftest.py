"""Training tests run the path a GPU node runs: Gym's CPU kernels off (``GYM_CPU_KERNELS=0``).

The tests of the kernels themselves ask for them with the ``cpu_kernels_on`` fixture.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def gpu_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CPU_KERNELS", "0")


@pytest.fixture
def cpu_kernels_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CPU_KERNELS", "1")
