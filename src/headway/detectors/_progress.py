"""The progress mark of a step (semantics §4.1): ``progress``, ``no_progress``, ``waiting``
(a poll that did not change) or ``neutral``, from the tool's own progress check when it
has one, else from the signals before it (``duplicate``) and the write rules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._spec import ToolSpec
from ..outcome import CACHED, CORRECTED, ERROR, EXECUTED
from ._likeness import names_new, near
from ._observation import NEUTRAL, Mark, Observation
from ._window import Window


class ProgressMark:
    name = "progress"

    def observe(self, step: Observation, window: Window) -> dict[str, Any] | None:
        status, spec = step.status, step.spec
        assert spec is not None, "a step is marked while its call is judged (Monitor.after)"
        if status is CACHED or status is CORRECTED:
            # served again: a repeat by definition, no result to compare, no progress
            step.mark = "no_progress"
            step.duplicate = step.unchanged = True
            return None
        if status is ERROR:
            pass  # no progress when repeated (``RepeatedError``), else neutral
        elif status in NEUTRAL:
            step.mark = "neutral"
        else:
            step.mark = _mark(step, spec, window)
            # a tool's last result is kept only for its own progress check (a result is
            # often large); a record of an older version holds every tool's: dropped
            if status is EXECUTED:
                if spec.progress is not None or spec.progress_fields:
                    window.last_value[step.tool] = step.value
                elif window.last_value:
                    window.last_value.pop(step.tool, None)
        if step.mark == "progress" and (spec.progress is not None or spec.progress_fields):
            step.unchanged = False  # the tool's own progress check says it moved on
        return None


def _mark(step: Observation, spec: ToolSpec, window: Window) -> Mark:
    prev = window.last_of_key.get(step.key)
    if spec.poll:
        if prev is not None and prev.nlen >= 0 and (step.unchanged or near(window, step, prev)):
            return "waiting"
        return "progress"
    last = window.last_value
    if spec.progress is not None and step.tool in last:
        try:
            return "progress" if spec.progress(last[step.tool], step.value) else "no_progress"
        except Exception:
            return "neutral"
    if spec.progress_fields and step.tool in last:
        old, value = last[step.tool], step.value
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            changed = any(old.get(f) != value.get(f) for f in spec.progress_fields)
            return "progress" if changed else "no_progress"
    if step.effect == "write":
        # a write with new arguments moved the world, whatever it returned
        # (its volatile parts are content: a new commit hash, a new order id)
        if (
            prev is not None
            and prev.effect == "write"
            and prev.nlen >= 0
            and near(window, step, prev)
            and not names_new(window, step)
        ):
            return "no_progress"
        return "progress"
    return "no_progress" if step.duplicate else "progress"
