"""A store in Redis (redis-py): shared by processes on several machines.

The claim is ``SET NX PX``; compare-and-set is a one-key Lua script (``GET`` compared with
the expected JSON, then ``SET`` or ``DEL``), so every operation touches one key. A long
expected value (a session record's head) is sent as its SHA-1 and compared with the
stored value's, which the server computes: a swap sends the new value only, in a batch as
its edits of the stored one where they are shorter (``_delta``). headway's own keys put
the session or tool in a ``{hash tag}``. Tested against a single Redis server
only (not Redis Cluster).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ConfigError, StoreError
from . import _delta
from ._base import SAME, SAME_TEXT, Op, digest, dumps, loads, shared_prefix
from ._urls import target

try:
    import redis as _redis
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError("RedisStore needs redis-py: pip install 'headway[redis]'") from exc

# Every script takes its small arguments first and its values last.
_SWAP = """
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if string.byte(ARGV[2], 1) == 35 then
  local hexed = string.format(string.rep('%02x', 20), string.byte(ARGV[2], 2, 21))
  if redis.sha1hex(current) ~= hexed then return 0 end
elseif current ~= ARGV[2] then return 0 end
if ARGV[3] == '' then redis.call('DEL', KEYS[1])
elseif ARGV[1] == '' then redis.call('SET', KEYS[1], ARGV[3])
else redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[1]) end
return 1
"""


# ``batch``: ARGV[1] is the batch's layout, words separated by spaces: the number of keys
# k, then for each key how many of its leading bytes are the previous key's (a session's
# part extends its record's key, a lease its idempotency record's: each is sent as its
# tail), the distinct PX values, then a word per operation (the first word that starts
# with a letter): a letter for its name (get, x: a get with an expected value, del, swap,
# set, add), its condition ('1', '0' or '-'), the number of its key, and '.' and the
# number of its PX if it has one. The operations are read with one pattern, the numbers
# before them with another: a word at a time costs the server more. ARGV[2 .. k+1] are the
# keys' tails; then come the values, in the operations' order: one for a set or an add,
# two for a swap (its new value, '' to delete, then its expected one), one for an x, none
# for a get or a del. A swap's new value may come as '~' and edits of the value it
# replaces (``_delta``): steps of three 16-bit big-endian numbers, each copying the run of
# its second number's bytes that starts its first number's bytes past the end of the run
# copied before, then inserting as many bytes as its third number says, which follow it
# (``struct`` reads a step in one call, where text numbers took seven). An expected
# value written '#' and the 20 bytes of a SHA-1 (never a JSON text) is compared with the
# stored value's digest. Results: a get's value (nil when absent; '=' for an x whose value
# is the expected one), 1 or 0 for the others, nil when skipped. The keys are built here:
# a single server, never Redis Cluster.
_BATCH = """
local function same(current, expected)
  if not current then return false end
  if string.byte(expected, 1) == 35 then
    local a, b, c, d, e = struct.unpack('>I4I4I4I4I4', expected, 2)
    return redis.sha1hex(current) == bit.tohex(a, 8) .. bit.tohex(b, 8) .. bit.tohex(c, 8)
      .. bit.tohex(d, 8) .. bit.tohex(e, 8)
  end
  return current == expected
