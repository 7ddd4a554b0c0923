"""The same-result signal (semantics §3): a result equal to one already in the window
although the arguments differ (paging that returns the same content, going back to a
page already read). It also marks whether the result equals that of the identical call
before (``unchanged``: what the read repeat rule's "the same result" means)."""

from __future__ import annotations

from typing import Any

from ..outcome import CACHED, CORRECTED
from ..similarity import SHORT
from ._likeness import same_call
from ._observation import Observation
from ._window import Window


class SameResult:
    name = "same_result"

    def observe(self, step: Observation, window: Window) -> dict[str, Any] | None:
        if step.nlen < 0 or step.status is CACHED or step.status is CORRECTED:
            return None
        same = step.unchanged = same_call(step, window.last_of_key.get(step.key))
        if step.nlen < SHORT:
            # a short answer ("No files found", "[]") to a new query is exploration: a
            # repeat only for the same query or a cosmetic variant of it (same words)
            found = same or step.probe in window.probes
        else:
            found = step.nkey in window.norms
        if not found:
            return None
        step.duplicate = True
        return None if same else {"same_result": True}
