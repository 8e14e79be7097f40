"""The one place that decides where a run computes and what follows from it.

Before, about eighteen call sites each asked ``torch.cuda.is_available()`` and switched CPU-only code
on by themselves, so every CPU test ran a path no GPU node runs. Now :func:`plan_device` decides once
(cuda / mps / cpu), and the dtype, attention, CPU kernels (``train.cpu_kernels``, overridden by
``GYM_CPU_KERNELS``), thread policy and quantization backends follow from that one
:class:`DevicePlan`, which the run prints in its header and writes into train_results.json.

A CPU kernel that reaches into a library's internals runs only on the versions it was tested on
(:data:`HOOK_RANGES`); elsewhere the run takes the standard path and the plan says why in one note.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.config import GymConfig

ENV_SWITCH = "GYM_CPU_KERNELS"
ENV_VALUES = {"0": False, "false": False, "off": False, "1": True, "true": True, "on": True, "auto": "auto"}

# hook -> (library, lowest tested version, first untested version): outside it, the standard path runs.
# The ends are what the suite runs on: the pinned venv (pins.txt, `make test`) and the newest releases
# (`make test-latest`, CI's latest-releases job); a release the suite passes on moves the upper end.
HOOK_RANGES: dict[str, tuple[str, str, str]] = {
    "lora_matmuls": ("peft", "0.21", "0.22"),  # swaps PEFT's LoRA Linear for a subclass
    "packed_attention": ("transformers", "5.17", "5.26"),  # registers an attention function
    "clip_grad_norm": ("transformers", "5.17", "5.26"),  # overrides Trainer._clip_grad_norm
    "growing_kv_layer": ("transformers", "5.17", "5.26"),  # subclasses cache_utils.DynamicLayer
}


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: '5.17.0' -> (5, 17, 0); '0.22.0.dev0' -> (0, 22, 0)."""
    match = re.match(r"\d+(\.\d+)*", version.strip())
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group(0).split("."))


def version_in_range(version: str, lowest: str, first_untested: str) -> bool:
    """Whether ``version`` is at least ``lowest`` and below ``first_untested`` (release numbers only)."""
    return release(lowest) <= release(version) < release(first_untested)


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def hook_supported(hook: str) -> bool:
    """Whether the installed library is in the range ``hook`` was tested on (:data:`HOOK_RANGES`)."""
    return hook_note(hook) is None


def hook_note(hook: str) -> str | None:
    """None when ``hook`` may run; else the one line saying which version is outside its tested range."""
    package, lowest, first_untested = HOOK_RANGES[hook]
    version = installed_version(package)
    if version is not None and version_in_range(version, lowest, first_untested):
        return None
    return (
        f"Gym's {hook} hook is tested on {package} >={lowest},<{first_untested}, not {version or 'none'}; "
        "the standard path runs instead"
    )


