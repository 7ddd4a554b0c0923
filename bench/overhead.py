"""Per-call overhead of headway beside the floor and hand-built equivalents, in one run.

    python bench/overhead.py [--quick]

Prints microseconds per call and the ratio to the floor (json.dumps(sort_keys) + sha256,
the least any argument key costs). All paths use the same small nested arguments, except
the 17 KB rows (a text argument of 17 KB, against the floor of those arguments) and the
"new arguments" rows (arguments never seen before on each call, against the floor of
those: both make the dict). The default-timeout rows run the tool in a worker thread;
their bound is 3x the floor plus one raw ``ThreadPoolExecutor`` hand-off (the TPE row
minus the floor). The async rows time ``call`` and ``acall`` of the same sync tool
inside one running event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
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


def fresh_args() -> Callable[[], dict[str, Any]]:
    """Arguments never seen before on each call, as an agent mostly sends: no memo of a
    summary or a secret scan can serve them (the 64 rotating variants hit those memos)."""
    n = iter(range(64, 10**12))
    return lambda: {**ARGS, "limit": next(n)}


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

    fresh = fresh_args()
    executed_step, cached_step = _detector_steps(gov, nxt)
    rows = [
        ("bare function call", lambda: tool(**nxt())),
        ("floor: json.dumps(sort_keys)+sha256", lambda: floor_key(nxt())),
        ("headway canonical key (fast path)", lambda: headway.canonical_json(nxt())),
        ("cachetools TTLCache hit (by hand)", cachetools_hit),
        ("tenacity + pybreaker executed (by hand)", tenacity_pybreaker),
        ("raw ThreadPoolExecutor hand-off (+ key)", raw_handoff),
        ("headway cache-hit path", lambda: hit_s.call("cached", nxt())),
        ("headway executed path (retry+breaker)", lambda: exec_s.call("guarded", nxt())),
        ("floor, new arguments each call", lambda: floor_key(fresh())),
        ("headway executed, new arguments each call", lambda: exec_s.call("guarded", fresh())),
        ("headway executed, default timeout (thread)", lambda: exec_s.call("threaded", nxt())),
        ("headway uncached read, defaults (thread)", lambda: default_s.call("uncached", nxt())),
        ("headway unkeyed write, defaults (thread)", lambda: default_s.call("write", nxt())),
        ("floor, 17 KB arguments", lambda: floor_key(nxt_big())),
        ("headway cache-hit path, 17 KB arguments", lambda: hit_s.call("cached", nxt_big())),
        ("detectors alone, executed step (+ key)", executed_step),
        ("detectors alone, cached step (+ key)", cached_step),
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
    new_floor = results["floor, new arguments each call"]
    print(f"{'path':<44} {'us/call':>9} {'x floor':>8}")
    for name, us in results.items():
        base = big_floor if "17 KB" in name else new_floor if "new arg" in name else floor
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
    key = results["headway canonical key (fast path)"]
    print("the detectors' share (Monitor.observation + after, the key's time taken off):")
    for label, step, row in (
        (
            "executed step",
            "detectors alone, executed step (+ key)",
            "headway executed path (retry+breaker)",
        ),
        ("cached step", "detectors alone, cached step (+ key)", "headway cache-hit path"),
    ):
        us = results[step] - key
        print(
            f"  {label:<14} {us:>7.2f} us = {us / floor:.2f}x floor,"
            f" {us / results[row]:.0%} of the {row[8:]!r} row"
        )
    asyncio.run(_async_rows(default_s, nxt, rounds, max(batch // 4, 100), pool))
    assert hit_s.call("cached", VARIANTS[0]).status is headway.Status.CACHED


def _detector_steps(
    gov: headway.Governor, nxt: Callable[[], dict[str, Any]]
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """The detectors alone (``Monitor.observation`` + ``after``, as settling a call makes
    them, plus the canonical key), fed the steps of the headway rows: an executed read of
    these arguments and result, and a served (cached) one."""
    from headway._call import result_text
    from headway._canonical import canonical_json
    from headway.detectors import Monitor
    from headway.outcome import CACHED, EXECUTED

    spec = gov.spec("plain")
    assert spec is not None
    value = tool(**ARGS)
    text = result_text(value)

    def stream(status: headway.Status) -> Callable[[], Any]:
        monitor = Monitor(
            limit=10**9,
            window=gov.window,
            normalizers=gov.normalizers,
            threshold=gov.similarity,
            detectors=gov.detectors,
        )
        index = iter(range(10**12))
        served = status is CACHED

        def step() -> Any:
            canon = canonical_json(nxt())
            obs = monitor.observation(
                next(index), "plain", "plain:" + canon, canon, "read", status,
                None if served else text, None, canon,
            )  # fmt: skip
            return monitor.after(spec, obs, None if served else value, 0.0, 10**9)

        return step

    return stream(EXECUTED), stream(CACHED)


async def _async_rows(
    s: headway.Session,
    nxt: Callable[[], dict[str, Any]],
    rounds: int,
    batch: int,
    pool: concurrent.futures.ThreadPoolExecutor,
) -> None:
    """``call`` and ``acall`` of the same sync tool (default timeout), taking turns inside
    one running loop; each keeps its best batch. Beside them, the same tool handed to a raw
    ``ThreadPoolExecutor`` waited for by a blocking ``result()`` and by awaiting
    ``loop.run_in_executor``: what waking an event loop from another thread costs."""
    loop = asyncio.get_running_loop()
    best = dict.fromkeys(("call", "acall", "raw result()", "raw run_in_executor"), float("inf"))
    for _ in range(rounds):
        for name in best:
            t0 = time.perf_counter()
            for _ in range(batch):
                if name == "call":
                    s.call("uncached", nxt())
                elif name == "acall":
                    await s.acall("uncached", nxt())
                elif name == "raw result()":
                    pool.submit(tool, **nxt()).result(timeout=30)
                else:
                    await loop.run_in_executor(pool, functools.partial(tool, **nxt()))
            best[name] = min(best[name], (time.perf_counter() - t0) / batch * 1e6)
    print("async, a sync tool with the default timeout, inside a running event loop:")
    print(f"  call  {best['call']:>9.2f} us")
    print(
        f"  acall {best['acall']:>9.2f} us  ({best['acall'] / best['call']:.2f}x call; target <= 1)"
    )
    raw_sync, raw_async = best["raw result()"], best["raw run_in_executor"]
    print(
        f"  raw ThreadPoolExecutor: result() {raw_sync:.2f} us, awaited run_in_executor"
        f" {raw_async:.2f} us ({raw_async / raw_sync:.2f}x; {raw_async - raw_sync:+.2f} us)"
    )
    print(f"  acall - call {best['acall'] - best['call']:+.2f} us")


if __name__ == "__main__":
    main()
