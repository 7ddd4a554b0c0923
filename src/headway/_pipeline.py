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

Attempts (timeouts, retries, breaker) are in ``_attempts``; settling is in ``_settle``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import _epochs
from ._attempts import execute
from ._call import Call, describe, identity, recordable, result_text
from ._canonical import canonical_json, digest
from ._effects import Blocking, Plan, Sleep, Wait
from ._fingerprint import OnArgument
from ._settle import bump, settle, settle_shared
from ._shared import Moved, refresh, reserve
from ._spec import ToolSpec
from ._steps import check_stop, counts_calls, take
from .audit import summarize
from .errors import ArgumentError
from .idempotency import flush, step_key, unkeyed_key, with_rider
from .outcome import CACHED, CORRECTED, EXECUTED, REPLAYED, UNKNOWN, Outcome, error_info
from .stores._base import Op, check_key, dumps, loads

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
        if cacheable:  # direct_op()'s fail-open read, inline: its frame is 2% of a cache hit
            try:
                entry = ctx.store.get(_cache_key(ctx, st, c))
            except Exception as exc:
                flag_store_error(c, exc)
        if _served(ctx, st, c, entry):
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
        yield from _read(ctx, st, c)
    else:
        yield from _write(ctx, st, c)
    return settle(ctx, st, c)


def _shared_plan(ctx: Context, st: SessionState, c: Call) -> Plan[Outcome]:
    """The session's state is a record in the store: take the step, run, settle in it.

    A cached read is first looked up under the cache epochs this worker last saw; served
    (or corrected), it takes and settles its step in one swap, which succeeds only if the
    epochs are still those (no other worker changed the record, no write here bumped
    them; other threads' steps here do not count): two round trips, not three. When this
    worker holds the entry (``_recall``), the lookup is not made: one round trip. A swap
    that fails, or that the store does not answer, sends the call down the full path."""
    # the cache epochs seen: other threads here taking steps move the record, not them
    seen = st.epoch
    optimistic = c.effect == "read" and not c.early and st.remote is not None and ctx.enforce
    if optimistic and c.spec.cacheable() and (yield from _current(ctx, c)):
        key = _cache_key(ctx, st, c)
        entry = _recall(ctx, c.spec, key)
        if entry is not None:
            entry = _guarded(ctx, st, c, entry)
        if entry is None:
            entry = yield from _lookup(ctx, st, c)
            _hold(ctx, st, c, entry)
        if _served(ctx, st, c, entry):
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
        yield from (_read if c.effect == "read" else _write)(ctx, st, c)
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


def _cache_key(ctx: Context, st: SessionState, c: Call) -> str:
    spec = c.spec
    # an in-process store keys short arguments by their text; a shared one by their sha256
    args_id = c.args_digest if ctx.store.blocking else c.args_id
    # the prefix changes only when a write bumps the epochs: remember it until then
    ep = st.epochs
    # read before the generations (invalidate() bumps them first)
    epoch: Any = st.epoch if ep is None else (st.epoch, ep.serial)
    if spec.resources is None:
        memo = st.key_prefixes.get(spec.name)
        if memo is not None and memo[0] is spec and memo[1] == epoch:
            c.cache_key = memo[2] + args_id
            if c.currency is not None:
                c.cache_key += "~" + c.currency
            return c.cache_key
    scope = (
        "global"
        if spec.scope == "global"
        else st.session_id
        + "#"
        + _generation(
            st.generation if ep is None else ep.generation(),
            spec.name,
            resources_of(spec, c.args),
        )
    )
    prefix = f"{ctx.namespace}:cache:{{{scope}}}:{spec.name}:{spec.version}:"
    if spec.resources is None:
        st.key_prefixes[spec.name] = (spec, epoch, prefix)
    c.cache_key = prefix + args_id
    if c.currency is not None:  # stored and found under its fingerprint only (``validate``)
        c.cache_key += "~" + c.currency
    return c.cache_key


