"""The repeated-error signal (semantics §3, §4.1): the same error fingerprint from the
same tool, consecutively, even with different arguments. From the 2nd in a row the step
is no progress (a retry that changed nothing). A failure the tool reports as text
(``headway._text_errors``) counts in the same run, but leaves the step's mark alone: a
text that merely looks like an error never stops a run."""

from __future__ import annotations

from typing import Any

from .._text_errors import text_error
from ..outcome import CACHED, CORRECTED, ERROR, EXECUTED
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
            failure = text_error(step.text) if status is EXECUTED else None
            if failure is None:
                window.errors.pop(step.tool, None)  # the tool answered: its run of errors ends
                return None
            last, run = window.errors.get(step.tool, ("", 0))
            run = run + 1 if last == failure else 1
            window.errors[step.tool] = (failure, run)  # a failure reported as text: no mark
            if run >= 2:
                return {"repeated_error": run}
        return None
