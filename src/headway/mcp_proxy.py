"""``headway proxy``: an MCP server that governs every ``tools/call`` of the server behind it.

Two transports share this module's decisions (``govern``, ``declare``, the answers): over
HTTP on either side, FastMCP's proxy (``create_proxy``), where tools, resources, prompts,
notifications, progress and sampling pass through unchanged and one middleware
(``Governance``) runs each tool call through a headway session; stdio to a stdio
upstream, the lighter JSON-RPC relay of ``_mcp_relay``. Each client session is a headway
session: the proxy process over stdio, the MCP session id over streamable HTTP.

What the client receives: EXECUTED is the upstream's result; CACHED and REPLAYED are the
stored upstream result with a text block saying so (and when it was taken); CORRECTED,
UNKNOWN, ERROR and a stop are tool results with ``isError: true`` and headway's text.
Every governed result carries ``_meta.headway`` (status, step, executed: the upstream ran
the call and answered during it). An upstream result with ``isError: true`` reaches the client as
it was, and counts as an error for headway (never cached, repeated-error correction).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import mcp_types as mt
from fastmcp import FastMCP
from fastmcp.server import create_proxy
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import InputRequiredToolResult as InputRequired
from fastmcp.tools.base import RawStructuredToolResult, Tool, ToolResult
from fastmcp.utilities.json_schema import is_object_schema
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ._mcp_calls import (
    ANSWERED,
    IDEMPOTENCY_KEY,
    SESSION,
    Taken,
    Turns,
    declare,
    fallback_structured,
    govern,
    headway_meta,
    judge_results,
    not_final,
    result_key,
    stored_note,
)
from ._session import Governor
from .outcome import Outcome, Status


class Governance(Middleware):
    """Runs each ``tools/call`` through ``gov``; everything else passes through."""

    def __init__(self, gov: Governor, *, session_id: str | None = None) -> None:
        self.gov = gov
        judge_results(gov)
        self.session_id = session_id  # stdio: one session for the whole process
        self.turns = Turns(gov.idle_turn_s, gov.timer)  # per client session
        self.taken = Taken()
        self._annotations: dict[str, dict[str, Any]] = {}
        self._raw: dict[str, bool] = {}  # tools whose structured results are not objects
        self._schemas: dict[str, Any] = {}  # each tool's output schema, if it has one

    async def on_list_tools(
        self,
        context: MiddlewareContext[mt.ListToolsRequest],
        call_next: CallNext[mt.ListToolsRequest, Sequence[Tool]],
    ) -> Sequence[Tool]:
        tools = await call_next(context)
        for tool in tools:
            self._declare(tool)
        return tools

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        params = context.message
        meta = _request_meta(context)
        name = params.name
        if self.gov.spec(name) is None and context.fastmcp_context is not None:
            tool = await context.fastmcp_context.fastmcp.get_tool(name)
            if tool is not None:
                self._declare(tool)
        session = self.gov.session(self._session_of(context, meta))
        upstream: list[ToolResult] = []

        async def forward() -> dict[str, Any]:
            result = await call_next(context)
            upstream.append(result)
            return (
                not_final(to_json(result)) if isinstance(result, InputRequired) else to_json(result)
            )

        arguments = params.arguments or {}
        out = await govern(session, name, arguments, meta, forward, self.turns, self.taken)
        if not isinstance(out, Outcome):
            return _error(*out)
        if upstream:
            self._raw[name] = isinstance(upstream[-1], RawStructuredToolResult)
        stored = result_key(session.id, name, arguments, meta.get(IDEMPOTENCY_KEY))
        return answer(
            out,
            upstream[-1] if upstream else None,
            session.id,
            self._raw.get(name, False),
            self._schemas.get(name),
            None if upstream else self.taken.when(stored, out.value),
        )

    def _declare(self, tool: Tool) -> None:
        """The tool's spec from its annotations (the operator's table wins, in register);
        declared again when a changed tool list brings new annotations."""
        annotations = (
            tool.annotations.model_dump(by_alias=True, exclude_none=True)
            if tool.annotations is not None
            else {}
        )
        schema = tool.output_schema
        self._raw.setdefault(tool.name, schema is not None and not is_object_schema(schema))
        self._schemas[tool.name] = schema
        declare(self.gov, tool.name, annotations, self._annotations)

    def _session_of(self, context: MiddlewareContext[Any], meta: Mapping[str, Any]) -> str:
        if self.session_id is not None:
            return self.session_id
        ctx = context.fastmcp_context
        rc = ctx.request_context if ctx is not None else None
        if ctx is not None and rc is not None and rc.protocol_version not in _MODERN:
            return f"http-{ctx.session_id}"  # the MCP session id of a handshake-era client
        # a 2026-07-28 client has no session: it may name one, else all share one
        return f"http-{meta.get(SESSION) or 'shared'}"


_MODERN = MODERN_PROTOCOL_VERSIONS


def _request_meta(context: MiddlewareContext[Any]) -> Mapping[str, Any]:
    """The ``_meta`` of the client's request (FastMCP keeps it on the request context)."""
    ctx = context.fastmcp_context
    rc = ctx.request_context if ctx is not None else None
    return (rc.meta if rc is not None else None) or {}


