"""Hostile input to ``headway proxy`` over stdio (issue 31, item 12): a JSON-RPC batch and
a ``tools/call`` notification are never run ungoverned; a line nested too deep or larger
than the limit gets a clear error for itself and loses nothing after it; an upstream
answer that is not valid UTF-8 is still matched to its request, and the relay's own
request ids never reach the client. Real proxy processes and real upstreams."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from test_mcp_proxy import BOUND_S, UPSTREAM, child_env  # noqa: F401 (skips without fastmcp)
from test_mcp_proxy_relay import RawClient


def executions(tmp_path: Path, tool: str) -> list[str]:
    log = tmp_path / "upstream.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line for line in lines if line.startswith(f"{tool}\t")]


async def lines_until(client: RawClient, rid: Any) -> list[dict[str, Any]]:
    """Every message the proxy sends until the answer to ``rid`` (included)."""
    assert client.proc.stdout is not None
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(BOUND_S):
        while True:
            line = await client.proc.stdout.readline()
            assert line, "the proxy ended"
            seen.append(json.loads(line))
            if seen[-1].get("id") == rid:
                return seen


async def close(client: RawClient) -> int:
    assert client.proc.stdin is not None
    client.proc.stdin.close()
    async with asyncio.timeout(BOUND_S):
        return await client.proc.wait()


async def test_each_tools_call_of_a_batch_is_governed_and_a_notification_call_never_runs(
    tmp_path: Path,
) -> None:
    """A keyed write sent three times in one batch (two requests and a notification) and
    once more as a notification runs once: the batch is taken apart, each request is
    governed (the second replays), and a tools/call without an id is dropped."""
    client = await RawClient.start(tmp_path, "--store", "sqlite:///h.db")
    key = {"headway/idempotency_key": "batch-key-1"}
    call = {"name": "delete_record", "arguments": {"record": "r1"}, "_meta": key}
    batch = [
        {"jsonrpc": "2.0", "id": 101, "method": "tools/call", "params": call},
        {"jsonrpc": "2.0", "method": "tools/call", "params": call},  # a notification
        {"jsonrpc": "2.0", "id": 102, "method": "tools/call", "params": call},
    ]
    assert client.proc.stdin is not None
    client.proc.stdin.write(json.dumps(batch).encode() + b"\n")
    first = await client.answer(101)
    second = await client.answer(102)
    await client.send({"jsonrpc": "2.0", "method": "tools/call", "params": call})
    other = {"name": "delete_record", "arguments": {"record": "r2"}}
    await client.send({"jsonrpc": "2.0", "method": "tools/call", "params": other})
    pong = await client.ask("ping", {})
    assert pong["result"] == {}
    statuses = {a["result"]["_meta"]["headway"]["status"] for a in (first, second)}
    assert statuses == {"executed", "replayed"}
    assert len(executions(tmp_path, "delete_record")) == 1  # r1 once, r2 never
    assert await close(client) == 0


async def test_a_line_nested_too_deep_gets_an_error_and_the_requests_after_it_are_answered(
    tmp_path: Path,
) -> None:
    client = await RawClient.start(tmp_path, "--store", "sqlite:///h.db")
    deep = "[" * 20_000 + "]" * 20_000
    line = (
        f'{{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {{"name": "echo", '
        f'"arguments": {{"text": {deep}}}}}}}\n'
    )
    after = {"jsonrpc": "2.0", "id": 8, "method": "tools/call"}
    after["params"] = {"name": "echo", "arguments": {"text": "after"}}
    assert client.proc.stdin is not None
    client.proc.stdin.write(line.encode() + json.dumps(after).encode() + b"\n")  # one write
    seen = await lines_until(client, 8)
    (error,) = [m for m in seen if m.get("id") == 7]
    assert "nested too deep" in error["error"]["message"]
    assert seen[-1]["result"]["content"][0]["text"] == "after"
    assert await close(client) == 0


async def test_a_line_past_the_size_limit_gets_an_error_and_the_proxy_keeps_serving(
    tmp_path: Path,
) -> None:
    client = await RawClient.start(tmp_path, "--store", "sqlite:///h.db")
    head = b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "echo", '
    big = head + b'"arguments": {"text": "' + b"x" * (65 << 20) + b'"}}}\n'
    assert client.proc.stdin is not None
    client.proc.stdin.write(big)
    seen = await lines_until(client, 9)
    assert "larger than 64 MiB" in seen[-1]["error"]["message"]
    answer = await client.ask("tools/call", {"name": "echo", "arguments": {"text": "still"}})
    assert answer["result"]["content"][0]["text"] == "still"
    assert await close(client) == 0


RAW_UPSTREAM = r"""
import json, sys
log = open(sys.argv[1], "a")
for line in sys.stdin:
    message = json.loads(line)
    rid, method = message.get("id"), message.get("method")
    if rid is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "raw", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "latin", "inputSchema": {"type": "object"},
                             "annotations": {"readOnlyHint": True}}]}
    elif method == "tools/call":
        log.write("latin\t\n"); log.flush()
        sys.stdout.buffer.write(b"\xff\xfe progress: 50%\n")  # not JSON-RPC: never relayed
        # an answer whose text is Latin-1, not UTF-8: bytes that do not decode
        head = json.dumps({"jsonrpc": "2.0", "id": rid})[:-1].encode()
        sys.stdout.buffer.write(head + b', "result": {"content": [{"type": "text", '
                                b'"text": "caf\xe9"}]}}\n')
        sys.stdout.buffer.flush()
        continue
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n")
    sys.stdout.flush()
