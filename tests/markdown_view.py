"""What a reader sees of a markdown document: rendered by markdown-it (CommonMark, raw HTML allowed, GFM
tables, as GitHub and the Hub do), then read back as HTML tags and table cells."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

ZERO_WIDTH = "\u200b"

HOSTILE_TASK = (
    "</details><img src=x onerror=alert(1)> [click](https://evil.example) "
    "![pixel](https://evil.example/p.png) @acme/admins <b>bold</b> \\[esc](x) a|b"
)
HOSTILE_METRIC = "acc`</td><script>alert(1)</script>` [x]: https://evil.example"
HOSTILE_FILTER = "<!-- hidden --> www.evil.example @octocat"


@dataclass
class Rendered(HTMLParser):
    """The tags of the rendered document and the text of every table cell, row by row."""

    tags: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    _cell: list[str] | None = None

    def __post_init__(self) -> None:
        super().__init__(convert_charrefs=True)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).replace(ZERO_WIDTH, ""))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_comment(self, data: str) -> None:
        self.tags.append("!--")


def render_markdown(text: str) -> Rendered:
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    view = Rendered()
    view.feed(html)
    return view
