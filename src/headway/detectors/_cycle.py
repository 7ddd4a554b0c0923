"""The cycle signal (semantics §3): a period-p pattern of keys (p = 2..5) repeated for
at least 3 full cycles (A-B-A-B-A-B), with the step where it started."""

from __future__ import annotations

from typing import Any

from ._observation import Observation
from ._window import Window


class Cycle:
    name = "cycle"

    def observe(self, step: Observation, window: Window) -> dict[str, Any] | None:
        found = cycle_of(window, step.key) if step.key in window.keys else None
        if found is None:
            return None
        return {"cycle": {"period": found[0], "start": found[1]}}


def cycle_of(window: Window, key: str) -> tuple[int, int] | None:
    """(period, start step) when a call with ``key`` continues a cycle of 3+ full rounds."""
    if key not in window.keys:
        return None  # a key not in the window continues no cycle
    w = window.steps
    n = len(w) + 1  # the window plus this call
    for p in range(2, 6):
        if n < 3 * p:
            break
        if w[n - 1 - p].key != key:  # one comparison rejects almost every call
            continue
        keys = [o.key for o in w] + [key]
        if len(set(keys[-p:])) == 1 or any(keys[i] != keys[i - p] for i in range(n - 2 * p, n)):
            continue
        start = n - 3 * p
        while start > 0 and keys[start - 1] == keys[start - 1 + p]:
            start -= 1
        return p, w[start].index
    return None
