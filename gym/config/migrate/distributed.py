"""LLaMA-Factory's and axolotl's ``deepspeed:`` / ``fsdp:`` / ``fsdp_config:`` -> ``[train.distributed]``."""

from __future__ import annotations

import errno
import json
import re
from pathlib import Path
from typing import Any

from gym.config.errors import shorten
from gym.config.migrate.convert import Conversion

DS = ("train", "distributed", "deepspeed")
FS = ("train", "distributed", "fsdp")


def carry_deepspeed(value: Any, conversion: Conversion, base: Path, key: str = "deepspeed") -> None:
    """A DeepSpeed JSON (path, read when it exists; else its ZeRO stage from a name like ds_z3_config) or dict.

    A file that exists is read as `gym init --from` reads the YAML (regular, at most 1 MB) and must be a JSON
    object: one that is not is left behind with the reason, never guessed from its name.
    """
    config = value if isinstance(value, dict) else None
    if config is None and isinstance(value, str):
        config, problem = _deepspeed_file(base / value)
        if problem:
            conversion.skip(key, f"{shorten(value)} {problem}; set [train.distributed] in gym.toml by hand")
            return
        if config is None:  # no such file here: LLaMA-Factory's examples are named for their stage
            stage = re.search(r"z(?:ero)?_?([23])", Path(value).name)
            if stage is None:
                conversion.skip(key, f"{shorten(value)!r} could not be read and its name gives no ZeRO stage")
                return
            config = {"zero_optimization": {"stage": int(stage.group(1))}}
    zero = (config or {}).get("zero_optimization") if isinstance(config, dict) else None
    if not isinstance(zero, dict) or zero.get("stage") not in (2, 3):
        conversion.skip(key, "Gym's DeepSpeed runs ZeRO stage 2 or 3; this config names neither")
        return
    conversion.put(("train", "distributed", "strategy"), "deepspeed", key)
    conversion.put((*DS, "stage"), zero["stage"], key)
    for source, target in (("offload_optimizer", "offload_optimizer"), ("offload_param", "offload_params")):
        offload = zero.get(source)
        if isinstance(offload, dict) and offload.get("device") in ("cpu", "nvme"):
            conversion.put((*DS, target), offload["device"], key)
            if offload["device"] == "nvme" and isinstance(offload.get("nvme_path"), str):
                conversion.put((*DS, "nvme_path"), offload["nvme_path"], key)


def _deepspeed_file(path: Path) -> tuple[dict[str, Any] | None, str]:
    """(the config, "") from the JSON file at ``path``; (None, "") when there is no such file; (None, why)
    when there is one that is not a DeepSpeed config Gym can read."""
    from gym.config.migrate.bounded_yaml import read_bounded

    try:
        text = read_bounded(path, what="a DeepSpeed config", kind="a DeepSpeed JSON file")
    except UnicodeDecodeError:
        return None, "is not UTF-8 text"
    except ValueError as error:  # a folder, a FIFO or device, too large; or a NUL in the name (no such file)
        return None, "" if "null" in str(error) else str(error.args[0])
    except OSError as error:
        missing = error.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG)
        return None, "" if missing else f"cannot be read ({error.strerror or type(error).__name__})"
    try:
        config = json.loads(text)
    except RecursionError:
        return None, "nests too deeply to be a DeepSpeed config"
    except ValueError as error:  # JSONDecodeError, or an integer of more than 4,300 digits
        where = f" at line {error.lineno}" if isinstance(error, json.JSONDecodeError) else ""
        return None, f"is not JSON{where}"
    if not isinstance(config, dict):
        return None, f"is {_kind(config)}, not a DeepSpeed config (a JSON object)"
    return config, ""


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true or false"
    for kinds, name in ((str, "text"), ((int, float), "a number"), (list, "a list"), (dict, "a mapping")):
        if isinstance(value, kinds):
            return name
    return "null" if value is None else type(value).__name__


def carry_fsdp(data: dict[str, Any], conversion: Conversion) -> None:
    """axolotl's ``fsdp: [full_shard, auto_wrap, offload]`` and ``fsdp_config:`` (fsdp_-prefixed or not).

    Either of another kind (``fsdp: 5``, ``fsdp_config: [..]``) leaves both behind with the reason.
    """
    options = data.get("fsdp")
    config = data.get("fsdp_config")
    if isinstance(options, str):
        options = options.split()
    if options not in (None, False) and not (
        isinstance(options, list) and all(isinstance(o, str) for o in options)
    ):
        conversion.skip(
            "fsdp", f"expected a list of FSDP options like [full_shard, auto_wrap], got {_kind(options)}"
        )
        return
    if config is not None and not isinstance(config, dict):
        conversion.skip(
            "fsdp_config",
            f"expected a mapping of FSDP settings (fsdp_offload_params: true, ...), got {_kind(config)}",
        )
        return
    options = options or []
    settings = {str(k).removeprefix("fsdp_"): v for k, v in (config or {}).items()}
    if not options and not settings:
        return
    conversion.put(("train", "distributed", "strategy"), "fsdp", "fsdp")
    strategy = settings.get("sharding_strategy") or next(
        (o for o in options if o in ("full_shard", "shard_grad_op", "hybrid_shard", "no_shard")), None
    )
    if isinstance(strategy, str) and strategy.lower() in (
        "full_shard",
        "shard_grad_op",
        "hybrid_shard",
        "no_shard",
    ):
        conversion.put((*FS, "sharding"), strategy.lower(), "fsdp_config")
    if settings.get("reshard_after_forward") is False:
        conversion.put((*FS, "sharding"), "shard_grad_op", "fsdp_config")
    if "offload" in options or settings.get("offload_params") is True or settings.get("cpu_offload") is True:
        conversion.put((*FS, "cpu_offload"), True, "fsdp")
    wrap = settings.get("auto_wrap_policy")
    if wrap == "NO_WRAP" or (options and "auto_wrap" not in options and wrap is None):
        conversion.put((*FS, "auto_wrap"), False, "fsdp")
    if settings.get("activation_checkpointing") is True:
        conversion.put((*FS, "activation_checkpointing"), True, "fsdp_config")
    state = str(settings.get("state_dict_type") or "")
    if state.upper() in ("FULL_STATE_DICT", "SHARDED_STATE_DICT"):
        conversion.put(
            (*FS, "state_dict"), "sharded" if state.upper().startswith("SHARDED") else "full", "fsdp_config"
        )
