"""The hub tests share the serving tests' tiny-model fixtures."""

from tests.api.conftest import cache_root, tiny_dir  # noqa: F401
from tests.hub.test_deploy import lora_dir  # noqa: E402, F401 - the LoRA folder every deploy test pushes
