"""What this process knows about keys beyond the store (``KeyMemory``): the claims it
holds (the lease keeper), the keys it claimed or saw settled, and the attempts it
abandoned after a timeout, whose late answers can settle UNKNOWN."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import TYPE_CHECKING, Any

from ._key_store import gc_s
from ._leases import Held, Keeper
from ._recent import Recent

if TYPE_CHECKING:
    from ._context import Context


class LateResults:
    """Attempts abandoned after a timeout, kept so a late answer can settle UNKNOWN."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, concurrent.futures.Future[Any] | tuple[str, Any]] = {}

    def keep(self, key: str, late: concurrent.futures.Future[Any] | tuple[str, Any]) -> None:
        with self._lock:
            self._by_key[key] = late
            while len(self._by_key) > 10_000:
                self._by_key.pop(next(iter(self._by_key)))

    def look(self, key: str) -> tuple[str, Any]:
        """('running', None), ('done', result), ('failed', None) or ('none', None)."""
        with self._lock:
            late = self._by_key.get(key)
        if late is None:
            return ("none", None)
        if isinstance(late, tuple):
            return late
        if not late.done():
            return ("running", None)
        if late.cancelled() or late.exception() is not None:
            return ("failed", None)
        return ("done", late.result())

    def forget(self, key: str) -> None:
        with self._lock:
            self._by_key.pop(key, None)


class KeyMemory:
    """This process's memory of keys: ``late`` attempts, the ``keeper`` of its claims,
    and the keys it ``used``."""

    def __init__(self) -> None:
        self.late = LateResults()
        self.keeper = Keeper()
        # keys this process claimed (their claim) or saw settled (when their record
        # expires): a record that disappears before then was lost by the store
        self.used: Recent[Held | float] = Recent()

    def hold(self, ctx: Context, rkey: str, claim: dict[str, Any]) -> Held:
        """Our claim, renewed by the keeper while its attempt runs."""
        held = Held(ctx.store, rkey, claim, gc_s(ctx))
        self.keeper.hold(held)
        return held

    def took(self, ctx: Context, rkey: str, claim: dict[str, Any]) -> Held:
        """A record taken over by a compare-and-set (expired, or UNKNOWN confirmed absent):
        ours now, held while the attempt runs."""
        held = self.hold(ctx, rkey, claim)
        self.used.put(rkey, held)
        return held

    def running_here(self, rkey: str) -> bool:
        """Whether an attempt of this process on this key has not ended."""
        used = self.used.get(rkey)
        return isinstance(used, Held) and used.running

    def lost_by_store(self, held: Held, now: float) -> Held | float | None:
        """What this process knew of a key it has just claimed afresh, when the store
        should still have held its record then (the store lost it): else None."""
        before = self.used.get(held.rkey)
        if before is not None and before is not held and now < _until(before):
            return before
        return None


def _until(used: Held | float) -> float:
    """Until when a key this process used is known to the store (its record's expiry)."""
    return float(used.record["expires"]) if isinstance(used, Held) else used
