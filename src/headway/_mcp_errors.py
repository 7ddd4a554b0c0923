"""The upstream's failures, as the proxy tells them to the pipeline: unreachable (nothing
ran: a retry may help) or lost after the request was sent (the call may have run), and
how an exception of an MCP client library (FastMCP, httpx) is told as one of the two.
"""

from __future__ import annotations

import sys


class UpstreamError(ConnectionError):
    """The upstream MCP server crashed, closed the connection or cannot be reached."""


class UpstreamUnreachableError(UpstreamError, ConnectionRefusedError):
    """The request never reached the upstream: it could not be started, or it had exited
    before the request was written. Nothing ran, so a retry may help (a refused
    connection, to the classifier: semantics §5.2)."""


class UpstreamLostError(UpstreamError, ConnectionResetError):
    """The upstream exited or closed the connection after the request was sent: the call
    may have run (semantics §5.2, a lost connection). A read is tried again; a write's
    outcome is unknown, and it is never run again in the same call."""


def _unreachable(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(10):  # the chain FastMCP raises is a few errors deep
        if seen is None:
            return False
        if isinstance(seen, OSError) or _connection_closed(seen):
            return True
        if type(seen).__name__ in ("ConnectError", "RemoteProtocolError", "ReadError"):
            return True  # httpx, for an HTTP upstream
        seen = seen.__cause__ or seen.__context__
    return False


def _lost(exc: BaseException) -> bool:
    """An upstream that went away after the request was sent (an MCP "connection closed",
    a reset, a broken stream), not one that could not be reached (refused, no such
    command, a name that does not resolve): the call may have run."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, UpstreamError):  # the relay said which it was
            return isinstance(seen, UpstreamLostError)
        if isinstance(seen, ConnectionRefusedError | FileNotFoundError | PermissionError):
            return False
        if type(seen).__name__ in ("ConnectError", "ConnectTimeout"):
            return False  # httpx: the connection was never made
        if _connection_closed(seen) or type(seen).__name__ in ("RemoteProtocolError", "ReadError"):
            return True
        if isinstance(seen, ConnectionResetError | ConnectionAbortedError | BrokenPipeError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _connection_closed(exc: BaseException) -> bool:
    """The MCP library's "connection closed" error. Looked up only when that library is
    loaded (the stdio relay never loads it): no such error can exist otherwise."""
    exceptions = sys.modules.get("mcp.shared.exceptions")
    if exceptions is None or not isinstance(exc, exceptions.MCPError):
        return False
    from mcp_types import CONNECTION_CLOSED

    return bool(exc.error.code == CONNECTION_CLOSED)


class UpstreamRefusedError(Exception):
    """The upstream answered a ``tools/call`` with a JSON-RPC error (unknown tool, bad
    arguments): the call did not run."""
