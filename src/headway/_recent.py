"""A table that keeps its most recent keys only: O(1) per insert at any size."""

from __future__ import annotations

import collections
import threading
from typing import TypeVar

V = TypeVar("V")


class Recent(collections.OrderedDict[str, V]):
    """Up to ``limit`` keys, the least recently put forgotten first. ``put`` may be called
    from several threads at once (a framework's tool threads, the lease keeper's callers).

    An ``OrderedDict``: a plain dict whose oldest keys are deleted again and again scans
    the deleted slots at its front on every ``next(iter(...))``."""

    def __init__(self, limit: int = 10_000) -> None:
        super().__init__()
        self.limit = limit
        self._lock = threading.Lock()

    def put(self, key: str, value: V) -> V:
        """Keep ``value`` under ``key``, now the most recent; returns it."""
        with self._lock:
            self[key] = value
            self.move_to_end(key)
            while len(self) > self.limit:
                self.popitem(last=False)
        return value

    def forget(self, key: str, value: V) -> None:
        """Drop ``key`` if it still holds ``value``."""
        with self._lock:
            if self.get(key) is value:
                del self[key]
