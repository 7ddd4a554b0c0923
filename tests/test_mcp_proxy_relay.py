"""The stdio relay (``headway proxy -- COMMAND`` served over stdio): what only it does.

A handshake-era client (its ``initialize`` must be replayed to a restarted upstream), a
request from the upstream to the client (elicitation), concurrent calls, an upstream that refuses a call, and an upstream that cannot start.
Real proxy processes, a real upstream, real MCP clients.
"""

from __future__ import annotations

import asyncio
import os
import sys
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
from test_mcp_proxy import BOUND_S, UPSTREAM, child_env, status, text  # noqa: E402


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
    assert crashed.is_error and "connection closed" in text(crashed)
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
