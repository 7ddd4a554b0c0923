"""Settling a call (semantics §2, §4, §10): budgets, the progress mark and signals,
escalation and stops, the audit record, and the Outcome the caller gets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _shared
from ._call import Call, result_text
from ._canonical import digest, sha256_of
from ._steps import reach, take
from .audit import AuditRecord, args_field, summarize
from .budgets import diagnostic
from .errors import BudgetExceeded, LoopDetected, Stop
from .idempotency import unkeyed_key
from .outcome import (
    CACHED,
    CORRECTED,
    ERROR,
    EXECUTED,
    FALLBACK,
    REPLAYED,
    UNKNOWN,
    Outcome,
    Status,
)

if TYPE_CHECKING:
    from ._context import Context
    from ._effects import Plan
    from ._state import SessionState


_PLAIN_STATUS = {s: s.value for s in Status}
_STATUS = {s.value: s for s in Status}
_WITH_TEXT = frozenset((EXECUTED, REPLAYED, FALLBACK))
_WITH_VALUE = frozenset((EXECUTED, CACHED, REPLAYED, FALLBACK))
_DIGEST_NOW = 1024  # characters of a result past which its record keeps only its digest
_LARGE = 4096  # characters of arguments or result past which a record is made at once
# a record's fields that most calls leave at these values (``_audit`` keeps them as None)
_PLAIN = (False, None, None, None, "closed", None, (), False, None, None, None)


def settle(ctx: Context, st: SessionState, c: Call) -> Outcome:
    now = ctx.clock()
    with st.lock:
        judged = _judge(ctx, st, c, now)
    return _finish(ctx, st, c, now, judged)


def settle_shared(ctx: Context, st: SessionState, c: Call, seen: Any = None) -> Plan[Outcome]:
    """``settle`` for a session shared by workers: the step is judged against the record
    (again, if another worker changed it meanwhile) and written back with it.

    ``seen``: a read served (or corrected) from what this worker knew of the record, which
    takes its step now, in the same swap; raises ``_shared.Moved`` when the cache epochs
    are no longer ``st.epoch`` as ``seen`` (the read is then looked up again). Steps other
    threads here took meanwhile do not move them; another worker's write fails the swap."""
    now = ctx.clock()
    if seen is None:
        judged = yield from _shared.update(ctx, st, c, lambda: _judge(ctx, st, c, now))
        return _finish(ctx, st, c, now, judged)

    def take_and_judge() -> _Judged:
        if st.epoch != seen:
            raise _shared.Moved
        take(ctx, st, c)
        return _judge(ctx, st, c, now)

    judged = yield from _shared.update(ctx, st, c, take_and_judge, rounds=1)
    return _finish(ctx, st, c, now, judged)


_Judged = tuple[
    int, str, dict[str, Any], "str | None", "Stop | None", tuple[int, int, int], "int | None"
]