def _current(ctx: Context, c: Call) -> Plan[bool]:
    """Whether the read may be looked up in its cache: always, unless its spec has a
    ``validate`` fingerprint that cannot be taken (the function raised, returned None or
    something JSON cannot hold): then the state of what it reads is unknown, nothing is
    served, and its result is not stored. Taken once per call, before the tool runs."""
    spec = c.spec
    if spec.fingerprint is None:
        return True
    if not c.validated:
        c.validated = True
        try:
            # the built-ins look at a local file: no thread needed; a function may not
            inline = isinstance(spec.fingerprint, OnArgument)
            value = yield Blocking(spec.fingerprint, (c.args,), not inline)
            if value is None:
                c.flag("not_current: no fingerprint")
            else:
                c.currency = digest(canonical_json(value))[:32]
        except Exception as exc:
            c.flag(f"not_current: validate raised {type(exc).__name__}: {describe(exc)}"[:300])
    return c.currency is not None


def _age_clock(ctx: Context) -> Callable[[], float]:
    """The clock of a cache entry's time: monotonic in this process; the wall clock in a
    shared store (the store's own TTL bounds it too)."""
    return ctx.clock if ctx.store.blocking else ctx.timer


def _fresh(ctx: Context, spec: ToolSpec, entry: Any) -> bool:
    """A cache entry that may be served (a TTL entry within its TTL; an entry from the
    future, written before the clock was set back, is stale)."""
    if type(entry) is not dict or "v" not in entry:
        return False  # absent, or not a record headway wrote: never served, never raised
    if spec.ttl is None:
        return True
    t = entry.get("t")
    if not (type(t) is float or type(t) is int):
        return False
    age = _age_clock(ctx)() - t
    return 0 <= age < spec.ttl


def _served(ctx: Context, st: SessionState, c: Call, entry: Any) -> bool:
    """Serve a read from its cache entry, or correct it (§4.2); True when that settles it."""
    spec = c.spec
    fresh = None if entry is None else entry if _fresh(ctx, spec, entry) else None
    # a TTL read whose entry expired is a fresh look, not a repeat
    monitor = st.monitor if c.agent is None else st.monitor_of(c.agent)
    if monitor.versions.get(spec.name) != spec.version:
        with st.lock:  # a new version is a new epoch: the old one's steps correct nothing
            monitor.adopt(spec.name, spec.version)
    if fresh is not None and ctx.enforce and st.in_batch(c.key):
        # an identical read in the model's turn that served this one (a parallel batch, §1)
        # that began after its leader ended: a follower all the same, never a repeat
        c.coalesced = True
    elif (fresh is not None or not spec.ttl) and monitor.may_correct(c.key):
        with st.lock:
            shown = summarize(c.canon, spec.redact_names, 300)  # never a secret in a correction
            correction = monitor.before(spec, c.key, "read", shown, fresh)
        if correction is not None:
            if ctx.enforce:
                c.status, c.correction = CORRECTED, correction
                return True
            c.would = "correct"
    if fresh is not None:
        if ctx.enforce:
            c.status, c.value, c.cache_hit = CACHED, fresh["v"], True
            c.result_digest, c.result_size = fresh.get("d"), fresh.get("n")
            return True
        c.would = c.would or "cache"
    return False


HELD = 512  # cache entries a governor holds for its shared sessions' reads (``Context.held``)
_HELD_CHARS = 16_384  # the largest result held


def _hold(ctx: Context, st: SessionState, c: Call, entry: Any) -> None:
    """Keep a cache entry this worker stored or served for a shared session's read. An
    entry never changes under its key, which names the session's cache epochs (another
    worker stores one only when it finds none, or none fresh): while the record still
    holds those epochs, the entry held is the one the store holds. Session-scoped
    entries only (a global entry's key names no epochs); kept as their stored text, so
    every call serving one gets its own copy."""
    if not st.shared or c.spec.scope != "session" or not _fresh(ctx, c.spec, entry):
        return
    size, t = entry.get("n"), entry.get("t")
    timed = type(t) is float or type(t) is int
    if type(size) is int and size <= _HELD_CHARS and timed and c.cache_key is not None:
        ctx.held.put(c.cache_key, dumps(entry))  # JSON: the store stored or returned it


def _recall(ctx: Context, spec: ToolSpec, key: str) -> dict[str, Any] | None:
    """The entry held under ``key``, if still fresh: a read judged with it here is settled
    only by a swap of the record that finds the epochs unchanged (``settle_shared``)."""
    text = ctx.held.get(key)
    if text is None:
        return None
    entry: Any = loads(text)
    if not _fresh(ctx, spec, entry) or _age_clock(ctx)() - entry["t"] >= ctx.cache_gc_s:
        return None  # expired, or the store may have collected it: looked up again
    return entry  # type: ignore[no-any-return]


