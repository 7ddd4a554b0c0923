"""What 1,000 concurrent sessions hold after 50 calls each, with the default MemoryStore.

    python bench/sessions_memory.py [--sessions 1000] [--calls 50]

Each session runs a coding agent's mix of tools, interleaved with the others' calls (all
sessions stay open): it reads source files (about 2 KB each, a file re-read after an edit
is a near-duplicate candidate, so the 5-gram comparison runs), searches (short results),
runs the tests (about 1 KB of output that changes a little between runs) and writes files.
Prints the bytes held per session (tracemalloc: the growth of the Python heap from before
the first session to after the last call, the tools' own data left out, divided by the
number of sessions), once with
the default audit and once with ``audit=[]`` (the audit's share is another issue's).
"""

from __future__ import annotations

import argparse
import gc
import random
import tracemalloc
from typing import Any

import headway

_WORDS = [
    "def",
    "return",
    "self",
    "value",
    "result",
    "config",
    "error",
    "session",
    "window",
    "state",
    "store",
    "record",
    "call",
    "tool",
    "step",
    "read",
    "write",
    "cache",
    "lock",
    "thread",
    "budget",
    "retry",
    "timeout",
    "limit",
    "count",
    "index",
    "key",
]


def source(rng: random.Random, path: str, lines: int) -> str:
    body = [f"# {path}"]
    for i in range(lines):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 8)))
        body.append(f"{'    ' * (i % 3)}{words}  # line {i}")
    return "\n".join(body)


def governor(audit: bool) -> headway.Governor:
    # the limit is out of reach: the bench measures memory, not stopping
    gov = headway.Governor(audit=None if audit else [], no_progress_limit=10**6)
    files: dict[str, str] = {}
    rng = random.Random(7)

    def read_file(path: str) -> str:
        if path not in files:
            files[path] = source(rng, path, 40)
        return files[path]

    def write_file(path: str, content: str) -> dict[str, Any]:
        old = files.get(path) or source(rng, path, 40)
        lines = old.splitlines()
        lines[len(lines) // 2] = content  # a one-line edit: a re-read is near the last read
        files[path] = "\n".join(lines)
        return {"ok": True, "bytes": len(files[path])}

    def search(query: str) -> str:
        return f"{query}: src/{query}.py:12, src/{query}_test.py:3"

    def run_tests(target: str) -> str:
        failed = rng.randint(0, 3)
        out = [f"collected 24 items from {target}"]
        out += [f"tests/test_{w}.py::test_{w}_{i} PASSED" for i, w in enumerate(_WORDS[:24])]
        out.append(f"{failed} failed, {24 - failed} passed in {rng.random():.2f}s")
        return "\n".join(out)

    gov.register("read_file", read_file, effect="read")
    gov.register("write_file", write_file, effect="write")
    gov.register("search", search, effect="read")
    gov.register("run_tests", run_tests, effect="read")
    return gov


def plan(session: int, calls: int) -> list[tuple[str, dict[str, Any]]]:
    rng = random.Random(session)
    steps: list[tuple[str, dict[str, Any]]] = []
    paths = [f"src/mod_{session}_{i}.py" for i in range(12)]
    while len(steps) < calls:
        path = rng.choice(paths)
        steps.append(("read_file", {"path": path}))
        steps.append(("search", {"query": rng.choice(_WORDS)}))
        steps.append(("write_file", {"path": path, "content": f"x = {rng.random()}"}))
        steps.append(("read_file", {"path": path}))
        steps.append(("run_tests", {"target": path}))
    return steps[:calls]


def held(sessions: int, calls: int, audit: bool) -> float:
    gov = governor(audit)
    plans = [plan(i, calls) for i in range(sessions)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    open_ = [gov.session(f"s{i}") for i in range(sessions)]
    for step in range(calls):  # interleaved: every session is open for the whole run
        for s, p in zip(open_, plans, strict=True):
            tool, args = p[step]
            s.call(tool, args)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    del open_
    gov.close()
    # the tools' own files (allocated in this script) are not the sessions'
    mine = (tracemalloc.Filter(False, __file__),)
    grown = sum(
        d.size_diff
        for d in after.filter_traces(mine).compare_to(before.filter_traces(mine), "filename")
    )
    return grown / sessions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=50)
    a = ap.parse_args()
    print(f"{a.sessions} sessions x {a.calls} calls, default MemoryStore")
    for audit in (True, False):
        per = held(a.sessions, a.calls, audit)
        label = "default audit" if audit else "audit=[]"
        print(f"  {label:<14} {per / 1024:8.1f} KiB per session")


if __name__ == "__main__":
    main()