@dataclass(frozen=True)
class DevicePlan:
    """What a run computes on and which code paths follow from it."""

    device: str  # cuda | mps | cpu
    hardware: str
    dtype: str  # model.dtype resolved: 'auto' is bfloat16 on a CUDA GPU that supports it, else float32
    attention: str  # 'gym-packed' (CPU kernels, padding-free SFT) or "transformers' own"
    cpu_kernels: bool
    cpu_kernels_source: str  # what decided it: the config key or the environment variable
    threads: str  # the thread policy
    quantization_backends: tuple[str, ...]
    hooks_off: tuple[str, ...] = ()  # CPU kernels outside their tested library versions

    def uses(self, hook: str) -> bool:
        """Whether the CPU kernel ``hook`` runs: the kernels are on and its library version is tested."""
        return self.cpu_kernels and hook not in self.hooks_off

    def notes(self) -> list[str]:
        return [note for hook in self.hooks_off if (note := hook_note(hook))]

    def header(self) -> str:
        kernels = "on" if self.cpu_kernels else "off (the GPU path)"
        return (
            f"device: {self.device} ({self.hardware}), {self.dtype}, attention {self.attention}, "
            f"CPU kernels {kernels} [{self.cpu_kernels_source}], threads {self.threads}"
        )

    def record(self) -> dict[str, Any]:
        return {**asdict(self), "quantization_backends": list(self.quantization_backends),
                "hooks_off": list(self.hooks_off)}  # fmt: skip


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def detect_device() -> str:
    """cuda, else mps (Apple GPUs), else cpu."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    return "mps" if mps is not None and mps.is_available() else "cpu"


def inference_device() -> str:
    """Where serving, evaluation and export put a model: the CUDA GPU when there is one, else the CPU."""
    return "cuda" if cuda_available() else "cpu"


def hardware_name(device: str) -> str:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}"
    if device == "mps":
        return f"Apple GPU ({platform.machine()})"
    if device != "cpu":
        return f"{device} (not visible to this process)"
    return f"CPU ({os.cpu_count()} cores, {platform.machine()})"


def auto_dtype_name() -> str:
    import torch

    return "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"


def quantization_backends(device: str) -> tuple[str, ...]:
    """Quantized bases this device trains or serves: bitsandbytes on CUDA and CPU, GPTQ/AWQ on CUDA."""
    return ("bnb-4bit", "bnb-8bit", "gptq", "awq") if device == "cuda" else ("bnb-4bit", "bnb-8bit")


def kernels_wanted(config: GymConfig, env: Mapping[str, str]) -> tuple[bool | str, str]:
    """``train.cpu_kernels``, or ``GYM_CPU_KERNELS`` when set, and which of the two decided."""
    raw = env.get(ENV_SWITCH, "").strip().lower()
    if raw:
        if raw not in ENV_VALUES:
            raise ValueError(f"{ENV_SWITCH}={raw!r} is not one of 0, 1 or auto")
        return ENV_VALUES[raw], f"{ENV_SWITCH}={raw}"
    value = config.train.cpu_kernels
    return value, f"train.cpu_kernels = {value!r}" if isinstance(value, str) else (
        f"train.cpu_kernels = {str(value).lower()}"
    )


def plan_device(
    config: GymConfig, env: Mapping[str, str] | None = None, *, device: str | None = None
) -> DevicePlan:
    """The device (``device``, else this machine's) and everything that follows from it, for ``config``
    in this environment.

    ``train.cpu_kernels = true`` (or ``GYM_CPU_KERNELS=1``) where a CUDA GPU is present is refused:
    the kernels are CPU code, and a GPU run must take the GPU path.
    """
    env = os.environ if env is None else env
    device = device or detect_device()
    wanted, source = kernels_wanted(config, env)
    if wanted is True and device == "cuda":
        raise KernelsOnGpu(source)
    kernels = device == "cpu" if wanted == "auto" else bool(wanted)
    hooks_off = tuple(hook for hook in HOOK_RANGES if kernels and not hook_supported(hook))
    dtype = auto_dtype_name() if config.model.dtype == "auto" else config.model.dtype
    return DevicePlan(
        device=device,
        hardware=hardware_name(device),
        dtype=dtype,
        attention="gym-packed (padding-free SFT)"
        if kernels and "packed_attention" not in hooks_off
        else "transformers' own",
        cpu_kernels=kernels,
        cpu_kernels_source=source,
        threads=thread_policy(config, device, kernels, env),
        quantization_backends=quantization_backends(device),
        hooks_off=hooks_off,
    )


def thread_policy(config: GymConfig, device: str, kernels: bool, env: Mapping[str, str]) -> str:
    """How torch's CPU threads are set: a number always; 'auto'/'fastest' only with the CPU kernels."""
    wanted = config.train.cpu_threads
    if device != "cpu":
        return "torch's default"
    if not isinstance(wanted, str):
        return str(wanted)
    if not kernels:
        return "torch's default"
    if env.get("OMP_NUM_THREADS"):
        return f"OMP_NUM_THREADS={env['OMP_NUM_THREADS']}"
    return "measured on the first steps" if wanted == "fastest" else "one per usable core"


class KernelsOnGpu(ValueError):
    """The CPU kernels asked for on a machine with a CUDA GPU."""

    REASON = "turns on Gym's CPU-only kernels, but this machine has a CUDA GPU; use 'auto' or false"

    def __init__(self, source: str) -> None:
        self.from_env = source.startswith(ENV_SWITCH)
        super().__init__(f"{source} {self.REASON}")
