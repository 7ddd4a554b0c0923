"""The stdio relay (``headway proxy -- COMMAND`` served over stdio): what only it does.

A handshake-era client (its ``initialize`` must be replayed to a restarted upstream), a
request from the upstream to the client (elicitation), concurrent calls, an upstream that refuses a call, and an upstream that cannot start.
Real proxy processes, a real upstream, real MCP clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
try:
    import pytest_asyncio  # noqa: F401
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport
except ImportError:
    if IN_CI:
        raise
    pytest.skip("needs fastmcp: pip install 'headway[mcp]'", allow_module_level=True)

# after the check above: without fastmcp this module skips with the extra to install
import headway  # noqa: E402
from headway._mcp_relay import Relay  # noqa: E402
from test_mcp_proxy import BOUND_S, UPSTREAM, child_env, status, text  # noqa: E402
from test_sqlite_off_the_loop import locked  # noqa: E402


def relay_client(
    tmp_path: Path, *upstream: str, mode: str = "legacy", **options: Any
) -> Client[Any]:
    args = ["-m", "headway.cli", "proxy", "--store", f"sqlite:///{tmp_path / 'h.db'}"]
    transport = StdioTransport(
        command=sys.executable,
        args=[*args, "--", *upstream],
        cwd=str(tmp_path),
        env=child_env(),
        log_file=tmp_path / "proxy.stderr",
    )
    return Client(transport, mode=mode, timeout=BOUND_S, **options)


def upstream(tmp_path: Path) -> list[str]:
    return [sys.executable, str(UPSTREAM), str(tmp_path / "upstream.log")]


async def test_a_restarted_upstream_meets_a_handshake_era_client_again(tmp_path: Path) -> None:
    async with relay_client(tmp_path, *upstream(tmp_path)) as client:
        first = await client.call_tool("lookup", {"key": "before"})
        async with asyncio.timeout(BOUND_S):
            crashed = await client.call_tool("crash", {}, raise_on_error=False)
            after = await client.call_tool("lookup", {"key": "after"})
            (about,) = await client.read_resource("info://about")  # passed through, too
    assert text(first) == "value of before"
    assert crashed.is_error and status(crashed) == "unknown"  # it may have acted: not rerun
    assert text(after) == "value of after" and status(after) == "executed"
    assert getattr(about, "text", None) == "the upstream test server"


async def test_a_request_from_the_upstream_to_the_client_and_its_answer_pass_through(
    tmp_path: Path,
) -> None:
    asked: list[str] = []

    async def elicitation(message: str, response_type: Any, params: Any, context: Any) -> Any:
        asked.append(message)
        return True

    client = relay_client(tmp_path, *upstream(tmp_path), elicitation_handler=elicitation)
    async with client:
        result = await client.call_tool("confirm", {"record": "r9"})
    assert asked == ["Delete r9?"]
    assert text(result) == "accept: True" and status(result) == "executed"


async def test_concurrent_calls_each_get_their_own_answer(tmp_path: Path) -> None:
    async with relay_client(tmp_path, *upstream(tmp_path), mode="auto") as client:
        slow, fast = await asyncio.gather(
            client.call_tool("hang", {"seconds": 0.5}),
            client.call_tool("lookup", {"key": "c1"}),
        )
    assert text(slow) == "late" and text(fast) == "value of c1"


async def test_a_call_the_upstream_refuses_is_a_tool_error_naming_its_reason(
    tmp_path: Path,
) -> None:
    async with relay_client(tmp_path, *upstream(tmp_path), mode="auto") as client:
        result = await client.call_tool("no_such_tool", {}, raise_on_error=False)
        after = await client.call_tool("lookup", {"key": "c2"})
    assert result.is_error and status(result) == "error"
    assert "no_such_tool" in text(result)
    assert text(after) == "value of c2"


async def test_an_upstream_that_cannot_start_is_a_clear_error_not_a_hang(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-server")

    async def connect() -> None:
        async with asyncio.timeout(BOUND_S), relay_client(tmp_path, missing) as client:
            await client.ping()

    with pytest.raises(Exception, match="no-such-server"):  # whatever type the client raises
        await connect()


Ask = Callable[[int, str, dict[str, Any]], Awaitable[dict[str, Any]]]


def relay_in_process(tmp_path: Path) -> tuple[Relay, Ask]:
    """A relay driven line by line in this process (SQLite store, the upstream a real
    subprocess), and ``ask``: a request to it and its answer."""
    gov = headway.Governor(headway.SQLiteStore(str(tmp_path / "h.db")), share_sessions=False)
    gov.tool_config = {"lookup": {"deterministic": True}}  # as a [tools.lookup] table says
    relay = Relay(gov, upstream(tmp_path), "in-process")
    seen: list[dict[str, Any]] = []

    def to_client(message: Any) -> None:
        seen.append(json.loads(message) if isinstance(message, bytes) else dict(message))

    relay.to_client = to_client  # type: ignore[method-assign]

    async def ask(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        line = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        await relay.from_client(json.dumps(line).encode() + b"\n")
        async with asyncio.timeout(BOUND_S):
            while not any(m.get("id") == rid for m in seen):
                await asyncio.sleep(0.01)
        return next(m for m in seen if m.get("id") == rid)

    return relay, ask


async def handshake(relay: Relay, ask: Ask) -> dict[str, Any]:
    """The client's ``initialize`` (id 1) and ``initialized``; the answer to the first."""
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
    answer = await ask(1, "initialize", {**hello, "clientInfo": {"name": "test", "version": "1"}})
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await relay.from_client(json.dumps(initialized).encode() + b"\n")
    return answer


