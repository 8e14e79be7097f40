"""Exporting a trained model into the forms other engines serve (GGUF for llama.cpp)."""

from gym.export.gguf import GGUF_QUANTS, GGUFError, convert_to_gguf

__all__ = ["GGUF_QUANTS", "GGUFError", "convert_to_gguf"]