def _read(ctx: Context, st: SessionState, c: Call) -> Plan[None]:
    spec = c.spec
    if not c.looked_up:  # a shared store, or a fingerprint to take: the lookup is I/O
        entry = None
        if spec.cacheable() and (yield from _current(ctx, c)):
            entry = yield from _lookup(ctx, st, c)
            _hold(ctx, st, c, entry)
        if _served(ctx, st, c, entry):
            return
    if c.cache_key is None or c.no_store:
        yield from execute(ctx, st, c)
        recordable(c)
        return
    # shadow mode runs every call as if headway were absent: no coalescing
    leader, future = ctx.flights.join(c.cache_key) if ctx.enforce else (False, None)
    if future is not None and not leader:
        try:
            shared = yield Wait(future, spec.timeout)
        except TimeoutError:
            shared = None  # the leader is slow or hung: look for ourselves
        if shared is not None:
            c.coalesced = True
            c.status, c.value, c.error = shared[0], _copy(shared[1]), shared[2]
            c.cache_hit = c.status is CACHED
            return
    stored = owns_flight = False
    try:
        if leader and ctx.store.blocking:
            # other processes sharing the store: one of them computes, the others wait
            owns_flight, entry = yield from _flight_across_processes(ctx, c)
            if entry is not None:
                c.status, c.value, c.cache_hit, c.coalesced = CACHED, entry["v"], True, True
                c.result_digest, c.result_size = entry.get("d"), entry.get("n")
                return
        yield from execute(ctx, st, c)
        if c.status is EXECUTED and recordable(c):
            c.text = c.text if c.text is not None else result_text(c.value)
            if len(c.text) <= ctx.max_cached_bytes:
                c.result_digest, c.result_size = digest(c.text), len(c.text)
                entry = {
                    "v": c.value,
                    "t": _age_clock(ctx)(),
                    "d": c.result_digest,
                    "n": c.result_size,
                }
                ok = yield from store_op(
                    ctx, c, "set", c.cache_key, entry, spec.ttl or ctx.cache_gc_s
                )
                stored = ok is not None
                if stored:
                    _hold(ctx, st, c, entry)
                else:
                    c.flag("not_cached")
            else:
                c.flag("too_large_to_cache")
    finally:
        if owns_flight:
            yield from store_op(ctx, c, "delete", c.cache_key + ":flight")
        if leader:
            shared_status = CACHED if c.status is EXECUTED else c.status
            ctx.flights.land(c.cache_key, (shared_status, _share(c, stored), c.error))


_FLIGHT_POLL_S = 0.02


def _flight_across_processes(ctx: Context, c: Call) -> Plan[tuple[bool, dict[str, Any] | None]]:
    """(we compute, or the entry another process computed). Claims the flight key; a
    process that loses waits for the winner's cache entry, and computes itself if the
    winner gives up (its claim disappears without an entry) or outlives the tool timeout."""
    spec = c.spec
    limit = spec.timeout or 30.0
    key = f"{c.cache_key}:flight"
    won = yield from store_op(ctx, c, "add", key, {"at": ctx.clock()}, limit + 1.0)
    if won is None or won:
        return bool(won), None  # we compute (or the store is down: reads fail open)
    waited = 0.0
    while waited < limit:
        yield Sleep(_FLIGHT_POLL_S)
        waited += _FLIGHT_POLL_S
        entry = yield from store_op(ctx, c, "get", c.cache_key)
        if _fresh(ctx, spec, entry):
            return False, entry
        if (yield from store_op(ctx, c, "get", key)) is None:
            # the winner finished, maybe just after our look: its entry, if it made one
            entry = yield from store_op(ctx, c, "get", c.cache_key)
            if _fresh(ctx, spec, entry):
                return False, entry
            break  # it finished without a cacheable result
    c.flag("flight_wait_gave_up")
    return False, None


def _share(c: Call, stored: bool) -> Any:
    """What followers get: a copy through the stored JSON text when the result is JSON (so
    no caller can change another's result), else the object itself."""
    if c.status is not EXECUTED:
        return None
    if stored and c.text is not None and not isinstance(c.value, str):
        return ("json", c.text)
    return ("raw", c.value)


