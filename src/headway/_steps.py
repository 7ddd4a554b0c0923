"""A call's step: the session's stop raised, the step taken and counted against budgets.

``check_stop`` runs before anything else in a call (and before a model turn is counted);
``take`` takes the step before the tool runs when the session counts calls (a budget on
them, or a session shared by workers: ``_shared.reserve``), so concurrent calls never run
past a budget; otherwise ``_settle`` takes it when the call settles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .budgets import diagnostic
from .errors import BudgetExceeded, Stop

if TYPE_CHECKING:
    from ._call import Call
    from ._context import Context
    from ._state import SessionState


def reach(ctx: Context, st: SessionState, stop: Stop) -> None:
    """A limit was reached: the session stops (shadow mode: records what would have)."""
    if ctx.enforce:
        st.stop = st.stop or stop
    else:
        st.would_stop = st.would_stop or stop.diagnostic


def check_stop(ctx: Context, st: SessionState, now: float | None = None) -> None:
    """Raise the session's stop, if any; check the wall clock."""
    if st.stop is None and st.meter.budgets.wall_clock_s is None:
        return
    if now is None:
        now = ctx.clock()
    over = st.meter.wall_clock(now) if st.stop is None else None
    if over is not None:
        reach(ctx, st, BudgetExceeded(diagnostic(*over, st.steps, st.monitor.last_progress_step)))
    if st.stop is not None:
        raise type(st.stop)(st.stop.diagnostic)


def take(ctx: Context, st: SessionState, c: Call) -> None:
    """Take the call's step: raise the session's stop, or count the step against the
    budgets. A step that reaches a budget stops the session at once (every worker's next
    call raises), so concurrent calls never run past the budget."""
    check_stop(ctx, st)
    index = st.steps
    st.steps += 1
    reached = st.meter.count_call(c.spec.name)
    c.index, c.reached = index, reached
    if reached is not None and ctx.enforce and st.stop is None:
        # provisional: settling this step writes the diagnostic it ends with
        st.stop = BudgetExceeded(diagnostic(*reached, index, st.monitor.last_progress_step))
        st.provisional = index


def counts_calls(st: SessionState) -> bool:
    """Whether the session has a budget on the number of calls (exact across workers)."""
    b = st.meter.budgets
    return b.tool_calls is not None or b.per_tool_calls is not None
