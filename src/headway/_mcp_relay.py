"""``headway proxy -- COMMAND`` over stdio: a JSON-RPC relay to one persistent upstream.

Every line passes through unchanged, both ways (resources, prompts, ``tools/list`` and its
changes, progress, logging, sampling, elicitation, pings, cancellations), except a client's
``tools/call``: headway governs it, and when it runs it goes upstream under an id of the
relay's own (``headway-N``), so a retry or a late answer never reaches the client twice.
Answers to ``tools/list`` are read on their way for the tools' annotations.

Why not FastMCP's proxy here: it is an MCP server and an MCP client in one process, each
request parsed into models, dispatched through middleware, sent through a client context
and serialised again, which costs about as much as the direct call itself. The relay
parses a line once. The upstream is started on first use, and again after it exits (the
client's ``initialize`` is replayed to it); requests in flight when it dies are answered
with an error at once, never left to hang.

This module owns the client's side; the upstream process is ``_mcp_upstream``, the
line-by-line JSON-RPC both sides read and write is ``_jsonrpc``, and one governed call is
``_mcp_calls``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ._jsonrpc import (
    HEAD,
    INVALID,
    LINE_LIMIT,
    PARSE_ERROR,
    Lines,
    dumps,
    id_in,
    nested,
    parsed,
    rpc_error,
)
from ._mcp_calls import (
    IDEMPOTENCY_KEY,
    Taken,
    Turns,
    answer_json,
    declare,
    error_json,
    govern,
    is_ask,
    judge_results,
    not_final,
    note,
    result_key,
)
from ._mcp_errors import UpstreamRefusedError
from ._mcp_upstream import Upstream
from ._session import Governor
from .outcome import Outcome


class Relay:
    """Between the client (this process's stdin and stdout) and the upstream."""

    def __init__(self, gov: Governor, command: Sequence[str], session_id: str) -> None:
        self.gov = gov
        judge_results(gov)
        self.session = gov.session(session_id)
        # its id is made for this process, which keeps the session: no run resumes it,
        # so its cache epochs stay in memory (a SQLite write per call saved)
        self.session._st.transient = True
        self.upstream = Upstream(command, self)
        self.turns = Turns(gov.idle_turn_s, gov.timer)  # user turns where the client marks none
        self.taken = Taken()  # when the results a later call may be served were received
        self._annotations: dict[str, dict[str, Any]] = {}
        self._schemas: dict[str, Any] = {}  # each tool's output schema, if it lists one
        self._forwarded: dict[Any, str] = {}  # the client's requests in flight -> method
        self._calls: dict[Any, asyncio.Task[None]] = {}  # governed tools/call in flight
        self._listed = False
        self._backlog: collections.deque[tuple[bytes, Any]] = collections.deque()
        self._forwarding: asyncio.Task[None] | None = None
        self._reading: asyncio.ReadTransport | None = None

    def to_client(self, message: bytes | Mapping[str, Any]) -> None:
        # a blocking write: the client reads its pipe, and an asyncio pipe transport
        # would refuse a stdout redirected to a file
        out = sys.stdout.buffer
        out.write(message if isinstance(message, bytes) else dumps(message))
        out.flush()

    async def serve(self) -> None:
        # what the imports made lives as long as the process: keep the collector from
        # walking it again and again (a full collection would add its time to a call)
        gc.freeze()
        loop = asyncio.get_running_loop()
        stdin = Lines(self._from_stdin, self._too_long)
        self._reading, _ = await loop.connect_read_pipe(lambda: stdin, sys.stdin)
        # a client that ends the proxy with SIGTERM ends it as closing its stdin does: the
        # calls in flight are cancelled, the upstream closed and the audit trail written out
        loop.add_signal_handler(signal.SIGTERM, self._reading.close)
        try:
            await stdin.ended
            if self._forwarding is not None:  # what came before the end goes on first
                await self._forwarding
        finally:
            loop.remove_signal_handler(signal.SIGTERM)
            for task in self._calls.values():
                task.cancel()
            await self.upstream.close()

    def _too_long(self, head: bytes) -> None:
        """A client's line past LINE_LIMIT: an error answer (to its id, if its first bytes
        name one); the lines after it are read as usual."""
        message = f"headway proxy: a message larger than {LINE_LIMIT >> 20} MiB was dropped"
        self.to_client(rpc_error(id_in(head), message, INVALID))

    def _from_stdin(self, line: bytes) -> None:
        """A line as it arrives: a ``tools/call`` starts at once unless lines wait before
        it (no turn of a reader task in between); the rest is forwarded in order. A batch
        is taken apart: each of its messages is handled as a line of its own (so each
        ``tools/call`` in it is governed). A line that cannot be read is answered here."""
        if not line.strip():
            return
        message = parsed(line, strict=True)
        if message is None:  # not JSON, or nested too deep to read: never forwarded blind
            reason = "nested too deep" if nested(line) else "not valid JSON in UTF-8"
            error = f"headway proxy: the message cannot be read ({reason})"
            self.to_client(rpc_error(id_in(line[:HEAD]), error, PARSE_ERROR))
            return
        if isinstance(message, list):
            if not message:
                self.to_client(rpc_error(None, "headway proxy: an empty batch", INVALID))
            for part in message:
                if isinstance(part, list):  # a batch holds messages, not batches
                    self.to_client(rpc_error(None, "headway proxy: a batch in a batch", INVALID))
                else:
                    self._from_stdin(dumps(part))
            return
        if self._forwarding is None and self._call(message):
            return
        self._backlog.append((line, message))
        if len(self._backlog) > _BACKLOG:  # the upstream is slow to take them: wait
            self._reading.pause_reading()  # type: ignore[union-attr]
        if self._forwarding is None:
            self._forwarding = asyncio.create_task(self._forward())

    async def _forward(self) -> None:
        try:
            while self._backlog:
                line, message = self._backlog.popleft()
                if len(self._backlog) == _BACKLOG:
                    self._reading.resume_reading()  # type: ignore[union-attr]
                await self._handle(line, message)
        finally:
            self._forwarding = None

    async def from_client(self, line: bytes) -> None:
        """One line from the client."""
        await self._handle(line, parsed(line, strict=True))

    def _call(self, message: Any) -> bool:
        """Start a governed ``tools/call``; False for any other message. A ``tools/call``
        without an id (a notification) cannot be answered: it is dropped, never run."""
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            return False
        rid = message.get("id")
        if rid is None:
            name = (
                (message.get("params") or {}).get("name")
                if isinstance(message.get("params"), dict)
                else None
            )
            note(f"dropped a tools/call without an id (a notification, {name!r}): not run")
            return True
        self._calls[rid] = asyncio.create_task(self._tool_call(rid, message.get("params") or {}))
        return True

    async def _handle(self, line: bytes, message: Any) -> None:
        if self._call(message):
            return
        if isinstance(message, dict) and isinstance(message.get("method"), str):
            method, rid = message["method"], message.get("id")
            if method == "notifications/cancelled":
                target = (message.get("params") or {}).get("requestId")
                if target in self._calls:  # its upstream request is cancelled under our id
                    self._calls.pop(target).cancel()
                    return
                self._forwarded.pop(target, None)  # the upstream may never answer it
            if rid is not None:
                self._forwarded[rid] = method
        try:
            await self.upstream.send(line)
        except (OSError, ConnectionError) as exc:  # cannot start it, or it died on the way
            if isinstance(message, dict) and message.get("id") is not None:
                self._forwarded.pop(message["id"], None)
                self.to_client(rpc_error(message["id"], f"{exc}"))
            return
        if isinstance(message, dict) and message.get("method") in _HANDSHAKE:
            self.upstream.handshake.append(message)  # after it went: replayed on a restart

    def from_upstream(self, line: bytes, message: Any) -> None:
        if isinstance(message, dict) and "method" not in message and "id" in message:
            method = self._forwarded.pop(message["id"], None)
            if method == "tools/list":
                self._declare(message.get("result"))
        elif isinstance(message, dict) and message.get("method") == _LIST_CHANGED:
            self._listed = False  # a tool not yet declared is looked up again
        elif not isinstance(message, dict | list):  # not JSON-RPC: never on the client's stdout
            note(f"skipped a line from the upstream that is not a JSON-RPC message: {line[:80]!r}")
            return
        self.to_client(line)

    def upstream_closed(self, reason: str) -> None:
        """The client's requests in flight get an error now (governed calls get theirs
        from headway, as a tool result)."""
        forwarded, self._forwarded = self._forwarded, {}
        for rid in forwarded:
            self.to_client(rpc_error(rid, f"the upstream MCP server crashed ({reason})"))

    def _declare(self, listing: Any) -> None:
        tools = listing.get("tools") if isinstance(listing, Mapping) else None
        for tool in tools or ():
            if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
                self._schemas[tool["name"]] = tool.get("outputSchema")
                annotations = tool.get("annotations")
                declare(
                    self.gov,
                    tool["name"],
                    dict(annotations) if isinstance(annotations, Mapping) else {},
                    self._annotations,
                )
        self._listed = True

    async def _list_tools(self, meta: Mapping[str, Any]) -> None:
        """The annotations of a client that calls a tool before it lists any. ``meta``:
        the protocol fields of the client's request (a 2026-07-28 request carries its
        version and capabilities in each request's ``_meta``)."""
        cursor = None
        era = {k: v for k, v in meta.items() if k.startswith("io.modelcontextprotocol/")}
        while True:
            params: dict[str, Any] = {"_meta": era} if era else {}
            answer = await self.upstream.request(
                "tools/list", {**params, "cursor": cursor} if cursor else params
            )
            result = answer.get("result") or {}
            self._declare(result)
            cursor = result.get("nextCursor")
            if not cursor:
                return

    async def _tool_call(self, rid: Any, params: Mapping[str, Any]) -> None:
        try:
            name, arguments = params.get("name"), params.get("arguments") or {}
            if not isinstance(name, str) or not isinstance(arguments, Mapping):
                self.to_client(rpc_error(rid, "tools/call needs a name and object arguments"))
                return
            meta = params.get("_meta") or {}
            if self.gov.spec(name) is None and not self._listed:
                with contextlib.suppress(OSError, ConnectionError, asyncio.TimeoutError):
                    await asyncio.wait_for(self._list_tools(meta), 30)
            ran: list[dict[str, Any]] = []

            async def forward() -> dict[str, Any]:
                answer = await self.upstream.request("tools/call", dict(params))
                if "error" in answer:  # the upstream refused the request itself
                    error = answer["error"] or {}
                    raise UpstreamRefusedError(f"{error.get('message')} (code {error.get('code')})")
                ran.append(answer.get("result") or {})
                return not_final(ran[-1]) if is_ask(ran[-1]) else ran[-1]

            session = self.session
            out = await govern(session, name, arguments, meta, forward, self.turns, self.taken)
            if isinstance(out, Outcome):
                ran_now = ran[-1] if ran else None
                stored = result_key(session.id, name, arguments, meta.get(IDEMPOTENCY_KEY))
                when = self.taken.when(stored, out.value) if ran_now is None else None
                result = answer_json(out, ran_now, session.id, self._schemas.get(name), when)
            else:
                result = error_json(*out)
            self.to_client({"jsonrpc": "2.0", "id": rid, "result": result})
        except asyncio.CancelledError:
            raise  # the client cancelled: it expects no answer
        except Exception as exc:  # never leave the client waiting
            self.to_client(rpc_error(rid, f"headway proxy: {type(exc).__name__}: {exc}"))
        finally:
            self._calls.pop(rid, None)


_BACKLOG = 256
_HANDSHAKE = ("initialize", "notifications/initialized")
_LIST_CHANGED = "notifications/tools/list_changed"


async def serve(gov: Governor, command: Sequence[str], session_id: str) -> None:
    await Relay(gov, command, session_id).serve()
