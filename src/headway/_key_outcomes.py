"""What a keyed (or UNKNOWN-guarded) write is told when its key, not its tool, decides:
the REPLAYED result, the UNKNOWN and the structured errors of semantics §5 (each sets the
call's status, ``idem_state`` and error as the audit and the model read them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._call import Call, describe, shown
from .outcome import ERROR, REPLAYED, UNKNOWN, error_info

if TYPE_CHECKING:
    from ._context import Context

RUNNING_HERE = "an earlier attempt with this key is still running in this process"
ABANDONED_RUNNING = "the abandoned attempt is still running"


def replay(c: Call, found: tuple[str, Any], how: str | None) -> None:
    """REPLAYED: ``found`` is (where it was found, the result); ``how`` a reconcile's."""
    c.status, c.value, c.idem_state = REPLAYED, found[1], "completed"
    c.text = shown(found[1])  # what settling needs, even for a result with no text
    if how is not None:
        c.flag(f"reconciled_by_{how}")


def replay_found(c: Call, found: tuple[str, Any]) -> None:
    """REPLAYED with what reconcile, or a late attempt, found."""
    replay(c, found, "late" if found[0] == "late" else "reconciled")


def still_unknown(c: Call, why: str) -> None:
    c.status, c.idem_state = UNKNOWN, "unknown"
    c.error = error_info(
        "unknown_outcome",
        f"the outcome of an earlier identical call is unknown ({why})",
        retryable=False,
        hint="Do not repeat this call; it may already have taken effect.",
    )


def store_error(c: Call, exc: BaseException) -> None:
    """Note a store failure in the call's audit flags."""
    c.flag(f"store_error: {type(exc).__name__}: {describe(exc)}"[:300])


def store_down(ctx: Context, c: Call, exc: Exception) -> bool:
    """The store cannot be reached (or holds a malformed record): keyed writes fail
    closed by default. True when the write runs anyway (``store_failure="open"``)."""
    store_error(c, exc)
    if ctx.store_failure == "open":
        c.flag("store_failure_open")
        return True
    c.status, c.idem_state = ERROR, "store_unavailable"
    c.error = error_info(
        "store_unavailable",
        f"the idempotency store failed ({describe(exc)}); the write was not performed",
        retryable=True,
        hint="Try again shortly with the same key; nothing was done.",
    )
    return False


def unrecorded(c: Call, key: str, why: str) -> None:
    """A completed key whose result could not be recorded: the write happened, and its
    result cannot be replayed."""
    c.status, c.idem_state = ERROR, "completed"
    c.flag("result_not_recordable")
    c.error = error_info(
        "unrecordable_result",
        f"{c.spec.name} already ran with key {key} (it was not run again), but its result "
        f"could not be recorded, so it cannot be shown: {why[:300]}",
        retryable=False,
        hint="Do not repeat it: it took effect. Check its effect with a read if you need "
        "the result.",
    )


def failed_final(c: Call, record: dict[str, Any]) -> None:
    """A key that ended with a final business error: that error, again."""
    c.status, c.idem_state = ERROR, "failed_final"
    c.error = record.get("error")


def busy(c: Call, key: str, retry_after: float) -> None:
    """Another caller performs the write, past the wait for its outcome."""
    c.status, c.idem_state = ERROR, "in_progress"
    c.error = error_info(
        "in_progress",
        f"this operation (key {key}) is being performed by another caller",
        retryable=True,
        hint="Wait for it, then call again with the same key to get its result.",
        retry_after=retry_after,
    )


def churned(c: Call, key: str, retry_after: float) -> None:
    """The record kept changing under every claim of the call."""
    c.status, c.idem_state = ERROR, "in_progress"
    c.error = error_info(
        "in_progress",
        f"the record of key {key} kept changing; nothing was done",
        retryable=True,
        hint="Call again with the same key shortly.",
        retry_after=retry_after,
    )


def not_recorded(c: Call) -> None:
    """The tool ran but its result is not recorded: UNKNOWN, resolved from here."""
    c.status, c.idem_state, c.value = UNKNOWN, "unknown", None
    c.error = error_info(
        "result_not_recorded",
        "the operation ran but its result could not be recorded",
        retryable=False,
        hint="Do not run it again under a new key: a call with the same key returns its result.",
    )
