"""Streaming tool calls: text in, (content, finished calls) out, never half a marker shown as content.

Content before a call streams as it comes. From where a call starts (or may start: ``<tool_`` at the
end of the text so far) the text is held; each call is sent as one ``tool_calls`` delta as soon as it
is complete. At the end, whatever the finished text turns out to be decides the rest: held text that
was not a call after all (a JSON answer that names no function) is sent as content.
"""

from __future__ import annotations

from gym.api.tools.parsers import ParsedCall, ToolParser


class ToolCallStream:
    def __init__(self, parser: ToolParser, forced: str = "") -> None:
        self.parser = parser
        self.text = forced  # a forced call prefix is part of what the parser reads, never content
        self.sent = 0  # characters of self.text released as content
        self.calls_sent = 0

    def feed(self, delta: str, final: bool = False) -> tuple[str, list[ParsedCall]]:
        self.text += delta
        if final:
            return self._finish()
        start = max(self.sent, self.parser.hold_from(self.text))
        content = self.text[self.sent : start]
        self.sent = start
        calls = self.parser.complete_calls(self.text[start:])[self.calls_sent :]
        self.calls_sent += len(calls)
        return content, calls

    def _finish(self) -> tuple[str, list[ParsedCall]]:
        parsed = self.parser.parse(self.text)
        if parsed.calls:
            calls = parsed.calls[self.calls_sent :]
            self.calls_sent += len(calls)
            rest = (parsed.content or "")[self.sent :]  # text after the calls (the part before was sent)
            return rest, calls
        content = self.text[self.sent :]
        self.sent = len(self.text)
        return content, []
