"""Before a keyed write runs: claim its key, and when the claim finds a record, do what
the record's state asks (``_keylife.seen``): replay it, reconcile it, take it over, wait
for its owner, or fail closed when the store cannot be trusted.

``claim_key`` returns the call's ticket: the claim (``Held``: the tool runs), ``RUN`` (it
runs without one: ``store_failure="open"``), or None (the call is settled here, as
``_key_outcomes`` tells it). Each turn of its loop follows a change of the record under
it, so it is bounded; a claim sent ahead with the session's record (``_riders.Claim``) is
its first turn.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Literal

from . import _key_store
from ._call import Call
from ._effects import Plan, Sleep
from ._key_memory import KeyMemory
from ._key_outcomes import (
    ABANDONED_RUNNING,
    RUNNING_HERE,
    busy,
    churned,
    failed_final,
    replay,
    replay_found,
    still_unknown,
    store_down,
    store_error,
    unrecorded,
)
from ._key_results import decode_result
from ._keylife import Event, Seen, claim, malformed, move, seen
from ._leases import DEFAULT_LEASE_S, Held, new_owner
from ._reconcile import reconcile
from .errors import KeyReuseError, StoreError

if TYPE_CHECKING:
    from ._context import Context

RUN = True  # the ticket of a write that runs without a claim (unkeyed, or store_failure="open")
_POLL_S = 0.02  # first wait on an in-flight write; doubles up to _POLL_MAX_S
_POLL_MAX_S = 0.5
_TURNS = 40  # bound on claim attempts in one call (each one follows a store change)


class _Turn(enum.Enum):
    AGAIN = "the record changed under the call: claim again"
    WAIT = "another claim holds the key: wait for its outcome"


def new_claim(ctx: Context, c: Call, owner: str, now: float) -> dict[str, Any]:
    """The IN_PROGRESS record with which ``owner`` claims the call's key at ``now``."""
    lease_s = float(ctx.lease_s or DEFAULT_LEASE_S)
    return claim(c.spec.name, c.args_digest, owner, now, lease_s, ctx.idempotency_ttl_s)


def down(ctx: Context, c: Call, exc: Exception) -> bool | None:
    """The ticket when the store failed: RUN with ``store_failure="open"``, else None."""
    return RUN if store_down(ctx, c, exc) else None


def claim_key(mem: KeyMemory, ctx: Context, c: Call) -> Plan[Held | bool | None]:
    """Claim the key; when the claim finds a record, do what its state asks (``seen``)."""
    key = c.idem_key or ""
    rkey = ctx.idempotency_record_key(key)
    c.reconcile_key = key
    ahead, c.claimed = c.claimed, None  # sent with the session record's read
    owner = ahead.claim["owner"] if ahead is not None else new_owner()
    waited, poll = 0.0, _POLL_S
    for turn in range(_TURNS):
        if turn >= 3:  # the record keeps changing under us: back off
            yield Sleep(min(_POLL_S * 2 ** (turn - 3), _POLL_MAX_S))
        if ahead is not None and turn == 0:
            if ahead.error is not None:
                return down(ctx, c, ahead.error)
            mine, now, held, record = (
                ahead.claim,
                ahead.claim["created"],
                ahead.held,
                ahead.record,
            )
            won = held is not None
        else:
            now = ctx.clock()
            mine, held = new_claim(ctx, c, owner, now), None
            try:
                won, record = yield from _key_store.claim(ctx, rkey, mine)
            except Exception as exc:
                return down(ctx, c, exc)
        if won:
            return (yield from _won(mem, ctx, c, held or mem.hold(ctx, rkey, mine), now))
        found = seen(record, now, c.spec.name, c.args_digest)
        if found is Seen.IN_PROGRESS:
            wait = yield from _in_progress(mem, ctx, c, rkey, record, now)
            if wait is _Turn.AGAIN:
                continue
            if wait is not _Turn.WAIT:
                return wait
            if waited >= ctx.in_progress_wait_s:
                lease_s = float(record["lease_s"])
                busy(c, key, round(min(max(poll, min(lease_s, 1.0)), 60.0), 3))
                return None
            step = min(poll, max(ctx.in_progress_wait_s - waited, 0.001))
            yield Sleep(step)
            waited, poll = waited + step, min(poll * 2, _POLL_MAX_S)
            continue
        settled = yield from _settled(mem, ctx, c, found, rkey, record, mine)
        if settled is not _Turn.AGAIN:
            return settled
    churned(c, key, _POLL_MAX_S)
    return None


