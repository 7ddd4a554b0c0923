"""The decision pipeline: what happens to one call, top to bottom.

``plan()`` is a generator and does no I/O: store operations, tool attempts, sleeps and
waits are yielded as effects (``_effects``) that the sync or async driver performs.

    stopped? -> spec -> canonical arguments -> read or write
    read:  cache lookup -> correction? (repeat, cycle) -> cached? -> single-flight -> attempts -> cache
    write: keyed? -> idempotency (claim, replay, reconcile) -> attempts -> record
           unkeyed -> UNKNOWN rule -> attempts -> invalidate the session's reads
    settle: budgets, progress mark, signals, escalation, stop, audit -> Outcome
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import breaker as brk
from ._canonical import canonical_json, digest
from ._effects import Attempt, AttemptTimeout, Blocking, Plan, Sleep, Wait
from ._spec import ToolSpec
from .audit import AuditRecord, args_field
from .budgets import diagnostic
from .errors import ArgumentError, BudgetExceeded, LoopDetected, Stop
from .idempotency import step_key
from .outcome import Outcome, Status, error_info
from .retry import (
    DEFAULT_RETRY,
    NO_RETRY,
    NON_RETRYABLE,
    RETRYABLE,
    Classification,
    Retry,
    default_classify,
)

if TYPE_CHECKING:
    from ._session import Governor
    from ._state import SessionState

_DIGITS = re.compile(r"\d+")


class Call:
    """What the pipeline knows and decided about one call (becomes the audit record).

    A plain class with class-level defaults, not a dataclass: it is built on every call,
    and only the fields a call actually sets are assigned.
    """

    status: Status = Status.ERROR
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
    idem_state: str | None = None
    reconcile_key: str | None = None
    reconcile_s: float | None = None  # time from UNKNOWN to resolution
    breaker: str = "closed"
    flags: tuple[str, ...] = ()
    text: str | None = None  # the result as text (computed once)
    result_digest: str | None = None
    result_size: int | None = None
    late: Any = None  # an attempt abandoned after a timeout, still running

    def __init__(
        self,
        spec: ToolSpec,
        args: Mapping[str, Any],
        canon: str,
        args_digest: str,
        key: str,
        effect: str,
        started: float,
        known: bool = True,
    ) -> None:
        self.spec = spec
        self.args = args
        self.canon = canon
        self.args_digest = args_digest
        self.key = key  # detector key: tool + arguments without ignored fields
        self.effect = effect
        self.started = started
        self.known = known  # False for a tool name that is not registered

    def flag(self, text: str) -> None:
        """Note something for the audit record's ``flags``."""
        self.flags = (*self.flags, text)


def result_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


# -- the pipeline ----------------------------------------------------------------------


