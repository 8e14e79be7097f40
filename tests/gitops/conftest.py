"""The gitops tests push the hub tests' tiny LoRA folder to the Hub double (and the serving tests' caches)."""

from tests.api.conftest import cache_root, tiny_dir  # noqa: F401
from tests.hub.test_deploy import lora_dir  # noqa: F401 - the LoRA folder every deploy test pushes
