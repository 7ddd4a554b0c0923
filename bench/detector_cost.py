"""Detector cost stays flat as a session grows; session memory stays bounded.

    python bench/detector_cost.py [--quick] [--base SRC]

Measures, in one run, the per-call cost of all detectors together (the session's
Monitor: before() + observation() + after()) at step 10 and at step 10,000 of one
session, and the full per-call cost through a Governor at both points. Results are real
tool results (mini-swe-agent observations, up to 800 characters) read from
../shared/traces when present, else synthetic texts; three tools, 50 argument sets.
Then the Monitor over recorded calls with their real arguments (CPU time), and the
traced memory of one session after 1,000 and 10,000 calls (each result a new
string, as a tool's is: what the window keeps of it is counted).

``--base SRC`` (another version's ``src`` folder) runs only the recorded calls (and
browser-use's full pages): that version's Monitor and this one's over the same calls, in
the same rounds, taking turns; it prints this / base per source.
"""

from __future__ import annotations

import gzip
import json
import random
import sys
import time
import tracemalloc
import types
from pathlib import Path
from typing import Any

import headway
from headway._spec import ToolSpec
from headway.detectors import Monitor
from headway.outcome import Status
from headway.similarity import DEFAULT_NORMALIZERS

TRACES = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "traces"
    / "miniswe_gemini3pro_swebv.calls.jsonl.gz"
)
SPECS = {
    t: ToolSpec(name=t, fn=lambda **_: None, effect="read") for t in ("search", "open", "grep")
}


def corpus(n: int) -> list[str]:
    """Real tool results (mini-swe-agent observations) when the traces are here; else
    synthetic texts over a large vocabulary."""
    if TRACES.exists():
        with gzip.open(TRACES, "rt", encoding="utf-8") as fh:
            texts = [json.loads(line)["observation"] for _, line in zip(range(n), fh, strict=False)]
        return [t for t in texts if len(t) >= 64] or texts
    rnd = random.Random(3)
    vocab = [
        "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(3, 9)))
        for _ in range(5000)
    ]
    return [" ".join(rnd.choice(vocab) for _ in range(rnd.randint(20, 150))) for _ in range(n)]


TEXTS = corpus(4000)
PAGES_FILE = TRACES.with_name("wai_browseruse_gemini.calls.jsonl.gz")


def pages(n: int) -> list[str]:
    """Full browser pages (browser-use text mode, up to 64 KiB) when the traces are here."""
    if not PAGES_FILE.exists():
        return []
    with gzip.open(PAGES_FILE, "rt", encoding="utf-8") as fh:
        texts = [json.loads(line)["observation"] for _, line in zip(range(n), fh, strict=False)]
    return [t for t in texts if len(t) >= 4096]


def feed(m: Monitor, step: int, rnd: random.Random) -> None:
    tool = ("search", "open", "grep")[step % 3]
    key = f"{tool}:{rnd.randint(0, 50)}"
    result = (" " + TEXTS[step % len(TEXTS)])[1:]  # a new string, as a tool's result is
    m.before(SPECS[tool], key, "read", key)
    obs = m.observation(step, tool, key, key[-8:], "read", Status.EXECUTED, result)
    m.after(SPECS[tool], obs, None, now=float(step), session_limit=10**9)


def monitor(steps: int, rnd: random.Random) -> Monitor:
    m = Monitor(limit=10**9, window=32, normalizers=DEFAULT_NORMALIZERS)
    for i in range(steps):
        feed(m, i, rnd)
    return m


def per_step(monitors: list[Monitor], start: int, rnd: random.Random) -> float:
    """Mean seconds for one step at ``start`` over fresh monitors (or consecutive steps)."""
    t0 = time.perf_counter()
    for i, m in enumerate(monitors):
        feed(m, start + (0 if len(monitors) > 1 else i), rnd)
    return (time.perf_counter() - t0) / len(monitors)


