"""Per-call latency of ``headway proxy`` over stdio, against a direct client->server call.

    python bench/proxy_latency.py [--calls 300]

Three paths to the same upstream (tests/mcp_upstream.py, its ``echo`` tool, a new argument
on every call so nothing is cached and every call reaches the upstream):

- direct: client -> upstream
- fastmcp proxy: client -> FastMCP's own proxy (no governance) -> upstream
- headway proxy: client -> ``headway proxy`` (SQLite store and audit, the defaults) -> upstream

Prints the median and p90 of each, the added latency and the ratio to the direct call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from fastmcp.server.middleware import Middleware

UPSTREAM = Path(__file__).resolve().parents[1] / "tests" / "mcp_upstream.py"
SRC = Path(__file__).resolve().parents[1] / "src"
# this checkout's headway in the proxy process (a stdio transport passes on only PATH,
# HOME and a few more by default)
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
}


async def measure(commands: dict[str, list[str]], calls: int, cwd: str) -> dict[str, list[float]]:
    """Per-call times of each path; the paths take turns call by call, so that the noise of
    a shared machine falls on all of them alike."""
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for name, command in commands.items():
            transport = StdioTransport(command=command[0], args=command[1:], cwd=cwd, env=ENV)
            clients[name] = await stack.enter_async_context(Client(transport, timeout=60))
        for i in range(20):  # warm up: imports, first connections, SQLite pages
            for client in clients.values():
                await client.call_tool("echo", {"text": f"warm {i}"})
        times: dict[str, list[float]] = {name: [] for name in clients}
        for i in range(calls):
            for name, client in clients.items():
                start = time.perf_counter()
                await client.call_tool("echo", {"text": f"call {i}"})
                times[name].append(time.perf_counter() - start)
    return times


async def governance(upstream: list[str], store: str | None, calls: int) -> list[float]:
    """Time spent in headway's middleware per call, the upstream call excluded (in process:
    a client talks to the proxy server in memory)."""
    import headway
    from headway import mcp_proxy
    from headway.audit import SQLiteAuditSink

    if store is None:
        gov = headway.Governor(audit=[])
    else:
        gov = headway.Governor(headway.SQLiteStore(store), audit=[SQLiteAuditSink(store)])
    middleware = mcp_proxy.Governance(gov, session_id="bench")
    server = mcp_proxy.build(gov, upstream, session_id="bench")
    server.middleware[:] = [m for m in server.middleware if type(m) is not mcp_proxy.Governance]
    overhead: list[float] = []

    class Timed(Middleware):
        async def on_call_tool(self, context: Any, call_next: Any) -> Any:
            inner = 0.0

            async def timed_next(ctx: Any) -> Any:
                nonlocal inner
                start = time.perf_counter()
                try:
                    return await call_next(ctx)
                finally:
                    inner += time.perf_counter() - start

            start = time.perf_counter()
            result = await middleware.on_call_tool(context, timed_next)
            overhead.append(time.perf_counter() - start - inner)
            return result

    server.add_middleware(Timed())
    async with Client(server, timeout=60) as client:
        for i in range(calls + 20):
            await client.call_tool("echo", {"text": f"call {i}"})
    gov.close()
    return overhead[20:]


def plain_proxy(upstream: list[str]) -> None:
    """Serve FastMCP's proxy without headway (run as a subprocess by this script)."""
    from fastmcp.server import create_proxy

    proxy = create_proxy(StdioTransport(command=upstream[0], args=upstream[1:]), name="plain")
    proxy.run("stdio", show_banner=False, log_level="WARNING")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--plain-proxy", action="store_true", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.plain_proxy:
        plain_proxy(rest[rest.index("--") + 1 :])
        return
    with tempfile.TemporaryDirectory(prefix="headway-bench-") as tmp:
        upstream = [sys.executable, str(UPSTREAM), str(Path(tmp) / "upstream.log")]
        paths = {
            "direct": upstream,
            "fastmcp proxy": [sys.executable, __file__, "--plain-proxy", "--", *upstream],
            "headway proxy": [sys.executable, "-m", "headway.cli", "proxy", "--", *upstream],
            "headway, memory": [
                *[sys.executable, "-m", "headway.cli", "proxy", "--store", "memory://"],
                *["--audit", str(Path(tmp) / "audit.jsonl"), "--", *upstream],
            ],
        }
        times = asyncio.run(measure(paths, args.calls, tmp))
        inside = {
            "memory store": asyncio.run(governance(upstream, None, args.calls)),
            "SQLite store + audit": asyncio.run(
                governance(upstream, str(Path(tmp) / "g.db"), args.calls)
            ),
        }
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"{args.calls} calls per path, stdio, echo tool, paths taking turns (median / p90)")
    for name, t in times.items():
        p90 = statistics.quantiles(t, n=10)[-1]
        print(f"  {name:14s} median {medians[name] * 1000:7.3f} ms   p90 {p90 * 1000:7.3f} ms")
    direct = medians["direct"]
    for name in ("fastmcp proxy", "headway proxy", "headway, memory"):
        added = medians[name] - direct
        print(f"  {name}: +{added * 1000:.3f} ms per call, {medians[name] / direct:.2f}x direct")
    hop = medians["headway proxy"] - medians["fastmcp proxy"]
    print(f"  headway proxy - fastmcp proxy: {hop * 1000:+.3f} ms")
    for name, t in inside.items():
        print(
            f"  governance alone, in process, {name}: median {statistics.median(t) * 1000:.3f} ms"
            f"   p90 {statistics.quantiles(t, n=10)[-1] * 1000:.3f} ms"
        )


if __name__ == "__main__":
    main()
