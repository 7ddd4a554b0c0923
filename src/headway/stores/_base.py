"""The ``Store`` protocol (semantics §6): a few atomic primitives over JSON values.

Everything headway keeps (cache entries, idempotency records, cache generations, shared
breaker state) is built from these five operations, so one contract suite checks every
store. A store may also offer ``batch(ops)``: several of them in one round trip (a keyed
write sends its claim with the session's record read, and its result with the record's
swap); ``batch()`` below performs them one by one for a store that does not. Values are
JSON, never pickle; ``swap`` compares the stored JSON text exactly, which is why values
are always written in one canonical form (sorted keys).

``ttl_s`` only collects garbage: expiry that matters (a cache entry's freshness, an
idempotency record's 24 h) is decided by headway with its own injectable clock.
"""

from __future__ import annotations

import hashlib
import json
import json.scanner
from collections.abc import Sequence
from typing import Any, AnyStr, NamedTuple, Protocol, runtime_checkable

import orjson

from ..errors import ArgumentError, StoreError


@runtime_checkable
class Store(Protocol):
    """Where headway keeps its state. Every method is atomic."""

    #: True when operations do network or disk I/O (async sessions run them in a thread)
    blocking: bool

    def get(self, key: str) -> Any | None:
        """The value, or None when absent."""

    def set(self, key: str, value: Any, ttl_s: float | None = None) -> None:
        """Write unconditionally."""

    def add(self, key: str, value: Any, ttl_s: float | None = None) -> bool:
        """Insert only if absent (the atomic claim); True when this call inserted."""

    def swap(self, key: str, expected: Any, value: Any | None, ttl_s: float | None = None) -> bool:
        """Replace ``expected`` by ``value`` (None deletes) only if the stored value is still
        ``expected``; True when it was."""

    def delete(self, key: str) -> None:
        """Remove the key if present."""

    def close(self) -> None:
        """Release connections."""


class Op(NamedTuple):
    """One operation of a ``batch``: ``get``, ``set``, ``add``, ``swap`` (``value`` None:
    delete) or ``delete`` with that operation's arguments.

    A ``get`` with an ``expected`` value returns ``SAME`` when the stored value is that
    one, instead of sending it back (a network store compares a digest of it).

    ``only_if``: performed only when the operation just before it in the batch returned
    True (``True``), or did not (``False``: it failed, or was itself skipped).

    ``durable=False``: the write may be acknowledged before it is on disk (other clients
    see it at once; a crash of the store's server can lose it): a shared session's record,
    never an idempotency record. PostgreSQL commits a batch whose writes are all such
    without waiting for its WAL flush; the other stores write every operation alike."""

    name: str
    key: str
    value: Any = None
    expected: Any = None
    ttl_s: float | None = None
    only_if: bool | None = None
    durable: bool = True


class _Same:
    __slots__ = ()

    def __repr__(self) -> str:
        return "SAME"


#: what a ``get`` with ``expected`` returns when the stored value is still ``expected``
SAME: Any = _Same()

#: a stored value's reply for ``SAME`` on the wire: never a JSON text
SAME_TEXT = "="


def digest(text: str, algorithm: str) -> str:
    """The hex digest of a stored text, as a store's server computes it; remembered for the
    last two long texts (a session record's head is expected again at its next write)."""
    global _digests
    memo = _digests
    for held, alg, hexed in memo:
        if held is text and alg == algorithm:
            return hexed
    hexed = hashlib.new(algorithm, text.encode("utf-8", "surrogatepass")).hexdigest()
    _digests = (text, algorithm, hexed), memo[0]
    return hexed


_digests: tuple[tuple[Any, str, str], ...] = ((None, "", ""), (None, "", ""))


def shared_prefix(a: AnyStr, b: AnyStr) -> int:
    """How many leading characters (bytes) ``b`` has in common with ``a``: a network store
    sends a key as its tail past what it shares with another key of the batch. Found in
    C: the first bit where the two (as big integers) differ."""
    n = min(len(a), len(b))
    if isinstance(a, str):  # four bytes a character
        x, y, width = a[:n].encode(*_UTF32), b[:n].encode(*_UTF32), 4
    else:
        x, y, width = a[:n], b[:n], 1
    diff = int.from_bytes(x, "big") ^ int.from_bytes(y, "big")
    return n - (diff.bit_length() + 8 * width - 1) // (8 * width)


_UTF32 = ("utf-32-be", "surrogatepass")


#: the longest idempotency key or session id, in bytes of UTF-8, that every store holds
#: with room to spare for its prefix (a PostgreSQL index entry must fit in 2,704 bytes)
MAX_KEY_BYTES = 1024


def check_key(label: str, value: str) -> None:
    """Refuse a key or session id that some store cannot hold, naming the problem: the
    same limits for every store, so moving to another store never changes what works."""
    if "\x00" in value:
        raise ArgumentError(f"{label} contains a NUL character, which stores cannot hold", label)
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ArgumentError(
            f"{label} contains a lone surrogate: it is not valid Unicode text", label
        ) from None
    if size > MAX_KEY_BYTES:
        raise ArgumentError(
            f"{label} is {size} bytes long (UTF-8); at most {MAX_KEY_BYTES} are allowed", label
        )


