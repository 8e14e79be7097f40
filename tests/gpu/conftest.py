"""tests/gpu: the path a GPU node runs, on a CUDA GPU (``make gpu-check``; docs/gpu.md).

Every test here carries the ``gpu`` marker and is skipped, saying why, where torch sees no CUDA GPU.
``GYM_GPU_TESTS_ON_CPU=1`` runs them on the CPU with Gym's CPU kernels off (``GYM_CPU_KERNELS=0``):
the same code path on another device, which checks the tests themselves where no GPU is lent.
"""

from __future__ import annotations

import os

import pytest

ON_CPU = os.environ.get("GYM_GPU_TESTS_ON_CPU") == "1"


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items or ON_CPU or cuda_available():
        return
    skip = pytest.mark.skip(
        reason="needs a CUDA GPU: torch.cuda.is_available() is false (make gpu-check runs these on one)"
    )
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def gpu_device(monkeypatch: pytest.MonkeyPatch) -> str:
    """'cuda', or 'cpu' under GYM_GPU_TESTS_ON_CPU=1 (then the CPU kernels are off: the GPU path)."""
    if ON_CPU:
        monkeypatch.setenv("GYM_CPU_KERNELS", "0")
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        return "cpu"
    return "cuda"
