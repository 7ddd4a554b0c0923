"""Per-call latency of ``headway proxy`` over stdio, against a direct client->server call.

    python bench/proxy_latency.py [--calls 300] [--base SRC]

Paths to the same upstream (tests/mcp_upstream.py, its ``echo`` tool, a new argument on
every call so nothing is cached and every call reaches the upstream), taking turns call by
call:

- direct: client -> upstream
- fastmcp proxy: client -> FastMCP's own proxy (``create_proxy``, no governance) -> upstream
- byte relay: client -> lines passed on, nothing parsed (the floor of a hop in Python)
- headway proxy: client -> ``headway proxy`` (SQLite store and audit, the defaults) -> upstream
- headway, memory: the same with ``--store memory://`` and a JSONL audit
- headway, base (with ``--base SRC``): the defaults again, with the headway package of
  another checkout's ``src`` (say ``../headway-main/src``), for a before/after in one run

Prints the median and p90 of each, the added latency and the ratio to the direct call,
headway's share over the byte relay, and headway's decision work alone, in process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fastmcp import Client
from fastmcp.client.transports import StdioTransport

UPSTREAM = Path(__file__).resolve().parents[1] / "tests" / "mcp_upstream.py"
SRC = Path(__file__).resolve().parents[1] / "src"
# this checkout's headway in the proxy process (a stdio transport passes on only PATH,
# HOME and a few more by default)
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
}


async def measure(
    commands: dict[str, list[str]], calls: int, cwd: str, envs: dict[str, dict[str, str]]
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Per-call times of each path, and the CPU seconds per call of the process the client
    talks to (the proxy; for the direct path, the upstream). The paths take turns call by
    call, so that the noise of a shared machine falls on all of them alike; CPU time is
    what that noise stretches, and does not depend on it as much."""
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for name, command in commands.items():
            env = envs.get(name, ENV)
            transport = StdioTransport(command=command[0], args=command[1:], cwd=cwd, env=env)
            clients[name] = await stack.enter_async_context(Client(transport, timeout=60))
        for i in range(20):  # warm up: imports, first connections, SQLite pages
            for client in clients.values():
                await client.call_tool("echo", {"text": f"warm {i}"})
        times: dict[str, list[float]] = {name: [] for name in clients}
        before = cpu_seconds(commands)
        for i in range(calls):
            for name, client in clients.items():
                start = time.perf_counter()
                await client.call_tool("echo", {"text": f"call {i}"})
                times[name].append(time.perf_counter() - start)
        after = cpu_seconds(commands)
    cpu = {name: (after[name] - before[name]) / calls for name in after if name in before}
    return times, cpu