def _settled(
    mem: KeyMemory,
    ctx: Context,
    c: Call,
    found: Seen,
    rkey: str,
    record: Any,
    mine: dict[str, Any],
) -> Plan[Held | bool | Literal[_Turn.AGAIN] | None]:
    """A claim that lost to a record that is not in progress: its state decides."""
    key = c.idem_key or ""
    if found is Seen.GONE:
        return _Turn.AGAIN  # released or collected in between
    if found is Seen.MALFORMED:
        problem = f"malformed idempotency record for key {key}: {malformed(record)}"
        return down(ctx, c, StoreError(problem))
    if found is Seen.EXPIRED:  # as good as absent: take it over atomically
        if (yield from _key_store.take_over(ctx, rkey, record, mine)):
            return mem.took(ctx, rkey, mine)
        return _Turn.AGAIN
    if found is Seen.KEY_REUSE:
        raise KeyReuseError(key, str(record["tool"]))
    if found is Seen.REPLAY:
        mem.used.put(rkey, record["expires"])
        replay(c, ("stored", decode_result(record.get("result"))), None)
    elif found is Seen.UNRECORDABLE:
        mem.used.put(rkey, record["expires"])
        unrecorded(c, key, str(record["unrecordable"]))
    elif found is Seen.FAILED_FINAL:
        failed_final(c, record)
    elif mem.running_here(rkey):  # UNKNOWN, and it may still act: nothing to reconcile
        still_unknown(c, RUNNING_HERE)
    else:
        return (yield from _reconciled(mem, ctx, c, rkey, record, mine))
    return None


def _reconciled(
    mem: KeyMemory, ctx: Context, c: Call, rkey: str, record: dict[str, Any], mine: dict[str, Any]
) -> Plan[Held | Literal[_Turn.AGAIN] | None]:
    """An UNKNOWN key: found -> COMPLETED (REPLAYED), confirmed absent -> our CLAIM."""
    verdict, result = yield from reconcile(ctx, c, mem.late, c.idem_key or "", record)
    if verdict == "found":
        ttl = ctx.idempotency_ttl_s
        done = move(record, Event.FOUND, ctx.clock(), ttl, result[1], "reconciled")
        assert done is not None
        if (yield from _key_store.swap(ctx, rkey, record, done)):
            mem.used.put(rkey, done["expires"])
            replay_found(c, result)
            return None
        return _Turn.AGAIN
    if verdict == "absent":
        if (yield from _key_store.take_over(ctx, rkey, record, mine)):
            return mem.took(ctx, rkey, mine)
        return _Turn.AGAIN
    return None


def _in_progress(
    mem: KeyMemory, ctx: Context, c: Call, rkey: str, record: dict[str, Any], now: float
) -> Plan[bool | _Turn | None]:
    """Another claim holds the key: WAIT for it, claim AGAIN when it has just ended,
    or the call's ticket (None: settled here). Its owner is alive while its lease is in
    the store; ours, while its attempt runs in this process."""
    held = mem.keeper.get(rkey)
    if held is not None and held.owner == record["owner"]:
        if held.late is None:
            return _Turn.WAIT  # another call of this process runs it
        # our own attempt, abandoned after a timeout
        if (yield from _key_store.settle(ctx, mem.keeper, held)):
            return _Turn.AGAIN  # it has just ended: its outcome is recorded now
        still_unknown(c, ABANDONED_RUNNING)
        return None
    try:
        alive = yield from _key_store.lease_alive(ctx, rkey, record["owner"])
    except Exception as exc:
        return down(ctx, c, exc)
    if alive:
        return _Turn.WAIT
    # the store let its owner's lease lapse (the owner died, or could not reach the
    # store for a whole lease): the write may have happened
    lost = move(record, Event.LOST, now, ctx.idempotency_ttl_s)
    assert lost is not None
    yield from _key_store.swap(ctx, rkey, record, lost)
    c.flag("lease_expired")
    return _Turn.AGAIN


def _won(mem: KeyMemory, ctx: Context, c: Call, held: Held, now: float) -> Plan[Held | None]:
    """Our claim won: the tool runs, unless this process knows the key from before
    (then the store lost its record)."""
    before = mem.lost_by_store(held, now)
    if before is not None:
        return (yield from _restore(mem, ctx, c, held, before))
    mem.used.put(held.rkey, held)
    return held


def _restore(
    mem: KeyMemory, ctx: Context, c: Call, held: Held, before: Held | float
) -> Plan[Held | None]:
    """We hold a fresh claim on a key this process claimed or saw settled before:
    the store lost its record. Reconcile first (§5.3); run only when the remote
    confirms absence. While our earlier attempt still runs, nothing runs and the key
    is UNKNOWN: that attempt's result is found on the next use."""
    c.flag("record_lost")
    verdict, result = "unknown", ("", None)
    if isinstance(before, Held) and before.running:
        still_unknown(c, RUNNING_HERE)
    else:
        verdict, result = yield from reconcile(ctx, c, mem.late, c.idem_key or "", held.record)
    if verdict == "absent":
        mem.used.put(held.rkey, held)
        return held
    now, ttl = ctx.clock(), ctx.idempotency_ttl_s
    if verdict == "found":
        new = move(held.record, Event.FOUND, now, ttl, result[1], "reconciled")
    else:
        new = move(held.record, Event.LOST, now, ttl)
    try:
        yield from _key_store.swap_held(ctx, held, new)
    except Exception as exc:
        store_error(c, exc)
    mem.keeper.drop(held)
    held.ended(None)
    if new is not None and verdict == "found":
        mem.used.put(held.rkey, new["expires"])
        replay_found(c, result)
    return None
