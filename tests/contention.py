"""A randomized schedule of contention on one shared session (issue 31: write epochs).

Several governors (workers) and threads call one session at once: cached reads of an
account's balance and keyed payments, with store errors injected at random. What must
hold: no read that starts after a payment was acknowledged returns a balance from before
it (0 stale reads), no key pays twice (0 duplicates), and every acknowledged payment
replays its own result (0 lost acknowledged results).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

import headway
from headway.stores._base import Op

_after = threading.local()  # store operations of this thread to fail next (a write's settle)


class Flaky:
    """A store whose operations (a batch: as a whole) fail at random, as a dropped
    connection would, before they are made; and the next ones of a thread whose write
    just ran, when the write says so (``_after.fail``)."""

    def __init__(self, inner: headway.Store, p: float, seed: int) -> None:
        self.inner, self.blocking, self.p = inner, inner.blocking, p
        self._rnd = random.Random(seed)
        self._lock = threading.Lock()
        self.on = True

    def _maybe(self) -> None:
        if getattr(_after, "fail", 0) > 0 and self.on:
            _after.fail -= 1
            raise headway.StoreError("injected: connection reset after the write ran")
        with self._lock:
            fail = self.on and self._rnd.random() < self.p
        if fail:
            raise headway.StoreError("injected: connection reset")

    def get(self, key: str) -> Any:
        self._maybe()
        return self.inner.get(key)

    def set(self, key: str, value: Any, ttl_s: float | None = None) -> None:
        self._maybe()
        self.inner.set(key, value, ttl_s)

    def add(self, key: str, value: Any, ttl_s: float | None = None) -> bool:
        self._maybe()
        return self.inner.add(key, value, ttl_s)

    def swap(self, key: str, expected: Any, value: Any, ttl_s: float | None = None) -> bool:
        self._maybe()
        return self.inner.swap(key, expected, value, ttl_s)

    def delete(self, key: str) -> None:
        self._maybe()
        self.inner.delete(key)

    def batch(self, ops: Sequence[Op]) -> list[Any]:
        self._maybe()
        return headway.stores._base.batch(self.inner, ops)

    def close(self) -> None:
        self.inner.close()


class Account:
    """The remote system: a balance and its version, bumped by every payment."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.version = 0
        self.paid: dict[str, int] = {}  # key -> times the payment ran
        self.acked = 0  # the newest version a caller was told about

    def balance(self) -> dict[str, int]:
        with self.lock:
            return {"version": self.version}

    def pay(self, key: str, fail_after: int = 0) -> dict[str, Any]:
        with self.lock:
            self.version += 1
            self.paid[key] = self.paid.get(key, 0) + 1
            _after.fail = fail_after  # the store fails while the write settles
            return {"key": key, "version": self.version}


def run_contention(
    make_store: Callable[[], headway.Store],
    *,
    workers: int = 3,
    threads: int = 3,
    calls: int = 60,
    p_fault: float = 0.03,
    p_settle: float = 0.2,
    seed: int = 31,
) -> dict[str, int]:
    """Every thread of every worker makes ``calls`` calls on the session "hot"; returns
    the counts (``stale``, ``duplicates`` and ``lost`` must be 0). ``p_fault``: each store
    operation fails; ``p_settle``: a write is followed by 1-3 failing operations."""
    account = Account()
    stores = [Flaky(make_store(), p_fault, seed + i) for i in range(workers)]
    govs = []
    for store in stores:
        gov = headway.Governor(store=store, no_progress_limit=10**6, deadline_s=30)
        gov.register("balance", account.balance, effect="read", deterministic=True)
        gov.register("pay", None, effect="write", timeout=None)  # run by each call: ``run=``
        govs.append(gov)
    counts = {"reads": 0, "cached": 0, "writes": 0, "stale": 0, "duplicates": 0, "lost": 0}
    acks: dict[str, Any] = {}
    keys: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(workers * threads)

    def work(gov: headway.Governor, rnd: random.Random, name: str) -> None:
        def pay(key: str) -> dict[str, Any]:
            fail = rnd.randint(1, 3) if rnd.random() < p_settle else 0
            return account.pay(key, fail)

        barrier.wait()
        s = gov.session("hot")
        for i in range(calls):
            if rnd.random() < 0.25:
                # a key another thread may use too: a concurrent duplicate
                key = f"{name}-{i}" if rnd.random() < 0.7 else f"shared-{rnd.randrange(8)}"
                with lock:
                    keys.append(key)
                out = s.call("pay", {"key": key}, idempotency_key=key, run=pay)
                if out.status in (headway.Status.EXECUTED, headway.Status.REPLAYED):
                    with lock:
                        counts["writes"] += 1
                        acks.setdefault(key, out.value)
                        if acks[key] != out.value:
                            counts["lost"] += 1
                        account.acked = max(account.acked, out.value["version"])
            else:
                floor = account.acked  # acknowledged before this read starts
                out = s.call("balance")
                if out.value is None:  # corrected: nothing served
                    continue
                with lock:
                    counts["reads"] += 1
                    counts["cached"] += out.status is headway.Status.CACHED
                    counts["stale"] += out.value["version"] < floor

    pool = [
        threading.Thread(
            target=work, args=(gov, random.Random(seed * 100 + i * 10 + t), f"w{i}t{t}")
        )
        for i, gov in enumerate(govs)
        for t in range(threads)
    ]
    for t in pool:
        t.start()
    for t in pool:
        t.join(600)
    for store in stores:
        store.on = False
    s = govs[0].session("hot")
    for key, result in acks.items():  # every acknowledged payment replays its own result
        again = s.call("pay", {"key": key}, idempotency_key=key, run=_never)
        if again.status is not headway.Status.REPLAYED or again.value != result:
            counts["lost"] += 1
    counts["duplicates"] = sum(n - 1 for n in account.paid.values() if n > 1)
    for gov in govs:
        gov.close()
    return counts


def _never(key: str) -> Any:
    raise AssertionError(f"an acknowledged payment ran again: {key}")
