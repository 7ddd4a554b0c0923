"""Outcomes (semantics §2): every call returns one; ``to_model()`` is what the model reads."""

from __future__ import annotations

import enum
import json
from typing import Any, NamedTuple

from ._redact import scrub


class Status(enum.StrEnum):
    EXECUTED = "executed"
    CACHED = "cached"
    REPLAYED = "replayed"
    CORRECTED = "corrected"
    UNKNOWN = "unknown"
    FALLBACK = "fallback"
    ERROR = "error"


# Module-level names for the members: on Python 3.11 ``Status.CACHED`` is a descriptor
# lookup (~75 ns), and the pipeline compares statuses many times per call.
EXECUTED, CACHED, REPLAYED, CORRECTED = (
    Status.EXECUTED,
    Status.CACHED,
    Status.REPLAYED,
    Status.CORRECTED,
)
UNKNOWN, FALLBACK, ERROR = Status.UNKNOWN, Status.FALLBACK, Status.ERROR


def render(value: Any, limit: int = 4000) -> str:
    """A result as text for the model: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except Exception:  # not JSON, too deep, an int too long, a __str__ that raises
            try:
                text = repr(value)
            except Exception:
                text = f"<a {type(value).__name__} that cannot be shown as text>"
    if len(text) > limit:
        text = text[:limit] + f"... [{len(text) - limit} more characters]"
    return text


class Outcome(NamedTuple):
    """What one call produced (immutable). ``value`` is None for CORRECTED, UNKNOWN and ERROR.

    A NamedTuple rather than a frozen dataclass: it is built on every call, and a frozen
    dataclass's ``__init__`` costs several times more.
    """

    status: Status
    tool: str
    value: Any = None
    executed: bool = False
    error: dict[str, Any] | None = None
    correction: str | None = None
    reconcile_key: str | None = None
    step: int = -1
    attempts: int = 0

    @property
    def ok(self) -> bool:
        """True when ``value`` holds a usable result."""
        return self.status in (Status.EXECUTED, Status.CACHED, Status.REPLAYED, Status.FALLBACK)

    def to_model(self) -> str:
        """Text the model can act on."""
        s = self.status
        if s is Status.EXECUTED:
            text = render(self.value)
        elif s is Status.CACHED:
            text = (
                render(self.value)
                + "\n[headway: stored result of an identical earlier call; the tool was not run again]"
            )
        elif s is Status.REPLAYED:
            text = (
                render(self.value)
                + "\n[headway: this operation already completed; this is its stored result, "
                "it was not performed again]"
            )
        elif s is Status.FALLBACK:
            text = (
                render(self.value)
                + f"\n[headway: degraded result: {self.tool} is unavailable, this is its fallback]"
            )
        elif s is Status.UNKNOWN:
            text = (
                f"The outcome of {self.tool} is unknown: it may or may not have taken effect "
                f"(reconcile key {self.reconcile_key}). Nothing checks it in the meantime. If "
                "you call it again with the same arguments and key, headway first checks "
                "whether it took effect and runs it again only if it did not; it never runs "
                "twice. Do not repeat it with other arguments to get around this: check its "
                "effect with a read, or continue with other work."
            )
        elif s is Status.CORRECTED:
            return scrub(self.correction or f"headway: {self.tool} was not run.")
        elif self.error is not None and self.error.get("code") == "error_result":
            text = str(self.error.get("message", ""))  # the tool's own answer, as it gave it
        else:
            err = self.error or {}
            code = err.get("code", "error")
            if code == "circuit_open":
                retry = ""  # its hint says when to call again
            elif not err.get("retryable"):
                retry = " Retrying the same call will not help."
            elif self.attempts > 1:
                retry = (
                    f" headway already tried it {self.attempts} times; calling it again right "
                    "away will likely fail the same way."
                )
            else:
                retry = " Retrying may help."
            message = str(err.get("message", "")).rstrip(".")
            text = f"Error from {self.tool} [{code}]: {message}.{retry}"
            if err.get("hint"):
                text += f" {err['hint']}"
        if self.correction:
            text += "\n" + scrub(self.correction)
        return text


def error_info(
    code: str, message: str, *, retryable: bool, hint: str = "", **extra: Any
) -> dict[str, Any]:
    """A structured error: the four fields every ERROR carries, plus any extras."""
    return {
        "code": code,
        "retryable": retryable,
        "message": scrub(message),
        "hint": scrub(hint),
        **extra,
    }
