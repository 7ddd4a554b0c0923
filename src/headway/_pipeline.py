"""The decision pipeline: what happens to one call, top to bottom.

``plan()`` is a generator and does no I/O: store operations, tool attempts, sleeps and
waits are yielded as effects (``_effects``) that the sync or async driver performs.

    stopped? -> spec -> canonical arguments -> read or write
    read:  cache lookup -> correction? (repeat, cycle) -> cached? -> single-flight -> attempts -> cache
    write: keyed? -> idempotency (claim, replay, reconcile) -> attempts -> record
           unkeyed -> UNKNOWN rule -> attempts -> invalidate the session's reads
    settle: budgets, progress mark, signals, escalation, stop, audit -> Outcome
    a session shared by workers (``_shared``): the step is taken in its record in the store
           before the call runs, and settled in it (a cached read: both in one swap)

The read path is ``_reading``; attempts (timeouts, retries, breaker) are ``_attempts``;
taking a step is ``_steps``; settling is ``_settle``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import _epochs
from ._attempts import execute
from ._call import Call, identity, recordable
from ._canonical import canonical_json
from ._effects import Plan
from ._reading import (
    cache_key,
    current,
    flag_store_error,
    guarded,
    hold,
    lookup,
    read,
    recall,
    resources_of,
    served,
    store_op,
)
from ._settle import bump, settle, settle_shared
from ._shared import Moved, refresh, reserve
from ._spec import ToolSpec
from ._steps import check_stop, counts_calls, take
from .errors import ArgumentError
from .idempotency import flush, step_key, unkeyed_key, with_rider
from .outcome import EXECUTED, REPLAYED, UNKNOWN, Outcome, error_info
from .stores._base import Op, check_key

if TYPE_CHECKING:
    from ._context import Context
    from ._state import SessionState

# -- the pipeline ----------------------------------------------------------------------


def begin(
    ctx: Context,
    st: SessionState,
    name: str,
    args: Any,
    idempotency_key: str | None = None,
    step_id: str | None = None,
    run: Any = None,
    agent: str | None = None,
    call_id: str | None = None,
) -> Call | Outcome:
    """The part of a call that needs no I/O: checks, keys, and a read served from an
    in-process cache or corrected. Returns the Outcome when that settles the call, else
    the Call for ``plan()``: a cache hit costs no generator round trip."""
    now = ctx.clock()
    if st.stop is not None or now >= st.meter.deadline:
        check_stop(ctx, st, now)
    if type(name) is not str:
        raise ArgumentError(f"the tool name must be a string, not {type(name).__name__}", "name")
    if type(args) is not dict and not isinstance(args, Mapping):
        raise ArgumentError(
            f"arguments must be a mapping of names to values, not {type(args).__name__}"
        )
    canon = canonical_json(args)
    spec = ctx.specs.get(name)
    if spec is None and run is not None:
        spec = ctx.declare(name)  # a tool the framework runs, undeclared: a write
    c = _new_call(ctx, spec, name, args, canon, now)
    if agent is not None:
        if not isinstance(agent, str) or not agent:
            raise ArgumentError(f"agent must be a non-empty string, not {agent!r}", "agent")
        c.agent = agent
    if call_id is not None:
        if type(call_id) is not str:
            raise ArgumentError(
                f"call_id must be a string, not {type(call_id).__name__}", "call_id"
            )
        c.call_id = call_id
    if run is not None:
        c.fn, c.fn_async = run, inspect.iscoroutinefunction(run)
    elif c.fn is None and spec is not None:
        c.error = error_info(
            "no_function",
            f"{name!r} is declared without a function and this call gave none",
            retryable=False,
            hint="Pass the tool's runner: session.call(name, args, run=...).",
        )
        return _early(ctx, st, c)
    if spec is None:
        known = ", ".join(sorted(ctx.specs)[:30])
        c.error = error_info(
            "unknown_tool",
            f"there is no tool named {name!r}",
            retryable=False,
            hint=f"Known tools: {known}.",
        )
        return _early(ctx, st, c)
    if idempotency_key is not None or step_id is not None:
        for label, value in (("idempotency_key", idempotency_key), ("step_id", step_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ArgumentError(f"{label} must be a non-empty string, not {value!r}", label)
        if idempotency_key is not None:
            check_key("idempotency_key", idempotency_key)
        if c.effect == "read":
            c.flag("key_ignored_on_read")
        elif idempotency_key is not None:
            c.idem_key = idempotency_key
        else:
            c.step_keyed = True
            c.idem_key = step_key(ctx.namespace, st.session_id, str(step_id))
            if st.unknown_steps:  # §5.4: an identical write left UNKNOWN is being retried
                c.idem_key = st.unknown_steps.get(unkeyed_key(st, c), c.idem_key)
    if st.shared or st.epochs is not None:
        return c  # the session's state (or its epochs) in the store: the rest is in plan()
    cacheable = spec.cacheable()
    # a fingerprint (``validate``) is I/O: looked at in plan(), by the driver
    if c.effect == "read" and not (cacheable and (ctx.store.blocking or spec.validate)):
        entry = None
        if cacheable:  # direct_op()'s fail-open read, inline: 2 frames less (bench/overhead.py)
            try:
                entry = ctx.store.get(cache_key(ctx, st, c))
            except Exception as exc:
                flag_store_error(c, exc)
        if served(ctx, st, c, entry):
            return settle(ctx, st, c)
        c.looked_up = True
    return c


def _early(ctx: Context, st: SessionState, c: Call) -> Call | Outcome:
    """A call settled without running (no such tool, no function)."""
    if st.shared:
        c.early = True  # still takes its step in the session's record: plan() settles it
        return c
    return settle(ctx, st, c)


def plan(ctx: Context, st: SessionState, c: Call) -> Plan[Outcome]:
    """The rest of a call begun by ``begin()``: everything that may wait on I/O."""
    if st.epochs is not None and st.epochs.owed and not st.shared:
        # an invalidation not published yet (a shared session's rides with its record's)
        yield from _epochs.publish(ctx, st.epochs, c)
    if st.shared:
        return (yield from _shared_plan(ctx, st, c))
    if counts_calls(st):
        # the step is taken before the tool runs, as in a shared session: a model's
        # parallel calls never run past a call budget (the one that reaches it runs)
        with st.lock:
            take(ctx, st, c)
    if c.effect == "read":
        yield from read(ctx, st, c)
    else:
        yield from _write(ctx, st, c)
    return settle(ctx, st, c)


def _shared_plan(ctx: Context, st: SessionState, c: Call) -> Plan[Outcome]:
    """The session's state is a record in the store: take the step, run, settle in it.

    A cached read is first looked up under the cache epochs this worker last saw; served
    (or corrected), it takes and settles its step in one swap, which succeeds only if the
    epochs are still those (no other worker changed the record, no write here bumped
    them; other threads' steps here do not count): two round trips, not three. When this
    worker holds the entry (``recall``), the lookup is not made: one round trip. A swap
    that fails, or that the store does not answer, sends the call down the full path."""
    # the cache epochs seen: other threads here taking steps move the record, not them
    seen = st.epoch
    optimistic = c.effect == "read" and not c.early and st.remote is not None and ctx.enforce
    if optimistic and c.spec.cacheable() and (yield from current(ctx, c)):
        key = cache_key(ctx, st, c)
        entry = recall(ctx, c.spec, key)
        if entry is not None:
            entry = guarded(ctx, st, c, entry)
        if entry is None:
            entry = yield from lookup(ctx, st, c)
            hold(ctx, st, c, entry)
        if served(ctx, st, c, entry):
            try:
                return (yield from settle_shared(ctx, st, c, seen))
            except Moved:
                c = _again(ctx, c)  # the record moved on: the full path, from the start
        else:
            c.looked_up, c.guard = True, None
    ep = st.epochs
    if c.effect == "write" and not c.early and ctx.enforce and ep is not None and _publishes(ctx):
        # marked pending with the record's read (or reservation), before the write runs
        _epochs.owe_start(ctx, ep, c, _bumped(c))
    take = reserve if counts_calls(st) else refresh
    if not (yield from take(ctx, st, c, seen)):
        c.looked_up = False  # looked up under epochs that may be older: look again
    if not c.early:
        yield from (read if c.effect == "read" else _write)(ctx, st, c)
    return (yield from settle_shared(ctx, st, c))


def _again(ctx: Context, c: Call) -> Call:
    """The call as ``begin()`` made it, without what an abandoned decision added."""
    fresh = _new_call(ctx, c.spec, c.spec.name, c.args, c.canon, c.started)
    fresh.agent, fresh.fn, fresh.fn_async, fresh.flags = c.agent, c.fn, c.fn_async, c.flags
    return fresh


_MAY_HAVE_CHANGED = frozenset((EXECUTED, REPLAYED, UNKNOWN))


def _write(ctx: Context, st: SessionState, c: Call) -> Plan[None]:
    """A write: the key's state machine (``idempotency.Writes``) decides, the tool runs
    when it hands out a ticket, and any outcome that may reflect a change (executed,
    replayed, unknown) makes the session's cached reads stale."""
    writes = ctx.writes
    if not ctx.enforce:  # shadow mode: run as if headway were absent, note what it would do
        yield from writes.shadow(ctx, c)
        yield from execute(ctx, st, c)
        yield from writes.shadow_record(ctx, c)
    else:
        ticket = yield from writes.before(ctx, st, c)
        if ticket is not None:
            if ticket is not True:
                c.held = ticket
            ep = st.epochs
            if ep is not None and _publishes(ctx):  # other workers' reads stop being served
                if c.epoch_token is None:
                    yield from _epochs.start(ctx, ep, c, _bumped(c))
                elif ep.owed:  # its mark did not ride with the record's read: now
                    yield from _epochs.publish(ctx, ep, c)
            try:
                yield from execute(ctx, st, c)
            except BaseException:
                if ep is not None and c.epoch_token is not None:
                    _epochs.owe_finish(ep, c, _bumped(c))  # published by the next call here
                yield from writes.interrupted(ctx, c, ticket)
                raise
            yield from writes.after(ctx, st, c, ticket)
    recordable(c)  # an unkeyed write whose result cannot be written: an ERROR that says it ran
    if c.executed or c.status in _MAY_HAVE_CHANGED:
        yield from invalidate(ctx, st, c)
    elif c.epoch_token is not None:  # it did not run after all: its pending mark goes
        yield from _published(ctx, st, c, ())


def _new_call(
    ctx: Context,
    spec: ToolSpec | None,
    name: str,
    args: Mapping[str, Any],
    canon: str,
    now: float,
) -> Call:
    args_id = identity(canon)
    ignored = ctx.ignore_fields
    if spec is not None and spec.ignore_fields:
        ignored += spec.ignore_fields
    if ignored and any(f in args for f in ignored):
        rest = canonical_json({k: v for k, v in args.items() if k not in ignored})
        key = name + ":" + identity(rest)
    else:
        key = name + ":" + args_id
    if spec is None:
        placeholder = ToolSpec(name=name, fn=_unknown)
        return Call(placeholder, args, canon, args_id, key, "write", now, known=False)
    effect = spec.effect if type(spec.effect) is str else spec.effect_for(args)
    return Call(spec, args, canon, args_id, key, effect, now)


def _unknown(**_: Any) -> None:
    return None


def invalidate(ctx: Context, st: SessionState, c: Call) -> Plan[None]:
    """A write ran (or may have): the session's cached reads it may affect are stale.

    ``invalidates=[tools]`` narrows it to those tools; ``resources=`` to the reads of those
    resources (reads that declare none are always invalidated); otherwise everything.
    A keyed write's completion (``c.rider``) is sent with the new generation: one round
    trip; a session shared by workers writes both with the step's record instead.
    """
    ep = st.epochs
    if not (ep is not None and _publishes(ctx)) and not ctx.has_session_cache():
        if c.rider is not None and not st.shared:
            yield from flush(ctx, c)
        return  # no tool caches per session: nothing to invalidate, no store round trip
    names = _bumped(c)
    if ep is not None:  # published apart from the session record (``_epochs``)
        yield from _published(ctx, st, c, names)
        if st.shared:
            c.bumps = names  # in the record too, for the workers of earlier versions
        elif c.rider is not None:
            yield from flush(ctx, c)
        return
    if st.shared:
        c.bumps = names  # written with the step's record when it settles: no round trip
        return
    with st.lock:
        bump(st, names)
        snapshot = dict(st.generation)
    key = ctx.generation_key(st.session_id)
    if c.rider is None:
        if not st.transient:  # else no run reads them back: a store write saved
            yield from store_op(ctx, c, "set", key, snapshot, ctx.cache_gc_s)
        return
    try:
        yield from with_rider(ctx, c, [Op("set", key, snapshot, ttl_s=ctx.cache_gc_s)])
    except Exception as exc:  # reads fail open; the rider has recorded its own failure
        flag_store_error(c, exc)


def _publishes(ctx: Context) -> bool:
    """Whether writes publish their epochs: some tool caches per session here, or other
    governors of the workspace may."""
    return ctx.workspace is not None or ctx.has_session_cache()


def _bumped(c: Call) -> tuple[str, ...]:
    """The cache epochs a write makes stale (``invalidate``)."""
    if c.spec.invalidates:
        return c.spec.invalidates
    touched = resources_of(c.spec, c.args)
    if touched:
        return ("any", *("r:" + r for r in touched))
    return ("any", "*")


def _published(ctx: Context, st: SessionState, c: Call, names: tuple[str, ...]) -> Plan[None]:
    """A write's second publication: with the step's record when a shared session settles
    it (one round trip for both), else now."""
    if st.shared:
        _epochs.owe_finish(st.epochs, c, names)
    else:
        yield from _epochs.finish(ctx, st.epochs, c, names)
