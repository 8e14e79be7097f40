"""What data preparation needs from a vision-language model, as Protocols the model layer implements.

Data sits below the model layer: it never loads a processor itself. The caller (training, `gym data
preview`, `gym validate`, export) passes ``gym.model.vision.model_vision(config)``; text-only callers
pass nothing, and image rows are then refused as headed for a text-only model.
"""

from __future__ import annotations

from typing import Any, Protocol


class ImageTokens(Protocol):
    """A loaded processor with Gym's tokenizer: how images become tokens in a row."""

    def placeholder(self) -> str:
        """What a dataset's ``<image>`` marker becomes in the rendered text."""
        ...

    def image_token(self) -> str:
        """The token the language model sees once per image patch."""
        ...

    def image_token_id(self) -> int: ...

    def token_counts(self, sizes: list[tuple[int, int]]) -> list[int]:
        """Image tokens each image of ``(height, width)`` costs after the processor's resizing."""
        ...

    def max_pixels(self) -> int | None:
        """The largest image the processor accepts as is, where it states one."""
        ...

    def fingerprint(self) -> dict[str, Any]:
        """What about the processor decides prepared rows (part of the data cache key)."""
        ...


class VisionModel(Protocol):
    """Whether the configured model reads images, and its processor when it does."""

    def known(self) -> bool | None:
        """True/False from files already on disk (no download); None when that cannot tell."""
        ...

    def confirmed(self) -> bool:
        """The same question answered for certain (may download the model's config)."""
        ...

    def tokens(self, tokenizer: Any) -> ImageTokens:
        """The model's processor, with ``tokenizer`` (Gym's, with the chosen chat template) as its own."""
        ...
