"""A real MCP server for the proxy tests and the latency benchmark (run as a subprocess).

    python tests/mcp_upstream.py LOG_FILE [--http PORT]

Every tool execution appends one line ``tool<TAB>arguments`` to LOG_FILE, so a test
counts what the upstream really executed, independently of the proxy.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from fastmcp import Context, FastMCP
from fastmcp.tools import Tool
from mcp_types import (
    ElicitRequest,
    ElicitRequestFormParams,
    InputRequiredResult,
    ToolAnnotations,
    ToolListChangedNotification,
)

LOG = Path(sys.argv[1])
mcp = FastMCP("upstream")

READ_CLOSED = ToolAnnotations(read_only_hint=True, open_world_hint=False)
READ_OPEN = ToolAnnotations(read_only_hint=True, open_world_hint=True)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)


def executed(tool: str, **args: object) -> int:
    """Record one execution; how many times ``tool`` ran with these arguments so far."""
    entry = f"{tool}\t{json.dumps(args, sort_keys=True)}"
    with LOG.open("a", encoding="utf-8") as fh:
        fh.write(entry + "\n")
    return LOG.read_text(encoding="utf-8").splitlines().count(entry)


@mcp.tool(annotations=READ_CLOSED)
def lookup(key: str) -> str:
    """A read-only, closed-world lookup: the same key always gives the same answer."""
    executed("lookup", key=key)
    return f"value of {key}"


@mcp.tool(annotations=READ_CLOSED)
def tally(name: str) -> str:
    """A read-only, closed-world counter whose answer changes with every call (a closed
    world changes under other writers: a file, a repository, a clock)."""
    n = executed("tally", name=name)
    return f"{name} is at #{n}"


@mcp.tool(annotations=READ_OPEN)
def quote(symbol: str) -> str:
    """A read-only, open-world price: it changes with time."""
    n = executed("quote", symbol=symbol)
    return f"{symbol} price #{n}"


@mcp.tool(annotations=DESTRUCTIVE)
def delete_record(record: str) -> str:
    """A destructive write."""
    n = executed("delete_record", record=record)
    return f"deleted {record} (deletion #{n})"


@mcp.tool(annotations=READ_OPEN)
def job_status(job: str) -> dict[str, object]:
    """RUNNING (the same answer) for 7 calls, then DONE (the config says ``poll = true``)."""
    n = executed("job_status", job=job)
    return {"job": job, "status": "RUNNING" if n < 8 else "DONE"}


@mcp.tool(annotations=READ_OPEN)
def queue_depth(queue: str) -> dict[str, object]:
    """The depth falls by one on every call (whatever the queue); the rest stays alike."""
    executed("queue_depth", queue=queue)
    n = sum(line.startswith("queue_depth\t") for line in LOG.read_text().splitlines())
    return {"queue": queue, "depth": 100 - n, "unit": "messages"}


@mcp.tool(annotations=READ_CLOSED)
def save_note(text: str, api_key: str = "") -> str:
    """Claims to be read-only, but writes (the operator's config says so)."""
    n = executed("save_note", text=text)
    return f"saved note #{n}"


@mcp.tool(annotations=DESTRUCTIVE)
def fail(reason: str) -> str:
    """Always fails with an error result (``isError: true``)."""
    executed("fail", reason=reason)
    raise ValueError(f"cannot do it: {reason}")


@mcp.tool(annotations=DESTRUCTIVE)
def crash() -> str:
    """Kills the server mid-call."""
    executed("crash")
    os._exit(3)


@mcp.tool(annotations=READ_OPEN)
def hang(seconds: float) -> str:
    """Answers after ``seconds``."""
    executed("hang", seconds=seconds)
    time.sleep(seconds)
    return "late"


@mcp.tool(annotations=READ_OPEN)
async def count(n: int, ctx: Context) -> str:
    """Reports its progress n times, then answers."""
    executed("count", n=n)
    for i in range(n):
        await ctx.report_progress(i + 1, n, f"step {i + 1}")
    return f"counted to {n}"


def hidden_lookup(key: str) -> str:
    """A read-only, closed-world lookup that only exists after ``unlock``."""
    executed("hidden_lookup", key=key)
    return f"hidden value of {key}"


@mcp.tool(annotations=DESTRUCTIVE)
async def unlock(ctx: Context) -> str:
    """Adds ``hidden_lookup`` to the tool list and says so (tools/list_changed)."""
    executed("unlock")
    if await mcp.get_tool("hidden_lookup") is None:
        mcp.add_tool(Tool.from_function(hidden_lookup, annotations=READ_CLOSED))
    await ctx.send_notification(ToolListChangedNotification())
    return "unlocked"


@mcp.tool(annotations=READ_OPEN)
async def stall(seconds: float) -> str:
    """Answers after ``seconds`` (the config gives it a breaker and a fallback)."""
    executed("stall", seconds=seconds)
    await asyncio.sleep(seconds)
    return "late"


@mcp.tool(annotations=DESTRUCTIVE)
async def confirm(record: str, ctx: Context) -> str:
    """Asks the user (elicitation, a request from the server to the client) first."""
    answer = await ctx.elicit(f"Delete {record}?", response_type=bool)
    executed("confirm", record=record)
    return f"{answer.action}: {getattr(answer, 'data', None)}"


@mcp.tool(annotations=READ_CLOSED, output_schema=None)
async def ask(topic: str, ctx: Context) -> Any:
    """A read that asks the user first (2026-07-28: the ask is its result, the client
    answers in a second round of the same call)."""
    responses = ctx.input_responses
    if not responses:
        form = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
        params = ElicitRequestFormParams(message=f"More about {topic}?", requested_schema=form)
        return InputRequiredResult(input_requests={"ok": ElicitRequest(params=params)})
    executed("ask", topic=topic)
    return f"{topic}: {getattr(responses['ok'], 'action', '?')}"


@mcp.tool(annotations=READ_OPEN)
def getenv(name: str) -> str:
    """A variable of the server's environment (what the proxy passed on)."""
    return os.environ.get(name, "<unset>")


@mcp.tool()
def echo(text: str) -> str:
    """No annotations (the benchmark's tool)."""
    return text


@mcp.resource("info://about", mime_type="text/plain")
def about() -> str:
    return "the upstream test server"


@mcp.resource("notes://{name}")
def note(name: str) -> str:
    return f"note {name}"


@mcp.prompt()
def greet(name: str) -> str:
    """Greets someone."""
    return f"Say hello to {name}."


if __name__ == "__main__":
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        mcp.run("http", host="127.0.0.1", port=port, show_banner=False, log_level="WARNING")
    else:
        mcp.run("stdio", show_banner=False, log_level="WARNING")
