"""The record of one call as the pipeline fills it in (and the audit reads it)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from ._canonical import digest
from ._redact import scrub
from ._spec import ToolSpec
from .outcome import ERROR, EXECUTED, Status, error_info

INLINE = 256  # canonical arguments up to this long identify a call as they are


def identity(canon: str) -> str:
    """Canonical arguments as an identifier: the text itself when short, else its sha256."""
    return canon if len(canon) <= INLINE else digest(canon)


class Call:
    """What the pipeline knows and decided about one call (becomes the audit record).

    A plain class with class-level defaults, not a dataclass: it is built on every call,
    and only the fields a call actually sets are assigned.
    """

    status: Status = ERROR
    value: Any = None
    executed: bool = False
    error: dict[str, Any] | None = None
    fingerprint: str | None = None
    attempts: int = 0
    cache_key: str | None = None
    cache_hit: bool = False
    coalesced: bool = False
    correction: str | None = None
    would: str | None = None
    idem_key: str | None = None
    step_keyed: bool = False  # the key came from a step id, not from the caller
    idem_state: str | None = None
    reconcile_key: str | None = None
    reconcile_s: float | None = None  # time from UNKNOWN to resolution
    breaker: str = "closed"
    flags: tuple[str, ...] = ()
    text: str | None = None  # the result as text (computed once)
    result_digest: str | None = None
    result_size: int | None = None
    late: Any = None  # an attempt abandoned after a timeout, still running
    began: float | None = None  # ctx.timer() when the call's deadline began (a reconcile)
    held: Any = None  # the claim on the idempotency key while the write runs (_leases.Held)
    # store operations of the write sent with the call's next one (_riders.Claim,
    # .Completion), and the claim made that way
    rider: Any = None
    claimed: Any = None
    looked_up: bool = False  # begin() already looked the read up (an in-process store)
    # a read with ``validate``: the digest of its fingerprint, taken once before it runs
    # (None: not taken yet, or it could not be: then nothing is served or stored)
    currency: str | None = None
    validated: bool = False
    agent: str | None = None  # the agent making the call, in a multi-agent run
    call_id: str | None = None  # the framework's id of this tool call (audit and spans only)
    fn: Any = None  # what runs the tool: the spec's function, or the caller's ``run=``
    fn_async: bool = False
    # a session shared by workers: the step reserved in the record, the budget it reached,
    # the cache epochs to bump when it settles, and a call settled without running
    index: int | None = None
    reached: tuple[str, float, float, str] | None = None
    bumps: tuple[str, ...] = ()
    early: bool = False
    # write epochs published apart from the session record (``_epochs``): a write's pending
    # mark, a read whose epochs a pending write touches (neither served nor stored), and
    # the epochs record's value a held entry was served under (the settling swap's guard)
    epoch_token: str | None = None
    no_store: bool = False
    guard: Any = None
    _digest: str | None = None

    def __init__(
        self,
        spec: ToolSpec,
        args: Mapping[str, Any],
        canon: str,
        args_id: str,
        key: str,
        effect: str,
        started: float,
        known: bool = True,
    ) -> None:
        self.spec = spec
        self.args = args
        self.canon = canon
        self.key = key  # detector key: tool + arguments without ignored fields
        self.effect = effect
        self.started = started
        self.known = known  # False for a tool name that is not registered
        self.args_id = args_id  # identity(canon)
        self.fn, self.fn_async = spec.fn, spec.is_async
        if args_id is not canon:
            self._digest = args_id  # long arguments: their identity is already the sha256

    @property
    def args_digest(self) -> str:
        """sha256 of the canonical arguments (computed when first needed)."""
        if self._digest is None:
            self._digest = digest(self.canon)
        return self._digest

    def flag(self, text: str) -> None:
        """Note something for the audit record's ``flags``."""
        self.flags = (*self.flags, scrub(text))


_RESULT_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def result_text(value: Any) -> str:
    """A result as compact JSON text (keys sorted; what JSON cannot hold written as str)."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value, default=str, option=_RESULT_OPTIONS).decode()
    except (orjson.JSONEncodeError, TypeError):
        pass  # integers past 64 bits, mixed key types, lone surrogates, very deep values
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except Exception:  # also a __str__ that raises
        return _repr(value)


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except (ValueError, RecursionError) as exc:  # a 10,000-deep list, a 5,000-digit int
        raise UnrecordableError(describe(exc)) from None
    except Exception:  # a __repr__ that raises
        return f"<{type(value).__name__}: text unavailable>"


def shown(value: Any) -> str:
    """``result_text``, or a stand-in naming the result's type when it has no text."""
    try:
        return result_text(value)
    except UnrecordableError as exc:
        return f"<a {type(value).__name__} result with no text: {exc}>"


class UnrecordableError(ValueError):
    """A result that cannot be written as text (so neither recorded nor shown)."""


def recordable(c: Call) -> bool:
    """Check that an executed call's result can be recorded (its text is kept); if not, the
    call becomes an ERROR that says the tool ran. Keyed writes are left to idempotency."""
    if c.status is not EXECUTED or c.text is not None or c.idem_key is not None:
        return True
    try:
        c.text = result_text(c.value)
    except UnrecordableError as exc:
        c.status, c.value = ERROR, None
        c.error = error_info(
            "unrecordable_result",
            f"{c.spec.name} ran, but its result cannot be recorded or shown ({exc})",
            retryable=False,
            hint="The call took effect: do not repeat it to get the result. Ask for a smaller "
            "or simpler result instead.",
        )
        return False
    return True


def describe(exc: BaseException) -> str:
    """str(exc), even for exceptions whose __str__ fails."""
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__}: message unavailable>"
