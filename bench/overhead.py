"""Per-call overhead of headway beside the floor and hand-built equivalents, in one run.

    python bench/overhead.py [--quick]

Prints microseconds per call and the ratio to the floor (json.dumps(sort_keys) + sha256,
the least any argument key costs). All paths use the same small nested arguments.
"""

from __future__ import annotations

import hashlib
import json
import sys
import timeit
from collections.abc import Callable
from typing import Any

import cachetools
import pybreaker
import tenacity

import headway

ARGS = {
    "ticker": "AAPL",
    "filters": {"from": "2024-01-01", "fields": ["pe", "eps", "div"]},
    "limit": 10,
    "opts": [{"k": 1, "v": "x"}, {"k": 2, "v": True}],
}
VARIANTS = [{**ARGS, "limit": i} for i in range(64)]  # rotate so no call repeats its predecessor


def tool(**kwargs: Any) -> dict[str, Any]:
    return {"ticker": kwargs["ticker"], "pe": 28.1}


def floor_key(args: dict[str, Any]) -> str:
    return hashlib.sha256(
        json.dumps(args, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def measure_all(
    rows: list[tuple[str, Callable[[], Any]]], batch: int, rounds: int
) -> dict[str, float]:
    """Interleave short batches of every path over many rounds and keep each path's best
    batch: on a noisy machine the paths then see the same conditions, so ratios hold."""
    best = {name: float("inf") for name, _ in rows}
    for _ in range(rounds):
        for name, fn in rows:
            t = timeit.timeit(fn, number=batch)
            best[name] = min(best[name], t / batch * 1e6)
    return best


def main() -> None:
    quick = "--quick" in sys.argv
    batch, rounds = (500, 20) if quick else (1_000, 100)
    i = iter(range(10**12))

    def nxt() -> dict[str, Any]:
        return VARIANTS[next(i) % 64]

    # hand-built: cachetools TTLCache hit
    ttl_cache: cachetools.TTLCache[str, Any] = cachetools.TTLCache(maxsize=10_000, ttl=300)
    for v in VARIANTS:
        ttl_cache[floor_key(v)] = tool(**v)

    def cachetools_hit() -> Any:
        a = nxt()
        return ttl_cache[floor_key(a)]

    # hand-built: tenacity retry + pybreaker around the call, with the key computed
    breaker = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=30)
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(3),
        reraise=True,
        wait=tenacity.wait_random_exponential(multiplier=0.1, max=5),
    )

    def tenacity_pybreaker() -> Any:
        a = nxt()
        floor_key(a)
        return retrying(breaker.call, tool, **a)

    # headway: hit path and executed path, detectors + budgets + in-memory audit on.
    # The rotation never repeats a call consecutively; the no-progress limit is raised so
    # that a benchmark of identical-shaped results is not stopped as a loop.
    gov = headway.Governor(no_progress_limit=10**9)
    gov.register("cached", tool, effect="read", deterministic=True)
    gov.register("plain", tool, effect="read", timeout=None)
    gov.register("guarded", tool, effect="read", timeout=None, retry=headway.Retry(attempts=3))
    gov.register("threaded", tool, effect="read", retry=headway.Retry(attempts=3))  # timeout 30 s
    # budgets on: every kind set, with limits this run never reaches
    budgets = headway.Budgets(
        turns=10**9,
        tool_calls=10**9,
        per_tool_calls=10**9,
        retries_per_tool=10**9,
        wall_clock_s=10**9,
        tokens=10**12,
        cost=10.0**9,
    )
    hit_s = gov.session("hit", budgets=budgets)
    for v in VARIANTS:
        hit_s.call("cached", v)
    exec_s = gov.session("exec", budgets=budgets)

    def headway_hit() -> Any:
        return hit_s.call("cached", nxt())

    def headway_exec() -> Any:
        return exec_s.call("guarded", nxt())

    def headway_threaded() -> Any:
        return exec_s.call("threaded", nxt())

    rows = [
        ("bare function call", lambda: tool(**nxt())),
        ("floor: json.dumps(sort_keys)+sha256", lambda: floor_key(nxt())),
        ("headway canonical key (fast path)", lambda: headway.canonical_json(nxt())),
        ("cachetools TTLCache hit (by hand)", cachetools_hit),
        ("tenacity + pybreaker executed (by hand)", tenacity_pybreaker),
        ("headway cache-hit path", headway_hit),
        ("headway executed path (retry+breaker)", headway_exec),
        ("headway executed, default timeout (thread)", headway_threaded),
    ]
    print(
        "settings: in-memory audit on (the Governor's default), detectors on, every budget set;"
        " tools timeout=None (inline) except the last row (the default 30 s: a worker thread)"
    )
    results = measure_all(rows, batch, rounds)
    floor = results["floor: json.dumps(sort_keys)+sha256"]
    print(f"{'path':<42} {'us/call':>9} {'x floor':>8}")
    for name, us in results.items():
        print(f"{name:<42} {us:>9.2f} {us / floor:>8.2f}")
    assert hit_s.call("cached", VARIANTS[0]).status is headway.Status.CACHED


if __name__ == "__main__":
    main()
