"""JSON-RPC over stdio, line by line: a pipe read as lines (``Lines``, each at most
``LINE_LIMIT``), a line read as a message (``loads``, ``parsed``) and a message written as
a line (``dumps``), and the JSON-RPC error answers. Both sides of the stdio relay, the
client's and the upstream's, read and write through this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable
from typing import Any

import orjson

LINE_LIMIT = 2**26  # asyncio's default (64 KiB) is smaller than many tool results
# bytes asked of a pipe per read. asyncio asks 256 KiB: a buffer that size is allocated
# and unmapped again by malloc on every read (past its mmap threshold, 128 KiB), 16 us
# per read here against 1.5 us for 64 KiB; a message is a few hundred bytes
READ_SIZE = 2**16


class Lines(asyncio.Protocol):
    """A pipe read line by line, each line handed to ``on_line`` as it arrives. ``ended``
    is set when the pipe ends (a last line without a newline is handed on first, as
    ``readline`` would). A line that grows past LINE_LIMIT is not handed on: with
    ``on_overflow``, its first bytes go there and the rest of it is skipped (the lines
    after it are read as usual); without, the pipe is closed."""

    def __init__(
        self,
        on_line: Callable[[bytes], None],
        on_overflow: Callable[[bytes], None] | None = None,
    ) -> None:
        self._on_line = on_line
        self._on_overflow = on_overflow
        self._skipping = False  # inside a line past the limit: dropped up to its newline
        self._buffer = bytearray()
        self._transport: asyncio.BaseTransport | None = None
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.max_size = READ_SIZE  # type: ignore[attr-defined]  # see READ_SIZE
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        start, end = 0, data.find(b"\n")  # in the new bytes only: a long line is not rescanned
        if self._skipping:
            if end < 0:
                return
            self._skipping = False
            start, end = end + 1, data.find(b"\n", end + 1)
        while end >= 0:
            if self._buffer:
                self._buffer += data[start : end + 1]
                line = bytes(self._buffer)
                self._buffer.clear()
            else:
                line = data[start : end + 1]
            if len(line) > LINE_LIMIT:
                if not self._overflow(line, skip=False):
                    return
            else:
                self._on_line(line)
            start, end = end + 1, data.find(b"\n", end + 1)
        self._buffer += data[start:]
        if len(self._buffer) > LINE_LIMIT:
            self._overflow(bytes(self._buffer[:HEAD]), skip=True)

    def _overflow(self, line: bytes, *, skip: bool) -> bool:
        """A line past the limit: True when reading goes on (the rest of it is skipped)."""
        self._buffer.clear()
        if self._on_overflow is None:
            if self._transport is not None:
                self._transport.close()
            return False
        self._skipping = skip
        self._on_overflow(line[:HEAD])
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self._buffer and not self._skipping:
            line, self._buffer = bytes(self._buffer), bytearray()
            self._on_line(line)
        if not self.ended.done():
            self.ended.set_result(None)


def parsed(line: bytes, *, strict: bool = False) -> Any:
    """The message of a line; None for one that cannot be read (not JSON, or nested past
    what the parser recurses into). From the upstream, bytes that are not UTF-8 are read
    as U+FFFD: the message (and its id) is still there. From the client (``strict``) such
    a line is not read: repairing it could make two of its idempotency keys one."""
    try:
        return loads(line)
    except UnicodeDecodeError:
        if strict:
            return None
        try:
            return json.loads(line.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            return None
    except (ValueError, RecursionError):
        return None


def nested(line: bytes) -> bool:
    return line.count(b"[") + line.count(b"{") > 512


HEAD = 4096  # bytes of an unreadable line searched for its id
_ID_FIELD = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')


def id_in(head: bytes) -> Any:
    """The id of a message that cannot be parsed, from its first bytes (None if none)."""
    found = _ID_FIELD.search(head)
    if found is None:
        return None
    with contextlib.suppress(ValueError):
        return json.loads(found.group(1))
    return None


def loads(line: bytes) -> Any:
    """``json.loads``, by orjson where that gives the same values (four times faster): a
    line without a run of 19 digits (orjson reads integers past 64 bits as floats); what
    orjson refuses and json takes (NaN, lone surrogates, UTF-16) goes to json. The check
    is a translation (every digit to "0", the rest to spaces) and a search, 0.6 ns a
    byte (a regular expression took 13 ns, more than it saved on a long line)."""
    if _LONG_NUMBER not in line.translate(_DIGITS):
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass
    return json.loads(line)


_DIGITS = bytes(0x30 if 0x30 <= c <= 0x39 else 0x20 for c in range(256))  # "0" or " "
_LONG_NUMBER = b"0" * 19  # 19 digits may pass 64 bits; fewer never do


def dumps(message: Any) -> bytes:
    """A line of ``message``'s JSON, by orjson where it writes what ``json.dumps`` would
    (the same values; spacing and escapes differ): not for what orjson writes as ``null``
    (NaN, infinities), nor for what it refuses (integers past 64 bits, keys that are not
    strings) or would write where ``json.dumps`` raises (datetimes, dataclasses)."""
    try:
        data = orjson.dumps(message, option=_AS_JSON_DOES)
    except TypeError:
        return json.dumps(message).encode() + b"\n"
    if b"null" in data:  # a real null, or a NaN that json.dumps keeps: json decides
        return json.dumps(message).encode() + b"\n"
    return data + b"\n"


_AS_JSON_DOES = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)

PARSE_ERROR, INVALID, INTERNAL = -32700, -32600, -32603


def rpc_error(rid: Any, message: str, code: int = INTERNAL) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
