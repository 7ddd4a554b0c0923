"""What 1,000 concurrent sessions hold after 50 calls each, with the default MemoryStore.

    python bench/sessions_memory.py [--sessions 1000] [--calls 50] [--audit both|default|none]

Each session runs a coding agent's mix of tools, interleaved with the others' calls (all
sessions stay open): it reads source files (about 2 KB each, a file re-read after an edit
is a near-duplicate candidate, so the 5-gram comparison runs), searches (short results),
runs the tests (about 1 KB of output that changes a little between runs) and writes files.
Prints the bytes held per session (tracemalloc: the growth of the Python heap from before
the first session to after the last call, less the growth of the same calls made to the
tools without headway: their files; divided by the number of sessions), once with the
default audit and once with ``audit=[]`` (the audit's share is another issue's). Every
result is a new string, as a real tool's is: a session that keeps one pays for it.
"""

from __future__ import annotations

import argparse
import gc
import random
import tracemalloc
from collections.abc import Callable
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


def tools() -> dict[str, Callable[..., Any]]:
    """A coding agent's tools over files kept in memory. Every call returns a new string,
    as a real tool's result is (a file read from disk, a command's output)."""
    files: dict[str, list[str]] = {}
    rng = random.Random(7)

    def lines_of(path: str) -> list[str]:
        if path not in files:
            files[path] = source(rng, path, 40).splitlines()
        return files[path]

    def read_file(path: str) -> str:
        return "\n".join(lines_of(path))

    def write_file(path: str, content: str) -> dict[str, Any]:
        lines = lines_of(path)
        lines[len(lines) // 2] = content  # a one-line edit: a re-read is near the last read
        return {"ok": True, "bytes": sum(map(len, lines)) + len(lines) - 1}

    def search(query: str) -> str:
        return f"{query}: src/{query}.py:12, src/{query}_test.py:3"

    def run_tests(target: str) -> str:
        failed = rng.randint(0, 3)
        out = [f"collected 24 items from {target}"]
        out += [f"tests/test_{w}.py::test_{w}_{i} PASSED" for i, w in enumerate(_WORDS[:24])]
        out.append(f"{failed} failed, {24 - failed} passed in {rng.random():.2f}s")
        return "\n".join(out)

    return {
        "read_file": read_file,
        "write_file": write_file,
        "search": search,
        "run_tests": run_tests,
    }


def governor(audit: bool) -> headway.Governor:
    # the limit is out of reach: the bench measures memory, not stopping
    gov = headway.Governor(audit=None if audit else [], no_progress_limit=10**6)
    fns = tools()
    for name, effect in (
        ("read_file", "read"),
        ("write_file", "write"),
        ("search", "read"),
        ("run_tests", "read"),
    ):
        gov.register(name, fns[name], effect=effect)
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


def grown(run: Callable[[], object]) -> int:
    """Bytes by which the Python heap grew over ``run()``, what it returns still held."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    kept = run()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    del kept
    return sum(d.size_diff for d in after.compare_to(before, "filename"))


def held(sessions: int, calls: int, audit: bool) -> float:
    plans = [plan(i, calls) for i in range(sessions)]

    def tools_alone() -> object:  # the same calls without headway: the tools' own state
        fns = tools()
        for step in range(calls):
            for p in plans:
                tool, args = p[step]
                fns[tool](**args)
        return fns

    gov = governor(audit)

    def run() -> object:
        open_ = [gov.session(f"s{i}") for i in range(sessions)]
        for step in range(calls):  # interleaved: every session is open for the whole run
            for s, p in zip(open_, plans, strict=True):
                tool, args = p[step]
                s.call(tool, args)
        return open_

    own = grown(tools_alone)
    total = grown(run)
    gov.close()
    return (total - own) / sessions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument(
        "--audit", choices=("both", "default", "none"), default="both", help="which runs"
    )
    a = ap.parse_args()
    print(f"{a.sessions} sessions x {a.calls} calls, default MemoryStore")
    for audit in {"both": (True, False), "default": (True,), "none": (False,)}[a.audit]:
        per = held(a.sessions, a.calls, audit)
        label = "default audit" if audit else "audit=[]"
        print(f"  {label:<14} {per / 1024:8.1f} KiB per session")


if __name__ == "__main__":
    main()
