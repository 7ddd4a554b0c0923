"""The repeat signal (semantics §3): how many consecutive calls had the same key."""

from __future__ import annotations

from typing import Any

from ._observation import Observation
from ._window import Window


class Repeat:
    name = "repeat"

    def observe(self, step: Observation, window: Window) -> dict[str, Any] | None:
        if step.key == window.repeat_key:
            window.repeat += 1
        else:
            window.repeat_key, window.repeat = step.key, 1
        return {"repeat": window.repeat} if window.repeat > 1 else None
