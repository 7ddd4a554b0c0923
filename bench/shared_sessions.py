"""What sharing a session across workers costs per call, on each shared store.

    python bench/shared_sessions.py [--n 400] [--rounds 5]

For each store (SQLite, Redis, PostgreSQL; the servers' rows are skipped when they are not
reachable): a keyed write (a new key each call, a cached tool registered, so every write
also invalidates the session's reads), a cached read (64 arguments in turn, served from
the store; a shared session's worker holds the entries it stored: ``Governor.held``) and
the same read with nothing held (``held`` emptied before each call: the entry looked up,
as on a worker that did not store it), each through a session shared by workers (the
default) and through today's in-process session on the same store
(``share_sessions=False``); last, the floor: the store alone, a cache entry's get against
a swap of a 4.4 KB session record. The two run interleaved, round by round, and each row
is the median round. ``ops`` counts store round trips per call (a wrapper around the store
counts them).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import headway

REDIS = "redis://127.0.0.1:6379/15"
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
_SKUS = 64


class Counting:
    """A store that counts its operations."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.blocking, self.ops = inner, inner.blocking, 0

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)
        if name in ("get", "set", "add", "swap", "delete", "batch"):  # a batch: one trip

            def counted(*args: Any) -> Any:
                self.ops += 1
                return fn(*args)

            return counted
        return fn


def path(store: Counting, shared: bool, kind: str) -> Callable[[int], Any]:
    # cached reads are no progress: a limit no run of this length reaches
    gov = headway.Governor(
        store=store,  # type: ignore[arg-type]
        share_sessions=shared,
        audit=[],
        no_progress_limit=10**9,
    )
    gov.register("pay", lambda order: {"ok": order}, effect="write", timeout=None)
    gov.register("price", lambda sku: {"sku": sku, "eur": 3}, effect="read", deterministic=True)
    run = uuid.uuid4().hex
    s = gov.session(run)
    if kind == "write":

        def write(i: int) -> Any:
            return s.call("pay", {"order": i}, idempotency_key=f"{run}-{i}")

        return write
    for sku in range(_SKUS):
        s.call("price", {"sku": sku})

    held = gov.held if kind == "lookup" else {}  # "lookup": emptied before each call

    def read(i: int) -> Any:
        held.clear()
        # a cycle longer than the detector window: served, never corrected
        return s.call("price", {"sku": i % _SKUS})

    return read


def floor(store: Counting, swap: bool) -> Callable[[int], Any]:
    """The store alone: a cache entry's get (what an in-process session's cached read
    costs the store) or a swap of a 4.4 KB record (what a shared session's costs)."""
    if not swap:
        store.inner.set("entry", {"v": {"sku": 1, "eur": 3}, "t": 0.0, "d": "x" * 64, "n": 20})
        return lambda i: store.get("entry")
    pad = "x" * 4400
    last = [f"{pad}-1"]
    store.inner.set("record", last[0])

    def swap_record(i: int) -> Any:
        new = f"{pad}{i}"
        assert store.swap("record", last[0], new, 86_400.0)
        last[0] = new

    return swap_record


def measure(fn: Callable[[int], Any], store: Counting, n: int, start: int) -> tuple[float, float]:
    ops = store.ops
    t0 = time.perf_counter()
    for i in range(start, start + n):
        fn(i)
    return (time.perf_counter() - t0) / n * 1e6, (store.ops - ops) / n


def stores() -> list[tuple[str, Callable[[], Any]]]:
    tmp = tempfile.mkdtemp()
    found: list[tuple[str, Callable[[], Any]]] = [
        ("sqlite", lambda: headway.open_store(f"sqlite:///{tmp}/bench.db"))
    ]
    for name, url in (("redis", REDIS), ("postgres", POSTGRES)):
        try:
            headway.open_store(url, prefix="bench:").close()
        except Exception as exc:
            print(f"{name}: skipped ({type(exc).__name__})")
            continue
        found.append(
            (name, lambda url=url: headway.open_store(url, prefix=f"b{uuid.uuid4().hex[:6]}:"))
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    a = parser.parse_args()
    print("| store | path | in-process session (us, ops) | shared session (us, ops) | ratio |")
    print("|---|---|---|---|---|")
    for name, opener in stores():
        for kind in ("write", "read", "lookup", "floor"):
            made = {shared: Counting(opener()) for shared in (False, True)}
            make = floor if kind == "floor" else lambda st, sh, kind=kind: path(st, sh, kind)
            fns = {shared: make(made[shared], shared) for shared in (False, True)}
            runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
            for r in range(a.rounds):  # interleaved: the machine's noise hits both alike
                for shared in (False, True) if r % 2 == 0 else (True, False):
                    runs[shared].append(measure(fns[shared], made[shared], a.n, r * a.n))
            local = statistics.median(t for t, _ in runs[False])
            shared_t = statistics.median(t for t, _ in runs[True])
            ops = {k: statistics.median(o for _, o in v) for k, v in runs.items()}
            label = {
                "write": "keyed write",
                "read": "cached read",
                "lookup": "cached read, not held",
                "floor": "the store alone: get / swap",
            }[kind]
            print(
                f"| {name} | {label} | {local:.0f} ({ops[False]:.1f}) | "
                f"{shared_t:.0f} ({ops[True]:.1f}) | {shared_t / local:.2f}x |"
            )
            for s in made.values():
                s.close()


if __name__ == "__main__":
    main()
