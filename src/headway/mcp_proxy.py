"""``headway proxy``: an MCP server that governs every ``tools/call`` of the server behind it.

Two transports share this module's decisions (``govern``, ``declare``, the answers): over
HTTP on either side, FastMCP's proxy (``create_proxy``), where tools, resources, prompts,
notifications, progress and sampling pass through unchanged and one middleware
(``Governance``) runs each tool call through a headway session; stdio to a stdio
upstream, the lighter JSON-RPC relay of ``_mcp_relay``. Each client session is a headway
session: the proxy process over stdio, the MCP session id over streamable HTTP.

What the client receives: EXECUTED is the upstream's result; CACHED and REPLAYED are the
stored upstream result; CORRECTED, UNKNOWN, ERROR and a stop are tool results with
``isError: true`` and headway's text. Every governed result carries ``_meta.headway``
(status, step, executed). An upstream result with ``isError: true`` reaches the client as
it was, and counts as an error for headway (never cached, repeated-error correction).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import mcp_types as mt
from fastmcp import FastMCP
from fastmcp.server import create_proxy
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import InputRequiredToolResult as InputRequired
from fastmcp.tools.base import RawStructuredToolResult, Tool, ToolResult
from fastmcp.utilities.json_schema import is_object_schema
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ._session import Governor, Session
from .errors import HeadwayError, Stop
from .outcome import Outcome, Status

IDEMPOTENCY_KEY = "headway/idempotency_key"
USER_TURN = "headway/user_turn"
SESSION = "headway/session"


class UpstreamError(ConnectionError):
    """The upstream MCP server crashed, closed the connection or cannot be reached."""


def _unreachable(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(10):  # the chain FastMCP raises is a few errors deep
        if seen is None:
            return False
        if isinstance(seen, OSError) or (
            isinstance(seen, MCPError) and seen.error.code == CONNECTION_CLOSED
        ):
            return True
        if type(seen).__name__ in ("ConnectError", "RemoteProtocolError", "ReadError"):
            return True  # httpx, for an HTTP upstream
        seen = seen.__cause__ or seen.__context__
    return False


_ANSWERED = (Status.EXECUTED, Status.CACHED, Status.REPLAYED, Status.FALLBACK)


class Governance(Middleware):
    """Runs each ``tools/call`` through ``gov``; everything else passes through."""

    def __init__(self, gov: Governor, *, session_id: str | None = None) -> None:
        self.gov = gov
        self.session_id = session_id  # stdio: one session for the whole process
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

        out = await govern(session, name, params.arguments or {}, meta, forward)
        if not isinstance(out, Outcome):
            return _error(*out)
        if upstream:
            self._raw[name] = isinstance(upstream[-1], RawStructuredToolResult)
        return answer(
            out,
            upstream[-1] if upstream else None,
            session.id,
            self._raw.get(name, False),
            self._schemas.get(name),
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

Refusal = tuple[str, dict[str, Any]]  # headway's text and _meta.headway for a call not run


async def govern(
    session: Session,
    name: str,
    arguments: Mapping[str, Any],
    meta: Mapping[str, Any],
    forward: Callable[[], Awaitable[dict[str, Any]]],
) -> Outcome | Refusal:
    """One ``tools/call`` through ``session``: its outcome, or headway's refusal (a stop,
    a key that cannot be used). ``forward`` runs it upstream and gives the JSON of the
    upstream's ``CallToolResult``; ``meta`` is the request's ``_meta``."""
    if meta.get(USER_TURN) is True:
        session.user_turn()

    async def run(**_: Any) -> dict[str, Any]:
        try:
            return await forward()
        except Exception as exc:
            if _unreachable(exc):  # retryable: reads are tried again, stdio restarted
                raise UpstreamError(
                    f"the upstream MCP server crashed, closed the connection or cannot "
                    f"be reached ({type(exc).__name__}: {exc})"
                ) from exc
            raise

    key = meta.get(IDEMPOTENCY_KEY)
    try:
        return await session.acall(
            name,
            dict(arguments),
            idempotency_key=str(key) if key is not None else None,
            run=run,
        )
    except Stop as stop:
        return (
            f"headway stopped this session: {json.dumps(stop.diagnostic, default=str)}",
            {"status": "stopped", "session": session.id, "diagnostic": stop.diagnostic},
        )
    except HeadwayError as exc:  # arguments that cannot be keyed, a reused key
        return f"headway refused this call: {exc}", {"status": "refused", "session": session.id}


def not_final(result: dict[str, Any]) -> dict[str, Any]:
    """What headway judges of a round that asks the client for input (2026-07-28, an
    ``InputRequiredResult``): not a result, so never cached or replayed (the client's
    next round of the same call, with its answers, must reach the upstream); the client
    still receives the ask as the upstream sent it."""
    return {**result, "isError": True}


def is_ask(result: Mapping[str, Any]) -> bool:
    return result.get("resultType") == "input_required"


def declare(
    gov: Governor, name: str, annotations: dict[str, Any], seen: dict[str, dict[str, Any]]
) -> None:
    """A tool's spec from its listed MCP annotations (the operator's table wins, in
    register); declared again when a changed tool list brings new annotations. ``seen``:
    the annotations each tool was last declared with."""
    if seen.get(name) == annotations and gov.spec(name):
        return
    seen[name] = annotations
    fields = gov.tool_config.get(name, {}).get("progress_fields")
    # the governed value is the whole CallToolResult: progress_fields name fields of
    # its structured content (or of a JSON object in its text)
    progress = fields_changed(tuple(fields)) if fields else None
    # replace=True: a tools/list change re-declares the tool from its new annotations
    gov.register(name, None, annotations=annotations, progress=progress, replace=True)


def _request_meta(context: MiddlewareContext[Any]) -> Mapping[str, Any]:
    """The ``_meta`` of the client's request (FastMCP keeps it on the request context)."""
    ctx = context.fastmcp_context
    rc = ctx.request_context if ctx is not None else None
    return (rc.meta if rc is not None else None) or {}