"""


async def test_an_upstream_answer_that_is_not_utf8_is_matched_to_its_request(
    tmp_path: Path,
) -> None:
    """Matched at once (run once, not retried until a timeout), and no ``headway-`` id of
    the relay's own reaches the client; a line of the upstream that is not JSON-RPC (bytes
    that are not even UTF-8) never reaches the client's stdout (each line it gets is JSON)."""
    script = tmp_path / "raw_upstream.py"
    script.write_text(RAW_UPSTREAM)
    log = tmp_path / "upstream.log"
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "headway.cli", "proxy", "--store", "sqlite:///h.db"],
        *["--", sys.executable, str(script), str(log)],
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=tmp_path,
        env=child_env(),
    )
    client = RawClient(proc)
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
    await client.ask("initialize", {**hello, "clientInfo": {"name": "raw", "version": "1"}})
    rid = await client.request("tools/call", {"name": "latin", "arguments": {}})
    seen = await lines_until(client, rid)
    result = seen[-1]["result"]
    assert result["content"][0]["text"] == "caf\ufffd"
    assert result["_meta"]["headway"]["status"] == "executed"
    assert log.read_text().count("latin\t") == 1
    assert not any("headway-" in json.dumps(m) for m in seen)
    assert await close(client) == 0


@pytest.mark.parametrize("line", [b"not json at all\n", b"[]\n"])
async def test_a_message_that_cannot_be_read_is_answered_not_forwarded(
    tmp_path: Path, line: bytes
) -> None:
    client = await RawClient.start(tmp_path, "--store", "sqlite:///h.db")
    assert client.proc.stdin is not None
    client.proc.stdin.write(line)
    seen = await lines_until(client, None)
    assert seen[-1]["error"]["code"] in (-32700, -32600)
    assert (await client.ask("ping", {}))["result"] == {}
    assert await close(client) == 0


async def test_idempotency_keys_in_invalid_utf8_are_refused_never_merged(tmp_path: Path) -> None:
    """Two requests whose keys differ only in bytes that are not UTF-8: repairing them
    (U+FFFD) would make them one key, and the second write would be replayed from the
    first. Each is refused as unreadable (-32700, with its id), and nothing runs."""
    client = await RawClient.start(tmp_path, "--store", "sqlite:///h.db")
    assert client.proc.stdin is not None
    for rid, key in ((21, b"order-\xe9"), (22, b"order-\xff")):
        client.proc.stdin.write(
            b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": '
            b'"delete_record", "arguments": {"record": "r1"}, "_meta": '
            b'{"headway/idempotency_key": "%s"}}}\n' % (rid, key)
        )
    first = (await lines_until(client, 21))[-1]
    second = (await lines_until(client, 22))[-1]
    assert first["error"]["code"] == second["error"]["code"] == -32700
    assert "UTF-8" in first["error"]["message"]
    assert executions(tmp_path, "delete_record") == []
    assert (await client.ask("ping", {}))["result"] == {}
    assert await close(client) == 0