def main() -> None:
    global TEXTS
    quick = "--quick" in sys.argv
    rounds = 5 if quick else 15
    rnd = random.Random(7)
    if "--base" in sys.argv:  # only the recorded calls, both versions taking turns
        recorded_cost(rounds, sys.argv[sys.argv.index("--base") + 1])
        return
    monitor_cost("detectors (Monitor) per call", rounds, rnd)
    browser = pages(600)
    if browser:
        small_texts, TEXTS = TEXTS, browser
        monitor_cost(
            f"detectors per call on full browser pages ({sum(map(len, browser)) // len(browser):,} chars on average)",
            max(3, rounds // 3),
            rnd,
        )
        TEXTS = small_texts
    recorded_cost(rounds)
    governor_cost(rounds, rnd)


def _judge(version: Any, calls: list[tuple[str, str, str]]) -> float:
    """CPU seconds per call of ``version``'s Monitor over ``calls`` (browser actions'
    ``index`` read as an element, as by default)."""
    specs = {t: version.ToolSpec(name=t, fn=lambda **_: None, effect="read") for t, _, _ in calls}
    m = version.Monitor(limit=10**9, window=32, normalizers=version.DEFAULT_NORMALIZERS)
    executed = version.Status.EXECUTED
    t0 = time.process_time()
    for i, (tool, args, text) in enumerate(calls):
        key = f"{tool}:{args}"
        if m.may_correct(key):
            m.before(specs[tool], key, "read", args)
        obs = m.observation(i, tool, key, args, "read", executed, text, None, args, ("index",))
        m.after(specs[tool], obs, None, float(i), 10**9)
    return (time.process_time() - t0) / len(calls)


def _version(module: Any) -> Any:
    """The classes ``_judge`` needs, from this headway or another one (``--base``)."""
    name = module.__name__
    parts = {
        "Monitor": "detectors",
        "ToolSpec": "_spec",
        "Status": "outcome",
        "DEFAULT_NORMALIZERS": "similarity",
    }
    return types.SimpleNamespace(
        **{k: getattr(sys.modules[f"{name}.{m}"], k) for k, m in parts.items()}
    )


def recorded_cost(rounds: int, base: str | None = None) -> None:
    """The Monitor over recorded calls with their own arguments (the arguments'
    similarity is judged too: the synthetic keys above are too short for it), in CPU
    time: a loaded machine moves it less than wall time. With ``base``, that version's
    Monitor takes turns with this one's over the same calls."""
    versions = [_version(headway)]
    if base is not None:
        sys.path.insert(0, str(Path(__file__).parent))
        from shared_sessions import load_base

        versions.insert(0, _version(load_base(base)))
    for name in ("miniswe_gemini3pro_swebv", "codetracer_claudecode_tb1", "wai_browseruse_gemini"):
        path = TRACES.with_name(f"{name}.calls.jsonl.gz")
        if not path.exists():
            continue
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            rows = [json.loads(line) for _, line in zip(range(3000), fh, strict=False)]
        calls = [
            (r["tool"], json.dumps(r["args"], sort_keys=True), r["observation"])
            for r in rows
            if isinstance(r["observation"], str)
        ]
        best = [float("inf")] * len(versions)
        for r in range(max(2, rounds // 3) * len(versions)):
            turn = r % len(versions) if r // len(versions) % 2 == 0 else -1 - r % len(versions)
            best[turn] = min(best[turn], _judge(versions[turn], calls))
        print(f"detectors per call, {len(calls):,} recorded calls of {name} (CPU time)")
        if base is None:
            print(f"  mean over the run: {best[0] * 1e6:8.1f} us")
        else:
            print(
                f"  base {best[0] * 1e6:8.1f} us, this {best[1] * 1e6:8.1f} us: "
                f"this / base {best[1] / best[0]:.3f}"
            )


def monitor_cost(title: str, rounds: int, rnd: random.Random) -> None:
    big = monitor(10_000, rnd)
    best_small, best_big = float("inf"), float("inf")
    for _ in range(rounds):
        smalls = [monitor(10, rnd) for _ in range(200)]
        best_small = min(best_small, per_step(smalls, 10, rnd))
        t0 = time.perf_counter()
        for i in range(200):
            feed(big, 10_000 + i, rnd)
        best_big = min(best_big, (time.perf_counter() - t0) / 200)
    print(title)
    print(f"  at step 10:      {best_small * 1e6:8.1f} us")
    print(f"  at step 10,000:  {best_big * 1e6:8.1f} us   ratio {best_big / best_small:.2f}")


def governor_cost(rounds: int, rnd: random.Random) -> None:
    # the whole call through a Governor, at step ~10 (best of fresh sessions) and at
    # step ~10,000 of one long session (best of batches)
    gov = headway.Governor(no_progress_limit=10**9)
    results = iter(TEXTS * 40)
    for t in ("search", "open", "grep"):
        gov.register(t, lambda q: next(results), effect="read", timeout=None)  # inline

    def calls(s: headway.Session, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            s.call(rnd.choice(("search", "open", "grep")), {"q": rnd.randint(0, 50)})
        return (time.perf_counter() - t0) / n

    early = float("inf")
    for k in range(rounds * 2):
        fresh = gov.session(f"short-{k}")
        calls(fresh, 10)
        early = min(early, calls(fresh, 20))
    s = gov.session("long")
    while s.steps < 10_000:
        s.call(rnd.choice(("search", "open", "grep")), {"q": rnd.randint(0, 50)})
    late = min(calls(s, 20) for _ in range(rounds * 2))
    print("whole call through a Governor")
    print(f"  at step ~10:     {early * 1e6:8.1f} us")
    print(f"  at step ~10,000: {late * 1e6:8.1f} us   ratio {late / early:.2f}")

    # memory of one session's state (its Monitor, meter and counters), audit kept apart
    for n in (1_000, 10_000):
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        m = monitor(n, rnd)
        after = tracemalloc.take_snapshot()
        size = sum(st.size_diff for st in after.compare_to(before, "filename"))
        tracemalloc.stop()
        print(
            f"session detector state after {n:>6,} calls: {size / 1024:8.1f} KiB (window {m.window.maxlen})"
        )


if __name__ == "__main__":
    main()
