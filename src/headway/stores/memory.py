"""An in-process store: the default, and the reference for the contract suite."""

from __future__ import annotations

import collections
import re
import threading
import time
from typing import Any

import orjson

from ._base import loads, text_of

# A session's cache entry: "<ns>:cache:{<session>#<epochs>}:<tool>:<version>:<arguments>"
# (``_reading.cache_key``). Its first epoch ("any" for a read that declares no resources,
# "*" for one that does) is bumped by every write that makes all of those reads stale.
# A session id with braces in it is not recognised: its entries wait for the bound.
_CACHE_KEY = re.compile(r":cache:\{[^{}]*#(\d+)\.\d+(\.\d+|:[\d.]*)\}:")


class _Epoch:
    """The cache entries of one session's reads (with resources, or without) written under
    the newest first epoch seen: once a later one is written, they can never be served."""

    __slots__ = ("first", "keys", "name")

    def __init__(self, name: str, first: int) -> None:
        self.name, self.first, self.keys = name, first, set[str]()


class MemoryStore:
    """A dict behind a lock, holding JSON text (so served values are never aliased).

    Bounded: past ``max_entries`` the oldest entries are dropped, and a session's cache
    entries are dropped as soon as an entry of a newer epoch of the same reads is written
    (a write made them stale: without that they would stay until the bound). Not shared
    between processes: use ``SQLiteStore`` for that.
    """

    blocking = False

    def __init__(self, *, max_entries: int = 100_000) -> None:
        # key -> (JSON text, expiry, whether orjson may parse it: three times faster, the
        # cache epoch it belongs to). An OrderedDict: a plain dict whose oldest entries are
        # deleted again and again scans the deleted slots to find the next one, so eviction
        # would grow with the size
        self._data: collections.OrderedDict[str, tuple[str, float | None, bool, _Epoch | None]] = (
            collections.OrderedDict()
        )
        self._epochs: dict[str, _Epoch] = {}  # "<ns>:cache:{<session>#" + kind -> newest
        self._lock = threading.Lock()
        self.max_entries = max_entries

    def _live(self, key: str, now: float) -> str | None:
        item = self._data.get(key)
        if item is None:
            return None
        if item[1] is not None and item[1] <= now:
            self._drop(key)
            return None
        return item[0]

    def _put(self, key: str, text: str, ttl_s: float | None, now: float, fast: bool) -> None:
        self._drop(key)
        at = key.find(":cache:{")
        epoch = None if at < 0 else self._epoch_of(key, at)
        self._data[key] = (text, None if ttl_s is None else now + ttl_s, fast, epoch)
        while len(self._data) > self.max_entries:  # the oldest first, in O(1)
            self._drop(next(iter(self._data)))

    def _epoch_of(self, key: str, at: int) -> _Epoch | None:
        """The epoch a session's cache entry joins, after dropping the entries of the epoch
        it supersedes (each entry is dropped once: O(1) per operation, amortised). An entry
        of an older epoch (a call that started before a write) joins none."""
        found = _CACHE_KEY.match(key, at)
        if found is None:
            return None  # not a session's entry (a global one): never invalidated
        name, first = key[: found.start(1)] + found.group(2)[0], int(found.group(1))
        epoch = self._epochs.get(name)
        if epoch is None:
            epoch = self._epochs[name] = _Epoch(name, first)
        elif first > epoch.first:
            for stale in epoch.keys:
                del self._data[stale]
            epoch.first, epoch.keys = first, set()
        elif first < epoch.first:
            return None  # left to the bound and the TTL, as every entry was before
        epoch.keys.add(key)
        return epoch

    def _drop(self, key: str) -> None:
        item = self._data.pop(key, None)
        epoch = None if item is None else item[3]
        if epoch is not None:
            epoch.keys.discard(key)
            if not epoch.keys:  # the session's last entry: forget the session too
                self._epochs.pop(epoch.name, None)

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
                self._drop(key)
            else:
                self._put(key, new, ttl_s, now, fast)
            return True

    def delete(self, key: str) -> None:
        with self._lock:
            self._drop(key)

    def close(self) -> None:
        with self._lock:
            self._data.clear()
            self._epochs.clear()
