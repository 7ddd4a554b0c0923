"""What the readers produce: recorded runs of tool calls, and the problems they met."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
from typing import Any


@dataclasses.dataclass(slots=True)
class Call:
    """One recorded tool call. ``result`` is the text the tool returned (as much as was
    recorded); ``result_id`` identifies the FULL result (a digest), so two calls returned the
    same thing when their ``result_id`` are equal."""

    tool: str
    args: Any
    result: str
    result_id: str
    agent: str = ""
    time: float | None = None  # seconds, when the input records it
    error: bool = False  # the tool (or its framework) marked the result as an error
    hints: dict[str, Any] = dataclasses.field(default_factory=dict)  # side_effect, kind...
    size: int = -1  # characters in the FULL result, when more than ``result`` holds
    turn: int | None = None  # the model turn (response) that asked for it; None: its own turn

    def full_size(self) -> int:
        return max(self.size, len(self.result))


@dataclasses.dataclass(slots=True)
class Run:
    """One agent run: its calls in order; ``succeeded`` is None when no outcome is recorded."""

    source: str
    run_id: str
    calls: list[Call]
    succeeded: bool | None = None
    not_replayed: int = 0  # records that are no tool call headway would see (see the reader)
    # per model turn, when the input records it: the tokens the model read and wrote
    # (``usage``), and the characters of the context it was sent (the transcript so far)
    usage: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)
    context: dict[int, int] = dataclasses.field(default_factory=dict)
    cost: float | None = None  # USD, when the export records what the run's model calls cost


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    """Input a reader could not use: the file, the line (1-based, 0 = whole file), why."""

    path: str
    line: int
    message: str
    skipped: bool = False  # a file in a named directory that holds no runs: a note only

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}"


def digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()  # noqa: S324  # an id, not security


def usage_of(usage: Any) -> tuple[int, int] | None:
    """(input, output) tokens of a recorded usage object: OpenAI's ``prompt_tokens`` /
    ``completion_tokens``, or ``input_tokens`` / ``output_tokens`` (Anthropic, Responses,
    Agents SDK; Anthropic's cache reads and writes are input too); None when it has none
    (or records no input at all: a test model's zeros)."""
    if not isinstance(usage, dict):
        return None
    tin = usage.get("input_tokens", usage.get("prompt_tokens"))
    tout = usage.get("output_tokens", usage.get("completion_tokens"))
    if not isinstance(tin, int) or isinstance(tin, bool) or tin <= 0:
        return None  # a model call reads something: zero means not measured
    extra = [usage.get(k) for k in ("cache_read_input_tokens", "cache_creation_input_tokens")]
    tin += sum(x for x in extra if isinstance(x, int))
    return tin, tout if isinstance(tout, int) and not isinstance(tout, bool) else 0


def iso_time(text: Any) -> float | None:
    """Seconds since the epoch of an ISO 8601 time (``Z`` or an offset), or None."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
