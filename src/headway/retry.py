"""Retries (semantics §7): whether to retry is decided apart from when.

Eligibility comes from a classifier (an exception -> RETRYABLE, NON_RETRYABLE,
BEFORE_EFFECT or RetryAfter(seconds)) and from what the tool does (a write is retried only
when it is idempotent or keyed, and never after a timeout or a lost connection: semantics
§5.2). The schedule is exponential backoff with full jitter, capped, bounded by attempts
and by the deadline; ``RetryAfter`` stays inside those bounds. Sleep, clock and randomness
are injected by the caller.

Which failures may come after the tool acted is decided here too, by exception type
names (no client library is imported): ``connection_lost`` (a reset or closed connection,
a broken pipe, an incomplete response, an end of stream, a read timeout) and
``before_effect`` (a refused connection, a name that does not resolve, a connect timeout).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import errno
import random
import socket
from collections.abc import Callable
from typing import Any

from .errors import ConfigError


class Verdict(enum.Enum):
    RETRYABLE = "retryable"
    NON_RETRYABLE = "non_retryable"
    # retryable, and known to have failed before the tool could act: a write's claim is
    # released and the write may run again (even after what looks like a lost connection)
    BEFORE_EFFECT = "before_effect"


RETRYABLE = Verdict.RETRYABLE
NON_RETRYABLE = Verdict.NON_RETRYABLE
BEFORE_EFFECT = Verdict.BEFORE_EFFECT


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


# Failures known to happen before a request could reach the service: nothing was sent
_BEFORE_EFFECT_NAMES = frozenset(
    {
        "ConnectionRefusedError",
        "gaierror",  # socket: a name that does not resolve
        "ConnectError",  # httpx, httpcore: the connection was never made
        "ConnectTimeout",  # httpx, requests
        "PoolTimeout",  # httpx: no connection from the pool
        "NewConnectionError",  # urllib3 (inside requests' ConnectionError)
        "NameResolutionError",  # urllib3
        "ConnectTimeoutError",  # urllib3
        "ClientConnectorError",  # aiohttp
        "ClientConnectorDNSError",  # aiohttp
    }
)
# A gateway's answer that the service behind it got the request and gave no answer in
# time (504) or a broken one (502): the service may have acted
_GATEWAY_LOST = frozenset({502, 504})
# Failures after the request may have reached the service: the connection was lost
_LOST_NAMES = frozenset(
    {
        "ConnectionResetError",
        "ConnectionAbortedError",
        "BrokenPipeError",
        "EOFError",  # also asyncio.IncompleteReadError
        "IncompleteRead",  # http.client, urllib3
        "RemoteDisconnected",  # http.client
        "BadStatusLine",  # http.client: the answer was cut or garbled
        "TimeoutError",  # also socket.timeout, asyncio.TimeoutError
        "RemoteProtocolError",  # httpx: the server closed mid-answer
        "ReadError",  # httpx
        "WriteError",  # httpx: part of the request may have been sent
        "ReadTimeout",  # httpx, requests
        "WriteTimeout",  # httpx
        "ReadTimeoutError",  # urllib3
        "ProtocolError",  # urllib3: "Connection aborted"
        "ChunkedEncodingError",  # requests
        "ServerDisconnectedError",  # aiohttp
        "ClientPayloadError",  # aiohttp
        "ClientOSError",  # aiohttp
        "ServerTimeoutError",  # aiohttp
        "ConnectionClosed",  # websockets
        "EndOfStream",  # anyio (an MCP session's stream ended)
        "BrokenResourceError",  # anyio
        "ClosedResourceError",  # anyio
        "SSLEOFError",
        "SSLZeroReturnError",
    }
)
# Failures that say only "the connection failed": lost, unless what they wrap says it was
# never made (requests' ConnectionError around urllib3's MaxRetryError around a
# NewConnectionError, say)
_WRAPPER_NAMES = frozenset({"ConnectionError", "MaxRetryError", "NetworkError"})
# Failures that carry another one and say nothing themselves (urllib's URLError)
_CARRIER_NAMES = frozenset({"URLError"})


def _connection_kind(exc: BaseException, depth: int = 0) -> str | None:
    """ "before" (it never reached the service), "lost" (it may have), or None (not a
    connection failure)."""
    names = {c.__name__ for c in type(exc).__mro__}
    if names & _BEFORE_EFFECT_NAMES:
        return "before"
    if names & _LOST_NAMES:
        return "lost"
    if isinstance(exc, OSError) and exc.errno == errno.ENETRESET:
        return "lost"  # the network dropped the connection: after it was made
    if _http_status(exc)[0] in _GATEWAY_LOST:
        return "lost"
    wrapper = bool(names & _WRAPPER_NAMES)
    if not wrapper and not names & _CARRIER_NAMES:
        return None
    if depth < 4:  # what it explicitly wraps: urllib3's ``reason``, requests' args[0], ``from``
        args = getattr(exc, "args", ())
        for inner in (getattr(exc, "reason", None), args[0] if args else None, exc.__cause__):
            if isinstance(inner, BaseException) and inner is not exc:
                kind = _connection_kind(inner, depth + 1)
                if kind is not None:
                    return kind
    return "lost" if wrapper else None


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is a connection failure after the request may have reached the
    service (semantics §5.2): a reset or closed connection, a broken pipe, an incomplete
    answer, an end of stream, a read timeout. A write failing so may have acted."""
    try:
        return _connection_kind(exc) == "lost"
    except Exception:  # an exception whose attributes fail: not recognised
        return False


def before_effect(exc: BaseException) -> bool:
    """Whether ``exc`` is a connection failure known to come before the request was sent:
    a refused connection, a name that does not resolve, a connect timeout."""
    try:
        return _connection_kind(exc) == "before"
    except Exception:
        return False


def default_classify(exc: BaseException) -> Classification:
    """Common transient errors are retryable; anything unrecognised is not.

    Connection errors and timeouts (a write is never retried after a timeout or a lost
    connection: ``connection_lost``), failures before the request was sent
    (BEFORE_EFFECT: ``before_effect``), HTTP 429/502/503/504 from httpx or requests
    (``Retry-After`` honoured), and ``RetryAfter``-carrying exceptions.
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
    kind = _connection_kind(exc)
    if kind == "before":
        return BEFORE_EFFECT
    if kind == "lost" or isinstance(exc, ConnectionError | TimeoutError | socket.timeout):
        return RETRYABLE  # a read is worth another try; a write is UNKNOWN (never retried)
    return NON_RETRYABLE


def default_rng() -> float:
    return random.random()
