"""The life of an idempotency key (semantics §5.2, §5.3): its states, the moves between
them, and what a record found in the store means for a call with that key.

Pure data and functions: no store, no clock, no call. ``idempotency.Writes`` drives a key
through these moves; the store traffic that carries them is ``_key_store`` (and
``_riders``, for operations sent with the session's own), the lease that keeps a claim
alive is ``_leases``. A key's record lives under ``{ns}:idem:{key}``::

    ABSENT ──CLAIM──▶ IN_PROGRESS(owner, beat, lease_s)
    IN_PROGRESS ──RETURNED──▶ COMPLETED(result)   the tool returned (or its late attempt did)
                ──RAISED────▶ ABSENT              the tool raised before acting: released
                ──FAILED────▶ FAILED_FINAL(error) opt-in: a final business error
                ──LOST──────▶ UNKNOWN             a timeout, an interrupt, a lost answer, a
                                                  lapsed lease, a result that was not stored
                ──FOUND─────▶ COMPLETED           a fresh claim on a record the store lost:
                                                  reconcile found the earlier result
    UNKNOWN ──FOUND──▶ COMPLETED      reconcile (or the late answer) found it: REPLAYED
            ──CLAIM──▶ IN_PROGRESS    reconcile confirmed absence: one new execution
    COMPLETED, FAILED_FINAL, UNKNOWN past their expiry ──CLAIM──▶ IN_PROGRESS

Every move after the claim is a compare-and-set against the exact record read, so only
one owner ever wins. A settled record expires (24 h by default) by the governor's clock;
an in-progress one only when its owner's lease lapses.
"""

from __future__ import annotations

import enum
import math
from typing import Any

from ._key_results import encode_result
from .outcome import Status

ABSENT = "absent"  # no record: never claimed, released, or collected
IN_PROGRESS = "in_progress"
COMPLETED = "completed"
UNKNOWN = "unknown"
FAILED_FINAL = "failed_final"
STORED = (IN_PROGRESS, COMPLETED, UNKNOWN, FAILED_FINAL)  # the states a record can hold


class Event(enum.Enum):
    """What happens to a key."""

    CLAIM = "a caller claims it (the record's add, or a swap over a record it replaces)"
    RETURNED = "the tool returned"
    RAISED = "the tool raised before it could act"
    FAILED = "the tool failed with a final business error (failed_final=True)"
    LOST = "whether the tool acted is not known"
    FOUND = "reconcile, or the abandoned attempt's late answer, found the result"


#: (state, event) -> the state it moves the key to; no other move is made
MOVES: dict[tuple[str, Event], str] = {
    (ABSENT, Event.CLAIM): IN_PROGRESS,
    (IN_PROGRESS, Event.RETURNED): COMPLETED,
    (IN_PROGRESS, Event.RAISED): ABSENT,
    (IN_PROGRESS, Event.FAILED): FAILED_FINAL,
    (IN_PROGRESS, Event.LOST): UNKNOWN,
    (IN_PROGRESS, Event.FOUND): COMPLETED,  # a claim over a record the store lost
    (UNKNOWN, Event.FOUND): COMPLETED,
    (UNKNOWN, Event.CLAIM): IN_PROGRESS,  # confirmed absent, or expired
    (COMPLETED, Event.CLAIM): IN_PROGRESS,  # expired: as good as absent
    (FAILED_FINAL, Event.CLAIM): IN_PROGRESS,  # expired
}


def claim(
    tool: str, args: str, owner: str, now: float, lease_s: float, ttl_s: float
) -> dict[str, Any]:
    """The record of a claim: IN_PROGRESS, owned by ``owner`` while its lease lives. Its
    times are kept to the millisecond (sent with every write of the key)."""
    now = round(now, 3)
    return {
        "state": IN_PROGRESS,
        "tool": tool,
        "args": args,
        "owner": owner,
        "beat": 0,
        "lease_s": lease_s,
        "created": now,
        "expires": now + ttl_s,
    }


