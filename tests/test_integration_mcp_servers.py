"""GovernedMCPServer (OpenAI Agents SDK) and GovernedWorkbench (AutoGen) in front of a real
third-party MCP server: the reference filesystem server from npm
(``@modelcontextprotocol/server-filesystem``), run over stdio by each framework's own MCP
client, with the file it serves changed between calls through its own write tool."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import headway
import real_servers
from conftest import IN_CI


@pytest.fixture(scope="module")
def filesystem_server() -> str:
    """The server's command, installed once into the tests' cache (``real_servers``)."""
    try:
        return real_servers.filesystem_server()[0]
    except real_servers.Unavailable as exc:
        if IN_CI:
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def _text(output: Any) -> str:
    """What the model read of an MCP result: its text items, one per line."""
    items = output if isinstance(output, list) else [output]
    return "\n".join(i["text"] if isinstance(i, dict) else str(i) for i in items)


def _calls(*calls: tuple[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return list(calls)


def _script(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """Read the file twice, change it through the server, read it twice more."""
    path = str(folder / "notes.txt")
    read = ("read_text_file", {"path": path})
    return _calls(read, read, ("write_file", {"path": path, "content": "v2"}), read, read)


def test_the_openai_agents_sdk_through_a_governed_third_party_mcp_server(
    filesystem_server: str, tmp_path: Path
) -> None:
    """The operator declares the server's read an exact cache (annotations alone never
    cache): the repeated read is served (with the note); after the server's own write,
    the model reads the new content, not the stored one."""
    pytest.importorskip("agents")
    import agents
    from agents import Agent, Runner
    from agents.items import ToolCallOutputItem
    from agents.mcp import MCPServerStdio
    from agents.testing import ScriptedModel, assistant_message, function_call

    from headway.integrations.openai_agents import GovernedMCPServer

    agents.set_tracing_disabled(True)
    folder = tmp_path.resolve()
    (folder / "notes.txt").write_text("v1", encoding="utf-8")
    gov = headway.Governor()
    gov.tool_config = {"read_text_file": {"deterministic": True}}
    steps: list[Any] = [
        [function_call(name, args, call_id=f"c{n}")]
        for n, (name, args) in enumerate(_script(folder))
    ]
    model = ScriptedModel([*steps, [assistant_message("done")]])

    async def main() -> Any:
        server = MCPServerStdio(
            params={"command": filesystem_server, "args": [str(folder)]}, cache_tools_list=True
        )
        async with server:
            agent = Agent(name="a", model=model, mcp_servers=[GovernedMCPServer(server, gov)])
            return await Runner.run(agent, "go", context={"run_id": "fs-1"}, max_turns=20)

    result = asyncio.run(main())
    out = [i.output for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    texts = [_text(o) for o in out]
    statuses = [r["status"] for r in gov.audit_records("fs-1")]
    assert statuses == ["executed", "cached", "executed", "executed", "cached"]
    assert texts[0] == "v1" and texts[1].startswith("v1") and "stored result" in texts[1]
    assert texts[3] == "v2" and texts[4].startswith("v2")  # the write made the read current
    assert (folder / "notes.txt").read_text(encoding="utf-8") == "v2"


def test_autogen_through_a_governed_third_party_mcp_workbench(
    filesystem_server: str, tmp_path: Path
) -> None:
    """The same through AutoGen's agent loop. autogen-ext's McpWorkbench does not import
    with mcp 2.x, so the workbench here is the server reached with the mcp SDK's own
    stdio client, as an AutoGen ``Workbench``."""
    pytest.importorskip("autogen_agentchat")
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.messages import ToolCallExecutionEvent
    from autogen_core import FunctionCall
    from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
    from autogen_core.tools import TextResultContent, ToolResult, Workbench
    from autogen_ext.models.replay import ReplayChatCompletionClient
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from headway.integrations.autogen import GovernedWorkbench

    class StdioWorkbench(Workbench):
        def __init__(self, session: ClientSession) -> None:
            self.session = session

        async def list_tools(self) -> list[Any]:
            tools = (await self.session.list_tools()).tools
            return [
                {"name": t.name, "description": t.description or "", "parameters": t.input_schema}
                for t in tools
            ]

        async def call_tool(
            self,
            name: str,
            arguments: Any = None,
            cancellation_token: Any = None,
            call_id: Any = None,
        ) -> ToolResult:
            result = await self.session.call_tool(name, dict(arguments or {}))
            texts: list[Any] = [
                TextResultContent(content=c.text) for c in result.content if c.type == "text"
            ]
            return ToolResult(name=name, result=texts, is_error=bool(result.is_error))

        async def start(self) -> None: ...
        async def stop(self) -> None: ...
        async def reset(self) -> None: ...
        async def save_state(self) -> Any:
            return {}

        async def load_state(self, state: Any) -> None: ...

    folder = tmp_path.resolve()
    (folder / "notes.txt").write_text("v1", encoding="utf-8")
    info = ModelInfo(
        vision=False,
        function_calling=True,
        json_output=False,
        family=ModelFamily.UNKNOWN,
        structured_output=False,
    )
    results = [
        CreateResult(
            finish_reason="function_calls",
            content=[FunctionCall(id=f"c{n}", name=name, arguments=json.dumps(args))],
            usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
            cached=False,
        )
        for n, (name, args) in enumerate(_script(folder))
    ]
    model = ReplayChatCompletionClient(results, model_info=info)
    gov = headway.Governor()
    gov.register("read_text_file", None, effect="read", deterministic=True)
    gov.register("write_file", None, effect="write", idempotent=True)

    async def main() -> Any:
        params = StdioServerParameters(command=filesystem_server, args=[str(folder)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            bench = GovernedWorkbench(gov, StdioWorkbench(session), session="fs-2")
            agent = AssistantAgent(
                "files", model_client=model, workbench=bench, max_tool_iterations=5
            )
            return await agent.run(task="go")

    result = asyncio.run(main())
    events = [m for m in result.messages if isinstance(m, ToolCallExecutionEvent)]
    texts = [r.content for e in events for r in e.content]
    assert [r["status"] for r in gov.audit_records("fs-2")] == [
        "executed",
        "cached",
        "executed",
        "executed",
        "cached",
    ]
    assert texts[0] == "v1" and "stored result" in texts[1]
    assert texts[3] == "v2" and texts[4].startswith("v2")