def plan(
    gov: Governor,
    st: SessionState,
    name: str,
    args: Any,
    idempotency_key: str | None = None,
    step_id: str | None = None,
) -> Plan[Outcome]:
    check_stop(gov, st)
    if type(args) is not dict and not isinstance(args, Mapping):
        raise ArgumentError(
            f"arguments must be a mapping of names to values, not {type(args).__name__}"
        )
    canon = canonical_json(args)
    spec = gov.spec(name)
    c = _new_call(gov, spec, name, args, canon)
    if spec is None:
        known = ", ".join(sorted(gov.tools())[:30])
        c.error = error_info(
            "unknown_tool",
            f"there is no tool named {name!r}",
            retryable=False,
            hint=f"Known tools: {known}.",
        )
        return settle(gov, st, c)
    if idempotency_key is not None or step_id is not None:
        for label, value in (("idempotency_key", idempotency_key), ("step_id", step_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ArgumentError(f"{label} must be a non-empty string, not {value!r}", label)
        if c.effect == "read":
            c.flag("key_ignored_on_read")
        else:
            c.idem_key = idempotency_key or step_key(gov.namespace, st.session_id, str(step_id))
    if c.effect == "read":
        yield from _read(gov, st, c)
    else:
        yield from gov.writes.run(gov, st, c)
    return settle(gov, st, c)


def _new_call(
    gov: Governor, spec: ToolSpec | None, name: str, args: Mapping[str, Any], canon: str
) -> Call:
    args_digest = digest(canon)
    key = name + ":" + args_digest
    ignored = gov.ignore_fields + spec.ignore_fields if spec else gov.ignore_fields
    if ignored and any(f in args for f in ignored):
        key = (
            name + ":" + digest(canonical_json({k: v for k, v in args.items() if k not in ignored}))
        )
    if spec is None:
        return Call(
            ToolSpec(name=name, fn=_unknown),
            args,
            canon,
            args_digest,
            key,
            "write",
            gov.clock(),
            known=False,
        )
    return Call(spec, args, canon, args_digest, key, spec.effect_for(args), gov.clock())


def _unknown(**_: Any) -> None:
    return None


def _read(gov: Governor, st: SessionState, c: Call) -> Plan[None]:
    spec = c.spec
    fresh: dict[str, Any] | None = None
    if spec.cacheable():
        scope = (
            "global" if spec.scope == "global" else st.session_id + "#" + _generation(st, spec.name)
        )
        # the arguments are already a sha256; the rest stays readable (and needs no hash)
        c.cache_key = (
            f"{gov.namespace}:cache:{{{scope}}}:{spec.name}:{spec.version}:{c.args_digest}"
        )
        entry = yield from store_op(gov, c, "get", c.cache_key)
        if isinstance(entry, dict) and (spec.ttl is None or gov.clock() - entry["t"] < spec.ttl):
            fresh = entry
    # a TTL read whose entry expired is a fresh look, not a repeat
    if fresh is not None or not spec.ttl:
        with st.lock:
            correction = st.monitor.before(spec, c.key, "read", c.canon)
        if correction is not None:
            if gov.enforce:
                c.status, c.correction = Status.CORRECTED, correction
                return
            c.would = "correct"
    if fresh is not None:
        if gov.enforce:
            c.status, c.value, c.cache_hit = Status.CACHED, fresh["v"], True
            c.result_digest, c.result_size = fresh.get("d"), fresh.get("n")
            return
        c.would = c.would or "cache"
    if c.cache_key is None:
        yield from execute(gov, st, c)
        return
    # shadow mode runs every call as if headway were absent: no coalescing
    leader, future = gov.flights.join(c.cache_key) if gov.enforce else (False, None)
    if future is not None and not leader:
        try:
            shared = yield Wait(future, spec.timeout)
        except TimeoutError:
            shared = None  # the leader is slow or hung: look for ourselves
        if shared is not None:
            c.coalesced = True
            c.status, c.value, c.error = shared[0], _copy(shared[1]), shared[2]
            c.cache_hit = c.status is Status.CACHED
            return
    stored = False
    try:
        yield from execute(gov, st, c)
        if c.status is Status.EXECUTED:
            c.text = result_text(c.value)
            if len(c.text) <= gov.max_cached_bytes:
                c.result_digest, c.result_size = digest(c.text), len(c.text)
                entry = {"v": c.value, "t": gov.clock(), "d": c.result_digest, "n": c.result_size}
                ok = yield from store_op(
                    gov, c, "set", c.cache_key, entry, spec.ttl or gov.cache_gc_s
                )
                stored = ok is not None
                if not stored:
                    c.flag("not_cached")
            else:
                c.flag("too_large_to_cache")
    finally:
        if leader:
            shared_status = Status.CACHED if c.status is Status.EXECUTED else c.status
            gov.flights.land(c.cache_key, (shared_status, _share(c, stored), c.error))


def _share(c: Call, stored: bool) -> Any:
    """What followers get: a copy through the stored JSON text when the result is JSON (so
    no caller can change another's result), else the object itself."""
    if c.status is not Status.EXECUTED:
        return None
    if stored and c.text is not None and not isinstance(c.value, str):
        return ("json", c.text)
    return ("raw", c.value)


def _copy(shared: Any) -> Any:
    if shared is None:
        return None
    kind, payload = shared
    return json.loads(payload) if kind == "json" else payload


def _generation(st: SessionState, tool: str) -> str:
    gen = st.generation
    return f"{gen.get('*', 0)}.{gen.get(tool, 0)}"


def invalidate(gov: Governor, st: SessionState, c: Call) -> Plan[None]:
    """A write ran: the session's cached reads (or those it names) are no longer fresh."""
    if not gov.has_session_cache():
        return  # no tool caches per session: nothing to invalidate, no store round trip
    with st.lock:
        for name in c.spec.invalidates or ("*",):
            st.generation[name] = st.generation.get(name, 0) + 1
        snapshot = dict(st.generation)
    yield from store_op(gov, c, "set", gov.generation_key(st.session_id), snapshot, gov.cache_gc_s)


def store_op(gov: Governor, c: Call, op: str, *args: Any) -> Plan[Any]:
    """A store operation that fails open: None (and a flag in the audit) when the store fails."""
    store = gov.store
    try:
        if store.blocking:
            result = yield Blocking(getattr(store, op), args)
        else:  # an in-process store: no round trip through the driver
            result = getattr(store, op)(*args)
    except Exception as exc:
        flag_store_error(c, exc)
        return None
    return True if result is None and op == "set" else result


def flag_store_error(c: Call, exc: BaseException) -> None:
    c.flag(f"store_error: {type(exc).__name__}: {describe(exc)}"[:300])


def execute_write(gov: Governor, st: SessionState, c: Call) -> Plan[None]:
    """Run a write; if it may have acted, the session's cached reads are stale."""
    yield from execute(gov, st, c)
    if c.executed or c.status is Status.UNKNOWN:
        yield from invalidate(gov, st, c)


# -- attempts: timeout, retry, breaker ---------------------------------------------------


def _policy(gov: Governor, c: Call) -> Retry:
    if not gov.enforce:
        return NO_RETRY
    spec = c.spec
    safe = c.effect == "read" or spec.idempotent or c.idem_key is not None
    if not safe:
        return NO_RETRY
    return spec.retry if isinstance(spec.retry, Retry) else DEFAULT_RETRY


def _breaker(gov: Governor, spec: ToolSpec) -> brk.Breaker | None:
    if not gov.enforce or spec.breaker is False:
        return None
    return spec.breaker if isinstance(spec.breaker, brk.Breaker) else gov.default_breaker


def execute(gov: Governor, st: SessionState, c: Call) -> Plan[None]:
    """Run the tool: attempts with timeouts, retries when eligible, breaker around each."""
    spec = c.spec
    policy = _policy(gov, c)
    b = _breaker(gov, spec)
    classify = spec.classify or default_classify
    start = gov.clock()
    while True:
        probe = False
        if b is not None:
            lease = b.probe_lease_s or spec.timeout or 60.0
            now = gov.clock()
            decision, retry_after = yield from breaker_update(
                gov, spec, b, lambda s, n=now, le=lease: brk.admit(b, s, n, le)
            )
            c.breaker = {"allow": "closed", "probe": "half_open", "reject": "open"}[decision]
            if decision == "reject":
                _circuit_open(c, retry_after)
                return
            probe = decision == "probe"
        timeout = spec.timeout
        if policy.deadline_s is not None:
            left = policy.deadline_s - (gov.clock() - start)
            timeout = left if timeout is None else min(timeout, left)
        c.attempts += 1
        try:
            c.value = yield Attempt(spec.fn, c.args, timeout, spec.is_async)
        except (AttemptTimeout, TimeoutError) as exc:
            failure: BaseException = exc
            timed_out = True
            c.late = getattr(exc, "late", None)
        except Exception as exc:
            failure, timed_out = exc, False
        except BaseException:
            # cancellation and interrupts are never retried and never counted
            if b is not None:
                yield from breaker_update(
                    gov, spec, b, lambda s, p=probe: (brk.release(s, p), None)
                )
            raise
        else:
            c.status, c.executed, c.error = Status.EXECUTED, True, None
            if b is not None:
                now = gov.clock()
                yield from breaker_update(
                    gov, spec, b, lambda s, n=now, p=probe: (brk.record(b, s, True, p, n), None)
                )
            return
        c.executed = True
        verdict = _classify(classify, failure, timed_out, spec)
        if b is not None:
            now = gov.clock()
            if _ignored(b, failure, verdict, timed_out):
                yield from breaker_update(
                    gov, spec, b, lambda s, p=probe: (brk.release(s, p), None)
                )
            else:
                yield from breaker_update(
                    gov, spec, b, lambda s, n=now, p=probe: (brk.record(b, s, False, p, n), None)
                )
        c.value = None
        if timed_out and c.effect == "write":
            # the remote may have acted: never retried blindly, reconciled on next use
            c.status = Status.UNKNOWN
            c.error = error_info(
                "timeout", describe(failure), retryable=False, hint="Do not repeat this call."
            )
            return
        _fail(c, failure, verdict, timed_out)
        elapsed = gov.clock() - start
        delay = policy.next_delay(c.attempts, verdict, elapsed, gov.rng)
        if delay is None:
            return
        with st.lock:
            if not st.meter.retry_allowed(spec.name):
                c.flag("retry_budget_exhausted")
                return
            st.meter.count_retry(spec.name)
        if gov.on_retry is not None:
            info = {"tool": spec.name, "attempt": c.attempts, "delay_s": delay, "error": c.error}
            try:
                gov.on_retry(info)
            except Exception as exc:  # a hook must never break the call
                c.flag(f"on_retry_failed: {describe(exc)}"[:200])
        if delay > 0:
            yield Sleep(delay)


def _classify(classify: Any, exc: BaseException, timed_out: bool, spec: ToolSpec) -> Classification:
    if timed_out:
        return RETRYABLE  # a read that timed out is worth another look; writes never get here
    if isinstance(exc, TypeError) and _bad_arguments(spec, exc):
        return NON_RETRYABLE
    try:
        verdict: Classification = classify(exc)
    except Exception:
        return NON_RETRYABLE
    return verdict


def _bad_arguments(spec: ToolSpec, exc: TypeError) -> bool:
    text = describe(exc)
    name = getattr(spec.fn, "__name__", "\x00")
    return "argument" in text and (name in text or "positional" in text or "keyword" in text)


def _ignored(b: brk.Breaker, exc: BaseException, verdict: Classification, timed_out: bool) -> bool:
    """A breaker counts failures of the tool's service (timeouts, errors classified as
    transient), not answers about the request (NON_RETRYABLE: bad input, business rules),
    and never the exceptions named in ``Breaker.ignore``."""
    if b.ignore and isinstance(exc, b.ignore):
        return True
    return not timed_out and verdict is NON_RETRYABLE


def describe(exc: BaseException) -> str:
    """str(exc), even for exceptions whose __str__ fails."""
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__}: message unavailable>"


def _fail(c: Call, exc: BaseException, verdict: Classification, timed_out: bool) -> None:
    name = type(exc).__name__
    text = describe(exc)
    message = f"{name}: {text}"[:2000]
    retryable = verdict is not NON_RETRYABLE
    if timed_out:
        code, hint = "timeout", "The tool did not answer in time; a later retry may succeed."
    elif isinstance(exc, TypeError) and _bad_arguments(c.spec, exc):
        code, hint = (
            "invalid_arguments",
            "The arguments do not match the tool's parameters: fix them.",
        )
    else:
        code = "tool_error"
        hint = (
            "This looks transient; retrying later may succeed."
            if retryable
            else "Check the arguments against the tool's description, or use another tool."
        )
    c.status = Status.ERROR
    c.error = error_info(code, message, retryable=retryable, hint=hint)
    c.fingerprint = f"{name}:{_DIGITS.sub('#', text)[:300]}"


def _circuit_open(c: Call, retry_after: float) -> None:
    spec = c.spec
    if spec.has_fallback:
        fb = spec.fallback
        try:
            c.value = fb(c.args) if callable(fb) else fb
            c.status = Status.FALLBACK
        except Exception as exc:
            c.flag(f"fallback_failed: {describe(exc)}"[:200])
        else:
            return
    c.status = Status.ERROR
    c.fingerprint = "circuit_open"  # calling it again anyway is a repeated error
    c.error = error_info(
        "circuit_open",
        f"{spec.name} is failing and its circuit breaker is open",
        retryable=True,
        hint=f"Do not call {spec.name} for {retry_after:.1f} s; use another tool or continue without it.",
        retry_after=round(retry_after, 3),
    )


def breaker_update(gov: Governor, spec: ToolSpec, b: brk.Breaker, fn: Any) -> Plan[Any]:
    """Apply a pure transition ``fn(state) -> (state, result)`` atomically."""
    if not b.shared:
        with gov.breaker_lock:
            state = gov.breakers.get(spec.name, brk.CLOSED)
            new, result = fn(state)
            if new is not state:
                gov.breakers[spec.name] = new
        return result
    key = gov.breaker_key(spec.name)
    store = gov.store
    for _ in range(1000):  # optimistic concurrency: retry on a lost compare-and-set
        try:
            current = yield Blocking(store.get, (key,), store.blocking)
            state = current if isinstance(current, dict) else brk.CLOSED
            new, result = fn(state)
            if new is state:
                return result
            if current is None:
                won = yield Blocking(store.add, (key, new, None), store.blocking)
            else:
                won = yield Blocking(store.swap, (key, current, new, None), store.blocking)
        except Exception:
            if b.on_store_error == "open":
                return ("reject", b.cooldown_s)
            return ("allow", 0.0)
        if won:
            return result
    return ("reject", 0.1)


# -- settle: budgets, detectors, stop, audit ------------------------------------------


def check_stop(gov: Governor, st: SessionState) -> None:
    """Raise the session's stop, if any; check the wall clock."""
    if st.stop is not None:
        raise type(st.stop)(st.stop.diagnostic)
    over = st.meter.wall_clock(gov.clock())
    if over is not None:
        diag = diagnostic(*over, st.steps, st.monitor.last_progress_step)
        if gov.enforce:
            st.stop = BudgetExceeded(diag)
            raise BudgetExceeded(diag)
        st.would_stop = st.would_stop or diag


def settle(gov: Governor, st: SessionState, c: Call) -> Outcome:
    spec = c.spec
    now = gov.clock()
    with st.lock:
        index = st.steps
        st.steps += 1
        reached = st.meter.count_call(spec.name)
        signals: dict[str, Any] = {}
        mark = "neutral"
        correction = c.correction
        stop: Stop | None = None
        if c.known and not c.coalesced:
            text = c.error.get("message") if c.error else None
            if c.status in (Status.EXECUTED, Status.REPLAYED, Status.FALLBACK):
                text = c.text if c.text is not None else result_text(c.value)
                c.text = text
            obs = st.monitor.observation(
                index,
                spec.name,
                c.key,
                c.args_digest[:16],
                c.effect,
                c.status,
                text,
                c.fingerprint,
                c.canon,
            )
            v = st.monitor.after(spec, obs, c.value, now=now, session_limit=st.no_progress_limit)
            mark, signals = v.mark, v.signals
            if correction is None:
                correction = v.correction
            if v.stop is not None:
                stop = LoopDetected(v.stop) if v.stop_kind == "loop" else BudgetExceeded(v.stop)
        if stop is None and reached is not None:
            stop = BudgetExceeded(diagnostic(*reached, index, st.monitor.last_progress_step))
        if stop is not None:
            if gov.enforce:
                st.stop = st.stop or stop
            else:
                st.would_stop = st.would_stop or stop.diagnostic
        if not gov.enforce and st.would_stop is not None:
            c.would = "stop"
        budget = st.meter.consumption(spec.name)
        last_progress = st.monitor.last_progress_step
    outcome = Outcome(
        status=c.status,
        tool=spec.name,
        value=c.value
        if c.status in (Status.EXECUTED, Status.CACHED, Status.REPLAYED, Status.FALLBACK)
        else None,
        executed=c.executed,
        error=c.error,
        correction=correction,
        reconcile_key=c.reconcile_key,
        step=index,
        attempts=c.attempts,
    )
    if gov.sinks:
        record = _record(gov, st, c, outcome, now, mark, signals, budget, last_progress)
        plain: dict[str, Any] | None = None
        for sink, lazy in gov.sink_modes:
            try:
                if lazy:
                    sink.write(record)
                else:
                    plain = plain if plain is not None else record.to_dict()
                    sink.write(plain)
            except Exception as exc:  # an audit sink must never break a call
                gov.report_sink_error(sink, exc)
    return outcome


def _record(
    gov: Governor,
    st: SessionState,
    c: Call,
    out: Outcome,
    now: float,
    mark: str,
    signals: dict[str, Any],
    budget: dict[str, Any],
    last_progress: int | None,
) -> AuditRecord:
    if c.result_digest is None:
        text = c.text
        if text is None and out.value is not None:
            text = result_text(out.value)
        if text is not None:
            c.result_digest, c.result_size = digest(text), len(text)
    saved = 0
    if c.status is Status.CACHED or c.status is Status.REPLAYED or c.status is Status.CORRECTED:
        saved = (c.result_size or 0) // 4
    redact = c.spec.redact
    return AuditRecord(
        [
            now,
            st.agent,
            st.session_id,
            out.step,
            out.tool,
            c.args_digest,
            args_field(c.canon, redact),
            c.result_digest,
            c.result_size,
            c.status.value,
            c.executed,
            c.cache_hit,
            c.coalesced,
            c.idem_key,
            c.idem_state,
            c.reconcile_s,
            c.attempts,
            c.breaker,
            round((now - c.started) * 1000, 3),
            mark,
            signals,
            _decision(c),
            c.would,
            c.error.get("code") if c.error else None,
            out.correction is not None,
            budget,
            last_progress,
            saved,
            c.flags,
        ],
        redact,
    )


_DECISIONS = {
    Status.EXECUTED: "execute",
    Status.CACHED: "cache",
    Status.REPLAYED: "replay",
    Status.CORRECTED: "correct",
    Status.UNKNOWN: "unknown",
    Status.FALLBACK: "fallback",
    Status.ERROR: "execute",
}


def _decision(c: Call) -> str:
    if c.coalesced:
        return "coalesce"
    if c.status is Status.ERROR and not c.executed:
        return "reject"
    return _DECISIONS[c.status]
