"""Running a tool (semantics §7, §8): attempts with timeouts, retries when eligible, and
the circuit breaker around each attempt. Like the pipeline, it only yields effects."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import breaker as brk
from ._call import Call, describe, result_text
from ._effects import Aborted, Attempt, AttemptTimeout, Blocking, Plan, Sleep
from ._spec import ToolSpec
from .outcome import ERROR, EXECUTED, FALLBACK, UNKNOWN, error_info
from .retry import (
    BEFORE_EFFECT,
    DEFAULT_RETRY,
    NO_RETRY,
    NON_RETRYABLE,
    RETRYABLE,
    Classification,
    Retry,
    connection_lost,
    default_classify,
)

if TYPE_CHECKING:
    from ._context import Context
    from ._state import SessionState

_DIGITS = re.compile(r"\d+")
_STATE_SEEN = {"allow": "closed", "probe": "half_open", "reject": "open"}


def _policy(ctx: Context, c: Call) -> Retry:
    if not ctx.enforce:
        return NO_RETRY
    spec = c.spec
    safe = c.effect == "read" or spec.idempotent or c.idem_key is not None
    if not safe:
        return NO_RETRY
    return spec.retry if isinstance(spec.retry, Retry) else DEFAULT_RETRY


def _breaker(ctx: Context, spec: ToolSpec) -> brk.Breaker | None:
    if not ctx.enforce or spec.breaker is False:
        return None
    return spec.breaker if isinstance(spec.breaker, brk.Breaker) else ctx.default_breaker


def execute(ctx: Context, st: SessionState, c: Call) -> Plan[None]:
    """Run the tool: attempts with timeouts, retries when eligible, breaker around each."""
    spec = c.spec
    policy = _policy(ctx, c)
    b = _breaker(ctx, spec)
    # the whole call's bound, the same for every attempt (an inline tool needs it only
    # when a retry is due)
    bound = _deadline(ctx, policy) if spec.timeout is not None else None
    start = ctx.timer() if c.began is None else c.began  # a reconcile may have begun it
    whole = bound if spec.timeout is not None else policy.deadline_s
    if c.began is not None and whole is not None and ctx.timer() - start >= whole:
        c.status, c.value = ERROR, None
        c.error = error_info(
            "deadline_reached",
            "the call's deadline was spent finding out what an earlier attempt did; "
            f"{spec.name} was not run",
            retryable=True,
            hint="Call it again with the same arguments: it has not run.",
        )
        return
    while True:
        # a retry never starts on a claim that may have expired: renew it first
        if c.held is not None and c.attempts and not (yield from _renewed(ctx, c)):
            return
        probe = False
        steady = b is not None and not b.shared and _steady(ctx, b, spec.name)
        if steady:
            c.breaker = "closed"  # admit() would allow and change nothing
        elif b is not None:
            lease = b.probe_lease_s or spec.timeout or 60.0
            now = ctx.clock() if b.shared else ctx.timer()
            admit = lambda s, n=now, le=lease: brk.admit(b, s, n, le)  # noqa: E731
            decision, retry_after = (
                (yield from breaker_update(ctx, spec, b, admit))
                if b.shared
                else local_update(ctx, spec, admit)
            )
            c.breaker = _STATE_SEEN[decision]
            if decision == "reject":
                _circuit_open(c, retry_after)
                return
            probe = decision == "probe"
        timeout = _timeout(ctx, spec, whole, start)
        c.attempts += 1
        try:
            c.value = yield Attempt(c.fn, c.args, timeout, c.fn_async)
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
                    ctx, spec, b, lambda s, p=probe: (brk.release(s, p), None)
                )
            raise
        else:
            c.status, c.executed, c.error = EXECUTED, True, None
            if b is not None and not (steady and _steady(ctx, b, spec.name)):
                now = ctx.clock() if b.shared else ctx.timer()
                ok = lambda s, n=now, p=probe: (brk.record(b, s, True, p, n), None)  # noqa: E731
                if b.shared:
                    yield from breaker_update(ctx, spec, b, ok)
                else:
                    local_update(ctx, spec, ok)
            if _is_error_result(ctx, c):  # the service answered: not a breaker failure
                _error_result(c)
            return
        c.executed = True
        verdict = _classify(spec.classify or default_classify, failure, timed_out, spec)
        if b is not None:
            now = ctx.clock() if b.shared else ctx.timer()
            if _ignored(b, failure, verdict, timed_out):
                yield from breaker_update(
                    ctx, spec, b, lambda s, p=probe: (brk.release(s, p), None)
                )
            else:
                yield from breaker_update(
                    ctx, spec, b, lambda s, n=now, p=probe: (brk.record(b, s, False, p, n), None)
                )
        c.value = None
        if c.effect == "write" and (timed_out or _may_have_acted(failure, verdict)):
            # the remote may have acted: never retried blindly, reconciled on next use
            _unknown(c, failure, timed_out)
            return
        _fail(c, _unwrapped(failure), verdict, timed_out)
        elapsed = ctx.timer() - start
        delay = policy.next_delay(c.attempts, verdict, elapsed, ctx.rng)
        if delay is None:
            return
        limit = bound if spec.timeout is not None else _deadline(ctx, policy)
        if limit is not None and elapsed + delay >= limit:
            c.flag("deadline_reached")
            return
        with st.lock:
            if not st.meter.retry_allowed(spec.name):
                c.flag("retry_budget_exhausted")
                return
            st.meter.count_retry(spec.name)
        if ctx.on_retry is not None:
            info = {"tool": spec.name, "attempt": c.attempts, "delay_s": delay, "error": c.error}
            try:
                ctx.on_retry(info)
            except Exception as exc:  # a hook must never break the call
                c.flag(f"on_retry_failed: {describe(exc)}"[:200])
        if delay > 0:
            yield Sleep(delay)


def _timeout(ctx: Context, spec: ToolSpec, deadline: float | None, start: float) -> float | None:
    """An attempt's timeout: the tool's own, within what is left of ``deadline`` (a tool
    without a timeout runs inline: only its retry policy's deadline cuts it)."""
    timeout = spec.timeout
    if deadline is not None:
        left = max(deadline - (ctx.timer() - start), 0.001)
        timeout = left if timeout is None else min(timeout, left)
    return timeout


def reconcile_attempt(ctx: Context, c: Call, fn: Callable[..., Any], key: str) -> Attempt:
    """The call of the tool's reconcile function (semantics §7): it has the tool's
    per-attempt timeout, within the call's deadline, which starts counting here (an
    execution it allows gets what is left)."""
    spec = c.spec
    if c.began is None:
        c.began = ctx.timer()
    policy = _policy(ctx, c)
    deadline = _deadline(ctx, policy) if spec.timeout is not None else policy.deadline_s
    is_async = inspect.iscoroutinefunction(fn)
    return Attempt(
        functools.partial(fn, key, c.args), {}, _timeout(ctx, spec, deadline, c.began), is_async
    )


def _may_have_acted(exc: BaseException, verdict: Classification) -> bool:
    """A write's failure after its request may have reached the tool (semantics §5.2): a
    lost connection (``retry.connection_lost``), unless the classifier says BEFORE_EFFECT,
    or a tool that ended with a BaseException such as GeneratorExit."""
    if isinstance(exc, Aborted):
        return True
    return verdict is not BEFORE_EFFECT and connection_lost(exc)


def _unwrapped(exc: BaseException) -> BaseException:
    return exc.exc if isinstance(exc, Aborted) else exc


def _unknown(c: Call, exc: BaseException, timed_out: bool) -> None:
    """A write that may have acted and got no answer: UNKNOWN, reconciled at next use."""
    c.status = UNKNOWN
    exc = _unwrapped(exc)
    if timed_out:
        code, message = "timeout", describe(exc)
    else:
        code = "interrupted" if not isinstance(exc, Exception) else "connection_lost"
        message = type(exc).__name__
        text = describe(exc)
        message = f"{message}: {text}"[:2000] if text else message
    c.error = error_info(
        code,
        message,
        retryable=False,
        hint="Do not repeat this call: it may have taken effect.",
    )


def _steady(ctx: Context, b: brk.Breaker, tool: str) -> bool:
    """``brk.steady`` of this process's breaker of ``tool`` (closed when it never failed)."""
    return brk.steady(b, ctx.breakers.get(tool, brk.CLOSED))


def _is_error_result(ctx: Context, c: Call) -> bool:
    predicate = c.spec.is_error or ctx.is_error
    if predicate is None:
        return False
    try:
        return bool(predicate(c.value))
    except Exception as exc:  # a predicate that fails judges nothing
        c.flag(f"is_error_failed: {describe(exc)}"[:200])
        return False


def _error_result(c: Call) -> None:
    """A result the tool (or its framework) marks as an error: an ERROR outcome for the
    signals, never cached, and the model reads the tool's own text."""
    text = error_text(c.value)
    c.status, c.value = ERROR, None
    c.error = error_info("error_result", text[:4000], retryable=False)
    c.fingerprint = f"result:{_DIGITS.sub('#', text)[:300]}"


def error_text(value: Any) -> str:
    """The text of an error result: a string as it is; else its ``content`` when that is
    text, or a list of text blocks (MCP, several frameworks); else the result as JSON."""
    if isinstance(value, str):
        return value
    content = (
        value.get("content") if isinstance(value, Mapping) else getattr(value, "content", None)
    )
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            b.get("text") if isinstance(b, Mapping) else getattr(b, "text", None) for b in content
        ]
        if texts and all(isinstance(t, str) for t in texts):
            return "\n".join(t for t in texts if isinstance(t, str))
    return result_text(value)


