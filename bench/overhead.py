"""Per-call overhead of headway beside the floor and hand-built equivalents, in one run.

    python bench/overhead.py [--quick]

Prints microseconds per call and the ratio to the floor (json.dumps(sort_keys) + sha256,
the least any argument key costs). All paths use the same small nested arguments, except
the 17 KB rows (a text argument of 17 KB, against the floor of those arguments). The
default-timeout rows run the tool in a worker thread; their bound is 3x the floor plus
one raw ``ThreadPoolExecutor`` hand-off (the TPE row minus the floor). The async rows
time ``call`` and ``acall`` of the same sync tool inside one running event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import sys
import time
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
# 17 KB of text, as an agent passes a file or a page: words, digits, punctuation, lines
_LINE = "The service returned {n} rows for account {n:05d}; see the notes, then retry.\n"
_TEXT = "".join(_LINE.format(n=n) for n in range(220))[:17_000]
BIG = [{**ARGS, "limit": i, "text": _TEXT} for i in range(64)]


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

    def nxt_big() -> dict[str, Any]:
        return BIG[next(i) % 64]

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

    # the least a call in a worker thread costs: the key, then a raw ThreadPoolExecutor
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)

    def raw_handoff() -> Any:
        a = nxt()
        floor_key(a)
        return pool.submit(tool, **a).result(timeout=30)

    # headway: hit path and executed path, detectors + budgets + in-memory audit on.
    # The rotation never repeats a call consecutively; the no-progress limit is raised so
    # that a benchmark of identical-shaped results is not stopped as a loop.
    gov = headway.Governor(no_progress_limit=10**9)
    gov.register("cached", tool, effect="read", deterministic=True)
    gov.register("plain", tool, effect="read", timeout=None)
    gov.register("guarded", tool, effect="read", timeout=None, retry=headway.Retry(attempts=3))
    gov.register("threaded", tool, effect="read", retry=headway.Retry(attempts=3))  # timeout 30 s
    gov.register("uncached", tool, effect="read")  # every option at its default
    gov.register("write", tool, effect="write")  # an unkeyed write, defaults; "cached" is there
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
    for v in (*VARIANTS, *BIG):
        hit_s.call("cached", v)
    exec_s = gov.session("exec", budgets=budgets)
    default_s = gov.session("defaults")  # the options a user leaves alone

    rows = [
        ("bare function call", lambda: tool(**nxt())),
        ("floor: json.dumps(sort_keys)+sha256", lambda: floor_key(nxt())),
        ("headway canonical key (fast path)", lambda: headway.canonical_json(nxt())),
        ("cachetools TTLCache hit (by hand)", cachetools_hit),
        ("tenacity + pybreaker executed (by hand)", tenacity_pybreaker),
        ("raw ThreadPoolExecutor hand-off (+ key)", raw_handoff),
        ("headway cache-hit path", lambda: hit_s.call("cached", nxt())),
        ("headway executed path (retry+breaker)", lambda: exec_s.call("guarded", nxt())),
        ("headway executed, default timeout (thread)", lambda: exec_s.call("threaded", nxt())),
        ("headway uncached read, defaults (thread)", lambda: default_s.call("uncached", nxt())),
        ("headway unkeyed write, defaults (thread)", lambda: default_s.call("write", nxt())),
        ("floor, 17 KB arguments", lambda: floor_key(nxt_big())),
        ("headway cache-hit path, 17 KB arguments", lambda: hit_s.call("cached", nxt_big())),
    ]
    print(
        "settings: in-memory audit on (the Governor's default), detectors on, every budget set"
        " on the first three headway rows; tools timeout=None (inline) on the first two, the"
        " default 30 s (a worker thread) on the rows marked thread; the 'defaults' rows set"
        " no option but effect= (a cached tool is registered, so writes invalidate)"
    )
    results = measure_all(rows, batch, rounds)
    floor = results["floor: json.dumps(sort_keys)+sha256"]
    big_floor = results["floor, 17 KB arguments"]
    print(f"{'path':<44} {'us/call':>9} {'x floor':>8}")
    for name, us in results.items():
        base = big_floor if "17 KB" in name else floor
        print(f"{name:<44} {us:>9.2f} {us / base:>8.2f}")
    handoff = results["raw ThreadPoolExecutor hand-off (+ key)"] - floor
    bound = 3 * floor + handoff
    print("targets (met?):")
    print(f"  cache hit <= 2x floor: {results['headway cache-hit path'] / floor:.2f}x")
    print(
        f"  cache hit, 17 KB <= 1.3x its floor: "
        f"{results['headway cache-hit path, 17 KB arguments'] / big_floor:.2f}x"
    )
    for name in (
        "headway uncached read, defaults (thread)",
        "headway unkeyed write, defaults (thread)",
    ):
        print(
            f"  {name[8:]} <= 3x floor + raw hand-off ({bound:.2f} us): {results[name]:.2f} us"
            f" = {results[name] / bound:.2f}x the bound"
        )
    asyncio.run(_async_rows(default_s, nxt, rounds, max(batch // 4, 100)))
    assert hit_s.call("cached", VARIANTS[0]).status is headway.Status.CACHED


async def _async_rows(
    s: headway.Session, nxt: Callable[[], dict[str, Any]], rounds: int, batch: int
) -> None:
    """``call`` and ``acall`` of the same sync tool (default timeout), taking turns inside
    one running loop; each keeps its best batch."""
    best = {"call": float("inf"), "acall": float("inf")}
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(batch):
            s.call("uncached", nxt())
        best["call"] = min(best["call"], (time.perf_counter() - t0) / batch * 1e6)
        t0 = time.perf_counter()
        for _ in range(batch):
            await s.acall("uncached", nxt())
        best["acall"] = min(best["acall"], (time.perf_counter() - t0) / batch * 1e6)
    print("async, a sync tool with the default timeout, inside a running event loop:")
    print(f"  call  {best['call']:>9.2f} us")
    print(
        f"  acall {best['acall']:>9.2f} us  ({best['acall'] / best['call']:.2f}x call; target <= 1)"
    )


if __name__ == "__main__":
    main()
