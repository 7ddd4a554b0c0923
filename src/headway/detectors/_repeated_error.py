"""The repeated-error signal (semantics §3, §4.1): the same error fingerprint from the
same tool, consecutively, even with different arguments. From the 2nd in a row the step
is no progress (a retry that changed nothing)."""

from __future__ import annotations

from typing import Any

from ..outcome import CACHED, CORRECTED, ERROR
from ._observation import NEUTRAL, Observation
from ._window import Window


class RepeatedError:
    name = "repeated_error"

    def observe(self, step: Observation, window: Window) -> dict[str, Any] | None:
        status = step.status
        if status is ERROR:
            fp, run = window.errors.get(step.tool, ("", 0))
            run = run + 1 if fp == step.error else 1
            window.errors[step.tool] = (step.error or "", run)
            if run >= 2:
                step.mark = "no_progress"
                return {"repeated_error": run}
        elif status not in NEUTRAL and status is not CACHED and status is not CORRECTED:
            window.errors.pop(step.tool, None)  # the tool answered: its run of errors ends
        return None
