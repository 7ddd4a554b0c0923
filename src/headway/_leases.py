"""Claims this process holds on idempotency keys, kept alive while their attempt runs.

A claim is two store entries: its record (``{ns}:idem:{key}``, with the owner's token and
a ``beat`` counter) and the owner's lease (``lease_key``: that record key, then
``:lease:`` and the owner), a small entry whose time to live, ``lease_s``, is counted by
the store's own clock (Redis ``PX``, PostgreSQL's ``clock_timestamp()``; SQLite's writer
and reader share the one machine's clock; ``MemoryStore``, the one process's). The owner
renews both every third of the lease: a compare-and-set of the record (bumping ``beat``:
proof the claim is still its own) and, only if that succeeded, the lease written again.
Another worker presumes the owner dead as soon as it finds the record in progress and
the owner's lease gone: no worker watches the record on its own clock, so a fresh
process (a CLI, a restarted proxy, a serverless worker) takes over a dead owner's claim
at once, and workers whose clocks disagree (or step) never take over a live one.

The lease is written before the record can be seen without it: with the record's claim
in one batch when the store makes batches atomic, else first. A claim's final transition
(completed, released, UNKNOWN) deletes the lease with it.

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
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from .stores import Store
from .stores._base import Op, batch, in_one_trip

DEFAULT_LEASE_S = 30.0
LEASE = 1  # the value of a lease entry: its key names the owner, its TTL is the lease


def new_owner() -> str:
    """A new claim's owner token: 64 random bits (it names the owner's lease; only the
    claims of one key must never share one)."""
    return secrets.token_hex(8)


def lease_key(rkey: str, owner: str) -> str:
    """The store key of ``owner``'s lease on the record ``rkey`` (same hash tag)."""
    return f"{rkey}:lease:{owner}"


def leased(store: Any, op: Op, claim: dict[str, Any]) -> list[Op]:
    """``op`` (an ``add`` or ``swap`` writing the in-progress record ``claim``) with the
    new owner's lease: after it and only if it succeeded when the store makes a batch
    atomically, else before it (the record is never seen without its lease). The result
    of ``op`` is at ``won_at(store)``; the last operation is ``op`` or depends on it."""
    lease = Op("set", lease_key(op.key, str(claim["owner"])), LEASE, ttl_s=claim["lease_s"])
    if in_one_trip(store):
        return [op, lease._replace(only_if=True)]
    return [lease, op]


def won_at(store: Any) -> int:
    """Where ``leased``'s own operation is in its results."""
    return 0 if in_one_trip(store) else 1


def claim_ops(store: Any, rkey: str, claim: dict[str, Any], gc_s: float) -> list[Op]:
    """A claim: the record's ``add`` with its lease, then the record when the add failed
    (``claim_results`` reads them)."""
    return [
        *leased(store, Op("add", rkey, claim, ttl_s=gc_s), claim),
        Op("get", rkey, only_if=False),
    ]


def claim_results(store: Any, results: list[Any]) -> tuple[bool, Any]:
    """(won, the record found) from the results of ``claim_ops``."""
    return results[won_at(store)] is True, results[2]


class Held:
    """One claim: its record as last written by this process."""

    def __init__(self, store: Store, rkey: str, record: dict[str, Any], gc_s: float) -> None:
        self.store = store
        self.rkey = rkey
        self.record = record
        self.gc_s = gc_s
        self.lease_s = float(record["lease_s"])
        self.owner = str(record["owner"])
        self.lease = lease_key(rkey, self.owner)
        self.renewed = time.monotonic()
        self.lost = False  # another worker changed the record: it is no longer ours
        self.late: concurrent.futures.Future[Any] | None = None  # an abandoned attempt
        self.running = True  # its attempt has not ended (see ``ended``)
        self.finish: Callable[[Held], dict[str, Any] | None] | None = None  # its final record
        self._lock = threading.Lock()

    def _ops(self, new: dict[str, Any] | None) -> list[Op]:
        """Our record replaced by ``new``, the record's swap last: a renewal writes the
        lease again after it (only if it succeeded), a final transition deletes it first."""
        swap = Op("swap", self.rkey, new, self.record, self.gc_s)
        if new is not None and new.get("state") == "in_progress":
            return [swap, Op("set", self.lease, LEASE, ttl_s=self.lease_s, only_if=True)]
        return [Op("swap", self.lease, None, LEASE), swap]

    def swap(self, new: dict[str, Any] | None) -> bool:
        """Replace our record by ``new`` (None deletes); False when it is no longer ours.
        Store errors propagate (the claim may still be ours)."""
        return bool(self.swap_with(new, [])[0])

    def swap_with(self, new: dict[str, Any] | None, ops: list[Op]) -> list[Any]:
        """``swap(new)`` with ``ops`` after it, in one ``batch``: its result, then theirs.
        ``new`` is final when ``ops`` are given (the record's swap is then the operation
        just before them, for the first one's ``only_if``)."""
        with self._lock:
            if self.lost:
                return [False, *batch(self.store, ops)] if ops else [False]
            own = self._ops(new)
            at = 0 if own[0].key == self.rkey else 1  # where the record's swap is
            results = batch(self.store, [*own, *ops])
            won = results[at] is True
            if won and new is not None:
                self.record, self.renewed = new, time.monotonic()
            elif not won:
                self.lost = True
            return [won, *results[len(own) :]]

    def ended(self, late: concurrent.futures.Future[Any] | None) -> None:
        """The attempt returned, or was abandoned and runs on as ``late``."""
        if late is None or late.done():
            self.running = False
        else:
            late.add_done_callback(lambda _: setattr(self, "running", False))

    def renew(self) -> bool:
        """Bump the beat (proof to observers that the record is still ours) and write the
        lease again: the store's clock counts a new ``lease_s``."""
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
            # wake the keeper only when it would look too late for this claim: a wake is a
            # thread switch per keyed write (bench/keyed_writes.py: 15-40% slower without)
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