async def test_the_relay_in_process_passes_the_handshake_and_governs_each_tools_call(
    tmp_path: Path,
) -> None:
    """The relay driven line by line in this process (the upstream is a real subprocess):
    the handshake and tools/list pass through as the upstream answered them, a read the
    operator declared deterministic runs once and its third repeat is a correction, and a malformed tools/call is a
    JSON-RPC error naming what is missing."""
    relay, ask = relay_in_process(tmp_path)
    try:
        hello = await handshake(relay, ask)
        listing = await ask(2, "tools/list", {})
        reads = [
            await ask(3 + i, "tools/call", {"name": "lookup", "arguments": {"key": "a"}})
            for i in range(3)
        ]
        malformed = await ask(9, "tools/call", {"arguments": {"key": "a"}})
    finally:
        await relay.upstream.close()
    assert "serverInfo" in hello["result"]
    assert "lookup" in {t["name"] for t in listing["result"]["tools"]}
    statuses = [r["result"]["_meta"]["headway"]["status"] for r in reads]
    assert statuses == ["executed", "cached", "corrected"]
    assert reads[2]["result"]["isError"] is True
    assert "identical arguments" in reads[2]["result"]["content"][0]["text"]
    assert (tmp_path / "upstream.log").read_text().count("lookup\t") == 1
    assert "needs a name" in malformed["error"]["message"]


async def test_the_stdio_session_keeps_its_cache_epochs_in_memory_not_in_the_store(
    tmp_path: Path,
) -> None:
    """A stdio proxy's session is never resumed (its id is made for the process): a write
    makes its cached reads stale in memory (the read after it runs again) and writes no
    epochs to the store, which keeps the record the session started with."""
    relay, ask = relay_in_process(tmp_path)
    gov, session_id = relay.gov, relay.session.id
    started = gov.store.get(gov.generation_key(session_id))
    try:
        await handshake(relay, ask)
        calls = [("lookup", {"key": "a"}), ("delete_record", {"record": "r1"})]
        calls += [("lookup", {"key": "a"})]
        answers = [
            await ask(2 + i, "tools/call", {"name": name, "arguments": arguments})
            for i, (name, arguments) in enumerate(calls)
        ]
    finally:
        await relay.upstream.close()
    statuses = [a["result"]["_meta"]["headway"]["status"] for a in answers]
    assert statuses == ["executed", "executed", "executed"]
    assert (tmp_path / "upstream.log").read_text().count("lookup\t") == 2
    assert started is not None
    assert gov.store.get(gov.generation_key(session_id)) == started


