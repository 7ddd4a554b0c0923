"""A shared session's record swap alone, this version beside another, on each store.

    python bench/record_swap.py --base SRC [--n 500] [--rounds 9]

The swap-and-read batch a shared session sends at each step (a 4.4 KB record, the text
written by one swap expected by the next), through the store of this version and of the
version under ``SRC`` (imported as ``headway_base``), interleaved round by round; per
swap, the median round, and this / base paired round by round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Any

import orjson

import headway
from shared_sessions import load_base, stores


def swapper(hw: ModuleType, store: Any) -> Callable[[int], None]:
    base = sys.modules[hw.__name__ + ".stores._base"]
    pad = orjson.dumps([["price", "x" * 40, {"sku": 1}] for _ in range(80)]).decode()[:4400]
    key = f"record-{uuid.uuid4().hex}"
    last = [f"{pad}-1"]
    store.set(key, last[0])

    def swap(i: int) -> None:
        new = f"{pad}{i}"
        ops = [
            base.Op("swap", key, new, last[0], 86_400.0, durable=False),
            base.Op("get", key, only_if=False),
        ]
        assert base.batch(store, ops)[0] is True
        last[0] = new

    return swap


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--base", required=True, help="a src folder of another headway")
    a = parser.parse_args()
    versions = [load_base(a.base), headway]
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("| store | base: us per swap | this: us per swap | this / base |")
    print("|---|---:|---:|---:|")
    for name, opener in stores():
        made = [opener(hw) for hw in versions]
        fns = [swapper(hw, s) for hw, s in zip(versions, made, strict=True)]
        runs: list[list[float]] = [[], []]
        for r in range(a.rounds):
            for v in (0, 1) if r % 2 == 0 else (1, 0):
                t = time.perf_counter()
                for i in range(a.n):
                    fns[v](r * a.n + i)
                runs[v].append((time.perf_counter() - t) / a.n * 1e6)
        paired = statistics.median(x / y for x, y in zip(runs[1], runs[0], strict=True))
        med = [statistics.median(x) for x in runs]
        print(f"| {name} | {med[0]:.1f} | {med[1]:.1f} | {paired:.2f} |", flush=True)
        for s in made:
            s.close()
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
