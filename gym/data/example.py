"""The one typed example every dataset format converts into, and every template renders.

Converters (``gym/data/formats``) turn alpaca, sharegpt, openai, preference, kto, text and prompt
rows into :class:`Example`; the template system renders ``messages`` (plus ``tools``) into text and
loss masks. Nothing downstream ever looks at a raw row again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass
class ToolCall:
    """A function call made by the assistant: name plus JSON-able arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass
class Message:
    """One turn. ``reasoning`` holds thinking-block text (qwen3) kept apart from the visible answer."""

    role: Role
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None
    name: str | None = None  # tool name on role == "tool" turns
    images: list[str] = field(default_factory=list)  # image parts of this turn (each left an <image> marker)

    def to_chat(self) -> dict[str, Any]:
        """The message in the shape HF chat templates expect."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        if self.reasoning is not None:
            out["reasoning_content"] = self.reasoning
        if self.name is not None:
            out["name"] = self.name
        return out


@dataclass
class Example:
    """One training example after conversion, whatever its source format.

    - SFT (alpaca/sharegpt/openai): ``messages`` ending with an assistant turn.
    - preference: ``messages`` is the prompt; ``chosen`` / ``rejected`` are the two answers.
    - kto: ``messages`` ends with the answer; ``label`` says whether it is desirable.
    - text: ``text`` only (continued pretraining).
    - prompt: ``messages`` is the prompt; ``reference`` the expected answer (GRPO/PPO rewards).
    """

    messages: list[Message] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    images: list[str] = field(default_factory=list)  # absolute paths, checked to exist
    audios: list[str] = field(default_factory=list)
    chosen: Message | None = None
    rejected: Message | None = None
    label: bool | None = None
    text: str | None = None
    reference: str | None = None
    source: str = ""  # dataset name
    index: int = -1  # row index in the source, for error reports