def _judge(ctx: Context, st: SessionState, c: Call, now: float) -> _Judged:
    """Count and judge the step in the session state (under its lock, no I/O)."""
    spec = c.spec
    if c.index is None:
        index = st.steps
        st.steps += 1
        reached = st.meter.count_call(spec.name)
    else:  # reserved before the call ran (a shared session, or a call budget: ``take``)
        index, reached = c.index, c.reached
        if reached is None and st.meter.budgets.retries_per_tool is not None:
            reached = st.meter.retries_used_up(spec.name)  # retries made by this call
    if st.shared:  # applied again when the record is read again after a conflict
        if c.bumps:
            bump(st, c.bumps)
        if c.reconcile_key is not None and c.status is UNKNOWN and c.idem_key is None:
            st.unknown_writes.setdefault(c.reconcile_key, now)
    if c.step_keyed:  # a retry of it with another step id is a retry of its key (§5.4)
        if c.status is UNKNOWN:
            st.unknown_steps[unkeyed_key(st, c)] = c.idem_key or ""
        elif st.unknown_steps and c.status in (EXECUTED, REPLAYED):
            st.unknown_steps.pop(unkeyed_key(st, c), None)
    if st.meter.turns and c.effect == "read" and (c.status is EXECUTED or c.status is CACHED):
        st.batched(c.key)  # a read of this model turn (sessions told of turns only)
    signals: dict[str, Any] = {}
    mark = "neutral"
    correction = c.correction
    stop: Stop | None = None
    monitor = st.monitor_of(c.agent)
    if c.known and monitor.versions.get(spec.name) != spec.version:
        monitor.adopt(spec.name, spec.version)  # a new version: a new epoch (§1)
    if c.known and not c.coalesced:
        status = c.status
        if status is CACHED and c.agent is not None and not monitor.may_correct(c.key):
            # fetched by another agent: new to this one, judged like a fresh result
            status = EXECUTED
        text = c.error.get("message") if c.error else None
        if status in _WITH_TEXT:
            text = c.text if c.text is not None else result_text(c.value)
            c.text = text
        obs = monitor.observation(
            index,
            spec.name,
            c.key,
            c.args_id,
            c.effect,
            status,
            text,
            c.fingerprint,
            summarize(c.canon, spec.redact_names, 300),  # shown in corrections
            spec.targets,
        )
        v = monitor.after(spec, obs, c.value, now, st.no_progress_limit)
        mark, signals = v.mark, v.signals
        if correction is None and not (
            c.error is not None and c.error.get("code") == "circuit_open"
        ):  # an open circuit is not the arguments' fault: its own text says what to do
            correction = v.correction
        if v.stop is not None:
            diag = v.stop if c.agent is None else {**v.stop, "agent": c.agent}
            stop = LoopDetected(diag) if v.stop_kind == "loop" else BudgetExceeded(diag)
    if correction is not None and not ctx.enforce:
        # shadow mode: the model sees exactly what the tool returned; the audit keeps it
        c.would, correction = c.would or "correct", None
    if correction is not None and c.agent is not None:  # name the agent it is meant for
        correction = f"[agent {c.agent}] {correction}"
    if stop is None and reached is not None:
        stop = BudgetExceeded(diagnostic(*reached, index, st.monitor.last_progress_step))
    if stop is not None:
        if st.provisional == index:  # the stop reserved with this step gets its final words
            st.stop = st.provisional = None
        reach(ctx, st, stop)
    if not ctx.enforce and st.would_stop is not None:
        c.would = "stop"
    meter = st.meter
    budget = (meter.calls, meter.per_tool.get(spec.name, 0), meter.retries.get(spec.name, 0))
    # the window's field, not Monitor's property: a frame less (bench/overhead.py)
    return index, mark, signals, correction, stop, budget, monitor.window.last_progress_step


_outcome = tuple.__new__  # an Outcome from its full field tuple


def _finish(ctx: Context, st: SessionState, c: Call, now: float, judged: _Judged) -> Outcome:
    index, mark, signals, correction, stop, budget, last_progress = judged
    outcome: Outcome = _outcome(  # without Outcome's __new__ frame (bench/overhead.py)
        Outcome,
        (
            c.status,
            c.spec.name,
            c.value if c.status in _WITH_VALUE else None,
            c.executed,
            c.error,
            correction,
            c.reconcile_key,
            index,
            c.attempts,
        ),
    )
    if ctx.sink_modes:
        reached_stop = stop.diagnostic if stop is not None else None
        _audit(ctx, st, c, outcome, now, mark, signals, budget, last_progress, reached_stop)
    return outcome


_MAX_RESOURCES = 10_000  # resource epochs kept per session; past that, start afresh


def bump(st: SessionState, names: tuple[str, ...]) -> None:
    """Advance the cache epochs ``names`` (a write ran): reads keyed by them are stale."""
    gen = st.generation
    for name in names:
        gen[name] = gen.get(name, 0) + 1
    if len(gen) > _MAX_RESOURCES:
        kept = {k: v for k, v in gen.items() if not k.startswith("r:")}
        gen.clear()
        gen.update(kept)
        gen["*"] = gen.get("*", 0) + 1  # forgotten epochs: everything becomes stale
    st.epoch += 1  # after the bumps: a key prefix remembered from before is stale


