"""``headway proxy`` per call, driven by a raw JSON-RPC client: lower noise than an MCP client.

    python bench/proxy_raw.py [--calls 2000] [NAME=SRC ...]

Each path is a process over stdio in front of the same upstream (tests/mcp_upstream.py,
its ``echo`` tool, a new argument per call): ``direct`` (the upstream itself), ``relay``
(bench/proxy_latency.py's byte relay) and, for each NAME=SRC, ``headway proxy`` with its
defaults (a SQLite store and audit, a file of its own) run with the headway package of
SRC (say ``base=../headway-main/src this=src``). The paths take turns call by call, in a new
order each round; the client
writes a line and reads lines until the answer, so its own time is small and alike for
all. Prints each path's median and the CPU per call of its process (Linux ``/proc``), and of
that the share of its main thread (for headway: the event loop; the rest is mostly the
SQLite audit's writer thread).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("proxies", nargs="*", metavar="NAME=SRC", default=[f"this={ROOT / 'src'}"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="headway-raw-") as tmp:
        upstream = [sys.executable, str(ROOT / "tests" / "mcp_upstream.py"), f"{tmp}/up.log"]
        relay = [sys.executable, str(ROOT / "bench" / "proxy_latency.py"), "--byte-relay"]
        paths: dict[str, tuple[list[str], dict[str, str]]] = {
            "direct": (upstream, dict(os.environ)),
            "relay": ([*relay, "--", *upstream], dict(os.environ)),
        }
        for spec in args.proxies:
            name, _, src = spec.partition("=")
            store = f"sqlite:///{tmp}/{name}.db"
            command = [sys.executable, "-m", "headway.cli", "proxy", "--store", store]
            # absolute: the processes run in the temporary directory, where a relative
            # PYTHONPATH names nothing and the installed headway would run instead
            env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
            paths[name] = ([*command, "--", *upstream], env)
        procs = {
            name: subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                cwd=tmp,
            )
            for name, (command, env) in paths.items()
        }
        try:
            times, cpu = measure(procs, args.calls)
        finally:
            for proc in procs.values():
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait()
    print(f"{args.calls} calls per path, taking turns (median, p90, CPU per call of the process)")
    direct = statistics.median(times["direct"])
    for name, t in times.items():
        median = statistics.median(t)
        p90 = statistics.quantiles(t, n=10)[-1]
        print(
            f"  {name:10s} {median * 1000:7.3f} ms ({(median - direct) * 1000:+.3f})"
            f"  p90 {p90 * 1000:7.3f} ms"
            f"   CPU {cpu[name][0] * 1000:6.3f} ms (main thread {cpu[name][1] * 1000:6.3f})"
        )


def measure(
    procs: dict[str, subprocess.Popen[bytes]], calls: int
) -> tuple[dict[str, list[float]], dict[str, tuple[float, float]]]:
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
    hello["clientInfo"] = {"name": "raw", "version": "1"}
    for proc in procs.values():
        rpc(proc, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
        rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        for i in range(30):  # warm up: imports, connections, SQLite pages
            rpc(proc, call(i + 1, f"warm {i}"))
    times: dict[str, list[float]] = {name: [] for name in procs}
    before = {name: (cpu_seconds(p.pid), cpu_seconds(p.pid, p.pid)) for name, p in procs.items()}
    order = list(procs.items())
    shuffle = random.Random(12).shuffle
    for i in range(calls):
        shuffle(order)  # no path always runs right after the same other one
        for name, proc in order:
            start = time.perf_counter()
            answer = rpc(proc, call(100 + i, f"call {i}"))
            times[name].append(time.perf_counter() - start)
            assert "result" in answer, answer
    after = {name: (cpu_seconds(p.pid), cpu_seconds(p.pid, p.pid)) for name, p in procs.items()}
    return times, {
        name: (
            (after[name][0] - before[name][0]) / calls,
            (after[name][1] - before[name][1]) / calls,
        )
        for name in procs
    }


def call(rid: int, text: str) -> dict[str, Any]:
    params = {"name": "echo", "arguments": {"text": text}}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def rpc(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> Any:
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()
    if "id" not in message:
        return None
    while True:
        answer = json.loads(proc.stdout.readline())
        if answer.get("id") == message["id"]:
            return answer


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU seconds of a process, or of one of its threads."""
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