async def test_a_tools_call_from_stdin_starts_after_the_lines_still_waiting_before_it(
    tmp_path: Path,
) -> None:
    """The client's lines are handled as they arrive: a ``tools/call`` starts at once,
    unless earlier lines still wait to go upstream (here the ``initialize`` that starts
    it): then after them, in order."""
    relay, ask = relay_in_process(tmp_path)
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
    hello["clientInfo"] = {"name": "test", "version": "1"}
    lines: list[dict[str, Any]] = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "lookup"}},
    ]
    try:
        for line in lines:
            relay._from_stdin(json.dumps(line).encode() + b"\n")
        assert 2 not in relay._calls  # it waits behind the handshake
        forwarding = relay._forwarding
        assert forwarding is not None
        await forwarding
        assert 2 in relay._calls
        # a call with no line waiting before it starts at once
        call = {"name": "lookup", "arguments": {"key": "b"}}
        relay._from_stdin(json.dumps({**lines[2], "id": 3, "params": call}).encode())
        assert 3 in relay._calls
        answer = await ask(4, "tools/call", {"name": "lookup", "arguments": {"key": "c"}})
        await asyncio.gather(*relay._calls.values())
    finally:
        await relay.upstream.close()
    assert answer["result"]["_meta"]["headway"]["status"] == "executed"
    assert relay.upstream.handshake == lines[:2]


class RawClient:
    """JSON-RPC lines to a ``headway proxy`` process over its stdio, after the handshake."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._ids = iter(range(1, 10**6))

    @classmethod
    async def start(cls, tmp_path: Path, *options: str) -> RawClient:
        proc = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "headway.cli", "proxy", *options],
            *["--", *upstream(tmp_path)],
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            cwd=tmp_path,
            env=child_env(),
        )
        client = cls(proc)
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
        await client.ask("initialize", {**hello, "clientInfo": {"name": "raw", "version": "1"}})
        await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return client

    async def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        await self.proc.stdin.drain()

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return await self.answer(await self.request(method, params))

    async def request(self, method: str, params: dict[str, Any]) -> int:
        rid = next(self._ids)
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    async def answer(self, rid: int) -> dict[str, Any]:
        assert self.proc.stdout is not None
        async with asyncio.timeout(BOUND_S):
            while True:
                message = json.loads(await self.proc.stdout.readline())
                if message.get("id") == rid:
                    return dict(message)


def audit_steps(db: Path) -> list[int]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [r[0] for r in conn.execute("SELECT step FROM headway_audit ORDER BY id")]


async def test_calls_are_answered_while_the_audit_file_is_locked_and_sigterm_writes_it_out(
    tmp_path: Path,
) -> None:
    """Another process holds the audit file's lock: the calls are answered all the same
    (the trail is written by a thread of its own), and a SIGTERM ends the proxy as a
    closed stdin does: the trail is written out once the lock is free, nothing lost."""
    trail = tmp_path / "trail.db"
    client = await RawClient.start(tmp_path, "--store", "sqlite:///h.db", "--audit", str(trail))
    await client.ask("tools/call", {"name": "echo", "arguments": {"text": "warm"}})
    with locked(trail):
        answers = [
            await client.ask("tools/call", {"name": "echo", "arguments": {"text": f"t{i}"}})
            for i in range(3)
        ]
        client.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)  # the proxy waits for the lock to write its last records
    async with asyncio.timeout(BOUND_S):
        assert await client.proc.wait() == 0  # a clean exit, not death by the signal
    assert [a["result"]["content"][0]["text"] for a in answers] == ["t0", "t1", "t2"]
    assert audit_steps(trail) == [0, 1, 2, 3]


async def test_a_store_file_locked_by_another_process_does_not_stop_the_relay(
    tmp_path: Path,
) -> None:
    """The SQLite store's file is locked by another process: the call that must write
    (a cacheable read: its result goes into the store) waits for the lock in a thread,
    and the relay serves other requests meanwhile."""
    db = tmp_path / "h.db"
    (tmp_path / "headway.toml").write_text("[tools.lookup]\ndeterministic = true\n")
    client = await RawClient.start(
        tmp_path, "--store", f"sqlite:///{db}", "--config", "headway.toml"
    )
    await client.ask("tools/call", {"name": "lookup", "arguments": {"key": "warm"}})
    with locked(db):
        call = await client.request("tools/call", {"name": "lookup", "arguments": {"key": "x"}})
        pong = await client.ask("ping", {})  # answered while the call waits for the lock
        assert pong["result"] == {}
    answer = await client.answer(call)
    assert answer["result"]["content"][0]["text"] == "value of x"
    assert client.proc.stdin is not None
    client.proc.stdin.close()
    async with asyncio.timeout(BOUND_S):
        assert await client.proc.wait() == 0
    assert audit_steps(db) == [0, 1]


def test_the_stdio_relay_loads_no_mcp_library() -> None:
    """The relay and the command that starts it import neither FastMCP nor the MCP SDK
    (nor pydantic): a smaller process that starts sooner."""
    import subprocess

    script = (
        "import sys, headway._mcp_relay, headway._proxy_cli\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'fastmcp', 'mcp', 'mcp_types', 'pydantic'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], env=child_env(), capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_an_upstream_is_unreachable_after_a_closed_mcp_connection_or_an_os_error() -> None:
    """What ``govern`` retries as the upstream's crash: an OSError, or the MCP library's
    "connection closed" error (looked up only once that library is loaded), a few
    errors deep in the chain; another MCP error is the upstream's answer."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    from headway._mcp_errors import _unreachable

    def chained(inner: BaseException) -> RuntimeError:
        try:
            raise RuntimeError("wrapped") from inner
        except RuntimeError as exc:
            return exc

    assert _unreachable(chained(MCPError(CONNECTION_CLOSED, "connection closed")))
    assert _unreachable(chained(BrokenPipeError()))
    assert not _unreachable(MCPError(-32602, "invalid params"))
    assert not _unreachable(ValueError("bad"))


