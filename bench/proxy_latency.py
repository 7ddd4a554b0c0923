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
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fastmcp import Client
from fastmcp.client.transports import StdioTransport

UPSTREAM = Path(__file__).resolve().parents[1] / "tests" / "mcp_upstream.py"


async def measure(commands: dict[str, list[str]], calls: int, cwd: str) -> dict[str, list[float]]:
    """Per-call times of each path; the paths take turns call by call, so that the noise of
    a shared machine falls on all of them alike."""
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for name, command in commands.items():
            transport = StdioTransport(command=command[0], args=command[1:], cwd=cwd)
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
        }
        times = asyncio.run(measure(paths, args.calls, tmp))
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"{args.calls} calls per path, stdio, echo tool, paths taking turns (median / p90)")
    for name, t in times.items():
        p90 = statistics.quantiles(t, n=10)[-1]
        print(f"  {name:14s} median {medians[name] * 1000:7.3f} ms   p90 {p90 * 1000:7.3f} ms")
    direct = medians["direct"]
    for name in ("fastmcp proxy", "headway proxy"):
        added = medians[name] - direct
        print(f"  {name}: +{added * 1000:.3f} ms per call, {medians[name] / direct:.2f}x direct")
    governance = medians["headway proxy"] - medians["fastmcp proxy"]
    print(
        f"  headway's governance alone (headway proxy - fastmcp proxy): {governance * 1000:+.3f} ms"
    )


if __name__ == "__main__":
    main()
