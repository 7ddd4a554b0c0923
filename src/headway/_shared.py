"""A session shared by workers: its state in one record of the shared store.

With a store that other processes share (SQLite, Redis, PostgreSQL), every worker that
opens ``governor.session(run_id)`` continues the same run. The record ``{ns}:sess:{run_id}``
holds what the decision core reads: steps, budgets consumed, the stop, the cache epochs,
the detector windows (as bounded excerpts and digests) and the unknown writes.

A call meets the record twice; changes are compare-and-set over the whole record:

    before:  stopped? (refresh: a read) -- with a call budget, reserve: a swap that
             also takes the next step and counts it against the budgets
    (the tool runs, uncoupled from the record)
    settle:  take the step (if not reserved), judge it (marks, corrections, loop stop),
             bump the cache epochs

A keyed write's claim rides with the first of these (one ``batch``), and its completion
with the second, which is made only if the completion was (``idempotency.with_rider``):
two round trips in all. A stop read with the claim lets the claim go.

A cached read does both in one swap after its lookup, which it made under the cache
epochs this worker last saw: the swap succeeds only if the record is still that one.
When this worker holds the entry (it stored or served it under those epochs), the
lookup is not made: the swap alone, one round trip. A swap that fails brings the record
back in the same round trip (``batch``).

A change is a function of the session state, applied in memory to the state the record
last held; when another worker changed the record in between, the swap fails, the
record is read again and the same change is applied to it (the decision core does no
I/O, so a change can be applied again). The local state is a cache of the record: a
worker that wrote the record last needs no read before its next swap.

On a store with its own ``batch`` the record is a head and immutable parts
(``_record_parts``): a swap sends the head (compared by its digest on the store's server)
and, only if it succeeds, the write's part and the deletes of the parts it drops; a read
sends the head this worker knows and gets it back only if it changed, and the parts it
lacks in one more round trip (none for a worker that wrote them itself).

The store failing mid-session degrades to the local state (flagged in the audit); no
exception leaves ``call()`` for it. The record's text is ``_session_record``'s; counting
a step against the budgets is ``_steps``'.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from . import _epochs
from ._call import Call, describe
from ._effects import Blocking, Plan, Sleep, Wait, drive_sync
from ._epochs import trip
from ._redact import scrub
from ._session_record import STOPS, dump, load, part_ops, read_parts
from ._steps import check_stop, take
from .errors import LoopDetected, Stop
from .idempotency import flush, with_rider
from .stores._base import SAME, Op, batch, in_one_trip

if TYPE_CHECKING:
    from ._context import Context
    from ._state import SessionState

T = TypeVar("T")
log = logging.getLogger("headway")

_ROUNDS = 64  # swaps tried per change before the call goes on with the local state


_UNREAD = object()


class Moved(Exception):  # noqa: N818 - a signal between the pipeline and this module
    """The record changed since a decision this worker made on its copy of it."""


def update(
    ctx: Context,
    st: SessionState,
    c: Call | None,
    change: Callable[[], T],
    rounds: int = _ROUNDS,
) -> Plan[T]:
    """Apply ``change`` to the session state and to its record, atomically: compare-and-set
    against the record as this worker last knew it; on a conflict read it and apply the
    change again (``rounds=1``: raise ``Moved`` instead). The store failing leaves the
    change applied locally (flagged; ``rounds=1``: undone, and ``Moved`` raised)."""
    try:
        wait = st.turns.enter()
        if wait is not None:
            try:
                yield Wait(wait, None)
            except BaseException:
                st.turns.give_up(wait)
                raise
        try:
            result = yield from _update(ctx, st, c, change, rounds)
        finally:
            st.turns.leave()
    except BaseException:
        if c is not None and c.rider is not None:
            yield from flush(ctx, c)  # an executed write's result is recorded regardless
        raise
    if c is not None and c.rider is not None:
        yield from flush(ctx, c)
    if st.epochs is not None and st.epochs.owed:
        yield from _epochs.publish(ctx, st.epochs, c)  # did not ride with the record: now
    return result


def _update(
    ctx: Context, st: SessionState, c: Call | None, change: Callable[[], T], rounds: int
) -> Plan[T]:
    key = ctx.session_key(st.session_id)
    store, ttl = ctx.store, ctx.session_ttl_s
    split = in_one_trip(store)  # a head and parts (``_record_parts``): a batch writes them
    for round_ in range(rounds):
        current: Any = _UNREAD
        parts_read: dict[str, Any] | None = None
        with st.lock:
            expected = st.remote
            before = st.epoch, st.stop, dict(st.unknown_writes), dict(st.unknown_steps)
            result = change()  # may raise Stop: nothing was written
            sent = dict(st.meter.unsynced)
            # steps, counts and windows may be lost in a crash of the store's server
            # (PostgreSQL: no wait for the WAL flush); cache epochs that a write bumped,
            # a stop and the unknown writes may not (a stale read, a stopped run going
            # on, an UNKNOWN write run again without reconciling)
            durable = (st.epoch, st.stop, st.unknown_writes, st.unknown_steps) != before
            written = st.version + 1
            try:
                w = dump(st, ctx.clock(), (key, ttl) if split else None)
                new: str | None = w.head
                st.remote = new  # later changes in this process build on this one
            except (TypeError, ValueError) as exc:  # cannot be written: kept here only
                new, unwritable = None, exc
        if new is None:
            if rounds == 1:
                _withdraw(ctx, st, expected, unwritable)
            _degrade(st, c, unwritable, expected, None)
            return result
        # the part it adds and the parts it drops, written only if the record is
        parts = part_ops(w, ttl, durable)
        mine = "" if w.part is None else w.part[0][len(key) + 1 :]
        # write epochs owed (a write's): published in the same round trip
        carries = (c is not None and c.rider is not None) or (
            expected is not None and (split or (c is not None and c.guard is not None))
        )
        r = _epochs.ride(ctx, st.epochs) if carries else None
        extra = r.ops if r is not None else []
        rest: list[Any] = []
        # after the record's write: its parts, the record read back if the write did not
        # happen, the epochs owed
        tail = [*parts, Op("get", key, only_if=False), *extra]
        back: list[Any] | None = None  # what ``tail`` returned
        try:
            if c is not None and c.rider is not None:
                # with the keyed write's claim or completion; chained to a completion
                # (a result not recorded is settled as UNKNOWN), the record read back
                # when the swap does not happen
                first = (
                    Op("add", key, new, ttl_s=ttl, durable=durable)
                    if expected is None
                    else Op("swap", key, new, expected, ttl, durable=durable)
                )
                done, *back = yield from with_rider(ctx, c, [first, *tail], chained=True)
                ok = done is True
            elif expected is None:
                if parts:
                    ok, *_ = yield trip(store, [Op("add", key, new, ttl_s=ttl), *parts])
                else:
                    ok = yield Blocking(store.add, (key, new, ttl))
            elif c is not None and c.guard is not None:
                # a read served from an entry held here: settled only while the write
                # epochs are still those it was held under (``_epochs``), else ``Moved``
                guard, c.guard = c.guard, None
                swap = Op("swap", key, new, expected, ttl, only_if=True, durable=durable)
                _, done, *back = yield trip(store, [guard, swap, *tail])
                ok = done is True
            elif split:  # the record read back in the same round trip
                # the store's own method: a SQLite store runs it on the event loop (inline)
                # (with a rider, above, the idempotency record keeps the batch durable)
                swap = Op("swap", key, new, expected, ttl, durable=durable)
                done, *back = yield Blocking(
                    store.batch,  # type: ignore[attr-defined]  # in_one_trip: it has one
                    ([swap, *tail],),
                )
                ok = done is True
            else:
                ok = yield Blocking(store.swap, (key, expected, new, ttl))
            if back is not None:
                current, rest = back[len(parts)], back[len(parts) + 1 :]
            _epochs.landed(r, rest)
            r = None
            if not ok:
                # this write's part was not written, and another worker's write of the
                # same version may have been: never taken for the store's
                st.parts.pop(mine, None)
            if not ok and current is _UNREAD:
                current = yield Blocking(store.get, (key,))
            if not ok:
                current, parts_read = yield from read_parts(ctx, st, current)
        except Exception as exc:
            st.parts.pop(mine, None)  # written or not: read from the store if named
            _epochs.landed(r, None)
            if rounds == 1:
                _withdraw(ctx, st, expected, exc)
            _degrade(st, c, exc, expected, new)
            return result
        if ok:
            with st.lock:
                st.version = max(st.version, written)
                stopped = before[1] is None and st.stop is not None
                if stopped and st.epochs is not None and ctx.workspace is None:
                    # a session's own epochs record keeps its stop too (``_stop_kept_apart``)
                    kind = "loop" if isinstance(st.stop, LoopDetected) else "budget"
                    _epochs.owe_stop(st.epochs, [kind, st.stop.diagnostic, written])  # type: ignore[union-attr]
                unsynced = st.meter.unsynced
                for tool, n in sent.items():
                    left = unsynced.get(tool, 0) - n
                    if left > 0:
                        unsynced[tool] = left
                    else:
                        unsynced.pop(tool, None)
            return result
        with st.lock:
            # the record moved on: this change (and any other in flight here) is redone
            # on top of it; each retried change rebuilds its own part
            load(st, current, ctx.clock(), parts=parts_read)
        if rounds == 1:
            raise Moved
        if round_ >= 2:  # a hot session: spread the retries out
            yield Sleep(random.uniform(0, 0.001 * min(round_, 20)))
    if c is not None:
        c.flag("session_state_conflict: the shared record kept changing; local state used")
    return result


def _withdraw(ctx: Context, st: SessionState, expected: Any, exc: BaseException) -> NoReturn:
    """A change that must be confirmed by the store (``rounds=1``) and was not: undone (the
    state is the record's as last known again), and the caller decides anew."""
    with st.lock:
        load(st, expected, ctx.clock())
    raise Moved from exc


def _degrade(st: SessionState, c: Call | None, exc: BaseException, expected: Any, new: Any) -> None:
    with st.lock:
        if st.remote is new:
            st.remote = expected  # the next swap tries from what the store still holds
    text = f"session_state_local: {type(exc).__name__}: {describe(exc)}"[:300]
    if c is not None:
        c.flag(text)
    else:
        log.warning("%s (session %s)", scrub(text), st.session_id)


def _stop_kept_apart(ctx: Context, st: SessionState) -> None:
    """The session's stop as its epochs record keeps it: raised even when the session
    record was rolled back to a copy from before it (a worker that saw nothing else)."""
    ep = st.epochs
    kept = None if ep is None or ep.value is None or ctx.workspace else ep.value.get("s")
    if kept is None or st.stop is not None or st.version >= kept[2] or kept[0] not in STOPS:
        return
    log.warning(
        "session record rolled back (%s): version %d, older than version %d that holds "
        "its stop; the stop stands",
        st.session_id,
        st.version,
        kept[2],
    )
    st.stop = STOPS[kept[0]](kept[1])


def reserve(ctx: Context, st: SessionState, c: Call, seen: Any = None) -> Plan[bool]:
    """``take`` the step in the record before the call runs; True when it was taken under
    the cache epochs ``seen`` (``st.epoch`` when this worker looked the call up)."""
    attempts: list[bool] = []

    def change() -> None:
        attempts.append(seen is not None and st.epoch == seen)
        take(ctx, st, c)

    ctx.writes.claim_ahead(ctx, c)  # a keyed write claims in the same round trip
    try:
        yield from update(ctx, st, c, change)
    except BaseException:
        _unmark(st, c)
        yield from ctx.writes.unclaim(ctx, c)  # it does not run after all
        raise
    return attempts == [True]


def refresh(ctx: Context, st: SessionState, c: Call, seen: Any = None) -> Plan[bool]:
    """Before a call that runs in a session without call budgets: read the record (a get,
    cheaper than a swap) and raise its stop, if any; the step is taken when it settles.
    True when the cache epochs are still ``seen``. (With call budgets, ``reserve`` takes the
    step before the call runs, so concurrent calls never run past the budget.)"""
    entered = st.turns.entered
    floor = st.version
    key = ctx.session_key(st.session_id)
    ctx.writes.claim_ahead(ctx, c)  # a keyed write claims in the same round trip
    r = _epochs.ride(ctx, st.epochs)  # write epochs owed: published in the same round trip
    known = st.remote
    parts_read: dict[str, Any] | None = None
    # the record is sent back only if it is no longer the one this worker knows
    get = Op("get", key, expected=known)
    try:
        if c.rider is not None:
            rec, *rest = yield from with_rider(ctx, c, [get, *(r.ops if r else ())])
        elif r is not None or known is not None:
            rec, *rest = yield trip(ctx.store, [get, *(r.ops if r else ())])
        else:
            rec, rest = (yield Blocking(ctx.store.get, (key,))), []
    except Exception as exc:  # the call goes on with what this worker knows
        _epochs.landed(r, None)
        _degrade(st, c, exc, None, None)
        rec = st.remote
    else:
        _epochs.landed(r, rest)
    if rec is SAME:
        rec = known
    elif rec is not st.remote:
        try:
            rec, parts_read = yield from read_parts(ctx, st, rec)
        except Exception as exc:  # the call goes on with what this worker knows
            _degrade(st, c, exc, None, None)
            rec = st.remote
    try:
        with st.lock:
            # a write of another thread here in flight (or done) meanwhile: the record read
            # may be older than this state, which the next swap checks against the store
            if rec != st.remote and st.turns.quiet_since(entered):
                # None: expired meanwhile: starts afresh
                load(st, rec, ctx.clock(), floor, parts_read)
            unchanged = seen is not None and st.epoch == seen
            check_stop(ctx, st)
    except Stop:
        _unmark(st, c)
        yield from ctx.writes.unclaim(ctx, c)  # stopped: the write does not run
        raise
    return unchanged


def _unmark(st: SessionState, c: Call) -> None:
    """A write that will not run: the pending mark of its epochs goes (next publication)."""
    if c.epoch_token is not None and st.epochs is not None:
        _epochs.owe_finish(st.epochs, c, ())


def run_now(ctx: Context, st: SessionState, change: Callable[[], T]) -> T:
    """``update`` outside a call (model turns, user turns): performed at once."""
    return drive_sync(update(ctx, st, None, change), ctx.sleep or time.sleep)


def fetch(ctx: Context, st: SessionState) -> None:
    """Read the record when a handle opens (a run other workers may have moved on)."""
    floor = st.version
    known = st.remote
    parts_read: dict[str, Any] | None = None
    ops = [Op("get", ctx.session_key(st.session_id), expected=known)]
    if st.epochs is not None:  # the write epochs too, in the same round trip
        ops.append(Op("get", st.epochs.key))
    try:
        rec, *epochs = batch(ctx.store, ops)
        if rec is SAME:
            rec = known
        elif rec is not None:
            rec, parts_read = drive_sync(read_parts(ctx, st, rec), ctx.sleep or time.sleep)
        if epochs:
            st.epochs.seen(epochs[0])
    except Exception as exc:  # reads fail open: the first call tries again
        log.warning("store unavailable at session start (%s): %s", st.session_id, scrub(str(exc)))
        return
    with st.lock:
        if rec is not None:
            if rec != st.remote:  # unchanged since this worker's last step: nothing to read
                load(st, rec, ctx.clock(), floor, parts_read)
            _stop_kept_apart(ctx, st)
        elif st.remote is not None or "*" not in st.generation:
            load(st, None, ctx.clock())  # new, or expired meanwhile: the run starts afresh
