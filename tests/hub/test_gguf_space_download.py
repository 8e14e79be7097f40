"""A CPU Space serving GGUF fetches the one .gguf file and the tokenizer, not the repository's safetensors.

The model repository `gym deploy` pushes holds both (the fp32 safetensors are about 4x the q8_0 file's
bytes); the Space resolves its model with huggingface_hub against the Hub double, in its own process
with the Space's environment (HF_ENDPOINT, HF_HOME).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.api.conftest import REPO, free_port
from tests.hub.hub_double import HubDouble

TOKEN = "hf_SpaceDownloadToken0123456789ab"
SERVED = ("model-q8_0.gguf", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
          "chat_template.jinja", "config.json")  # fmt: skip
NOT_SERVED = ("model.safetensors", "README.md", "training_args.bin")

RESOLVE = """
import json, sys
from pathlib import Path
from gym.engine.llamacpp_backend import resolve_gguf_source
source = resolve_gguf_source(sys.argv[1])
folder = Path(source.base).parent
files = sorted(p.name for p in folder.iterdir())
print(json.dumps({"gguf": source.base, "model_id": source.model_id, "files": files}))
"""


def test_the_space_downloads_the_gguf_and_tokenizer_but_not_the_safetensors(tmp_path: Path) -> None:
    from huggingface_hub import HfApi

    folder = tmp_path / "pushed"
    folder.mkdir()
    for name in SERVED + NOT_SERVED:
        binary = name.endswith((".gguf", ".safetensors", ".bin"))
        (folder / name).write_bytes(os.urandom(2048) if binary else json.dumps({"name": name}).encode())
    with HubDouble(TOKEN, free_port()) as hub:
        api = HfApi(endpoint=hub.url, token=TOKEN)
        api.create_repo("acme/support-bot", private=False)
        api.upload_folder(repo_id="acme/support-bot", folder_path=folder)
        assert "model.safetensors" in hub.state.lfs_files["model:acme/support-bot"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_XET="1")
        done = subprocess.run([sys.executable, "-c", RESOLVE, "acme/support-bot"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        downloads = {path.rsplit("/", 1)[1] for path in hub.state.downloads}

    resolved = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(resolved["gguf"]).name == "model-q8_0.gguf"
    assert resolved["model_id"] == "acme/support-bot"  # the name the API lists, not the snapshot's hash
    assert Path(resolved["gguf"]).read_bytes() == (folder / "model-q8_0.gguf").read_bytes()
    assert set(resolved["files"]) == set(SERVED)
    assert set(SERVED) <= downloads
    assert not downloads & set(NOT_SERVED)