def _copy(shared: Any) -> Any:
    if shared is None:
        return None
    kind, payload = shared
    return json.loads(payload) if kind == "json" else payload


def resources_of(spec: ToolSpec, args: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The resources a call reads or touches, or None when the spec does not say (or the
    function fails: unknown means everything)."""
    declared = spec.resources
    if declared is None:
        return None
    try:
        if callable(declared):
            found = declared(args)
            return None if found is None else tuple(sorted({str(r) for r in found}))
        return tuple(sorted({str(args[name]) for name in declared if name in args}))
    except Exception:
        return None


def _generation(gen: dict[str, int], tool: str, resources: tuple[str, ...] | None) -> str:
    """The cache epoch of a read. Without resources it changes on any write; with
    resources, on writes that name one of them or that name nothing."""
    if resources is None:
        return f"{gen.get('any', 0)}.{gen.get('*', 0)}.{gen.get(tool, 0)}"
    parts = ".".join(str(gen.get("r:" + r, 0)) for r in resources)
    return f"{gen.get('*', 0)}.{gen.get(tool, 0)}:{parts}"


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


def store_op(ctx: Context, c: Call, op: str, *args: Any) -> Plan[Any]:
    """A store operation that fails open: None (and a flag in the audit) when the store fails."""
    if not ctx.store.blocking:
        return direct_op(ctx, c, op, *args)  # an in-process store: no trip through the driver
    try:
        result = yield Blocking(getattr(ctx.store, op), args)
    except Exception as exc:
        flag_store_error(c, exc)
        return None
    return True if result is None and op == "set" else result


def direct_op(ctx: Context, c: Call, op: str, *args: Any) -> Any:
    """``store_op`` for an in-process store, called directly."""
    try:
        result = getattr(ctx.store, op)(*args)
    except Exception as exc:
        flag_store_error(c, exc)
        return None
    return True if result is None and op == "set" else result


def flag_store_error(c: Call, exc: BaseException) -> None:
    c.flag(f"store_error: {type(exc).__name__}: {describe(exc)}"[:300])


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


def _lookup(ctx: Context, st: SessionState, c: Call) -> Plan[Any]:
    """A cacheable read's entry. With epochs published apart from the record, they are read
    in the same round trip, and the entry is that of the key they make (a second trip
    only when they changed). None, and ``c.no_store``, while a write touching the read's
    epochs is pending or this process owes a publication: neither served nor stored."""
    ep = st.epochs
    if ep is None or c.spec.scope != "session":
        return (yield from store_op(ctx, c, "get", _cache_key(ctx, st, c)))
    entry = key = None
    try:
        for _ in range(3):
            key = _cache_key(ctx, st, c)
            entry, value = yield _epochs.trip(ctx.store, [Op("get", key), Op("get", ep.key)])
            ep.seen(value)
            if value is None:  # no write published yet, or the record expired
                yield from _epochs.create(ctx, ep)
            elif _cache_key(ctx, st, c) == key:
                break
    except Exception as exc:  # reads fail open: executed, not cached
        flag_store_error(c, exc)
        key = None
    names = _epochs.read_names(c.spec.name, resources_of(c.spec, c.args))
    if ep.value is None or c.cache_key != key or not ep.open_for(names, ctx.clock()):
        c.no_store = True
        return None
    return entry


def _guarded(ctx: Context, st: SessionState, c: Call, entry: Any) -> Any:
    """A held entry served only if the epochs record is still the one it was held under:
    the settling swap of the record is guarded by it (``_shared``). None: look it up."""
    ep = st.epochs
    if ep is None or c.spec.scope != "session":
        return entry
    names = _epochs.read_names(c.spec.name, resources_of(c.spec, c.args))
    if ep.value is None or not ep.open_for(names, ctx.clock()):
        return None
    c.guard = Op("swap", ep.key, ep.value, ep.value, ctx.cache_gc_s, durable=False)
    return entry


def _published(ctx: Context, st: SessionState, c: Call, names: tuple[str, ...]) -> Plan[None]:
    """A write's second publication: with the step's record when a shared session settles
    it (one round trip for both), else now."""
    if st.shared:
        _epochs.owe_finish(st.epochs, c, names)
    else:
        yield from _epochs.finish(ctx, st.epochs, c, names)
