"""The export tests share the serving tests' tiny-model fixtures."""

from tests.api.conftest import cache_root, tiny_dir  # noqa: F401
