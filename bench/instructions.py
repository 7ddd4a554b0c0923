"""Instructions per call on the cache-hit and executed paths, two versions side by side.

    python bench/instructions.py --base /path/to/other/src

Wall-clock timings on a shared machine swing by 2x from one run to the next; instruction
counts do not. Each path runs under ``valgrind --tool=callgrind`` (valgrind must be
installed) for 1,000 and for 3,000 calls after a warm-up, and the difference over 2,000
calls is one call's count, start-up taken off. The setup is ``bench/overhead.py``'s (its arguments and budgets): small
nested arguments, a deterministic read served from the session cache ("hit"), a read with
retry and breaker that runs every time ("executed"), every budget set and never reached.
``PYTHONHASHSEED`` is fixed, so a run gives the same counts each time.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import headway
from overhead import VARIANTS, unreachable_budgets

HERE = Path(__file__).resolve()
SRC = HERE.parents[1] / "src"


def work(path: str, n: int) -> None:
    """The measured process: a warm-up, then ``n`` calls of one path."""

    def tool(**kwargs: Any) -> dict[str, Any]:
        return {"ticker": kwargs["ticker"], "pe": 28.1}

    gov = headway.Governor(no_progress_limit=10**9)
    gov.register("cached", tool, effect="read", deterministic=True)
    gov.register("guarded", tool, effect="read", timeout=None, retry=headway.Retry(attempts=3))
    budgets = unreachable_budgets(headway)
    session = gov.session(path, budgets=budgets)
    name = "cached" if path == "hit" else "guarded"
    for i in range(2000 + n):
        session.call(name, VARIANTS[i % 64])


def count(src: str, path: str, n: int) -> int:
    env = {**os.environ, "PYTHONPATH": src, "PYTHONHASHSEED": "0"}
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    out = subprocess.run(
        [*valgrind, sys.executable, str(HERE), "--work", path, str(n)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    found = re.search(r"refs:\s*([\d,]+)", out)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{out[-2000:]}")
    return int(found.group(1).replace(",", ""))


def per_call(src: str, path: str) -> int:
    return (count(src, path, 3000) - count(src, path, 1000)) // 2000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", help="the src folder of the other version (required)")
    ap.add_argument("--work", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.work:
        work(a.work[0], int(a.work[1]))
        return
    if not a.base:
        ap.error("--base SRC is required")
    print(f"{'path':10s} {'base':>10s} {'this':>10s}  this/base")
    for path in ("hit", "executed"):
        base, this = per_call(a.base, path), per_call(str(SRC), path)
        print(f"{path:10s} {base:10,d} {this:10,d}  {this / base:.3f}")


if __name__ == "__main__":
    main()