def to_json(result: ToolResult) -> dict[str, Any]:
    """An upstream result as the JSON of its ``CallToolResult`` (what the store keeps)."""
    data: dict[str, Any] = {
        "content": [
            c.model_dump(by_alias=True, mode="json", exclude_none=True) for c in result.content
        ],
        "isError": result.is_error,
    }
    if result.structured_content is not None:
        data["structuredContent"] = result.structured_content
    if result.meta:
        data["_meta"] = result.meta
    return data


def answer(
    out: Outcome,
    upstream: ToolResult | None,
    session: str,
    raw: bool,
    schema: Any = None,
    taken: float | None = None,
) -> ToolResult:
    """The MCP result the client receives for an outcome. ``upstream``: the result the
    upstream gave during this call, if it ran; ``raw``: the tool's structured results are
    sent as they are (FastMCP's ``RawStructuredToolResult``, wrapped for older clients);
    ``taken``: when a stored result was received, if known."""
    headway = headway_meta(out, session, upstream is not None)
    note = stored_note(out, taken)
    extra = [mt.TextContent(text=out.correction)] if out.correction else []
    if note is not None:
        extra.insert(0, mt.TextContent(text=note))
    error = out.error or {}
    if upstream is not None and (
        out.status is Status.EXECUTED
        or (out.status is Status.ERROR and error.get("code") == "error_result")
    ):  # the upstream's own result (an error result too), plus a correction if any
        return upstream.model_copy(
            update={
                "content": [*upstream.content, *extra],
                "meta": {**(upstream.meta or {}), "headway": headway},
            }
        )
    if out.status in ANSWERED:
        if isinstance(out.value, Mapping) and "content" in out.value:
            stored = mt.CallToolResult.model_validate(dict(out.value))
            content, structured = list(stored.content), stored.structured_content
            meta, is_error = stored.meta or {}, stored.is_error
        else:  # a fallback value from the operator's configuration
            content, meta, is_error = [], {}, False
            structured = fallback_structured(out.value, schema)
            extra = [mt.TextContent(text=out.to_model())]
        return _result([*content, *extra], structured, {**meta, "headway": headway}, is_error, raw)
    return _error(out.to_model(), headway)


def _result(
    content: list[Any], structured: Any, meta: dict[str, Any], is_error: bool, raw: bool
) -> ToolResult:
    if raw or (structured is not None and not isinstance(structured, dict)):
        return RawStructuredToolResult(
            content=content, structured_content=structured, meta=meta, is_error=is_error
        )
    return ToolResult(content=content, structured_content=structured, meta=meta, is_error=is_error)


def _error(text: str, headway: dict[str, Any]) -> ToolResult:
    return ToolResult(content=[mt.TextContent(text=text)], meta={"headway": headway}, is_error=True)


def build(
    gov: Governor, upstream: Any, *, session_id: str | None = None, metrics: Any = None
) -> FastMCP[Any]:
    """The proxy server in front of ``upstream`` (a command list for stdio, or a URL).
    ``metrics``: a ``prometheus_client`` registry served at ``/metrics`` over HTTP."""
    if isinstance(upstream, list | tuple):
        from fastmcp.client.transports import StdioTransport

        # the whole environment: an upstream's credentials (GITHUB_TOKEN, ...) come from the
        # client's configuration through the proxy (the MCP default passes only PATH, HOME...)
        target: Any = StdioTransport(
            command=upstream[0], args=list(upstream[1:]), env=dict(os.environ)
        )
    else:
        target = upstream
    server = create_proxy(target, name="headway")
    server.add_middleware(Governance(gov, session_id=session_id))
    if metrics is not None:
        serve_metrics(server, metrics)
    return server


def serve_metrics(server: FastMCP[Any], registry: Any) -> None:
    """``GET /metrics``: the registry in Prometheus's text exposition format."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from starlette.requests import Request
    from starlette.responses import Response

    @server.custom_route("/metrics", methods=["GET"])
    async def scrape(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