end
local function patch(base, e)
  local out, pos, at, n = {}, 2, 0, #e
  while pos <= n do
    local skip, len, add
    skip, len, add, pos = struct.unpack('>HHH', e, pos)
    at = at + skip + len
    out[#out + 1] = string.sub(base, at - len + 1, at)
    if add > 0 then
      out[#out + 1] = string.sub(e, pos, pos + add - 1)
      pos = pos + add
    end
  end
  return table.concat(out)
end
local layout = ARGV[1]
local d = {}
for w in string.gmatch(string.sub(layout, 1, (string.find(layout, '%a') or 0) - 1), '%d+') do
  d[#d + 1] = w
end
local k = tonumber(d[1])
local keys, prev = {}, ''
for i = 1, k do
  prev = string.sub(prev, 1, tonumber(d[i + 1])) .. ARGV[i + 1]
  keys[i] = prev
end
local out, last, data, i = {}, nil, k + 2, 0
for name, cond, at, px in string.gmatch(layout, '(%a)(.)(%d+)%.?(%d*)') do
  i = i + 1
  local key, r = keys[tonumber(at)], 0
  if px ~= '' then px = d[k + 1 + tonumber(px)] end
  local value = ARGV[data]
  if name == 'w' then data = data + 2
  elseif name ~= 'g' and name ~= 'd' then data = data + 1 end
  if (cond == '1' and last ~= 1) or (cond == '0' and last == 1) then r = false
  elseif name == 'g' then r = redis.call('GET', key)
  elseif name == 'x' then
    r = redis.call('GET', key)
    if same(r, value) then r = '=' end
  elseif name == 'd' then redis.call('DEL', key); r = 1
  elseif name == 'w' then
    local current = redis.call('GET', key)
    if same(current, ARGV[data - 1]) then
      if string.byte(value, 1) == 126 then value = patch(current, value) end
      if value == '' then redis.call('DEL', key)
      elseif px == '' then redis.call('SET', key, value)
      else redis.call('SET', key, value, 'PX', px) end
      r = 1
    end
  else
    if name == 's' and px == '' then r = redis.call('SET', key, value)
    elseif name == 's' then r = redis.call('SET', key, value, 'PX', px)
    elseif px == '' then r = redis.call('SET', key, value, 'NX')
    else r = redis.call('SET', key, value, 'NX', 'PX', px) end
    r = r and 1 or 0
  end
  out[i], last = r, r
end
return out
"""

#: an expected value this long or longer is sent as '#' and its SHA-1 (21 bytes)
_DIGESTED = 32


def _expected(text: str) -> str | bytes:
    """An expected value (its stored text) as sent: that text, or '#' and its SHA-1's 20
    bytes when it is long."""
    return b"#" + bytes.fromhex(digest(text, "sha1")) if len(text) >= _DIGESTED else text


def _new(value: Any, expected: str) -> str | bytes:
    """A swap's new value as sent: '' to delete, its text, or '~' and its edits of the
    expected value's text when they are shorter (a session record's head, a completion)."""
    if value is None:
        return ""
    text = dumps(value)
    if len(text) < _delta.LONG:
        return text
    new = text.encode()
    runs = _delta.edits(expected.encode(), new)
    if not _delta.worth(runs, len(new), 6):
        return text
    steps: list[list[Any]] = []  # [skip, length, added bytes]
    end = 0
    for r in runs:
        if isinstance(r, tuple):
            steps.append([r[0] - end, r[1], b""])
            end = r[0] + r[1]
        elif steps:
            steps[-1][2] += r
        else:
            steps.append([0, 0, r])
    out = [b"~"]
    for skip, length, added in steps:
        if not (0 <= skip < _WIDE and length < _WIDE and len(added) < _WIDE):
            return text  # a value past 64 KiB: sent whole
        out += (_STEP.pack(skip, length, len(added)), added)
    return b"".join(out)


_STEP = struct.Struct(">HHH")  # an edit's step: skip, length, added
_WIDE = 1 << 16


_LETTERS = {"get": "g", "x": "x", "delete": "d", "swap": "w", "set": "s", "add": "a"}
_ONE_WRITE = 1 << 20  # a command up to this size is sent in one socket write


def _one_write(base: type[Any]) -> type[Any]:
    """redis-py's connection class (TCP, TLS or Unix socket), sending each command in one
    write: redis-py writes a value past 6,000 bytes (a session record) apart, each write
    a system call and a wake-up of the server."""

    def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
        if isinstance(command, list) and len(command) > 1 and sum(map(len, command)) <= _ONE_WRITE:
            command = [b"".join(command)]
        base.send_packed_command(self, command, check_health)

    return type(base.__name__, (base,), {"send_packed_command": send_packed_command})


def _px(ttl_s: float | None) -> int | None:
    return None if ttl_s is None else max(1, int(ttl_s * 1000))


def _px_args(ttl_s: float | None) -> tuple[Any, ...]:
    px = _px(ttl_s)
    return () if px is None else ("PX", px)


class RedisStore:
    blocking = True

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "headway:",
        timeout_s: float = 5.0,
    ) -> None:
        self._target = target(url)
        self.url = self._target.shown  # the password [redacted]: safe to print
        self.prefix = prefix
        failure: ConfigError | None = None
        try:
            self._client = _redis.Redis.from_url(
                self._target.connect,
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                decode_responses=True,
            )
        except ValueError as exc:  # redis-py's own URL checks
            failure = ConfigError(f"invalid Redis URL {self.url!r}: {self._target.hide(str(exc))}")
        if failure is not None:
            raise failure  # outside the handler: the driver's error is not chained to it
        pool = self._client.connection_pool
        pool.connection_class = _one_write(pool.connection_class)
        self._pool: Any = pool
        self._idle: list[Any] = []  # connections taken from the pool, this store's own
        self._pid = os.getpid()
        self._swap: Any = self._client.register_script(_SWAP)
        self._batch: Any = self._client.register_script(_BATCH)

    def __repr__(self) -> str:
        return f"RedisStore({self.url!r}, prefix={self.prefix!r})"

    def _k(self, key: str) -> str:
        return self.prefix + key

    def _do(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``; a driver error becomes a ``StoreError`` whose message
        shows no password, with the driver's error not chained to it (a traceback would
        print that one's message as it is)."""
        try:
            return fn(*args, **kwargs)
        except (_redis.RedisError, UnicodeEncodeError) as exc:  # the latter: a lone surrogate
            failure = StoreError(
                f"Redis store {self.url}: {type(exc).__name__}: {self._target.hide(str(exc))}"
            )
        raise failure

    def _eval(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """``script`` run by its SHA-1, loaded again when the server no longer has it (a
        restart, ``SCRIPT FLUSH``)."""
        try:
            return self._command("EVALSHA", script.sha, len(keys), *keys, *args)
        except _redis.exceptions.NoScriptError:
            script.sha = self._command("SCRIPT", "LOAD", script.script)
            return self._command("EVALSHA", script.sha, len(keys), *keys, *args)

    def _command(self, *args: Any) -> Any:
        """One command and its reply on a connection this store keeps, without redis-py's
        per-command machinery (its pool's bookkeeping, metrics and retries: some 40 us of
        a round trip's 80 on this machine). Never sent again: a command whose connection
        failed may have run, and the caller treats it as such (a keyed write's result not
        recorded is UNKNOWN). A connection the server closed while it was idle (a restart)
        is found before the command is sent, and opened again."""
        if self._pid != os.getpid():  # a forked child: never the parent's sockets
            self._idle, self._pid = [], os.getpid()
        try:
            conn = self._idle.pop()
        except IndexError:
            conn = self._pool.make_connection()
        try:
            packed = conn.pack_command(*args)
        except BaseException:  # a value it cannot encode: nothing was sent
            self._idle.append(conn)
            raise
        try:
            self._pool.ensure_connection(conn)  # connected, nothing unread, not closed
            conn.send_packed_command(packed)
            reply = conn.read_response()
        except _redis.exceptions.ResponseError:  # the server's answer, read whole
            self._idle.append(conn)
            raise
        except BaseException:
            conn.disconnect()  # a reply half read, or none: never reused as it is
            self._idle.append(conn)
            raise
        self._idle.append(conn)
        return reply

    def get(self, key: str) -> Any | None:
        return loads(self._do(self._command, "GET", self._k(key)))

    def set(self, key: str, value: Any, ttl_s: float | None = None) -> None:
        self._do(self._command, "SET", self._k(key), dumps(value), *_px_args(ttl_s))

    def add(self, key: str, value: Any, ttl_s: float | None = None) -> bool:
        command = ("SET", self._k(key), dumps(value), "NX", *_px_args(ttl_s))
        return self._do(self._command, *command) is not None

    def swap(self, key: str, expected: Any, value: Any | None, ttl_s: float | None = None) -> bool:
        new = "" if value is None else dumps(value)
        px = _px(ttl_s)
        args = ["" if px is None else px, _expected(dumps(expected)), new]
        return bool(self._do(self._eval, self._swap, [self._k(key)], args))

    def batch(self, ops: Sequence[Op]) -> list[Any]:
        """Several operations in one script: one round trip (see ``_base.batch``), its
        layout in one argument and each key sent once, as its tail past what it shares
        with the key before. Their keys need not share a hash slot: a single server, not
        Redis Cluster."""
        keys: dict[str, int] = {}  # each key once, numbered from 1 as in Lua
        pxs: dict[int, int] = {}  # each PX once, numbered from 1
        words: list[str] = []
        values: list[str | bytes] = []
        for op in ops:
            px = _px(op.ttl_s)
            name = op.name
            if name == "swap":
                old = dumps(op.expected)
                values += (_new(op.value, old), _expected(old))
            elif name in ("set", "add"):
                values.append(dumps(op.value))
            elif name == "get" and op.expected is not None:
                name = "x"
                values.append(_expected(dumps(op.expected)))
            elif name not in ("get", "delete"):
                raise StoreError(f"unknown store operation {op.name!r}")
            cond = "-" if op.only_if is None else ("1" if op.only_if else "0")
            at = keys.setdefault(self._k(op.key), len(keys) + 1)
            word = f"{_LETTERS[name]}{cond}{at}"
            if px is not None and op.name not in ("get", "delete"):
                word += f".{pxs.setdefault(px, len(pxs) + 1)}"
            words.append(word)
        shared: list[str] = []
        tails: list[bytes] = []
        prev = b""
        for key in keys:
            raw = key.encode()
            n = shared_prefix(prev, raw)
            shared.append(str(n))
            tails.append(raw[n:])
            prev = raw
        layout = " ".join([str(len(keys)), *shared, *map(str, pxs), *words])
        replies = self._do(self._eval, self._batch, [], [layout, *tails, *values])
        return [
            (SAME if r == SAME_TEXT else loads(r))
            if op.name == "get"
            else (None if r is None else r == 1)
            for op, r in zip(ops, replies, strict=True)
        ]

    def delete(self, key: str) -> None:
        self._do(self._command, "DEL", self._k(key))

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.disconnect()
        self._client.close()
