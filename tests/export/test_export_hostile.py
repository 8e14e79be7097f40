"""`gym export` on hostile input (issue 43): an output that would overwrite what the export reads, damaged model
folders, lying safetensors headers and absurd config values. Every refusal is exit code 1 and one line naming
the file and what is wrong, with no traceback, nothing written, nothing the export reads changed, and bounded
time and memory: the checks read headers only, so a claimed 10**12-token vocabulary costs nothing."""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gym.cli import app
from tests.api.conftest import REPO, SERVE_MAIN, server_env

gguf = pytest.importorskip("gguf", reason="the gguf package (train extra) is not installed")

runner = CliRunner()
RESTORE = "restore the config.json saved with these weights"
NOT_SAFETENSORS = "the file is truncated or not safetensors; copy or re-save the model"


def refused(*args: str) -> str:
    """The one line `gym export ARGS` answers with, after asserting it failed cleanly with exit code 1."""
    result = runner.invoke(app, ["export", *args])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # typer.Exit, not a crash
    assert "Traceback" not in result.output
    lines = result.output.splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def copy_model(tiny_dir: Path, root: Path, name: str = "model") -> Path:
    return Path(shutil.copytree(tiny_dir, root / name))


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (links as their target's name), to prove an export changed nothing."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            found[str(path)] = os.readlink(path).encode()
        elif path.is_file():
            found[str(path)] = path.read_bytes()
        else:
            found[str(path)] = b"<folder>"
    return found


def edit_json(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def split_safetensors(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


def join_safetensors(path: Path, header: object, data: bytes) -> None:
    encoded = json.dumps(header).encode()
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + data)


# -- the output may not touch what the export reads ---------------------------------------------------------


def test_output_onto_each_file_of_the_model_folder_is_refused_and_changes_nothing(
    tiny_dir: Path, tmp_path: Path
) -> None:
    model = copy_model(tiny_dir, tmp_path)
    before = snapshot(tmp_path)
    inside = f"is inside {model}, the model folder the export reads; write it elsewhere"
    for name in [*sorted(p.name for p in model.iterdir()), "new.gguf", "."]:
        target = model / name
        for flags in ([], ["--overwrite"]):
            line = refused(str(model), "--gguf", "q8_0", "-o", str(target), *flags)
            assert line == f"error: --output {target} {inside}"
    link = tmp_path / "link.gguf"  # a link elsewhere that leads into the folder
    link.symlink_to(model / "model.safetensors")
    assert (
        refused(str(model), "--gguf", "f16", "-o", str(link), "--overwrite")
        == f"error: --output {link} {inside}"
    )
    hard = tmp_path / "hard.gguf"  # a hard link: the same bytes under another name
    os.link(model / "model.safetensors", hard)
    assert refused(str(model), "--gguf", "f16", "-o", str(hard), "--overwrite") == (
        f"error: --output {hard} is {model / 'model.safetensors'}, a file the export reads; write it elsewhere"
    )
    link.unlink()
    hard.unlink()
    assert snapshot(tmp_path) == before  # the weights, config and tokenizer are byte for byte what they were


def test_merge_and_quantize_outputs_may_not_touch_the_adapter_or_its_base(
    tiny_dir: Path, tmp_path: Path
) -> None:
    """The checks come before any model is loaded, so a stand-in adapter folder naming the base is enough."""
    base = copy_model(tiny_dir, tmp_path, "base")
    adapter = tmp_path / "lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
    before = snapshot(tmp_path)
    target = base / "config.json"
    assert refused(str(adapter), "--merge", "-o", str(target), "--overwrite") == (
        f"error: --output {target} is inside {base}, the model folder the export reads; write it elsewhere"
    )
    assert refused(str(adapter), "--quantize", "gptq", "-o", str(adapter), "--overwrite") == (
        f"error: --output {adapter} is inside {adapter}, the model folder the export reads; write it elsewhere"
    )
    assert refused(str(base), "--quantize", "awq", "-o", str(tmp_path), "--overwrite") == (
        f"error: --output {tmp_path} holds {base}, the model folder the export reads; choose another folder"
    )
    existing = tmp_path / "merged"
    existing.mkdir()
    assert refused(str(adapter), "--merge", "-o", str(existing)) == (
        f"error: --output {existing} already exists; pass --overwrite to replace it, or choose another folder"
    )
    existing.rmdir()
    assert snapshot(tmp_path) == before


def test_an_adapter_on_a_builtin_base_may_not_write_into_the_builtin_cache(
    tiny_dir: Path, cache_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_root))  # where the tiny_dir fixture built builtin:tiny
    adapter = tmp_path / "lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "builtin:tiny"}))
    before = snapshot(tiny_dir)
    target = tiny_dir / "model.safetensors"
    assert refused(str(adapter), "--gguf", "q8_0", "-o", str(target), "--overwrite") == (
        f"error: --output {target} is inside {tiny_dir.parent}, the model folder the export reads; "
        "write it elsewhere"
    )
    assert snapshot(tiny_dir) == before


def test_merge_builds_its_folder_aside_and_replaces_an_old_one_only_with_overwrite(
    tiny_dir: Path, tmp_path: Path
) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    adapter = tmp_path / "lora"
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(adapter)
    shutil.copy(tiny_dir / "tokenizer.json", adapter / "tokenizer.json")
    shutil.copy(tiny_dir / "tokenizer_config.json", adapter / "tokenizer_config.json")
    target = tmp_path / "merged"
    target.mkdir()
    (target / "stale.txt").write_text("from an older merge")
    assert refused(str(adapter), "--merge", "-o", str(target)) == (
        f"error: --output {target} already exists; pass --overwrite to replace it, or choose another folder"
    )
    result = runner.invoke(app, ["export", str(adapter), "--merge", "-o", str(target), "--overwrite"])
    assert result.exit_code == 0, result.output
    assert not (target / "stale.txt").exists() and (target / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lora", "merged"]  # no staging folder left


def test_an_existing_file_is_replaced_only_with_overwrite_and_only_by_a_finished_file(
    tiny_dir: Path, tmp_path: Path
) -> None:
    model = copy_model(tiny_dir, tmp_path)
    target = tmp_path / "out" / "m.gguf"
    target.parent.mkdir()
    target.write_bytes(b"the previous export")
    assert refused(str(model), "--gguf", "q8_0", "-o", str(target)) == (
        f"error: --output {target} already exists; pass --overwrite to replace it, or choose another file"
    )
    broken = copy_model(tiny_dir, tmp_path, "broken")
    edit_json(
        broken / "tokenizer.json", lambda t: t.update(post_processor=[1])
    )  # fails inside the gguf package
    line = refused(str(broken), "--gguf", "q8_0", "-o", str(target), "--overwrite")
    assert line.startswith(f"error: {broken}: tokenizer.json or tokenizer_config.json is not in the shape")
    assert target.read_bytes() == b"the previous export" and os.listdir(target.parent) == ["m.gguf"]
    result = runner.invoke(app, ["export", str(model), "--gguf", "q8_0", "-o", str(target), "--overwrite"])
    assert result.exit_code == 0, result.output
    assert f"✓ GGUF q8_0 model in {target}" in " ".join(result.output.split())  # rich wraps at 80 columns
    reader = gguf.GGUFReader(target)
    assert bytes(reader.fields["general.architecture"].parts[-1]).decode() == "llama"
    assert os.listdir(target.parent) == ["m.gguf"]  # no temporary file left beside it
    default = tmp_path / "model-f16.gguf"
    default.write_bytes(b"keep")
    assert refused(str(model), "--gguf", "f16") == (
        f"error: --output {default} already exists; pass --overwrite to replace it, or choose another file"
    )


def test_a_failed_export_leaves_no_file_and_no_folder_behind(tiny_dir: Path, tmp_path: Path) -> None:
    """The one check the conversion itself makes (the gguf package reading the special tokens) fails
    after the output's folders would exist; they are removed again."""
    from gym.export import convert_to_gguf

    model = copy_model(tiny_dir, tmp_path)
    edit_json(model / "tokenizer_config.json", lambda c: c.update(eos_token={"content": 5}, add_bos_token=[]))
    edit_json(model / "config.json", lambda c: c.update(bos_token_id=-3))  # gguf's SpecialVocab raises on it
    before = snapshot(tmp_path)
    target = tmp_path / "a" / "b" / "m.gguf"
    line = refused(str(model), "--gguf", "q8_0", "-o", str(target))
    assert line == (
        f"error: {model}: tokenizer.json or tokenizer_config.json is not in the shape the gguf package reads "
        "(invalid value for special token type bos: -3); re-save the tokenizer with transformers"
    )
    assert snapshot(tmp_path) == before
    good = copy_model(tiny_dir, tmp_path, "good")
    old = tmp_path / "kept.gguf"
    old.write_bytes(b"old")

    def rejects(partial: Path) -> None:
        assert partial.is_file() and partial.name != old.name  # checked under its temporary name
        raise gguf_error("llama.cpp cannot load it")

    from gym.export.gguf import GGUFError as gguf_error

    with pytest.raises(gguf_error):
        convert_to_gguf(good, old, "f16", check=rejects)
    assert old.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == [
        "good",
        "kept.gguf",
        "model",
    ]


def test_outputs_that_cannot_be_a_gguf_file_are_one_sentence(tiny_dir: Path, tmp_path: Path) -> None:
    model = copy_model(tiny_dir, tmp_path)
    folder = tmp_path / "folder.gguf"
    folder.mkdir()
    assert refused(str(model), "--gguf", "q8_0", "-o", str(folder), "--overwrite") == (
        f"error: --output {folder} is a folder; name the .gguf file to write"
    )
    plain = tmp_path / "notes.txt"
    plain.write_text("x")
    assert refused(str(model), "--gguf", "q8_0", "-o", str(plain / "m.gguf")) == (
        f"error: --output {plain / 'm.gguf'} cannot be created: {plain} is a file, not a folder"
    )
    loop = tmp_path / "loop.gguf"
    loop.symlink_to(loop)
    assert refused(str(model), "--gguf", "q8_0", "-o", str(loop)) == (
        f"error: --output {loop} is a symbolic link loop; choose another path"
    )
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    assert refused(str(model), "--gguf", "q8_0", "-o", str(fifo), "--overwrite") == (
        f"error: --output {fifo} is not a regular file (a pipe, socket or device); choose another path"
    )
    proc = Path("/proc/self/m.gguf")  # a folder not even root may create files in (Linux)
    if proc.parent.is_dir():
        assert refused(str(model), "--gguf", "q8_0", "-o", str(proc), "--overwrite") == (
            f"error: --output {proc} cannot be written: /proc/{os.getpid()} is not writable (permission denied)"
        )
    if os.geteuid() != 0:  # root writes anywhere else
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert refused(str(model), "--gguf", "q8_0", "-o", str(locked / "m.gguf")) == (
            f"error: --output {locked / 'm.gguf'} cannot be written: {locked} is not writable (permission denied)"
        )
    looped = tmp_path / "looped-model"
    looped.symlink_to(looped)
    assert refused(str(looped), "--gguf", "q8_0") == (
        f"error: {looped} is a symbolic link loop; replace the link with the file it should point to; "
        "pass a trained model or LoRA output folder"
    )


# -- damaged model folders: one sentence each ---------------------------------------------------------------


def _config(**values: object) -> Callable[[Path], None]:
    return lambda model: edit_json(model / "config.json", lambda c: c.update(values))


def _loop(name: str) -> Callable[[Path], None]:
    def make(model: Path) -> None:
        (model / name).unlink()
        (model / name).symlink_to(model / name)

    return make


def _header(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def make(model: Path) -> None:
        header, data = split_safetensors(model / "model.safetensors")
        change(header)
        join_safetensors(model / "model.safetensors", header, data)

    return make


def _added_token(token_id: int) -> Callable[[Path], None]:
    return lambda model: edit_json(
        model / "tokenizer.json", lambda t: t["added_tokens"].append({"id": token_id, "content": "<x>"})
    )


def _write(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda model: (model / name).write_bytes(data)


def _truncate(keep: int) -> Callable[[Path], None]:
    return lambda model: (model / "model.safetensors").write_bytes(
        (model / "model.safetensors").read_bytes()[:keep]
    )


def _index(shard: str) -> Callable[[Path], None]:
    return _write("model.safetensors.index.json", json.dumps({"weight_map": {"a": shard}}).encode())


EMBED = "model.embed_tokens.weight"
CASES = {
    "vocab_size of 10**12": (
        _config(vocab_size=10**12),
        "{m}/config.json: vocab_size is 1000000000000, not a whole number from 1 to 4,294,967,295; "
        + RESTORE,
    ),
    "vocab_size that disagrees with the embedding": (
        _config(vocab_size=2**31),
        "{m}/config.json does not describe the weights: model.safetensors holds model.embed_tokens.weight of "
        "shape [512, 128], where (vocab_size, hidden_size) is [2147483648, 128]; " + RESTORE,
    ),
    "four billion layers": (
        _config(num_hidden_layers=4_000_000_000),
        "{m}/config.json: num_hidden_layers is 4000000000, but the weights hold no "
        "model.layers.4.self_attn.q_proj.weight; " + RESTORE,
    ),
    "fewer layers than the weights": (
        _config(num_hidden_layers=3),
        "{m}/config.json: num_hidden_layers is 3, but model.safetensors holds "
        "model.layers.3.input_layernorm.weight; " + RESTORE,
    ),
    "hidden_size of another model": (
        _config(hidden_size=256, head_dim=64),
        "{m}/config.json does not describe the weights: model.safetensors holds model.embed_tokens.weight of "
        "shape [512, 128], where (vocab_size, hidden_size) is [512, 256]; " + RESTORE,
    ),
    "head count as a string": (
        _config(num_attention_heads="4"),
        "{m}/config.json: num_attention_heads is '4', not a whole number from 1 to 4,294,967,295; " + RESTORE,
    ),
    "zero heads": (
        _config(num_attention_heads=0),
        "{m}/config.json: num_attention_heads is 0, not a whole number from 1 to 4,294,967,295; " + RESTORE,
    ),
    "key-value heads that do not divide": (
        _config(num_key_value_heads=3),
        "{m}/config.json: num_attention_heads 4 is not a multiple of num_key_value_heads 3; " + RESTORE,
    ),
    "infinite rms_norm_eps": (
        _config(rms_norm_eps=float("inf")),
        "{m}/config.json: rms_norm_eps is inf, not a finite number of at least 0.0; " + RESTORE,
    ),
    "rope settings as a list": (
        _config(rope_parameters=[1, 2]),
        "{m}/config.json: rope_parameters is a JSON array, not an object; " + RESTORE,
    ),
    "llama3 rope with equal frequency factors": (
        _config(
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 1e4,
                "low_freq_factor": 2,
                "high_freq_factor": 2,
            }
        ),
        "{m}/config.json: rope high_freq_factor must be above low_freq_factor; " + RESTORE,
    ),
    "config.json that is a list": (
        _write("config.json", b"[1, 2]"),
        "{m}/config.json: holds a JSON array where an object is expected",
    ),
    "config.json that is not JSON": (
        _write("config.json", b'{"vocab_size": 5'),
        "{m}/config.json: is not valid JSON (Expecting ',' delimiter at line 1 column 17); "
        "it should hold a JSON object",
    ),
    "config.json nested 400,000 deep": (
        _write("config.json", b"[" * 400_000 + b"]" * 400_000),
        "{m}/config.json: nests its JSON too deeply to read; it should hold a JSON object",
    ),
    "config.json as a link loop": (
        _loop("config.json"),
        "{m}/config.json: is a symbolic link loop; replace the link with the file it should point to",
    ),
    "a 0-byte weights file": (
        _write("model.safetensors", b""),
        "{m}/model.safetensors: is empty (0 bytes); the weights were never written, re-save the model",
    ),
    "weights cut at 1000 bytes": (
        _truncate(1000),
        "{m}/model.safetensors: its header claims 4,016 bytes but the file holds 992 after the length field "
        "(safetensors allows at most 100,000,000); " + NOT_SAFETENSORS,
    ),
    "weights cut inside the data": (
        _truncate(100_000),
        "{m}/model.safetensors: its tensors span 2,626,048 bytes of data but the file holds 95,976; "
        + NOT_SAFETENSORS,
    ),
    "a header that claims 2**63 bytes": (
        lambda model: (model / "model.safetensors").write_bytes((2**63).to_bytes(8, "little") + b"{}"),
        "{m}/model.safetensors: its header claims 9,223,372,036,854,775,808 bytes but the file holds 2 after "
        "the length field (safetensors allows at most 100,000,000); " + NOT_SAFETENSORS,
    ),
    "a tensor whose shape lies about its bytes": (
        _header(lambda h: h[EMBED].update(shape=[2**31, 2**31])),
        "{m}/model.safetensors: tensor 'model.embed_tokens.weight' claims shape [2147483648, 2147483648] of "
        "F32 (18,446,744,073,709,551,616 bytes) but spans 262,144 bytes; " + NOT_SAFETENSORS,
    ),
    "overlapping tensors": (
        _header(lambda h: h["model.layers.0.input_layernorm.weight"].update(data_offsets=[0, 512])),
        "{m}/model.safetensors: tensor 'model.embed_tokens.weight' starts at byte 0 of the data, "
        "where 512 was expected (the offsets overlap or leave a gap); " + NOT_SAFETENSORS,
    ),
    "integer weights": (
        _header(lambda h: h[EMBED].update(dtype="I32")),
        "{m}/model.safetensors: tensor 'model.embed_tokens.weight' is I32 of shape [512, 128]; GGUF export "
        "converts non-empty floating-point weights (F32, F16, BF16, F64)",
    ),
    "weights as a link loop": (
        _loop("model.safetensors"),
        "{m}/model.safetensors: is a symbolic link loop; replace the link with the file it should point to",
    ),
    "weights that are a FIFO": (
        lambda model: ((model / "model.safetensors").unlink(), os.mkfifo(model / "model.safetensors")),
        "{m}/model.safetensors: is not a regular file (a pipe, socket or device)",
    ),
    "an index naming a shard outside the folder": (
        _index("../../etc/passwd"),
        "{m}/model.safetensors.index.json: names shard '../../etc/passwd', which is not a file name inside {m}",
    ),
    "an added token with id 10**12": (
        _added_token(10**12),
        "{m}/tokenizer.json: token '<x>' has id 1,000,000,000,000, but the model has 512 embedding rows "
        "(vocab_size in config.json); resize the model's embeddings to cover every token "
        "(model.resize_token_embeddings) and re-save it",
    ),
    "an added token with id -1": (
        _added_token(-1),
        "{m}/tokenizer.json: token '<x>' has id -1, not a non-negative integer",
    ),
    "merges of mixed shapes": (
        lambda model: edit_json(model / "tokenizer.json", lambda t: t["model"].update(merges=["a b", ["c"]])),
        '{m}/tokenizer.json: model.merges is not a list of merges ("a b" strings or [a, b] pairs); '
        "re-save the tokenizer",
    ),
    "tokenizer_config.json that is a string": (
        _write("tokenizer_config.json", b'"hi"'),
        "{m}/tokenizer_config.json: holds a JSON string where an object is expected",
    ),
    "tokenizer.json as a link loop": (
        _loop("tokenizer.json"),
        "{m}/tokenizer.json: is a symbolic link loop; replace the link with the file it should point to",
    ),
}


# Cases that made the old converter grow memory until it failed: run only in a child with a memory limit.
ABSURD = ("vocab_size of 10**12", "vocab_size that disagrees with the embedding", "four billion layers",
          "an added token with id 10**12", "a tensor whose shape lies about its bytes",
          "a header that claims 2**63 bytes")  # fmt: skip


@pytest.mark.parametrize("case", [name for name in CASES if name not in ABSURD])
def test_a_damaged_model_folder_is_one_sentence_and_writes_nothing(
    case: str, tiny_dir: Path, tmp_path: Path
) -> None:
    model = copy_model(tiny_dir, tmp_path)
    damage, expected = CASES[case]
    damage(model)
    before = snapshot(tmp_path)
    assert refused(str(model), "--gguf", "q8_0") == "error: " + expected.format(m=model)
    assert snapshot(tmp_path) == before


def _run_bounded(args: list[str], cache_root: Path) -> tuple[subprocess.CompletedProcess, float]:
    """`gym export ARGS` in a child limited to 1 GiB of address space: a list grown from an absurd value
    would fail with MemoryError (a traceback) instead of the sentence the test expects."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(SERVE_MAIN), "export", *args], capture_output=True, text=True,
                          cwd=REPO, env=server_env(cache_root, COLUMNS="400", PYTHONPATH=str(REPO)),
                          preexec_fn=limit, timeout=60)  # fmt: skip
    return done, time.perf_counter() - started


@pytest.mark.parametrize("case", ABSURD)
def test_absurd_sizes_are_refused_in_bounded_time_and_memory(
    case: str, tiny_dir: Path, cache_root: Path, tmp_path: Path
) -> None:
    model = copy_model(tiny_dir, tmp_path)
    damage, expected = CASES[case]
    damage(model)
    done, seconds = _run_bounded([str(model), "--gguf", "q8_0"], cache_root)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip() == "error: " + expected.format(m=model) and done.stdout == ""
    assert seconds < 20


# -- property-based: whatever the corruption, one sentence --------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
SHAPE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
              "num_key_value_heads", "head_dim")  # fmt: skip
HOSTILE_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _assert_one_sentence(model: Path, args: list[str]) -> None:
    before = snapshot(model.parent)
    line = refused(str(model), *args)
    assert line.startswith("error: ") and str(model) in line, line
    assert snapshot(model.parent) == before


@HOSTILE_SETTINGS
@given(key=st.sampled_from(SHAPE_KEYS + ("max_position_embeddings", "rope_parameters", "architectures")),
       value=JSON_VALUES, remove=st.booleans())  # fmt: skip
def test_any_wrong_config_value_is_one_sentence_naming_the_file(
    tiny_dir: Path, key: str, value: object, remove: bool
) -> None:
    config = json.loads((tiny_dir / "config.json").read_text())
    if remove and key in (*SHAPE_KEYS[:5], "max_position_embeddings"):
        del config[key]
    elif _accepted(key, value, config.get(key)):
        return  # a value the converter may take: not a corruption
    else:
        config[key] = value
    with tempfile.TemporaryDirectory() as scratch:
        model = copy_model(tiny_dir, Path(scratch))
        (model / "config.json").write_text(json.dumps(config))
        _assert_one_sentence(model, ["--gguf", "q8_0"])


def _finite(value: object, low: float) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= low


def _accepted(key: str, value: object, saved: object) -> bool:
    """Whether ``value`` for ``key`` describes the same weights (so the export rightly goes ahead)."""
    if value == saved or (key == "head_dim" and value is None):  # head_dim defaults to hidden_size / heads
        return True
    if key == "max_position_embeddings":
        return type(value) is int and 0 < value < 2**32
    if key == "architectures":
        return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value) and (
            value[0] in ("LlamaForCausalLM", "MistralForCausalLM"))  # fmt: skip
    if key == "rope_parameters":
        if value is None or value == {}:
            return True
        if not isinstance(value, dict):
            return False
        kind = value.get("rope_type") or value.get("type") or "default"
        numbers = (
            "rope_theta",
            "factor",
            "low_freq_factor",
            "high_freq_factor",
            "original_max_position_embeddings",
        )
        return kind == "default" and all(value.get(k) is None or _finite(value[k], 1e-9) for k in numbers)
    return False


@st.composite
def header_corruptions(draw: st.DrawFn) -> tuple[str, object]:
    kind = draw(st.sampled_from(["truncate", "length", "field", "entry", "whole"]))
    if kind == "truncate":
        return kind, draw(st.integers(0, 3_000_000))
    if kind == "length":
        return kind, draw(st.integers(0, 2**64 - 1))
    if kind == "field":
        return kind, (
            draw(st.sampled_from(["dtype", "shape", "data_offsets"])),
            draw(st.integers(0, 40)),
            draw(JSON_VALUES),
        )
    if kind == "entry":
        return kind, (draw(st.integers(0, 40)), draw(JSON_VALUES))
    return kind, draw(JSON_VALUES)


@HOSTILE_SETTINGS
@given(corruption=header_corruptions())
def test_any_corrupted_safetensors_header_is_one_sentence_naming_the_file(
    tiny_dir: Path, corruption: tuple[str, object]
) -> None:
    original = (tiny_dir / "model.safetensors").read_bytes()
    header, data = split_safetensors(tiny_dir / "model.safetensors")
    names = sorted(k for k in header if k != "__metadata__")
    kind, detail = corruption
    with tempfile.TemporaryDirectory() as scratch:
        model = copy_model(tiny_dir, Path(scratch))
        weights = model / "model.safetensors"
        if kind == "truncate":
            weights.write_bytes(original[: min(detail, len(original) - 1)])
        elif kind == "length":
            if detail == int.from_bytes(original[:8], "little"):
                return
            weights.write_bytes(detail.to_bytes(8, "little") + original[8:])
        elif kind == "field":
            field, which, value = detail
            name = names[which % len(names)]
            if header[name][field] == value:
                return
            header[name][field] = value
            join_safetensors(weights, header, data)
        elif kind == "entry":
            which, value = detail
            header[names[which % len(names)]] = value
            join_safetensors(weights, header, data)
        else:
            join_safetensors(weights, detail, data)
        _assert_one_sentence(model, ["--gguf", "f16"])


TOKENIZER_FIELDS = (("tokenizer.json", ("model", "vocab")), ("tokenizer.json", ("model", "merges")),
                    ("tokenizer.json", ("model", "type")), ("tokenizer.json", ("added_tokens",)),
                    ("tokenizer.json", ("added_tokens", 0)), ("tokenizer.json", ("post_processor",)),
                    ("tokenizer.json", ("pre_tokenizer",)), ("tokenizer_config.json", ("chat_template",)),
                    ("tokenizer_config.json", ("eos_token",)), ("tokenizer_config.json", ("add_bos_token",)),
                    ("config.json", ("eos_token_id",)), ("config.json", ("bos_token_id",)))  # fmt: skip


@HOSTILE_SETTINGS
@given(field=st.sampled_from(TOKENIZER_FIELDS), value=JSON_VALUES)
def test_any_tokenizer_value_converts_or_is_one_sentence(
    tiny_dir: Path, field: tuple[str, tuple], value: object
) -> None:
    """Many tokenizer values are harmless (a missing chat template, an eos the converter skips), so the
    property is weaker than for shapes: the export succeeds, or it is one sentence; never a traceback."""
    name, keys = field
    with tempfile.TemporaryDirectory() as scratch:
        model = copy_model(tiny_dir, Path(scratch))
        data = json.loads((model / name).read_text())
        parent = data
        for key in keys[:-1]:
            parent = parent[key]
        parent[keys[-1]] = value
        (model / name).write_text(json.dumps(data))
        result = runner.invoke(app, ["export", str(model), "--gguf", "f16"])
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        assert "Traceback" not in result.output
        if result.exit_code != 0:
            assert result.exit_code == 1 and len(result.output.splitlines()) == 1, result.output
            assert result.output.startswith(f"error: {model}")
        else:
            gguf.GGUFReader(model.with_name("model-f16.gguf"))  # a file the gguf package reads back
