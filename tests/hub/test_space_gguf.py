"""The CPU Space that serves a GGUF file, as the Hub runs it: its own requirements.txt (llama-cpp-python
included) installed into a fresh venv, `python app.py`, and its OpenAI API answering at temperature 0
exactly as the full-precision model does (an f16 file of builtin:tiny).

The requirements name llama.cpp's prebuilt CPU wheel index, which this machine cannot reach; pip falls
back to PyPI's source release, and the wheel `make gguf` built from it (kept in pip's cache) is found
through PIP_FIND_LINKS, so nothing compiles here. Without that wheel the test skips naming `make gguf`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gym.hub.space import render_space
from tests.api.conftest import free_port
from tests.space_runtime import (
    api_answer,
    gguf_space_settings,
    llama_cpp_pip,
    llama_cpp_wheel,
    start_space,
    wait_healthy,
)

pytestmark = pytest.mark.slow
KEY = "sk-gguf-space-key"
MESSAGE = "Reverse: a b"


def test_cpu_space_serves_the_gguf_file_with_the_full_precision_answer(
    tiny_dir: Path, cache_root: Path, tmp_path: Path
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gym.export import convert_to_gguf

    wheel = llama_cpp_wheel()
    if wheel is None:
        pytest.skip("no llama-cpp-python 0.3.36 wheel in pip's cache: run `make gguf` (it builds one)")
    model = tmp_path / "model"
    model.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny_dir / name, model / name)
    convert_to_gguf(tiny_dir, model / "tiny-f16.gguf", "f16")
    folder = render_space(tmp_path / "space", gguf_space_settings())  # as make test renders it for its venv
    assert "llama-cpp-python==0.3.36" in (folder / "requirements.txt").read_text().splitlines()
    env = {
        "GYM_MODEL": str(model),
        "GYM_API_KEY": KEY,
        "HF_HUB_OFFLINE": "1",
        "XDG_CACHE_HOME": str(cache_root),
    }
    with llama_cpp_pip(wheel):  # the Space venv's pip reads PIP_* settings
        space = start_space(folder, free_port(), env, home=tmp_path / "home")
    try:
        wait_healthy(space, timeout=600)
        answer = api_answer(space.url, KEY, "acme/tiny", MESSAGE, max_tokens=12)
    finally:
        log = space.stop()
    assert KEY not in log
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": MESSAGE}], add_generation_prompt=True,
                                        return_dict=True)["input_ids"]  # fmt: skip
    full = AutoModelForCausalLM.from_pretrained(tiny_dir)
    out = full.generate(
        torch.tensor([ids]), max_new_tokens=12, do_sample=False, eos_token_id=tokenizer.eos_token_id
    )
    assert answer == tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True)