def batch(store: Any, ops: Sequence[Op]) -> list[Any]:
    """Perform ``ops`` in order, in one round trip when the store offers ``batch``. Each
    result is what the single operation returns (``set``: True); a skipped one's is None.
    Not a transaction: each operation is atomic on its own, as when made one by one. A
    batch writes a key at most once and reads a key it writes only after that write
    failed (PostgreSQL's runs as one statement, whose parts see the table as it was)."""
    native = getattr(store, "batch", None)
    if native is not None:
        return native(ops)  # type: ignore[no-any-return]
    return one_by_one(store, ops)


def in_one_trip(store: Any) -> bool:
    """Whether ``batch(store, ...)`` is one round trip (the store has its own ``batch``;
    a wrapper such as a signed store says whether the store it wraps has)."""
    return getattr(store, "batch", None) is not None and getattr(store, "one_trip", True)


def one_by_one(store: Any, ops: Sequence[Op], last: Any = None) -> list[Any]:
    """``batch`` as single operations (a store without its own); ``last``: the result of
    an operation made just before, for the first one's ``only_if``."""
    results: list[Any] = []
    for op in ops:
        if skipped(op, last):
            last = None
        elif op.name == "get":
            last = store.get(op.key)
            if op.expected is not None and last == op.expected:
                last = SAME
        elif op.name == "delete":
            store.delete(op.key)
            last = True
        elif op.name == "set":
            store.set(op.key, op.value, op.ttl_s)
            last = True
        elif op.name == "add":
            last = store.add(op.key, op.value, op.ttl_s)
        elif op.name == "swap":
            last = store.swap(op.key, op.expected, op.value, op.ttl_s)
        else:
            raise StoreError(f"unknown store operation {op.name!r}")
        results.append(last)
    return results


def skipped(op: Op, last: Any) -> bool:
    """Whether ``op`` is skipped after an operation that returned ``last``."""
    return op.only_if is not None and (last is True) is not op.only_if


def dumps(value: Any) -> str:
    """The one form in which values are stored (``swap`` compares it exactly): JSON with
    sorted keys, compact, not ASCII-escaped, finite numbers only."""
    global _memo
    if type(value) is str and len(value) >= _LONG:
        # a shared session's record (whole, 4-5 KB, or its head, 0.6 KB): the text a swap
        # writes is the one the next swap expects (the same text object, whose digest
        # ``digest`` remembers too), and escaping 4-5 KB of JSON costs some 4 us each time
        memo = _memo
        for held, text in memo:
            if held is value:
                return text
        text = text_of(value)[0]
        _memo = (value, text), memo[0]  # one tuple, replaced whole: safe across threads
        return text
    return text_of(value)[0]


_LONG = 256  # strings this long are remembered, the last two (by identity: strs never change)
_memo: tuple[tuple[Any, str], tuple[Any, str]] = ((None, ""), (None, ""))


def text_of(value: Any) -> tuple[str, bool]:
    """(``dumps(value)``, whether orjson parses that text back exactly). Values orjson
    writes as ``json.dumps`` does (keys sorted, compact, the same escapes and shortest
    floats: pinned by a property test) are written by orjson, three times faster."""
    try:
        if _same_text(value):
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode(), True
    except (orjson.JSONEncodeError, RecursionError):
        pass  # lone surrogates, very deep values: json decides
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise StoreError(f"stores keep JSON values only: {exc}") from exc
    return text, _orjson_reads_back(value)


def _same_text(v: Any) -> bool:
    """Whether orjson writes ``v`` as ``dumps`` does: exact str, bool, None, 64-bit ints,
    floats that both write without an exponent (zero, or 1e-4 <= |x| < 1e16), and lists
    and str-keyed dicts of those (both sort keys by code point). One call per container,
    leaves checked inline (records are walked on every store write)."""
    t = type(v)
    if t is dict:
        for k in v:
            if type(k) is not str:
                return False
        values: Any = v.values()
    elif t is list:
        values = v
    else:
        return _same_leaf(v)
    for x in values:
        tx = type(x)
        if tx is str or tx is bool or x is None:
            continue
        if tx is dict or tx is list:
            if not _same_text(x):
                return False
        elif not _same_leaf(x):
            return False
    return True


def _same_leaf(x: Any) -> bool:
    t = type(x)
    if t is str or t is bool or x is None:
        return True
    if t is int:
        return -(2**63) <= x < 2**64  # type: ignore[no-any-return]
    if t is float:
        return x == 0.0 or 1e-4 <= abs(x) < 1e16  # type: ignore[no-any-return]
    return False


def _orjson_reads_back(value: Any) -> bool:
    """Whether orjson parses this value's stored text back exactly. It reads integers past
    64 bits as floats; it refuses to write those (and anything else it cannot read back
    the same), so a value it can write is one it reads back."""
    try:
        orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return False
    return True


_scan = getattr(json.scanner, "c_make_scanner", None)
_scan_once = _scan(json.JSONDecoder()) if _scan is not None else None


def loads(text: str | bytes | None) -> Any | None:
    """Parse stored JSON. Stored text is always compact JSON written by ``dumps``: the C
    scanner parses it directly, without ``json.loads``'s whitespace handling."""
    if text is None:
        return None
    if text[:1] == '"':
        # a string (a shared session's record: 4-5 KB of escaped JSON): orjson reads
        # strings as json does, six times faster; a lone surrogate it refuses, json reads
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    if _scan_once is not None and isinstance(text, str):
        try:
            value, end = _scan_once(text, 0)
        except StopIteration:
            return json.loads(text)  # not JSON: let json raise its usual error
        if end == len(text):
            return value
    return json.loads(text)
