"""What follows from a judged step (semantics §4.2): the corrections the model is told,
the escalation at half the no-progress limit, and the stops (a loop, a poll budget) with
their diagnostics. Every text states only what headway observed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from .._call import result_text
from .._spec import ToolSpec
from ..outcome import CACHED, CORRECTED, ERROR, EXECUTED, render
from ._observation import NEUTRAL, Mark, Observation
from ._window import Window

MAX_POLLS_TRACKED = 256  # distinct polled calls whose waiting is counted


class Verdict(NamedTuple):
    """What ``Monitor.after()`` decided for a step."""

    mark: Mark
    signals: dict[str, Any]
    correction: str | None = None
    stop: dict[str, Any] | None = None
    stop_kind: Literal["loop", "budget"] | None = None


# -- before a call ------------------------------------------------------------------------


def streak(window: Window, key: str) -> int:
    """How many of the last calls, all with ``key``, returned the same result (each the
    same as the one before it): 0 when the last call had another key."""
    n = 0
    for o in reversed(window):
        if o.key != key or o.status in NEUTRAL:
            break
        n += 1
        if not o.unchanged:
            break  # the first of the run: its result differed from the call before it
    return n


def held_repeat(spec: ToolSpec, same: int, args: str, held: Mapping[str, Any]) -> str:
    """A read repeated with its result held as current (a current cache entry): not run."""
    return (
        f"headway: you called {spec.name} {same + 1} times with identical "
        f"arguments {args[:300]} and the result did not change; do not call it "
        "again with these arguments: use the result, change the arguments or the "
        "tool, or finish.\nheadway holds that result as current, so this call was "
        "not run again. Result: " + render(result_text(held.get("v")), 1500)
    )


def cycle_round(window: Window, period: int, prev: Observation | None, current: bool) -> str:
    """A call that would go round a cycle once more: not run."""
    calls = ", ".join(f"{o.tool} {o.args[:120]}" for o in window.recent(period))
    return (
        f"headway: you called the same {period} tools in a cycle 3 times ({calls}) and "
        "they brought nothing new; going round again will not help: use the "
        "results you have, try a different approach, or finish." + _last(prev, current=current)
    )


def _last(prev: Observation | None, *, current: bool) -> str:
    """The result a cycle's correction quotes: held as current (a current cache entry), or
    what the call returned when it last ran, said as such (it may have changed since)."""
    if prev is None or prev.text is None:
        return ""
    label = (
        "Last result (held as current)"
        if current
        else "What this call returned when it last ran (not run again now, so it may have "
        "changed since)"
    )
    if prev._size > len(prev.text):  # the window kept the head: say how much is left out
        return f"\n{label}: {prev.text[:1500]}... [{prev._size - 1500} more characters]"
    return f"\n{label}: " + render(prev.text, 1500)


# -- after a call -------------------------------------------------------------------------


def correction(window: Window, spec: ToolSpec, step: Observation) -> str | None:
    """The correction a step gets for what it repeated (judged before it joins the
    window): the 3rd failure in a row with the same error (raised, or reported as text),
    or else an executed read that returned the same result as the identical calls before
    it."""
    if step.status is ERROR:
        run = window.errors.get(step.tool, ("", 0))[1]
        if run >= 3:
            return (
                f"headway: {step.tool} failed {run} times in a row with the same error "
                f"(last arguments {step.args[:300]}): {(step.text or '')[:500]!r}. The same "
                "approach will fail again: change the arguments, use another tool, or report "
                "the problem."
            )
    elif step.status is EXECUTED:
        # an executed step has a run of errors only when it reported a failure as text
        # (``RepeatedError``: any other answer ended the run)
        failed = window.errors.get(step.tool)
        if failed is not None and failed[1] >= 3:
            return (
                f"headway: {step.tool} reported the same failure {failed[1]} times in a row "
                f"(last arguments {step.args[:300]}): {(step.text or '')[:500]!r}. The same "
                "approach will fail again: change the arguments, use another tool, or report "
                "the problem."
            )
        if step.effect == "read" and step.unchanged and not spec.poll:
            return _repeat_note(window, spec, step)
    return None


def recurrence_note(step: Observation, times: int) -> str:
    """The correction of a recurrence (``Recurrence``), given to a step that has no other."""
    return (
        f"headway: {step.tool} {step.args[:200]} brought you back to a result you already "
        f"had ({times} times now, and nothing in between changed what you were looking at: "
        "the same element or request, the same page or answer); going round again will not "
        "help: use what you have, try a different approach, or finish."
    )


def _repeat_note(window: Window, spec: ToolSpec, step: Observation) -> str | None:
    """An executed read that returned, for the 3rd time in a row or more, the same result
    as the identical calls before it."""
    same = 1
    exact = True
    for o in reversed(window):
        if o.key != step.key or o.status in NEUTRAL:
            break
        same += 1
        if o.status is EXECUTED and o.nkey != step.nkey:  # o.nkey: the whole result
            exact = False  # equal only once volatile parts are set aside
        if not o.unchanged:
            break
    if same < 3:
        return None
    apart = "" if exact else " (apart from volatile parts: timestamps, ids)"
    return (
        f"headway: {spec.name} returned the same result {same} times for identical "
        f"arguments {step.args[:300]}{apart}; calling it again with these arguments will "
        "not tell you more: use the result, change the arguments or the tool, or finish."
    )


def poll_budget(
    window: Window, spec: ToolSpec, step: Observation, now: float
) -> dict[str, Any] | None:
    """A poll's own budget (``max_polls``, ``max_wait_s``): the diagnostic when used up."""
    polls, since = window.polls.pop(step.key, (0, now))
    polls += 1
    window.polls[step.key] = (polls, since)
    if len(window.polls) > MAX_POLLS_TRACKED:  # bounded like everything in a session
        del window.polls[next(iter(window.polls))]
    for kind, limit, used in (
        ("max_polls", spec.max_polls, polls),
        ("max_wait_s", spec.max_wait_s, round(now - since, 3)),
    ):
        if limit is not None and used >= limit:
            return {
                "terminated_by": "budget",
                "budget_type": kind,
                "limit": limit,
                "consumed": used,
                "last_progress_step": window.last_progress_step,
                "hint": (
                    f"{spec.name} kept answering with the same or almost the same "
                    f"result; its {kind} budget is used up."
                ),
            }
    return None


