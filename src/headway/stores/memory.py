"""An in-process store: the default, and the reference for the contract suite."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import orjson

from ._base import loads, text_of


class MemoryStore:
    """A dict behind a lock, holding JSON text (so served values are never aliased).

    Bounded: past ``max_entries`` the oldest entries are dropped. Not shared between
    processes: use ``SQLiteStore`` for that.
    """

    blocking = False

    def __init__(self, *, max_entries: int = 100_000) -> None:
        # key -> (JSON text, expiry, whether orjson may parse it: three times faster). An
        # OrderedDict: a plain dict whose oldest entries are deleted again and again scans
        # the deleted slots to find the next one, so eviction would grow with the size
        self._data: collections.OrderedDict[str, tuple[str, float | None, bool]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()
        self.max_entries = max_entries

    def _live(self, key: str, now: float) -> str | None:
        item = self._data.get(key)
        if item is None:
            return None
        if item[1] is not None and item[1] <= now:
            del self._data[key]
            return None
        return item[0]

    def _put(self, key: str, text: str, ttl_s: float | None, now: float, fast: bool) -> None:
        self._data.pop(key, None)
        self._data[key] = (text, None if ttl_s is None else now + ttl_s, fast)
        while len(self._data) > self.max_entries:  # the oldest first, in O(1)
            self._data.popitem(last=False)

    def get(self, key: str) -> Any | None:
        item = self._data.get(key)  # a dict lookup is atomic: no lock on the read path
        if item is None:
            return None
        if item[1] is not None and item[1] <= time.monotonic():
            with self._lock:
                return loads(self._live(key, time.monotonic()))
        return orjson.loads(item[0]) if item[2] else loads(item[0])

    def set(self, key: str, value: Any, ttl_s: float | None = None) -> None:
        text, fast = text_of(value)
        with self._lock:
            self._put(key, text, ttl_s, time.monotonic(), fast)

    def add(self, key: str, value: Any, ttl_s: float | None = None) -> bool:
        text, fast = text_of(value)
        with self._lock:
            now = time.monotonic()
            if self._live(key, now) is not None:
                return False
            self._put(key, text, ttl_s, now, fast)
            return True

    def swap(self, key: str, expected: Any, value: Any | None, ttl_s: float | None = None) -> bool:
        old = text_of(expected)[0]
        new, fast = (None, False) if value is None else text_of(value)
        with self._lock:
            now = time.monotonic()
            if self._live(key, now) != old:
                return False
            if new is None:
                del self._data[key]
            else:
                self._put(key, new, ttl_s, now, fast)
            return True

    def delete(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)

    def close(self) -> None:
        with self._lock:
            self._data.clear()