def fields_changed(fields: tuple[str, ...]) -> Callable[[Any, Any], bool]:
    """Progress of an MCP tool: one of ``fields`` of its structured result changed."""

    def progress(previous: Any, current: Any) -> bool:
        old, new = structured(previous), structured(current)
        return any(old.get(f) != new.get(f) for f in fields)

    return progress


def structured(value: Any) -> Mapping[str, Any]:
    """A result's structured content, else the first JSON object in its text, else {}."""
    if not isinstance(value, Mapping):
        return {}
    content = value.get("structuredContent")
    if isinstance(content, Mapping):
        return content
    for block in value.get("content") or ():
        if isinstance(block, Mapping) and block.get("type") == "text":
            with contextlib.suppress(ValueError, TypeError):
                parsed = json.loads(block.get("text", ""))
                if isinstance(parsed, Mapping):
                    return parsed
    return {}


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


def _headway_meta(out: Outcome, session: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "status": str(out.status),
        "session": session,
        "step": out.step,
        "executed": out.executed,
    }
    if out.reconcile_key is not None:
        meta["reconcile_key"] = out.reconcile_key
    if out.correction:
        meta["correction"] = out.correction
    return meta


def answer(
    out: Outcome, upstream: ToolResult | None, session: str, raw: bool, schema: Any = None
) -> ToolResult:
    """The MCP result the client receives for an outcome. ``upstream``: the result the
    upstream gave during this call, if it ran; ``raw``: the tool's structured results are
    sent as they are (FastMCP's ``RawStructuredToolResult``, wrapped for older clients)."""
    headway = _headway_meta(out, session)
    extra = [mt.TextContent(text=out.correction)] if out.correction else []
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
    if out.status in _ANSWERED:
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


def answer_json(
    out: Outcome, ran: Mapping[str, Any] | None, session: str, schema: Any = None
) -> dict[str, Any]:
    """``answer`` on JSON (the stdio relay): the ``CallToolResult`` the client receives.
    ``ran``: the upstream's result during this call, if it ran, as the upstream sent it;
    ``schema``: the tool's output schema, if it listed one."""
    headway = _headway_meta(out, session)
    extra: list[Any] = [{"type": "text", "text": out.correction}] if out.correction else []
    error = out.error or {}
    if ran is not None and (
        out.status is Status.EXECUTED
        or (out.status is Status.ERROR and error.get("code") == "error_result")
    ):
        base: Mapping[str, Any] = ran
    elif out.status in _ANSWERED and isinstance(out.value, Mapping) and "content" in out.value:
        base = out.value  # the stored upstream result
    elif out.status in _ANSWERED:  # a fallback value from the operator's configuration
        base, extra = {"content": []}, [{"type": "text", "text": out.to_model()}]
        structured = fallback_structured(out.value, schema)
        if structured is not None:
            base = {**base, "structuredContent": structured}
    else:
        return error_json(out.to_model(), headway)
    return {
        "resultType": "complete",  # required from 2026-07-28 on; absent means the same
        **base,
        "content": [*(base.get("content") or []), *extra],
        "_meta": {**(base.get("_meta") or {}), "headway": headway},
    }


def fallback_structured(value: Any, schema: Any) -> Any:
    """The structured content of a fallback for a tool with an output schema (a client
    rejects a result without one): the value if it is an object, else wrapped as
    ``{"result": value}``, the form FastMCP servers give a tool that returns a plain value.
    None for a tool without an output schema."""
    if schema is None:
        return None
    return dict(value) if isinstance(value, Mapping) else {"result": value}


def error_json(text: str, headway: dict[str, Any]) -> dict[str, Any]:
    return {
        "resultType": "complete",
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "_meta": {"headway": headway},
    }


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


def new_stdio_session() -> str:
    return f"stdio-{uuid.uuid4().hex[:12]}"


def note(text: str) -> None:
    """A line for the operator: stderr, since stdout carries the MCP protocol."""
    print(f"headway proxy: {text}", file=sys.stderr, flush=True)