def test_an_upstream_lost_after_the_request_was_sent_is_told_from_one_never_reached() -> None:
    """Lost (the call may have run: a write is UNKNOWN): an upstream that exited with the
    request sent, an MCP "connection closed", a reset. Never reached (nothing ran): a
    refused connection, a command that does not exist, a request the relay could not
    write (a broken pipe under it)."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    from headway._mcp_errors import UpstreamLostError, UpstreamUnreachableError, _lost

    def chained(outer: BaseException, inner: BaseException) -> BaseException:
        outer.__cause__ = inner
        return outer

    assert _lost(UpstreamLostError("connection closed: the upstream exited"))
    assert _lost(chained(RuntimeError("x"), MCPError(CONNECTION_CLOSED, "connection closed")))
    assert _lost(chained(RuntimeError("x"), ConnectionResetError()))
    assert not _lost(chained(UpstreamUnreachableError("connection closed"), BrokenPipeError()))
    assert not _lost(chained(RuntimeError("x"), ConnectionRefusedError()))
    assert not _lost(FileNotFoundError("no-such-server"))


def test_the_classifier_releases_an_unreached_upstream_and_holds_a_lost_one() -> None:
    """A request that never reached the upstream ran nothing: a write's key is released
    for a retry. One lost after it was sent may have run: a write is UNKNOWN."""
    from headway._mcp_calls import UpstreamLostError, UpstreamUnreachableError
    from headway.retry import before_effect, connection_lost

    assert before_effect(UpstreamUnreachableError("connection closed: exited"))
    assert not connection_lost(UpstreamUnreachableError("connection closed: exited"))
    assert connection_lost(UpstreamLostError("connection closed: exited"))
    assert not before_effect(UpstreamLostError("connection closed: exited"))


async def test_a_keyed_write_whose_upstream_exits_mid_call_is_unknown_and_never_run_again(
    tmp_path: Path,
) -> None:
    """The request reached the upstream, which acted and exited: the outcome is unknown.
    The write is not run again on the restarted upstream, in this call or with its key
    later (no reconcile is known: it stays unknown), and the model reads so."""
    key = {"headway/idempotency_key": "crash-key-1"}
    async with relay_client(tmp_path, *upstream(tmp_path)) as client, asyncio.timeout(BOUND_S):
        first = await client.call_tool("crash", {}, raise_on_error=False, meta=key)
        again = await client.call_tool("crash", {}, raise_on_error=False, meta=key)
        after = await client.call_tool("lookup", {"key": "k"})
    assert [status(first), status(again)] == ["unknown", "unknown"]
    assert "unknown" in text(first) and "retrying may help" not in text(first).lower()
    assert (tmp_path / "upstream.log").read_text().splitlines().count("crash\t{}") == 1
    assert text(after) == "value of k"  # the upstream was started again for other calls
