"""Claims this process holds on idempotency keys, kept alive while their attempt runs.

A claim's record carries its lease as a *duration* (``lease_s``) and a counter (``beat``).
The owner renews it by bumping ``beat`` (a compare-and-set) every third of the lease;
another worker presumes the owner dead only when it has seen the same ``beat`` for a
whole lease on its own monotonic clock. No wall clocks are compared, so workers whose
clocks disagree (or step) never take over a live claim.

A claim stays held while its attempt runs anywhere in this process, including an attempt
abandoned after a timeout: when that attempt ends, the keeper records its result (or
UNKNOWN when it failed) and lets the claim go. The keeper is one daemon thread per
governor, running while claims are held (and a few seconds after), a daemon: it never keeps the
interpreter alive.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from .stores import Store
from .stores._base import Op, batch


class Held:
    """One claim: its record as last written by this process."""

    def __init__(self, store: Store, rkey: str, record: dict[str, Any], gc_s: float) -> None:
        self.store = store
        self.rkey = rkey
        self.record = record
        self.gc_s = gc_s
        self.lease_s = float(record["lease_s"])
        self.owner = str(record["owner"])
        self.renewed = time.monotonic()
        self.lost = False  # another worker changed the record: it is no longer ours
        self.late: concurrent.futures.Future[Any] | None = None  # an abandoned attempt
        self.finish: Callable[[Held], dict[str, Any]] | None = None  # its final record
        self._lock = threading.Lock()

    def swap(self, new: dict[str, Any] | None) -> bool:
        """Replace our record by ``new`` (None deletes); False when it is no longer ours.
        Store errors propagate (the claim may still be ours)."""
        with self._lock:
            if self.lost:
                return False
            won = self.store.swap(self.rkey, self.record, new, self.gc_s)
            if won and new is not None:
                self.record, self.renewed = new, time.monotonic()
            elif not won:
                self.lost = True
            return bool(won)

    def swap_with(self, new: dict[str, Any], ops: list[Op]) -> list[Any]:
        """``swap(new)`` with ``ops`` after it, in one ``batch``: its result, then theirs."""
        with self._lock:
            results = batch(self.store, [Op("swap", self.rkey, new, self.record, self.gc_s), *ops])
            won = results[0] is True and not self.lost
            if won:
                self.record, self.renewed = new, time.monotonic()
            else:
                self.lost = True
            results[0] = won
            return results

    def renew(self) -> bool:
        """Bump the beat: proof to observers that the owner is alive."""
        return self.swap({**self.record, "beat": int(self.record["beat"]) + 1})

    def due(self, now: float) -> bool:
        return now - self.renewed >= self.lease_s / 3


class Keeper:
    """Renews the claims of this process and settles abandoned attempts when they end."""

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf  # when the keeper looks next (monotonic), unless woken

    def hold(self, held: Held) -> None:
        with self._lock:
            self._held[held.rkey] = held
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="headway-leases", daemon=True
                )
                self._thread.start()
                return  # it looks at the claims as it starts
            # wake the keeper only when it would look too late for this claim: a wake is
            # a thread switch, the larger part of a keyed write's cost on a fast store
            if self._wakes_at > held.renewed + held.lease_s / 6:
                self._wake.set()

    def drop(self, held: Held) -> None:
        with self._lock:
            if self._held.get(held.rkey) is held:
                del self._held[held.rkey]

    def poke(self) -> None:
        """Look at the held claims now (an abandoned attempt has ended)."""
        self._wake.set()

    def get(self, rkey: str) -> Held | None:
        return self._held.get(rkey)

    def settle(self, held: Held) -> bool:
        """Record the outcome of an abandoned attempt that has ended; True once done."""
        if held.late is None or not held.late.done() or held.finish is None:
            return False
        try:
            held.swap(held.finish(held))
        except Exception:
            return False  # the store is down: try again on the next beat
        self.drop(held)
        return True

    def _run(self) -> None:
        idle_since: float | None = None
        while True:
            with self._lock:
                held = list(self._held.values())
                if not held and idle_since is not None and time.monotonic() - idle_since > 5:
                    self._thread = None  # idle a while: leave (hold() starts another)
                    return
                # with the snapshot: a claim held after it wakes us (we are awake until
                # _sleep() says when we look next), so none waits for a later round
                self._wake.clear()
                self._wakes_at = math.inf
            if not held:
                idle_since = idle_since or time.monotonic()
                self._sleep(1.0)
                continue
            idle_since = None
            now = time.monotonic()
            for h in held:
                if h.lost:
                    self.drop(h)
                elif self.settle(h):
                    continue
                elif h.due(now):
                    with contextlib.suppress(Exception):  # a missed beat: the next one retries
                        h.renew()
            tick = min(h.lease_s for h in held) / 6
            self._sleep(min(max(tick, 0.005), 1.0))

    def _sleep(self, seconds: float) -> None:
        # published before the wait: a claim held from now on sees when we will look
        self._wakes_at = time.monotonic() + seconds
        self._wake.wait(seconds)
