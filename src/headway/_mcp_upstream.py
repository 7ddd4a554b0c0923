"""The upstream of the stdio relay: one MCP server process, started on first use and
again after it exits (the client's ``initialize`` replayed to it). The relay's own
requests go to it under ids of their own (``headway-...-N``); their answers are taken
here and never forwarded, and every other line is handed to the ``Downstream``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import uuid
from collections.abc import Sequence
from typing import Any, Protocol

from ._jsonrpc import LINE_LIMIT, Lines, dumps, parsed
from ._mcp_calls import note
from ._mcp_errors import UpstreamLostError, UpstreamRefusedError, UpstreamUnreachableError

_ID = f"headway-{uuid.uuid4().hex[:8]}-"  # the relay's own request ids
_RELAY_ID = re.compile(rb'"id"\s*:\s*"(' + re.escape(_ID.encode()) + rb'\d+)"')


class Downstream(Protocol):
    """Where an upstream's lines go (the relay)."""

    def from_upstream(self, line: bytes, message: Any) -> None: ...

    def upstream_closed(self, reason: str) -> None: ...


class Upstream:
    """One upstream process over stdio: started on first use and again after it exits."""

    def __init__(self, command: Sequence[str], relay: Downstream) -> None:
        self.command = list(command)
        self.relay = relay
        self.proc: asyncio.subprocess.Process | None = None
        # the relay's requests in flight: the process they went to, and their answer
        self.pending: dict[str, tuple[Any, asyncio.Future[dict[str, Any]]]] = {}
        self.handshake: list[dict[str, Any]] = []  # the client's initialize, to replay
        self._ids = itertools.count()
        self._lock = asyncio.Lock()
        self._lines: Lines | None = None  # the upstream's stdout
        self._reader: asyncio.Task[None] | None = None

    def _running(self) -> asyncio.subprocess.Process | None:
        proc, lines = self.proc, self._lines
        if proc is not None and proc.returncode is None and lines and not lines.ended.done():
            return proc
        return None

    async def ensure(self) -> asyncio.subprocess.Process:
        proc = self._running()
        if proc is not None:
            return proc  # running: no lock to take
        async with self._lock:
            proc = self._running()
            if proc is not None:  # another call started it while this one waited
                return proc
            if self._reader is not None:  # the last one's end is reported before a restart
                await self._reader
            # its stdout is a pipe of the relay's own, read by a protocol that hands each
            # line on as it arrives: one loop turn fewer per answer than a StreamReader
            read_end, write_end = os.pipe()
            try:
                proc = await asyncio.create_subprocess_exec(
                    *self.command,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=write_end,
                    env=dict(os.environ),  # the upstream's credentials come through the proxy
                )
            except BaseException:
                os.close(read_end)
                raise
            finally:
                os.close(write_end)
            lines = Lines(self._received, self._too_long)
            loop = asyncio.get_running_loop()
            await loop.connect_read_pipe(lambda: lines, open(read_end, "rb", buffering=0))  # noqa: SIM115 (the transport closes it)
            self.proc, self._lines = proc, lines
            self._reader = asyncio.create_task(self._read(proc, lines))
            try:
                for message in self.handshake:  # a restart: the upstream meets the client again
                    if "id" in message:
                        await self._request(proc, message["method"], message.get("params"))
                    else:
                        await self._write(proc, message)
            except UpstreamLostError as exc:  # it died before the caller's request was sent
                raise UpstreamUnreachableError(str(exc)) from exc
            return proc

    async def send(self, line: bytes) -> None:
        """Forward a client's line as it is."""
        proc = await self.ensure()
        await self._write(proc, line)

    async def request(self, method: str, params: Any) -> dict[str, Any]:
        """A request of the relay's own; the upstream's JSON-RPC answer."""
        return await self._request(await self.ensure(), method, params)

    async def _request(
        self, proc: asyncio.subprocess.Process, method: str, params: Any
    ) -> dict[str, Any]:
        rid = f"{_ID}{next(self._ids)}"
        done: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[rid] = (proc, done)
        try:
            message = {"jsonrpc": "2.0", "id": rid, "method": method}
            await self._write(proc, message if params is None else {**message, "params": params})
            return await done
        except asyncio.CancelledError:  # a timeout, or the client cancelled
            if proc.returncode is None:
                cancelled = {"requestId": rid, "reason": "cancelled by headway proxy"}
                with contextlib.suppress(ConnectionError):
                    note = {"method": "notifications/cancelled", "params": cancelled}
                    await self._write(proc, {"jsonrpc": "2.0", **note})
            raise
        finally:
            self.pending.pop(rid, None)

    async def _write(self, proc: asyncio.subprocess.Process, message: bytes | Any) -> None:
        data = message if isinstance(message, bytes) else dumps(message)
        stdin = proc.stdin
        # not sent: the upstream cannot have read it (nothing ran)
        if stdin is None or proc.returncode is not None:
            raise UpstreamUnreachableError(f"connection closed: {self._exited(proc)}")
        try:
            stdin.write(data)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise UpstreamUnreachableError(f"connection closed: {self._exited(proc)}") from exc

    async def _read(self, proc: asyncio.subprocess.Process, lines: Lines) -> None:
        # until its stdout ends, a line passes LINE_LIMIT or the pipe breaks: then the
        # upstream is unusable
        await lines.ended
        with contextlib.suppress(TimeoutError):  # its exit status, for the message
            await asyncio.wait_for(proc.wait(), 1)
        if proc.returncode is None:  # its stdout is gone but it lives on: end it
            proc.kill()
            await proc.wait()
        reason = f"connection closed: {self._exited(proc)}"
        for sent_to, done in self.pending.values():
            if sent_to is proc and not done.done():  # sent, and never answered: lost
                done.set_exception(UpstreamLostError(reason))
        self.relay.upstream_closed(reason)

    def _received(self, line: bytes) -> None:
        message = parsed(line)
        rid = message.get("id") if isinstance(message, dict) else None
        if "method" not in (message or {}) and isinstance(rid, str) and rid.startswith(_ID):
            _, done = self.pending.get(rid, (None, None))
            if done is not None and not done.done():
                done.set_result(message)
            return  # an answer to the relay (or a late one, after a timeout): not forwarded
        if message is None and _ID.encode() in line:  # an answer to the relay, unreadable
            self._unreadable(line, "is not valid JSON")
            return
        self.relay.from_upstream(line, message)

    def _too_long(self, head: bytes) -> None:
        """An upstream line past LINE_LIMIT: skipped; an answer to the relay fails."""
        if _ID.encode() in head:
            self._unreadable(head, f"is larger than {LINE_LIMIT >> 20} MiB")
        else:
            note(f"skipped a message from the upstream larger than {LINE_LIMIT >> 20} MiB")

    def _unreadable(self, line: bytes, why: str) -> None:
        """An answer to the relay that cannot be read: its request fails now (the upstream
        answered: not a lost connection), never left to time out; never forwarded."""
        found = _RELAY_ID.search(line)
        rid = found.group(1).decode() if found else None
        _, done = self.pending.get(rid or "", (None, None))
        if done is not None and not done.done():
            done.set_exception(UpstreamRefusedError(f"the upstream's answer {why}"))
        else:
            note(f"skipped an answer from the upstream that {why}")

    @staticmethod
    def _exited(proc: asyncio.subprocess.Process) -> str:
        code = proc.returncode
        return "the upstream exited" + (f" with status {code}" if code is not None else "")

    async def close(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 2)
        except TimeoutError:
            proc.terminate()
            await proc.wait()