def move(
    record: dict[str, Any],
    event: Event,
    now: float,
    ttl_s: float,
    value: Any = None,
    by: str = "owner",
    error: Any = None,
) -> dict[str, Any] | None:
    """The record after ``event`` (None: ABSENT). RETURNED and FOUND keep ``value`` (and
    ``by``, who found it: a late attempt, reconcile, shadow mode; absent: the owner, as
    records of earlier versions say ``"owner"``); FAILED keeps ``error``. A CLAIM's record
    is ``claim()``'s, whatever it replaces."""
    to = MOVES.get((record["state"], event))
    if to is None or event is Event.CLAIM:
        raise ValueError(f"no move {event.name} from {record['state']}")
    if to == ABSENT:
        return None
    now = round(now, 3)  # to the millisecond, as ``claim``
    new = {**record, "state": to, "owner": None, "expires": now + ttl_s}
    if to == COMPLETED:
        result, why = encode_result(value)
        new.update(result=result, done_at=now)
        if by != "owner":  # who found the result; none: the claim's owner (it ran the tool)
            new["by"] = by
        if why is not None:
            new["unrecordable"] = why  # it ran: the key replays an error that says so
    elif to == UNKNOWN:
        new["unknown_at"] = now
    else:
        new["error"] = error
    return new


def malformed(record: Any) -> str | None:
    """Why a stored idempotency record cannot be trusted, or None."""
    if not isinstance(record, dict):
        return f"not an object but {type(record).__name__}"
    state = record.get("state")
    if state not in STORED:
        return f"unknown state {state!r}"
    for name in ("tool", "args"):
        if not isinstance(record.get(name), str):
            return f"{name!r} is {record.get(name)!r}"
    for name in ("created", "expires", "lease_s"):
        v = record.get(name)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return f"{name!r} is {v!r}"
    beat = record.get("beat")
    if isinstance(beat, bool) or not isinstance(beat, int):
        return f"'beat' is {beat!r}"
    if state == IN_PROGRESS and (
        not isinstance(record.get("owner"), str) or record["lease_s"] <= 0
    ):
        return "an in-progress record without an owner or a lease"
    return None


class Seen(enum.Enum):
    """What the record a lost claim found means for the call (``seen``)."""

    GONE = "released or collected in between: claim again"
    MALFORMED = "it cannot be trusted: the store is treated as down"
    EXPIRED = "settled and expired: taken over by a CLAIM"
    KEY_REUSE = "the key was used with other arguments or another tool: KeyReuseError"
    REPLAY = "COMPLETED: its result is REPLAYED"
    UNRECORDABLE = "COMPLETED, but its result could not be recorded: an error saying so"
    FAILED_FINAL = "FAILED_FINAL: its error is returned again"
    RECONCILE = "UNKNOWN: reconcile before anything runs"
    IN_PROGRESS = "IN_PROGRESS: wait for its owner while its lease lives"


def seen(record: Any, now: float, tool: str, args: str) -> Seen:
    """What ``record``, found by a claim that lost, means for a call of ``tool`` with the
    arguments digest ``args`` at ``now``."""
    if record is None:
        return Seen.GONE
    if malformed(record) is not None:
        return Seen.MALFORMED
    state = record["state"]
    if state != IN_PROGRESS and now >= record["expires"]:
        return Seen.EXPIRED
    if record["args"] != args or record["tool"] != tool:
        return Seen.KEY_REUSE
    if state == COMPLETED:
        return Seen.UNRECORDABLE if record.get("unrecordable") else Seen.REPLAY
    if state == FAILED_FINAL:
        return Seen.FAILED_FINAL
    if state == UNKNOWN:
        return Seen.RECONCILE
    return Seen.IN_PROGRESS


def ended(status: Status, final_error: bool) -> Event:
    """The event an attempt's outcome is for its claim; ``final_error``: its error, if it
    is one, is final (a ``failed_final`` tool's non-retryable error). An attempt abandoned
    after a timeout keeps its claim while it runs on, and moves it when it ends."""
    if status is Status.EXECUTED:
        return Event.RETURNED
    if status is Status.UNKNOWN:
        return Event.LOST
    return Event.FAILED if final_error and status is Status.ERROR else Event.RAISED
