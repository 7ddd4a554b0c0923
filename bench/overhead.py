"""Per-call overhead of headway beside the floor and hand-built equivalents, in one run.

    python bench/overhead.py [--quick] [--base SRC]

Prints microseconds per call and the ratio to the floor (json.dumps(sort_keys) + sha256,
the least any argument key costs). All paths use the same small nested arguments, except
the 17 KB rows (a text argument of 17 KB, against the floor of those arguments) and the
"new arguments" rows (arguments never seen before on each call, against the floor of
those: both make the dict). The default-timeout rows run the tool in a worker thread;
their bound is 3x the floor plus one raw ``ThreadPoolExecutor`` hand-off (the TPE row
minus the floor). The async rows time ``call`` and ``acall`` of the same sync tool
inside one running event loop.

``--base SRC`` (a ``src`` folder of another version of headway, say ``../headway-main/src``)
imports that version beside this one as ``headway_base`` (``shared_sessions.load_base``)
and runs every headway row of both, interleaved in the same rounds (the order reversed
every other round, so neither side always goes first): each row then prints base, this
and this / base, and the targets are checked for both.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import functools
import hashlib
import importlib
import json
import os
import time
import timeit
from collections.abc import Callable
from types import ModuleType
from typing import Any

import cachetools
import pybreaker
import tenacity

import headway
from shared_sessions import load_base

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
    for r in range(rounds):
        for name, fn in rows if r % 2 == 0 else rows[::-1]:
            t = timeit.timeit(fn, number=batch)
            best[name] = min(best[name], t / batch * 1e6)
    return best


def unreachable_budgets(h: ModuleType) -> Any:
    """Budgets on: every kind set, with limits a benchmark never reaches."""
    return h.Budgets(
        turns=10**9,
        tool_calls=10**9,
        per_tool_calls=10**9,
        retries_per_tool=10**9,
        wall_clock_s=10**9,
        tokens=10**12,
        cost=10.0**9,
    )


def headway_rows(
    h: ModuleType,
    nxt: Callable[[], dict[str, Any]],
    nxt_big: Callable[[], dict[str, Any]],
    fresh: Callable[[], dict[str, Any]],
) -> tuple[list[tuple[str, Callable[[], Any]]], Any, Any]:
    """The headway rows of one version (``headway`` or ``headway_base``), the session of
    the 'defaults' rows and that of the cache hits. Detectors, budgets and the in-memory
    audit are on. The rotation never repeats a call consecutively; the no-progress limit
    is raised so that a benchmark of identical-shaped results is not stopped as a loop."""
    gov = h.Governor(no_progress_limit=10**9)
    gov.register("cached", tool, effect="read", deterministic=True)
    gov.register("plain", tool, effect="read", timeout=None)
    gov.register("guarded", tool, effect="read", timeout=None, retry=h.Retry(attempts=3))
    gov.register("threaded", tool, effect="read", retry=h.Retry(attempts=3))  # timeout 30 s
    gov.register("uncached", tool, effect="read")  # every option at its default
    gov.register("write", tool, effect="write")  # an unkeyed write, defaults; "cached" is there
    budgets = unreachable_budgets(h)
    hit_s = gov.session("hit", budgets=budgets)
    for v in (*VARIANTS, *BIG):
        hit_s.call("cached", v)
    exec_s = gov.session("exec", budgets=budgets)
    default_s = gov.session("defaults")  # the options a user leaves alone
    executed_step, cached_step = _detector_steps(h, gov, nxt)
    return (
        [
            ("headway canonical key (fast path)", lambda: h.canonical_json(nxt())),
            ("headway cache-hit path", lambda: hit_s.call("cached", nxt())),
            ("headway executed path (retry+breaker)", lambda: exec_s.call("guarded", nxt())),
            ("headway executed, new arguments each call", lambda: exec_s.call("guarded", fresh())),
            ("headway executed, default timeout (thread)", lambda: exec_s.call("threaded", nxt())),
            ("headway uncached read, defaults (thread)", lambda: default_s.call("uncached", nxt())),
            ("headway unkeyed write, defaults (thread)", lambda: default_s.call("write", nxt())),
            ("headway cache-hit path, 17 KB arguments", lambda: hit_s.call("cached", nxt_big())),
            ("detectors alone, executed step (+ key)", executed_step),
            ("detectors alone, cached step (+ key)", cached_step),
        ],
        default_s,
        hit_s,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer and shorter rounds")
    parser.add_argument("--base", help="a src folder of another headway, run beside this one")
    a = parser.parse_args()
    batch, rounds = (500, 20) if a.quick else (1_000, 100)
    i = iter(range(10**12))

    def nxt() -> dict[str, Any]:
        return VARIANTS[next(i) % 64]

    def nxt_big() -> dict[str, Any]:
        return BIG[next(i) % 64]

    # hand-built: cachetools TTLCache hit (a TTL longer than any run: on a loaded machine the
    # whole run took over 300 s and the entries expired, a KeyError)
    ttl_cache: cachetools.TTLCache[str, Any] = cachetools.TTLCache(maxsize=10_000, ttl=86_400)
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

    fresh = fresh_args()
    versions = {"this": headway} if a.base is None else {"base": load_base(a.base), "this": headway}
    made = {label: headway_rows(h, nxt, nxt_big, fresh) for label, h in versions.items()}
    names = [name for name, _ in made["this"][0]]
    rows = [
        ("bare function call", lambda: tool(**nxt())),
        ("floor: json.dumps(sort_keys)+sha256", lambda: floor_key(nxt())),
        ("cachetools TTLCache hit (by hand)", cachetools_hit),
        ("tenacity + pybreaker executed (by hand)", tenacity_pybreaker),
        ("raw ThreadPoolExecutor hand-off (+ key)", raw_handoff),
        ("floor, new arguments each call", lambda: floor_key(fresh())),
        ("floor, 17 KB arguments", lambda: floor_key(nxt_big())),
    ]
    for n in range(len(names)):  # the versions' rows side by side, taking turns
        rows += [(f"{label}|{made[label][0][n][0]}", made[label][0][n][1]) for label in versions]
    print(
        "settings: in-memory audit on (the Governor's default), detectors on, every budget set"
        " on the first three headway rows; tools timeout=None (inline) on the first two, the"
        " default 30 s (a worker thread) on the rows marked thread; the 'defaults' rows set"
        " no option but effect= (a cached tool is registered, so writes invalidate)"
    )
    print(f"load average {os.getloadavg()[0]:.2f}; versions: {', '.join(versions)}")
    results = measure_all(rows, batch, rounds)
    floor = results["floor: json.dumps(sort_keys)+sha256"]
    big_floor = results["floor, 17 KB arguments"]
    new_floor = results["floor, new arguments each call"]

    def base_of(name: str) -> float:
        return big_floor if "17 KB" in name else new_floor if "new arg" in name else floor

    head = f"{'path':<44} {'us/call':>9} {'x floor':>8}"
    if a.base is not None:
        head += f" {'base us':>9} {'x floor':>8} {'this/base':>9}"
    print(head)
    for name, _ in rows[:7]:
        print(f"{name:<44} {results[name]:>9.2f} {results[name] / base_of(name):>8.2f}")
    for name in names:
        us = results["this|" + name]
        line = f"{name:<44} {us:>9.2f} {us / base_of(name):>8.2f}"
        if a.base is not None:
            b = results["base|" + name]
            line += f" {b:>9.2f} {b / base_of(name):>8.2f} {us / b:>9.2f}"
        print(line)
    handoff = results["raw ThreadPoolExecutor hand-off (+ key)"] - floor
    bound = 3 * floor + handoff
    for label in versions:
        r = {name: results[f"{label}|{name}"] for name in names}
        print(f"targets (met?), {label}:")
        print(f"  cache hit <= 2x floor: {r['headway cache-hit path'] / floor:.2f}x")
        print(
            f"  cache hit, 17 KB <= 1.3x its floor: "
            f"{r['headway cache-hit path, 17 KB arguments'] / big_floor:.2f}x"
        )
        for name in (
            "headway uncached read, defaults (thread)",
            "headway unkeyed write, defaults (thread)",
        ):
            print(
                f"  {name[8:]} <= 3x floor + raw hand-off ({bound:.2f} us): {r[name]:.2f} us"
                f" = {r[name] / bound:.2f}x the bound"
            )
        key = r["headway canonical key (fast path)"]
        print("  the detectors' share (Monitor.observation + after, the key's time taken off):")
        for what, step, row in (
            (
                "executed step",
                "detectors alone, executed step (+ key)",
                "headway executed path (retry+breaker)",
            ),
            ("cached step", "detectors alone, cached step (+ key)", "headway cache-hit path"),
        ):
            us = r[step] - key
            print(
                f"    {what:<14} {us:>7.2f} us = {us / floor:.2f}x floor,"
                f" {us / r[row]:.0%} of the {row[8:]!r} row"
            )
    sessions = {label: made[label][1] for label in versions}
    asyncio.run(_async_rows(sessions, nxt, rounds, max(batch // 4, 100), pool))
    for label, h in versions.items():
        assert made[label][2].call("cached", VARIANTS[0]).status is h.Status.CACHED


def _detector_steps(
    h: ModuleType, gov: Any, nxt: Callable[[], dict[str, Any]]
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """The detectors alone (``Monitor.observation`` + ``after``, as settling a call makes
    them, plus the canonical key), fed the steps of the headway rows: an executed read of
    these arguments and result, and a served (cached) one."""
    result_text = importlib.import_module(h.__name__ + "._call").result_text
    canonical_json = importlib.import_module(h.__name__ + "._canonical").canonical_json
    monitor_class = importlib.import_module(h.__name__ + ".detectors").Monitor
    outcome = importlib.import_module(h.__name__ + ".outcome")

    spec = gov.spec("plain")
    assert spec is not None
    value = tool(**ARGS)
    text = result_text(value)

    def stream(status: Any) -> Callable[[], Any]:
        monitor = monitor_class(
            limit=10**9,
            window=gov.window,
            normalizers=gov.normalizers,
            threshold=gov.similarity,
            detectors=gov.detectors,
        )
        index = iter(range(10**12))
        served = status is outcome.CACHED

        def step() -> Any:
            canon = canonical_json(nxt())
            obs = monitor.observation(
                next(index), "plain", "plain:" + canon, canon, "read", status,
                None if served else text, None, canon,
            )  # fmt: skip
            return monitor.after(spec, obs, None if served else value, 0.0, 10**9)

        return step

    return stream(outcome.EXECUTED), stream(outcome.CACHED)


async def _async_rows(
    sessions: dict[str, Any],
    nxt: Callable[[], dict[str, Any]],
    rounds: int,
    batch: int,
    pool: concurrent.futures.ThreadPoolExecutor,
) -> None:
    """``call`` and ``acall`` of the same sync tool (default timeout), taking turns inside
    one running loop, for each version; each keeps its best batch. Beside them, the same
    tool handed to a raw ``ThreadPoolExecutor`` waited for by a blocking ``result()`` and
    by awaiting ``loop.run_in_executor``: what waking an event loop from another thread
    costs."""
    loop = asyncio.get_running_loop()
    names = [f"{label} {how}" for label in sessions for how in ("call", "acall")]
    best = dict.fromkeys((*names, "raw result()", "raw run_in_executor"), float("inf"))
    for r in range(rounds):
        for name in best if r % 2 == 0 else list(best)[::-1]:
            label, _, how = name.partition(" ")
            t0 = time.perf_counter()
            for _ in range(batch):
                if label == "raw":
                    if how == "result()":
                        pool.submit(tool, **nxt()).result(timeout=30)
                    else:
                        await loop.run_in_executor(pool, functools.partial(tool, **nxt()))
                elif how == "call":
                    sessions[label].call("uncached", nxt())
                else:
                    await sessions[label].acall("uncached", nxt())
            best[name] = min(best[name], (time.perf_counter() - t0) / batch * 1e6)
    print("async, a sync tool with the default timeout, inside a running event loop:")
    for label in sessions:
        c, a = best[f"{label} call"], best[f"{label} acall"]
        print(
            f"  {label}: call {c:>9.2f} us, acall {a:>9.2f} us ({a / c:.2f}x call;"
            f" target <= 1; acall - call {a - c:+.2f} us)"
        )
    raw_sync, raw_async = best["raw result()"], best["raw run_in_executor"]
    print(
        f"  raw ThreadPoolExecutor: result() {raw_sync:.2f} us, awaited run_in_executor"
        f" {raw_async:.2f} us ({raw_async / raw_sync:.2f}x; {raw_async - raw_sync:+.2f} us)"
    )


if __name__ == "__main__":
    main()
