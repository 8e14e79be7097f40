"""`gym init --from FILE.yaml`: a LLaMA-Factory or axolotl training YAML as a commented gym.toml.

Teams move over with their configs in hand. Each converter returns a :class:`Conversion` (the gym.toml
data, which source key each value came from, what could not be carried over and why); the renderer
writes it as TOML with those facts as comments, and the result is validated before it is written.
"""

from __future__ import annotations

from gym.config.migrate.convert import Conversion, convert_file

__all__ = ["Conversion", "convert_file"]
