"""The near-duplicate signal (semantics §3, §4.1): a long result that brings no new
information, judged apart for its target (the call) and its content."""

from __future__ import annotations

from typing import Any

from ..outcome import CACHED, CORRECTED
from ..similarity import SHORT
from ._likeness import edits_last, grew, near, near_any, similar_call
from ._observation import Observation
from ._window import Window


class NearDuplicate:
    """Runs after ``SameResult``, and reads what it marked (``duplicate``, ``unchanged``)."""

    name = "near_duplicate"

    def observe(self, step: Observation, window: Window) -> dict[str, Any] | None:
        if step.nlen < SHORT or step.status is CACHED or step.status is CORRECTED:
            return None
        if step.duplicate:
            return None  # the same result exactly (``SameResult``, just before)
        if not _no_news(step, window):
            return None
        step.duplicate = True
        return {"near_duplicate": True}


def _no_news(step: Observation, window: Window) -> bool:
    prev = window.last_of_key.get(step.key)
    if grew(step, prev):
        return False  # the same call's result with every line it had and new ones: news
    if step.unchanged or (prev is not None and prev.nlen >= 0 and near(window, step, prev)):
        return True
    if prev is not None or similar_call(window, step):
        # a repeated target (the same call, or the same request in other words): a result
        # like a recent one of this tool is no news
        return near_any(window, step)
    # a new target whose result shows nothing the window has not seen, or that brings back
    # an earlier result (another link to a page already read). An action that changes the
    # page just seen, however little, moved the world: a few new words on a big page are
    # new (a form filled field by field)
    return window.units.all_in(step.units, window.steps) or (
        not edits_last(window, step) and near_any(window, step)
    )
