"""Access log lines without credentials: query values of credential-like names are masked.

Clients sometimes put a key in the URL (``?api_key=...``, ``?token=...``); the server refuses it (keys go
in the ``Authorization`` header) but uvicorn's access log would still write the line with the key in it.
:func:`redact_access_log` masks those values in every record of the ``uvicorn.access`` logger, so the
line keeps the method, path, parameter names and status, and never the secret.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

CREDENTIAL_NAMES = frozenset({
    "api_key", "apikey", "key", "token", "access_token", "refresh_token", "id_token", "hf_token",
    "auth", "authorization", "password", "passwd", "pwd", "secret", "client_secret", "signature", "sig",
    "code", "session", "sessionid", "credential", "credentials", "jwt", "bearer",
})  # fmt: skip
CREDENTIAL_SUFFIXES = ("token", "key", "secret", "password", "signature", "credential")
MASK = "***"


def is_credential_name(name: str) -> bool:
    normal = unquote_plus(name).strip().lower().replace("-", "_")
    return normal in CREDENTIAL_NAMES or normal.endswith(CREDENTIAL_SUFFIXES)


def redact_query(target: str) -> str:
    """``/v1/models?api_key=sk-1&limit=2`` -> ``/v1/models?api_key=***&limit=2``."""
    path, mark, query = target.partition("?")
    if not mark:
        return target
    pieces = []
    for piece in re.split(r"([&;])", query):  # separators kept; ';' too, as some servers split on it
        name, equals, _value = piece.partition("=")
        pieces.append(f"{name}={MASK}" if equals and is_credential_name(name) else piece)
    return f"{path}?{''.join(pieces)}"


class RedactCredentials(logging.Filter):
    """Masks credential query values in a record's arguments (uvicorn passes the request target as one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact_query(a) if isinstance(a, str) and "?" in a else a for a in record.args
            )
        return True


def redact_access_log(logger_name: str = "uvicorn.access") -> None:
    """Install :class:`RedactCredentials` on the access logger (once; uvicorn's logging set-up keeps it)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, RedactCredentials) for f in logger.filters):
        logger.addFilter(RedactCredentials())