def escalate(
    window: Window,
    spec: ToolSpec,
    step: Observation,
    signals: dict[str, Any],
    correction: str | None,
    stop: dict[str, Any] | None,
    session_limit: int,
) -> Verdict:
    """Escalate (a correction at half the no-progress limit) or stop (at the limit)."""
    stop_kind: Literal["loop", "budget"] | None = "budget" if stop else None
    run = window.no_progress_run
    if step.mark == "no_progress" and stop is None:
        limit = spec.no_progress_limit or session_limit
        if run >= limit:
            stop, stop_kind = _loop_diagnostic(window, limit, signals), "loop"
            stopping = (
                f"headway: no progress in the last {run} steps (the last: {step.tool} "
                f"{step.args[:200]}); this run is being stopped."
            )  # said even when the step has its own correction: the run ends here
            correction = stopping if correction is None else f"{correction}\n{stopping}"
        elif run >= (limit // 2 or 1) and correction is None and step.status is not CORRECTED:
            correction = (
                f"headway: no progress in the last {run} steps: {step.tool} {step.args[:200]} "
                f"{_why(spec, step, signals)}. Change your approach or finish; at "
                f"{limit} steps without progress this run is stopped."
            )
    # tuple.__new__: a NamedTuple's own __new__ is ~4% of a cache hit (bench/overhead.py)
    return tuple.__new__(Verdict, (step.mark, signals, correction, stop, stop_kind))


def _loop_diagnostic(window: Window, limit: int, signals: Mapping[str, Any]) -> dict[str, Any]:
    signal = next(
        (
            s
            for s in ("cycle", "repeat", "repeated_error", "same_result", "near_duplicate")
            if s in signals
        ),
        "no_progress",
    )
    return {
        "terminated_by": "no_progress",
        "signal": signal,
        "limit": limit,
        "consumed": window.no_progress_run,
        "last_progress_step": window.last_progress_step,
        "last_k_steps": [
            {"step": o.index, "tool": o.tool, "args_digest": o.args_digest, "mark": o.mark}
            for o in window.recent(limit)
        ],
        "suggestion": "Inspect the recent results and choose a different strategy.",
    }


def _why(spec: ToolSpec, step: Observation, signals: Mapping[str, Any]) -> str:
    """Why a step was no progress, in words that claim only what headway observed."""
    if step.status is CACHED:
        return "was answered with the stored result of an identical earlier call"
    if step.status is ERROR:
        return "failed with the same error as before"
    if step.effect == "write" and not step.duplicate:
        return "returned almost the same result as the identical call before it"
    if "near_duplicate" in signals:
        return "returned almost the same result as one you already had"
    if step.duplicate:
        return "returned what you already had"
    if spec.progress is not None or spec.progress_fields:
        return "made no progress by the tool's own progress check"
    return "made no progress"