def _deadline(ctx: Context, policy: Retry) -> float | None:
    """The whole call's bound: the retry policy's ``deadline_s`` within the governor's."""
    mine, whole = policy.deadline_s, ctx.deadline_s
    if mine is None or whole is None:
        return whole if mine is None else mine
    return min(mine, whole)


def _renewed(ctx: Context, c: Call) -> Plan[bool]:
    try:
        ok = yield Blocking(c.held.renew, (), ctx.store.blocking)
    except Exception as exc:
        ok = False
        c.flag(f"store_error: {type(exc).__name__}: {describe(exc)}"[:300])
    if not ok:
        c.status, c.value = UNKNOWN, None
        c.error = error_info(
            "lease_lost",
            "the claim on this operation's key could not be renewed before a retry",
            retryable=False,
            hint="Do not run it again under a new key: a call with the same key finds out its outcome first.",
        )
    return bool(ok)


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
    c.status = ERROR
    c.error = error_info(code, message, retryable=retryable, hint=hint)
    c.fingerprint = f"{name}:{_DIGITS.sub('#', text)[:300]}"


def _circuit_open(c: Call, retry_after: float) -> None:
    spec = c.spec
    if spec.has_fallback:
        fb = spec.fallback
        try:
            c.value = fb(c.args) if callable(fb) else fb
            c.status = FALLBACK
        except Exception as exc:
            c.flag(f"fallback_failed: {describe(exc)}"[:200])
        else:
            return
    c.status = ERROR
    c.fingerprint = "circuit_open"  # calling it again anyway is a repeated error
    c.error = error_info(
        "circuit_open",
        f"{spec.name} is failing and its circuit breaker is open",
        retryable=True,
        hint=f"Do not call {spec.name} for {retry_after:.1f} s; use another tool or continue without it.",
        retry_after=round(retry_after, 3),
    )


def local_update(ctx: Context, spec: ToolSpec, fn: Any) -> Any:
    """Apply a pure transition ``fn(state) -> (state, result)`` to this process's breaker."""
    with ctx.breaker_lock:
        state = ctx.breakers.get(spec.name, brk.CLOSED)
        new, result = fn(state)
        if new is not state:
            ctx.breakers[spec.name] = new
    return result


def breaker_update(ctx: Context, spec: ToolSpec, b: brk.Breaker, fn: Any) -> Plan[Any]:
    """Apply a pure transition ``fn(state) -> (state, result)`` atomically."""
    if not b.shared:
        return local_update(ctx, spec, fn)
    key = ctx.breaker_key(spec.name)
    store = ctx.store
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
