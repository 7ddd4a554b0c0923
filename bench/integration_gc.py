"""What headway leaves for the garbage collector inside an agent framework's loop.

    python bench/integration_gc.py [--quick]

The runs of ``integration_agents.py`` (20 tool calls per run, one per model turn), each
mode on its own: GC-tracked objects still alive per tool call after the runs (what every
later collection walks again), and the collector's passes per 1,000 tool calls by
generation, with the time they took. Object counts are exact; times are this machine's.
The default ``Governor()`` keeps every call's audit record in memory (``MemoryAudit``).
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from typing import Any

from integration_agents import CALLS, openai_agents_run, pydantic_ai_run


def measure(make: Any, mode: str, runs: int) -> tuple[float, list[tuple[float, float]]]:
    run = make(mode, 1)
    passes = [[0, 0.0] for _ in range(3)]
    started = [0.0]

    def watch(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            passes[info["generation"]][0] += 1
            passes[info["generation"]][1] += time.perf_counter() - started[0]

    async def go() -> float:
        for i in range(5):  # warm up: imports, caches, the first session
            await run(i)
        gc.collect()
        before = len(gc.get_objects())
        gc.callbacks.append(watch)
        try:
            for i in range(runs):
                await run(100 + i)
        finally:
            gc.callbacks.remove(watch)
        gc.collect()
        return (len(gc.get_objects()) - before) / (runs * CALLS)

    retained = asyncio.run(go())
    calls = runs * CALLS
    return retained, [(n * 1000 / calls, t / calls * 1e6) for n, t in passes]


def main() -> None:
    runs = 20 if "--quick" in sys.argv else 100
    print(f"{runs} runs of {CALLS} tool calls (one per model turn), each mode on its own\n")
    print(
        "| framework | mode | objects retained per call | gen0 / gen1 / gen2 passes per "
        "1,000 calls | GC µs per call |"
    )
    print("|---|---|---:|---:|---:|")
    for framework, make in (
        ("OpenAI Agents SDK", openai_agents_run),
        ("Pydantic AI", pydantic_ai_run),
    ):
        for mode in ("plain", "headway"):
            retained, passes = measure(make, mode, runs)
            counts = " / ".join(f"{n:.1f}" for n, _ in passes)
            spent = sum(t for _, t in passes)
            print(f"| {framework} | {mode} | {retained:.1f} | {counts} | {spent:.1f} |")


if __name__ == "__main__":
    main()
