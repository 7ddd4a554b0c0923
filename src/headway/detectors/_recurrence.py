"""The recurrence signal (semantics §3, §4.1): the same target reaching the same state
with nothing new since, the third time (``headway._recurrence`` judges it; the window
keeps its memory, ``Window.recur``). Only a correction, given after every other rule's
(``Monitor.after``): the step's mark stays as the progress rules set it."""

from __future__ import annotations

from typing import Any

from ..outcome import CACHED, CORRECTED, EXECUTED
from ._observation import Observation
from ._window import Window


class Recurrence:
    """Runs after ``ProgressMark``, and reads the mark it set (a write with new arguments
    is something new)."""

    name = "recurrence"

    def observe(self, step: Observation, window: Window) -> dict[str, Any] | None:
        status, spec = step.status, step.spec
        if status is CACHED or status is CORRECTED:
            return None  # served again: no result of its own, not counted
        assert spec is not None, "a step is judged with its call's tool (Monitor.after)"
        value = step.value
        times = window.recur.observe(
            step.tool,
            step.args,
            step.args_id,
            (value if isinstance(value, str) else step.text)
            if status is EXECUTED and not spec.poll  # waiting is not going round
            else None,
            targets=spec.targets,
            read=step.effect == "read",
            fresh_write=step.effect == "write" and step.mark == "progress",
        )
        return {"recurrence": times} if times else None
