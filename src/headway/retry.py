"""Retries (semantics §7): whether to retry is decided apart from when.

Eligibility comes from a classifier (an exception -> RETRYABLE, NON_RETRYABLE or
RetryAfter(seconds)) and from what the tool does (a write is retried only when it is
idempotent or keyed, and never after a timeout). The schedule is exponential backoff with
full jitter, capped, bounded by attempts and by the deadline; ``RetryAfter`` stays inside
those bounds. Sleep, clock and randomness are injected by the caller.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import random
import socket
from collections.abc import Callable
from typing import Any

from .errors import ConfigError


class Verdict(enum.Enum):
    RETRYABLE = "retryable"
    NON_RETRYABLE = "non_retryable"


RETRYABLE = Verdict.RETRYABLE
NON_RETRYABLE = Verdict.NON_RETRYABLE


@dataclasses.dataclass(frozen=True, slots=True)
class RetryAfter:
    """Retryable, but not before ``seconds``."""

    seconds: float


Classification = Verdict | RetryAfter
Classifier = Callable[[BaseException], Classification]

_TESTING: dict[str, Any] = {"on": False, "attempts": 1}


def set_testing(on: bool, *, attempts: int = 1) -> None:
    """Test mode: cap every retry policy at ``attempts`` and never sleep."""
    _TESTING.update(on=on, attempts=attempts)


def is_testing() -> bool:
    return bool(_TESTING["on"])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """A retry schedule. ``attempts`` counts the first try; ``deadline_s`` bounds the call."""

    attempts: int = 3
    initial_s: float = 0.1
    max_s: float = 5.0
    multiplier: float = 2.0
    jitter: bool = True
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError("Retry.attempts must be >= 1")
        if self.initial_s < 0 or self.max_s < 0 or self.multiplier < 1:
            raise ConfigError("Retry needs initial_s >= 0, max_s >= 0 and multiplier >= 1")

    @property
    def max_attempts(self) -> int:
        return min(self.attempts, int(_TESTING["attempts"])) if _TESTING["on"] else self.attempts

    def backoff(self, attempt: int, rng: Callable[[], float]) -> float:
        """Delay after failed attempt number ``attempt`` (1-based): full jitter, capped."""
        exp = min(attempt - 1, 64)  # bounded exponent: never overflows
        ceiling = min(self.max_s, self.initial_s * self.multiplier**exp)
        return rng() * ceiling if self.jitter else ceiling

    def next_delay(
        self, attempt: int, verdict: Classification, elapsed_s: float, rng: Callable[[], float]
    ) -> float | None:
        """Seconds to wait before the next attempt, or None to stop retrying."""
        if verdict is NON_RETRYABLE or attempt >= self.max_attempts:
            return None
        delay = self.backoff(attempt, rng)
        if isinstance(verdict, RetryAfter):
            delay = max(delay, verdict.seconds)
        if self.deadline_s is not None and elapsed_s + delay >= self.deadline_s:
            return None
        return 0.0 if _TESTING["on"] else delay


NO_RETRY = Retry(attempts=1)
DEFAULT_RETRY = Retry()


def _http_status(exc: BaseException) -> tuple[int | None, str | None]:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    headers = getattr(response, "headers", None) or {}
    retry_after = headers.get("Retry-After") if hasattr(headers, "get") else None
    return (status if isinstance(status, int) else None, retry_after)


def default_classify(exc: BaseException) -> Classification:
    """Common transient errors are retryable; anything unrecognised is not.

    Connection errors and timeouts (the caller never retries a write after a timeout),
    HTTP 429/502/503/504 from httpx or requests (``Retry-After`` honoured), and
    ``RetryAfter``-carrying exceptions.
    """
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit | GeneratorExit):
        return NON_RETRYABLE
    hinted = getattr(exc, "retry_after", None)
    if isinstance(hinted, int | float) and not isinstance(hinted, bool):
        return RetryAfter(float(hinted))
    status, header = _http_status(exc)
    if status is not None:
        if status in (429, 502, 503, 504):
            try:
                return RetryAfter(float(header)) if header else RETRYABLE
            except ValueError:
                return RETRYABLE
        return NON_RETRYABLE
    transient = (ConnectionError, TimeoutError, socket.timeout)
    if isinstance(exc, transient):
        return RETRYABLE
    names = {c.__name__ for c in type(exc).__mro__}
    if names & {
        "ConnectError",
        "ReadTimeout",
        "ConnectTimeout",
        "PoolTimeout",
        "RemoteProtocolError",
    }:
        return RETRYABLE
    return NON_RETRYABLE


def lost_connection(exc: BaseException) -> bool:
    """A connection lost after the request may have reached the tool (semantics §5.2: a
    reset or closed connection, a broken pipe, an MCP upstream that exited mid-call): a
    write's outcome is then unknown. Not a refused connection (nothing was sent)."""
    return isinstance(exc, ConnectionResetError | ConnectionAbortedError | BrokenPipeError)


def default_rng() -> float:
    return random.random()
