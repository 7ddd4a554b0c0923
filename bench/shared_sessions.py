"""What sharing a session across workers costs per call, on each shared store.

    python bench/shared_sessions.py [--n 400] [--rounds 5] [--base SRC]

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
counts them); on Redis and PostgreSQL, the bytes a call exchanges with the server follow,
counted at this process's sockets (``_probes``).

Issue 36's floor for a cached read on a shared session, measured in the rounds of the
cached read: the same read through a session in the process on a ``MemoryStore`` (the call
with no store) + one store read of the cache entry + one conditional write of a step's size
(a swap of a 300-byte value, not durable as a shared session's record write) on this store. Target: shared / floor <= 1.5x.

``--base SRC`` (a ``src`` folder holding another version of headway, say main's, from
``git archive main src``) runs that version too, in the same process, imported as
``headway_base``: the four variants take turns round by round, so that the two versions
meet the same load, and the last column is the shared session's time with this version
over the base's, paired round by round (median and range).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Any

import orjson

import headway
from _probes import SocketBytes

REDIS = "redis://127.0.0.1:6379/15"
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
_SKUS = 64
PORTS = {"redis": 6379, "postgres": 5432}


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


def path(hw: ModuleType, store: Counting, shared: bool, kind: str) -> Callable[[int], Any]:
    # cached reads are no progress: a limit no run of this length reaches
    gov = hw.Governor(
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


def floor(hw: ModuleType, store: Counting, swap: bool) -> Callable[[int], Any]:
    """The store alone: a cache entry's get (what an in-process session's cached read
    costs the store) or a swap of a 4.4 KB record sent as a shared session sends it (a
    batch of the swap and a read made only if it fails, not durable: ``Op.durable``)."""
    if not swap:
        store.inner.set("entry", {"v": {"sku": 1, "eur": 3}, "t": 0.0, "d": "x" * 64, "n": 20})
        return lambda i: store.get("entry")
    # a record's text: JSON, its quotes escaped when stored as a string
    base = sys.modules[hw.__name__ + ".stores._base"]
    Op = base.Op  # noqa: N806 - the class of the version measured
    # not durable (PostgreSQL: no wait for the WAL flush) where that version has the flag
    lazy = {"durable": False} if "durable" in Op._fields else {}
    pad = orjson.dumps([["price", "x" * 40, {"sku": 1}] for _ in range(80)]).decode()[:4400]
    last = [f"{pad}-1"]
    key = f"record-{uuid.uuid4().hex}"  # each version its own, in one SQLite file
    store.inner.set(key, last[0])

    def swap_record(i: int) -> Any:
        new = f"{pad}{i}"
        ops = [
            Op("swap", key, new, last[0], 86_400.0, **lazy),
            Op("get", key, only_if=False),
        ]
        assert base.batch(store, ops)[0] is True
        last[0] = new

    return swap_record


def composed_floor(hw: ModuleType, store: Counting) -> Callable[[int], Any]:
    """The store's part of the floor: a cache entry's read + a step-sized conditional write."""
    store.inner.set("entry", {"v": {"sku": 1, "eur": 3}, "t": 0.0, "d": "x" * 64, "n": 20})
    key = f"step-{uuid.uuid4().hex}"
    last = ["x" * 300]
    store.inner.set(key, last[0])

    base = sys.modules[hw.__name__ + ".stores._base"]
    # not durable, as a shared session writes its steps (PostgreSQL: no wait for the WAL)
    lazy = {"durable": False} if "durable" in base.Op._fields else {}

    def read_and_write(i: int) -> Any:
        store.get("entry")
        new = f"{i:08d}" + "x" * 292
        assert base.batch(store, [base.Op("swap", key, new, last[0], 86_400.0, **lazy)])[0]
        last[0] = new

    return read_and_write


def measure(
    fn: Callable[[int], Any], store: Counting, n: int, start: int, probe: SocketBytes | None
) -> tuple[float, float, float]:
    """(µs, store operations, bytes at the socket) per call."""
    ops = store.ops
    before = probe.read() if probe else (0, 0)
    t0 = time.perf_counter()
    for i in range(start, start + n):
        fn(i)
    took = (time.perf_counter() - t0) / n * 1e6
    after = probe.read() if probe else (0, 0)
    return took, (store.ops - ops) / n, (after[0] - before[0] + after[1] - before[1]) / n


def stores() -> list[tuple[str, Callable[[ModuleType], Any]]]:
    tmp = tempfile.mkdtemp()
    found: list[tuple[str, Callable[[ModuleType], Any]]] = [
        ("sqlite", lambda hw: hw.open_store(f"sqlite:///{tmp}/bench.db"))
    ]
    for name, url in (("redis", REDIS), ("postgres", POSTGRES)):
        try:
            headway.open_store(url, prefix="bench:").close()
        except Exception as exc:
            print(f"{name}: skipped ({type(exc).__name__})")
            continue
        found.append(
            (name, lambda hw, url=url: hw.open_store(url, prefix=f"b{uuid.uuid4().hex[:6]}:"))
        )
    return found


def load_base(src: str) -> ModuleType:
    """The headway package under ``src``, imported as ``headway_base`` (its own imports
    are relative, so it runs beside this one)."""
    init = os.path.join(src, "headway", "__init__.py")
    spec = importlib.util.spec_from_file_location(
        "headway_base", init, submodule_search_locations=[os.path.dirname(init)]
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["headway_base"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--base", help="a src folder of another headway, run beside this one")
    a = parser.parse_args()
    versions = [headway] if a.base is None else [load_base(a.base), headway]
    print(f"load average {os.getloadavg()[0]:.2f}")
    head = "| store | path |"
    if a.base is not None:
        head += " base: in-process / shared (us) | base: ratio |"
    head += " in-process session (us, ops, bytes) | shared session (us, ops, bytes) | ratio |"
    if a.base is not None:
        head += " shared: this / base |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for name, opener in stores():
        for kind in ("write", "read", "lookup", "floor"):
            variants: list[tuple[Any, Any]] = [
                (hw, shared) for hw in versions for shared in (False, True)
            ]
            made = {v: Counting(opener(v[0])) for v in variants}
            fns = {
                v: floor(v[0], made[v], v[1])
                if kind == "floor"
                else path(v[0], made[v], v[1], kind)
                for v in variants
            }
            if kind == "read":  # the floor's two parts, in the same rounds
                for part in ("memory", "store"):
                    v = (headway, part)
                    variants.append(v)
                    made[v] = Counting(
                        headway.MemoryStore() if part == "memory" else opener(headway)
                    )
                    fns[v] = (
                        path(headway, made[v], True, "read")
                        if part == "memory"
                        else composed_floor(headway, made[v])
                    )
            probe = SocketBytes(PORTS[name]) if name in PORTS else None
            runs: dict[Any, list[tuple[float, float, float]]] = {v: [] for v in variants}
            for r in range(a.rounds):  # interleaved: the machine's noise hits all alike
                for v in variants if r % 2 == 0 else variants[::-1]:
                    runs[v].append(measure(fns[v], made[v], a.n, r * a.n, probe))
            t = {v: statistics.median(m[0] for m in runs[v]) for v in variants}
            ops = {
                v: f"{statistics.median(m[1] for m in runs[v]):.1f}"
                + (f", {statistics.median(m[2] for m in runs[v]):,.0f} B" if probe else "")
                for v in variants
            }
            label = {
                "write": "keyed write",
                "read": "cached read",
                "lookup": "cached read, not held",
                "floor": "the store alone: get / swap",
            }[kind]
            this = (headway, False), (headway, True)
            row = f"| {name} | {label} |"
            if a.base is not None:
                old = (versions[0], False), (versions[0], True)
                row += f" {t[old[0]]:.0f} / {t[old[1]]:.0f} | {t[old[1]] / t[old[0]]:.2f}x |"
            row += (
                f" {t[this[0]]:.0f} ({ops[this[0]]}) | {t[this[1]]:.0f} ({ops[this[1]]})"
                f" | {t[this[1]] / t[this[0]]:.2f}x |"
            )
            if a.base is not None:
                paired = [x[0] / y[0] for x, y in zip(runs[this[1]], runs[old[1]], strict=True)]
                row += f" {statistics.median(paired):.2f} ({min(paired):.2f}-{max(paired):.2f}) |"
            print(row, flush=True)
            if kind == "read":
                mem, st = t[(headway, "memory")], t[(headway, "store")]
                print(
                    f"| {name} | floor: in-process call on memory {mem:.0f} + store read and"
                    f" step write {st:.0f} | | {mem + st:.0f} |"
                    f" shared / floor {t[this[1]] / (mem + st):.2f}x (target <= 1.5x) |",
                    flush=True,
                )
            for s in made.values():
                s.close()
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