def _audit(
    ctx: Context,
    st: SessionState,
    c: Call,
    out: Outcome,
    now: float,
    mark: str,
    signals: dict[str, Any],
    budget: tuple[int, int, int],
    last_progress: int | None,
    stop: dict[str, Any] | None,
) -> None:
    """Hand the call's record to every sink; a sink that fails is reported, never raised."""
    if c.result_digest is None and c.text is None and out.value is not None:
        c.text = result_text(out.value)  # now: the caller may change the value later
    text = c.text
    result_digest: str | bytes | None = c.result_digest
    result_size = c.result_size
    if text is not None and len(text) >= _DIGEST_NOW and result_digest is None:
        # a long result is digested now rather than kept until the record is read: the
        # audit outlives the detector window by thousands of records (a few us for a
        # result whose judging took a hundred times that); kept as its 32 bytes (65
        # bytes an object, its hex 113), written in hex when the record is read
        result_digest, result_size, text = sha256_of(text), len(text), None
    error_code = c.error.get("code") if c.error else None
    # a kept record holds only what its fields are made from, as one flat tuple: not the
    # Call (its instance dict, its detector key and runner), nor the caller's arguments'
    # dict, the result or the outcome (the record has their texts), nor an abandoned
    # attempt. What every record retains the garbage collector walks again and again, and
    # the audit holds up to 10,000. ``AuditRecord.estimate`` reads the two texts first.
    rare = (
        c.coalesced,
        c.idem_key,
        c.idem_state,
        c.reconcile_s,
        c.breaker,
        c.would,
        c.flags,
        out.correction is not None,
        c.agent or st.agent,
        error_code,
        stop,
    )
    source = (
        c.canon,
        text,
        result_digest,
        result_size,
        c._digest,
        c.spec.redact_names,
        _PLAIN_STATUS[c.status],  # a str, not the enum: the audit packs records (marshal)
        c.executed,
        c.cache_hit,
        c.attempts,
        c.started,
        c.cache_key is not None,
        c.call_id,
        out.step,
        out.tool,
        now,
        mark,
        signals or None,  # most steps have none: no empty dict kept per record
        budget[0],
        budget[1],
        budget[2],
        last_progress,
        st.session_id,
        None if rare == _PLAIN else rare,  # most calls: one slot for eleven fields
    )
    record = AuditRecord(_values, source, st.session_id)
    if len(c.canon) > _LARGE or len(text or "") > _LARGE or (result_size or 0) > _LARGE:
        record["time"]  # made now: a kept record must not hold the large call
    plain: dict[str, Any] | None = None
    for sink, lazy in ctx.sink_modes:
        try:
            if lazy:
                sink.write(record)
            else:
                plain = plain if plain is not None else record.to_dict()
                sink.write(plain)
        except Exception as exc:  # an audit sink must never break a call
            ctx.report_sink_error(sink, exc)


def _values(source: tuple[Any, ...]) -> list[Any]:
    """The record's values in ``audit.FIELDS`` order, from the snapshot ``_audit`` took."""
    (canon, text, result_digest, result_size, args_digest, redact, status, executed, cache_hit,
     attempts, started, keyed, call_id, step, tool, now, mark, signals, calls, per_tool, retries,
     last_progress, session, rare) = source  # fmt: skip
    (coalesced, idem_key, idem_state, reconcile_s, breaker, would, flags, corrected, agent,
     error_code, stop) = _PLAIN if rare is None else rare  # fmt: skip
    status = _STATUS[status]
    if result_digest is None and text is not None:
        result_digest, result_size = digest(text), len(text)
    elif type(result_digest) is bytes:
        result_digest = result_digest.hex()
    saved = 0
    if status is CACHED or status is REPLAYED or status is CORRECTED:
        saved = (result_size or 0) // 4
    return [
        now,
        agent,
        session,
        step,
        tool,
        digest(canon) if args_digest is None else args_digest,
        args_field(canon, redact),
        result_digest,
        result_size,
        status.value,
        executed,
        cache_hit,
        coalesced,
        idem_key,
        idem_state,
        reconcile_s,
        attempts,
        breaker,
        round((now - started) * 1000, 3),
        mark,
        {} if signals is None else signals,
        _decision(status, executed, coalesced),
        would,
        error_code,
        corrected,
        {"tool_calls": calls, "tool": per_tool, "retries": retries},
        last_progress,
        saved,
        flags,
        "hit" if cache_hit else ("miss" if keyed else "none"),
        stop,
        call_id,
    ]


_DECISIONS = {
    EXECUTED: "execute",
    CACHED: "cache",
    REPLAYED: "replay",
    CORRECTED: "correct",
    UNKNOWN: "unknown",
    FALLBACK: "fallback",
    ERROR: "execute",
}


def _decision(status: Status, executed: bool, coalesced: bool) -> str:
    if coalesced:
        return "coalesce"
    if status is ERROR and not executed:
        return "reject"
    return _DECISIONS[status]
