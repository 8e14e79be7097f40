"""Shared building blocks of the gym.toml schema.

Every section model derives from :class:`Section`: unknown keys are errors (so typos surface with a
"did you mean"), types are strict (TOML is typed, so ``batch_size = true`` or
``learning_rate = "fast"`` is a mistake to report, not a value to coerce), and numbers are finite:
TOML can write ``inf`` and ``nan``, and no key of gym.toml means anything with them (``alpha = inf``
once trained to NaN adapters while reporting loss 0.0).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic_core import PydanticCustomError

ENV_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Section(BaseModel):
    """Base of every gym.toml table: strict, closed, and documented field by field."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        allow_inf_nan=False,
        validate_default=True,
        use_attribute_docstrings=False,
        frozen=False,
    )


def fail(message: str) -> PydanticCustomError:
    """A validation error whose message is already the human sentence shown to the user.

    The message is formatted before it gets here and passed without context, so braces in a
    user's value are never taken for placeholders.
    """
    return PydanticCustomError("gym", message)


def _env_var_name(value: str) -> str:
    from gym.config.errors import looks_like_secret

    if looks_like_secret(value) or _token_like(value):
        raise fail(
            "this looks like a secret token, not the name of an environment variable; remove it from "
            "gym.toml (and revoke it if this file was shared), put it in the environment "
            "(export HF_TOKEN=...) and write the variable's name here"
        )
    if not ENV_VAR_NAME.match(value):
        raise fail(
            "expected the name of an environment variable (letters, digits, '_'), not a value; "
            "secrets are read from the environment, never written into gym.toml"
        )
    return value


def _token_like(value: str) -> bool:
    """Long, mixed-case, digit-bearing text without word separators: a pasted key, not a name."""
    words = [word for word in value.split("_") if word]
    return len(value) >= 24 and any(
        len(word) >= 16 and any(c.isdigit() for c in word) and any(c.isalpha() for c in word)
        for word in words
    )


EnvVarName = Annotated[str, AfterValidator(_env_var_name)]
"""A field that names an environment variable holding a secret (never the secret itself)."""
