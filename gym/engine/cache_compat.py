"""The engine's one door into transformers' KV-cache classes (``transformers.cache_utils``).

The running batch (:mod:`gym.engine.kvbatch`) edits caches row by row: it builds a ``DynamicCache`` from
tensors it kept, tells plain full-attention layers (``DynamicLayer``) from the others, and swaps those
for :class:`GrowingLayer`, a ``DynamicLayer`` subclass with spare columns. These are internals that move
between transformers releases, so they live here and nowhere else in Gym.

The cache's own name moved too: transformers 5.2x calls it ``cache`` in ``forward`` and in model outputs,
keeps ``past_key_values`` as a deprecated alias (a warning on every call) and drops the alias in 5.40.
:func:`cache_kwargs` and :func:`output_cache` use whichever name the installed release declares.

``GrowingLayer`` is tested on transformers 5.17 (the pinned ``make test``) and 5.25 (``make test-latest``):
``growing_kv_layer`` in :data:`gym.model.device.HOOK_RANGES`. Elsewhere the subclass stays off and the
cache keeps transformers' own layers (one note in the log); the rest relies on the layer API every
supported release has (``cache.layers[i].keys``/``.values``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import Any

HOOK = "growing_kv_layer"
_NOTED: list[str] = []


def growing_layers_supported() -> bool:
    """Whether :class:`GrowingLayer` may replace ``DynamicLayer`` on the installed transformers."""
    from gym.model.device import hook_note

    note = hook_note(HOOK)
    if note is not None and not _NOTED:
        _NOTED.append(note)
        logging.getLogger(__name__).warning(note)
    return note is None


@functools.cache
def cache_field() -> str:
    """The name the installed transformers gives the KV cache: ``cache`` where model outputs declare that
    field, else ``past_key_values`` (releases before the rename)."""
    import dataclasses

    from transformers.modeling_outputs import BaseModelOutputWithPast

    names = {field.name for field in dataclasses.fields(BaseModelOutputWithPast)}
    return "cache" if "cache" in names else "past_key_values"


def cache_kwargs(cache: Any) -> dict[str, Any]:
    """The keyword argument that hands ``cache`` to a model's ``forward``."""
    return {cache_field(): cache}


def output_cache(out: Any) -> Any:
    """The KV cache a model's ``forward`` returned."""
    return getattr(out, cache_field())


def is_plain_layer(layer: Any) -> bool:
    """A full-attention layer of transformers' own (no sliding window, no quantization, not ours)."""
    from transformers.cache_utils import DynamicLayer

    return type(layer) is DynamicLayer


def cache_from_kv(pairs: Iterable[tuple[Any, Any]]) -> Any:
    """A ``DynamicCache`` holding ``(keys, values)`` per layer, as a model's cache input."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=list(pairs))


def replace_kv(layer: Any, keys: Any, values: Any) -> None:
    """Make ``keys``/``values`` a cache layer's contents: a growing buffer copies them into fresh room,
    any other layer takes the tensors as they are."""
    if hasattr(layer, "set"):  # GrowingLayer (transformers' own layers have no ``set``)
        layer.set(keys, values)
    else:
        layer.keys, layer.values = keys, values


@functools.cache
def growing_layer_class(room: int) -> type:
    """:class:`GrowingLayer` for buffers rebuilt with ``room`` spare columns (built on first use, so
    importing this module never imports transformers)."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """A full-attention layer's KV in a buffer with spare room along the sequence axis."""

        def set(self, keys: Any, values: Any) -> None:
            import torch

            batch, heads, length, dim = keys.shape
            shape = (batch, heads, length + room, dim)
            self._k = torch.empty(shape, dtype=keys.dtype, device=keys.device)
            self._v = torch.empty(shape, dtype=values.dtype, device=values.device)
            self._k[:, :, :length] = keys
            self._v[:, :, :length] = values
            self.length = length
            self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
            self.keys, self.values = self._k[:, :, :length], self._v[:, :, :length]

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            new = key_states.shape[-2]
            if self.length + new > self._k.shape[-2]:
                self.set(self.keys, self.values)
            self._k[:, :, self.length : self.length + new] = key_states
            self._v[:, :, self.length : self.length + new] = value_states
            self.length += new
            self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]
            return self.keys, self.values

    return GrowingLayer
