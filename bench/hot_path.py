"""The defaults' hot paths before and after, side by side in one process (issue 17).

    python bench/hot_path.py [--quick] [--base REV]

"before" is the package as it was at git revision REV (default: da96f2b, the start of
this work), extracted from git into a temporary directory and imported as
``headway_base`` beside the working tree's ``headway`` (its imports are relative). Both
run the rows of ``bench/overhead.py`` that issue 17 targets, with the same arguments and
settings, taking turns in short batches over many rounds; each keeps its best batch.
Prints microseconds per call, the ratio to the floor, and after/before.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import subprocess
import sys
import tarfile
import tempfile
import time
import timeit
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import headway
import overhead  # bench/overhead.py: the arguments, the tool and the floor

ROOT = Path(__file__).resolve().parent.parent


def load_base(rev: str, into: Path) -> types.ModuleType:
    """``src/headway`` at ``rev``, importable as ``headway_base``."""
    archive = subprocess.run(
        ["git", "archive", rev, "src/headway"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "src" / "headway").rename(into / "headway_base")
    sys.path.insert(0, str(into))
    return importlib.import_module("headway_base")


def rows_of(h: Any, nxt: Callable[[], dict[str, Any]]) -> tuple[dict[str, Callable[[], Any]], Any]:
    """The paths of one package version, set up as ``overhead.py`` sets them up."""
    gov = h.Governor(no_progress_limit=10**9)
    gov.register("cached", overhead.tool, effect="read", deterministic=True)
    gov.register("plain", overhead.tool, effect="read", timeout=None)
    gov.register("uncached", overhead.tool, effect="read")
    gov.register("write", overhead.tool, effect="write")
    budgets = overhead.unreachable_budgets(h)
    hit = gov.session("hit", budgets=budgets)
    defaults = gov.session("defaults")
    for v in overhead.VARIANTS:
        hit.call("cached", v)
    for _ in range(12_000):  # fill the audit: a hit then frees the record it replaces
        hit.call("cached", nxt())
    fresh = overhead.fresh_args()
    return {
        "cache hit": lambda: hit.call("cached", nxt()),
        "executed, inline (timeout=None)": lambda: defaults.call("plain", nxt()),
        "executed, inline, new arguments": lambda: defaults.call("plain", fresh()),
        "uncached read, defaults (thread)": lambda: defaults.call("uncached", nxt()),
        "unkeyed write, defaults (thread)": lambda: defaults.call("write", nxt()),
    }, defaults


def main() -> None:
    quick = "--quick" in sys.argv
    rev = sys.argv[sys.argv.index("--base") + 1] if "--base" in sys.argv else "da96f2b"
    batch, rounds = (300, 15) if quick else (300, 60)
    i = iter(range(10**12))

    def nxt() -> dict[str, Any]:
        return overhead.VARIANTS[next(i) % 64]

    with tempfile.TemporaryDirectory() as tmp:
        base = load_base(rev, Path(tmp))
        before, before_s = rows_of(base, nxt)
        after, after_s = rows_of(headway, nxt)
        rows: list[tuple[str, Callable[[], Any]]] = [("floor", lambda: overhead.floor_key(nxt()))]
        for name in before:
            rows += [("before " + name, before[name]), ("after " + name, after[name])]
        best = {name: float("inf") for name, _ in rows}
        for r in range(rounds):
            for name, fn in rows if r % 2 else rows[::-1]:  # neither side always goes first
                best[name] = min(best[name], timeit.timeit(fn, number=batch) / batch * 1e6)
        floor = best["floor"]
        print(f"before: {rev}; after: the working tree. floor {floor:.2f} us")
        print(f"{'path':<34} {'before us':>10} {'x floor':>8} {'after us':>10} {'x floor':>8}")
        for name in before:
            b, a = best["before " + name], best["after " + name]
            print(
                f"{name:<34} {b:>10.2f} {b / floor:>8.2f} {a:>10.2f} {a / floor:>8.2f}"
                f"   after/before {a / b:.2f}"
            )
        asyncio.run(_async_rows(before_s, after_s, nxt, rounds, 100))


async def _async_rows(
    before: Any, after: Any, nxt: Callable[[], dict[str, Any]], rounds: int, batch: int
) -> None:
    """``call`` and ``acall`` of the same sync tool (default timeout) in a running loop."""
    best: dict[str, float] = {}
    for _ in range(rounds):
        for side, s in (("before", before), ("after", after)):
            for how in ("call", "acall"):
                t0 = time.perf_counter()
                for _ in range(batch):
                    if how == "call":
                        s.call("uncached", nxt())
                    else:
                        await s.acall("uncached", nxt())
                us = (time.perf_counter() - t0) / batch * 1e6
                best[f"{side} {how}"] = min(best.get(f"{side} {how}", float("inf")), us)
    for side in ("before", "after"):
        c, a = best[f"{side} call"], best[f"{side} acall"]
        print(f"{side:<6} call {c:8.2f} us  acall {a:8.2f} us  acall/call {a / c:.2f}")


if __name__ == "__main__":
    main()