def cpu_seconds(commands: dict[str, list[str]]) -> dict[str, float]:
    """User + system CPU seconds of this process's children, by the path that started
    them (Linux ``/proc``; empty elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    found: dict[str, float] = {}
    for children in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        for pid in children.read_text().split():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # it ended meanwhile
            for name, command in commands.items():
                if argv[1:] == command[1:]:
                    found[name] = (int(fields[11]) + int(fields[12])) / tick
    return found


async def governance(store: str | None, calls: int, upstream: list[str] | None) -> list[float]:
    """Headway's own time per call in the relay's path (``govern`` and the JSON answer), the
    time of the upstream call excluded. ``store``: None (memory, no audit), a ``.jsonl``
    file (memory, that audit: the "headway, memory" path) or a SQLite file (store and
    audit: the default path). ``upstream=None``: an answer at hand (the decision
    work alone, nothing else running); else a real JSON-RPC round trip to the upstream
    process (the same work beside the process it waits for, as in the proxy)."""
    import headway
    from headway._mcp_calls import Taken, Turns, answer_json, govern
    from headway.audit import JSONLSink, SQLiteAuditSink

    if store is None or store.endswith(".jsonl"):  # the memory path's audit, as in the proxy
        gov = headway.Governor(audit=[JSONLSink(store)] if store else [])
    else:
        # as the stdio proxy: its session is the process's own, kept out of the store
        audit = SQLiteAuditSink(store, background=True)  # as the proxy's
        gov = headway.Governor(headway.SQLiteStore(store), audit=[audit], share_sessions=False)
    session = gov.session("bench")
    turns, taken = Turns(0, time.monotonic), Taken()  # no idle turns, as a relay with 0
    rpc = await _raw_client(upstream) if upstream else None
    times: list[float] = []
    for i in range(calls + 20):
        text, spent = f"call {i}", [0.0]

        async def forward(text: str = text, i: int = i, spent: list[float] = spent) -> Any:
            if rpc is None:
                return {"content": [{"type": "text", "text": text}], "isError": False}
            start = time.perf_counter()
            params = {"name": "echo", "arguments": {"text": text}}
            answer = await rpc(
                {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}
            )
            spent[0] = time.perf_counter() - start
            return answer["result"]

        start = time.perf_counter()
        out = await govern(session, "echo", {"text": text}, {}, forward, turns, taken)
        assert isinstance(out, headway.Outcome)
        answer_json(out, None, session.id)
        times.append(time.perf_counter() - start - spent[0])
    gov.close()
    for sink in gov.sinks:
        getattr(sink, "close", lambda: None)()
    return times[20:]


async def _raw_client(upstream: list[str]) -> Any:
    """JSON-RPC lines to a started upstream, after the handshake: ``await rpc(message)``."""
    proc = await asyncio.create_subprocess_exec(
        *upstream, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    async def rpc(message: dict[str, Any]) -> Any:
        stdin.write(json.dumps(message).encode() + b"\n")
        await stdin.drain()
        return json.loads(await stdout.readline()) if "id" in message else None

    hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
    hello["clientInfo"] = {"name": "bench", "version": "1"}
    await rpc({"jsonrpc": "2.0", "id": -1, "method": "initialize", "params": hello})
    await rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return rpc


async def byte_relay(upstream: list[str]) -> None:
    """Lines passed on both ways, nothing parsed: the floor of any proxy hop in Python (run
    as a subprocess by this script)."""
    loop = asyncio.get_running_loop()
    proc = await asyncio.create_subprocess_exec(
        *upstream, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)

    async def back(stdout: asyncio.StreamReader) -> None:
        while line := await stdout.readline():
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()

    task = asyncio.create_task(back(proc.stdout))
    while line := await stdin.readline():
        proc.stdin.write(line)
        await proc.stdin.drain()
    proc.stdin.close()
    await proc.wait()
    await task


def plain_proxy(upstream: list[str]) -> None:
    """Serve FastMCP's proxy without headway (run as a subprocess by this script)."""
    from fastmcp.server import create_proxy

    proxy = create_proxy(StdioTransport(command=upstream[0], args=upstream[1:]), name="plain")
    proxy.run("stdio", show_banner=False, log_level="WARNING")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--base", metavar="SRC", help="also time the proxy of another src")
    parser.add_argument("--plain-proxy", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--byte-relay", action="store_true", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.plain_proxy:
        plain_proxy(rest[rest.index("--") + 1 :])
        return
    if args.byte_relay:
        asyncio.run(byte_relay(rest[rest.index("--") + 1 :]))
        return
    with tempfile.TemporaryDirectory(prefix="headway-bench-") as tmp:
        upstream = [sys.executable, str(UPSTREAM), str(Path(tmp) / "upstream.log")]
        paths = {
            "direct": upstream,
            "fastmcp proxy": [sys.executable, __file__, "--plain-proxy", "--", *upstream],
            "byte relay": [sys.executable, __file__, "--byte-relay", "--", *upstream],
            "headway proxy": [sys.executable, "-m", "headway.cli", "proxy", "--", *upstream],
            "headway, memory": [
                *[sys.executable, "-m", "headway.cli", "proxy", "--store", "memory://"],
                *["--audit", str(Path(tmp) / "audit.jsonl"), "--", *upstream],
            ],
        }
        envs = {}
        if args.base:  # its own file (the same defaults): the two proxies share no lock
            base_db = f"sqlite:///{Path(tmp) / 'base.db'}"
            paths["headway, base"] = [
                *[sys.executable, "-m", "headway.cli", "proxy", "--store", base_db],
                *["--", *upstream],
            ]
            envs["headway, base"] = {**os.environ, "PYTHONPATH": str(Path(args.base).resolve())}
        times, cpu = asyncio.run(measure(paths, args.calls, tmp, envs))
        db, trail = str(Path(tmp) / "g.db"), str(Path(tmp) / "g.jsonl")
        inside = {
            "memory store, no audit": asyncio.run(governance(None, args.calls, None)),
            "memory store + JSONL audit": asyncio.run(governance(trail, args.calls, None)),
            "SQLite store + audit": asyncio.run(governance(db, args.calls, None)),
            "memory store + JSONL audit, beside the upstream": asyncio.run(
                governance(trail, args.calls, upstream)
            ),
            "SQLite store + audit, beside the upstream": asyncio.run(
                governance(db, args.calls, upstream)
            ),
        }
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"{args.calls} calls per path, stdio, echo tool, paths taking turns (median / p90)")
    for name, t in times.items():
        p90 = statistics.quantiles(t, n=10)[-1]
        used = f"   CPU {cpu[name] * 1000:6.3f} ms" if name in cpu else ""
        print(
            f"  {name:15s} median {medians[name] * 1000:7.3f} ms   p90 {p90 * 1000:7.3f} ms{used}"
        )
    print("  (CPU: per call, of the process the client talks to: the proxy, or the upstream)")
    direct = medians["direct"]
    print(f"  target: headway adds under {max(1.0, direct * 100):.3f} ms (1 ms or 10% of direct)")
    for name in (
        "fastmcp proxy",
        "byte relay",
        "headway proxy",
        "headway, memory",
        "headway, base",
    ):
        if name not in medians:
            continue
        added = medians[name] - direct
        print(f"  {name}: {added * 1000:+.3f} ms per call, {medians[name] / direct:.2f}x direct")
    for name in ("headway proxy", "headway, memory", "headway, base"):
        if name not in medians:
            continue
        own = medians[name] - medians["byte relay"]
        print(f"  {name} - byte relay (headway's own share): {own * 1000:+.3f} ms")
    for name, t in inside.items():
        print(
            f"  decision work in process, {name}: median "
            f"{statistics.median(t) * 1000:.3f} ms   p90 {statistics.quantiles(t, n=10)[-1] * 1000:.3f} ms"
        )


if __name__ == "__main__":
    main()
