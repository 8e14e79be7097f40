"""User text inside markdown that GitHub or the Hub renders (PR comments, model cards, tables).

Task, metric and filter names come from lm-eval task YAML that a pull request can change, so they are
hostile input: raw HTML (``</details>``, ``<img>``), markdown links and images, and ``@org/team``
mentions would be rendered or would notify people. :func:`md_text` makes such a string inert but
readable: it renders as the same characters. Standard library only, usable from every layer.
"""

from __future__ import annotations

import re

# CommonMark lets any ASCII punctuation be backslash-escaped; these start links, images, code spans and
# table cells, plus the escape itself (so a name cannot undo the others). Emphasis is left alone: it
# changes a look, never what a reader is sent to, and ``arc_easy`` stays as typed.
_ESCAPED = re.compile(r"([\\`\[\]!|])")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
ZERO_WIDTH = "\u200b"


def md_text(value: object) -> str:
    """``value`` as one line of markdown that shows its characters and nothing else.

    HTML becomes entities, markdown punctuation is backslash-escaped, ``@`` is followed by a
    zero-width space (no mention, no notification), ``://`` loses its autolink, and line breaks become
    spaces so a table row stays one row.
    """
    text = " ".join(str(value).split("\n")).replace("\r", " ")
    text = _ESCAPED.sub(r"\\\1", text)
    text = "".join(_ENTITIES.get(char, char) for char in text)
    text = text.replace("@", "@" + ZERO_WIDTH)
    return text.replace("://", ":" + ZERO_WIDTH + "//").replace("www.", "www" + ZERO_WIDTH + ".")


def md_code(value: object) -> str:
    """``value`` as an inline code span (shown verbatim, never rendered), one line, safe in a table cell."""
    text = " ".join(str(value).splitlines()).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"
