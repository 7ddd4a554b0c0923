"""The read path of the pipeline: a read's cache key, lookup, serving or correction,
single flight (in this process and across processes sharing the store), and the entry
it stores.

``begin`` (``_pipeline``) serves a read from an in-process store without a generator
round trip; everything that may wait on I/O is ``read``, driven by ``plan``. Store
operations here fail open (``store_op``): a store that fails leaves the read executed
and uncached, with a flag in the audit.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import _epochs
from ._attempts import execute
from ._call import Call, describe, recordable, result_text
from ._canonical import canonical_json, digest
from ._effects import Blocking, Plan, Sleep, Wait
from ._fingerprint import OnArgument
from ._spec import ToolSpec
from .audit import summarize
from .outcome import CACHED, CORRECTED, EXECUTED
from .stores._base import Op, dumps, loads

if TYPE_CHECKING:
    from ._context import Context
    from ._state import SessionState


def cache_key(ctx: Context, st: SessionState, c: Call) -> str:
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


def current(ctx: Context, c: Call) -> Plan[bool]:
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


def served(ctx: Context, st: SessionState, c: Call, entry: Any) -> bool:
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


def hold(ctx: Context, st: SessionState, c: Call, entry: Any) -> None:
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


def recall(ctx: Context, spec: ToolSpec, key: str) -> dict[str, Any] | None:
    """The entry held under ``key``, if still fresh: a read judged with it here is settled
    only by a swap of the record that finds the epochs unchanged (``settle_shared``)."""
    text = ctx.held.get(key)
    if text is None:
        return None
    entry: Any = loads(text)
    if not _fresh(ctx, spec, entry) or _age_clock(ctx)() - entry["t"] >= ctx.cache_gc_s:
        return None  # expired, or the store may have collected it: looked up again
    return entry  # type: ignore[no-any-return]


def read(ctx: Context, st: SessionState, c: Call) -> Plan[None]:
    spec = c.spec
    if not c.looked_up:  # a shared store, or a fingerprint to take: the lookup is I/O
        entry = None
        if spec.cacheable() and (yield from current(ctx, c)):
            entry = yield from lookup(ctx, st, c)
            hold(ctx, st, c, entry)
        if served(ctx, st, c, entry):
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
    stored, claim, flight = False, None, f"{c.cache_key}:flight"
    try:
        if leader and ctx.store.blocking:
            # other processes sharing the store: one of them computes, the others wait
            claim, entry = yield from _flight_across_processes(ctx, c, flight)
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
                # a cache entry only saves work: written without waiting for the disk, and
                # with the end of our flight's claim in the same round trip
                ttl = spec.ttl or ctx.cache_gc_s
                if ctx.store.blocking:
                    ops = [Op("set", c.cache_key, entry, ttl_s=ttl, durable=False)]
                    done = yield from _trip(ctx, c, ops + _ending(flight, claim))
                    stored, claim = done is not None and done[0] is True, None
                else:  # an in-process store: no trip through the driver
                    stored = direct_op(ctx, c, "set", c.cache_key, entry, ttl) is not None
                if stored:
                    hold(ctx, st, c, entry)
                else:
                    c.flag("not_cached")
            else:
                c.flag("too_large_to_cache")
    finally:
        if claim is not None:
            yield from _trip(ctx, c, _ending(flight, claim))
        if leader:
            shared_status = CACHED if c.status is EXECUTED else c.status
            ctx.flights.land(c.cache_key, (shared_status, _share(c, stored), c.error))


def _ending(flight: str, claim: dict[str, Any] | None) -> list[Op]:
    """The end of our claim of a flight: deleted only if it is still ours (a claim that
    outlived its time may have been taken over by another process, whose claim stays)."""
    if claim is None:
        return []
    return [Op("swap", flight, None, expected=claim, durable=False)]


def _trip(ctx: Context, c: Call, ops: list[Op]) -> Plan[list[Any] | None]:
    """``ops`` in one round trip, failing open: None (and a flag) when the store fails."""
    try:
        return (yield _epochs.trip(ctx.store, ops))  # type: ignore[no-any-return]
    except Exception as exc:
        flag_store_error(c, exc)
        return None


_FLIGHT_POLL_S = 0.02


def _flight_across_processes(
    ctx: Context, c: Call, key: str
) -> Plan[tuple[dict[str, Any] | None, dict[str, Any] | None]]:
    """(our claim when we compute, or the entry another process computed). Claims the
    flight key; a process that loses waits for the winner's cache entry, and computes
    itself if the winner gives up (its claim disappears without an entry) or outlives the
    tool timeout. The claim is written without waiting for the disk: it only spares work."""
    spec = c.spec
    limit = spec.timeout or 30.0
    claim = {"at": ctx.clock(), "by": uuid.uuid4().hex}
    won = yield from _trip(ctx, c, [Op("add", key, claim, ttl_s=limit + 1.0, durable=False)])
    if won is None:
        return None, None  # the store is down: reads fail open, we compute
    if won[0]:
        return claim, None
    waited = 0.0
    while waited < limit:
        yield Sleep(_FLIGHT_POLL_S)
        waited += _FLIGHT_POLL_S
        entry = yield from store_op(ctx, c, "get", c.cache_key)
        if _fresh(ctx, spec, entry):
            return None, entry
        if (yield from store_op(ctx, c, "get", key)) is None:
            # the winner finished, maybe just after our look: its entry, if it made one
            entry = yield from store_op(ctx, c, "get", c.cache_key)
            if _fresh(ctx, spec, entry):
                return None, entry
            break  # it finished without a cacheable result
    c.flag("flight_wait_gave_up")
    return None, None


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


def lookup(ctx: Context, st: SessionState, c: Call) -> Plan[Any]:
    """A cacheable read's entry. With epochs published apart from the record, they are read
    in the same round trip, and the entry is that of the key they make (a second trip
    only when they changed). None, and ``c.no_store``, while a write touching the read's
    epochs is pending or this process owes a publication: neither served nor stored."""
    ep = st.epochs
    if ep is None or c.spec.scope != "session":
        return (yield from store_op(ctx, c, "get", cache_key(ctx, st, c)))
    entry = key = None
    try:
        for _ in range(3):
            key = cache_key(ctx, st, c)
            entry, value = yield _epochs.trip(ctx.store, [Op("get", key), Op("get", ep.key)])
            ep.seen(value)
            if value is None:  # no write published yet, or the record expired
                yield from _epochs.create(ctx, ep)
            elif cache_key(ctx, st, c) == key:
                break
    except Exception as exc:  # reads fail open: executed, not cached
        flag_store_error(c, exc)
        key = None
    names = _epochs.read_names(c.spec.name, resources_of(c.spec, c.args))
    if ep.value is None or c.cache_key != key or not ep.open_for(names, ctx.clock()):
        c.no_store = True
        return None
    return entry


def guarded(ctx: Context, st: SessionState, c: Call, entry: Any) -> Any:
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
