"""Canonical JSON of tool arguments and the digests built from it.

Plain JSON (str keys without a leading ``$`` and ASCII, str, bool, None, int within
+-2**53, non-integral floats written the same way by Python and ECMAScript, lists, dicts)
takes a fast path: one ``orjson`` pass (C), byte-identical to RFC 8785 (checked
against the ``rfc8785`` reference by property tests). Everything else is first mapped to
plain JSON with the documented tagged forms below, then serialised by the reference.

Tagged forms (a dict with one ``$``-key, so they never collide with user data, whose
``$``-keys are escaped by doubling the ``$``):

=====================  ============================================================
value                  canonical form
=====================  ============================================================
tuple                  array (like a list)
bytes, bytearray       ``{"$bytes": base64}``
datetime (aware)       ``{"$datetime": ISO 8601 in UTC}``; naive: ISO 8601 as is
date / time            ``{"$date": ISO}`` / ``{"$time": ISO}``
Decimal                ``{"$decimal": str(d.normalize())}`` (1.0 and 1.00 are equal)
set, frozenset         ``{"$set": [elements, sorted by their canonical JSON]}``
enum                   its value, canonicalised (so ``IntEnum`` 1 equals 1)
dataclass              ``{"$type": "module.Qualname", "fields": {...}}``
pydantic model         ``{"$type": "module.Qualname", "fields": model_dump(mode="json")}``
UUID, Path             ``{"$uuid": str}``, ``{"$path": str}``
float 1.0              ``1`` (one form per number, as in RFC 8785)
NaN, +-Infinity        ``{"$float": "NaN" | "Infinity" | "-Infinity"}``
int beyond +-2**53     ``{"$int": decimal string}``
=====================  ============================================================

Anything else (or a dict key that is not a string) raises ``ArgumentError`` with the
path of the value.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import hashlib
import math
import uuid
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import orjson
import rfc8785

from .errors import ArgumentError

_MAX_SAFE = 2**53 - 1
_SORTED = orjson.OPT_SORT_KEYS


def _plain_leaf(x: Any) -> bool | None:
    """True/False for a leaf; None for a container (to be walked)."""
    t = type(x)
    if t is str or t is bool or x is None:
        return True
    if t is int:
        return -_MAX_SAFE <= x <= _MAX_SAFE  # type: ignore[no-any-return]
    if t is float:
        # Python's repr and ECMAScript agree on the shortest digits; they differ only in
        # when they switch to exponent form and on integral values ("1.0" vs "1").
        return 1e-4 <= abs(x) < 1e16 and not x.is_integer()
    if t is dict or t is list:
        return None
    return False


def _plain(v: Any) -> bool:
    """True when the fast path encodes ``v`` exactly as RFC 8785 would.

    One call per container, leaves checked inline. Keys are checked joined (a non-string
    key makes ``join`` fail; a key subclassing str is refused later by orjson).
    """
    t = type(v)
    if t is dict:
        try:
            keys = "".join(v)
        except TypeError:
            return False
        if not keys.isascii() or "$" in keys:  # any "$": the reference escapes a leading one
            return False
        values: Any = v.values()
    elif t is list:
        values = v
    else:
        return bool(_plain_leaf(v))
    for x in values:
        tx = type(x)
        if tx is str or tx is bool:
            continue
        if tx is int:
            if -_MAX_SAFE <= x <= _MAX_SAFE:
                continue
            return False
        if tx is dict or tx is list:
            if _plain(x):
                continue
            return False
        if not _plain_leaf(x):
            return False
    return True


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value`` (RFC 8785 plus the tagged forms above)."""
    try:
        plain = _plain(value)
    except RecursionError:
        plain = False  # circular or very deep: the slow path says which, with a path
    try:
        if plain:
            # orjson (C) sorts keys by code point, which is UTF-16 order for the ASCII keys
            # that _plain() lets through, and writes strings and shortest-form floats as
            # RFC 8785 does (pinned by the property tests)
            return orjson.dumps(value, option=_SORTED).decode()
    except orjson.JSONEncodeError:
        pass  # lone surrogates, or nested past orjson's depth: the reference decides
    try:
        return rfc8785.dumps(_to_json(value, "args", set())).decode("utf-8", "surrogatepass")
    except RecursionError:
        raise ArgumentError("arguments are nested too deeply to canonicalise") from None


def digest(*parts: str) -> str:
    """sha256 over the parts, separated so that ("ab", "c") and ("a", "bc") differ."""
    return _sha256("\x1f".join(parts)).hexdigest()


def sha256_of(text: str) -> bytes:
    """The 32 bytes whose hex is ``digest(text)``."""
    return _sha256(text).digest()


def _sha256(text: str) -> hashlib._Hash:
    try:
        data = text.encode()
    except UnicodeEncodeError:  # lone surrogates: still one stable digest
        data = text.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data)


def _key(k: Any, path: str) -> str:
    if isinstance(k, enum.Enum) and isinstance(k.value, str):
        k = k.value
    if not isinstance(k, str):
        raise ArgumentError(f"dict key {k!r} is a {type(k).__name__}, not a string", path)
    text = _text(k, path)
    return "$" + text if text.startswith("$") else text


def _text(s: str, path: str) -> str:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise ArgumentError("text with a lone surrogate is not valid Unicode", path) from None
    return str(s)


def _to_json(v: Any, path: str, seen: set[int]) -> Any:
    if v is None or isinstance(v, bool | str):
        return _text(v, path) if isinstance(v, str) else v
    if isinstance(v, enum.Enum):
        return _to_json(v.value, path, seen)
    if isinstance(v, int):
        v = int(v)
        if -_MAX_SAFE <= v <= _MAX_SAFE:
            return v
        try:
            return {"$int": str(v)}
        except ValueError:  # past Python's int-to-text limit (4,300 digits by default)
            raise ArgumentError(f"integer of {v.bit_length()} bits is too large", path) from None
    if isinstance(v, float):
        if math.isnan(v):
            return {"$float": "NaN"}
        if math.isinf(v):
            return {"$float": "Infinity" if v > 0 else "-Infinity"}
        if v.is_integer() and abs(v) <= _MAX_SAFE:
            return int(v)
        return float(v)
    if isinstance(v, Mapping | list | tuple | set | frozenset) or dataclasses.is_dataclass(v):
        if id(v) in seen:
            raise ArgumentError("circular reference", path)
        seen = seen | {id(v)}
    if isinstance(v, Mapping):
        out: dict[str, Any] = {}
        for k, x in v.items():
            ck = _key(k, path)
            out[ck] = _to_json(x, f"{path}.{k}", seen)
        return out
    if isinstance(v, list | tuple):
        return [_to_json(x, f"{path}[{i}]", seen) for i, x in enumerate(v)]
    if isinstance(v, set | frozenset):
        items = [_to_json(x, f"{path}{{}}", seen) for x in v]
        return {"$set": sorted(items, key=rfc8785.dumps)}
    if isinstance(v, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None and v.utcoffset() is not None:
            v = v.astimezone(dt.UTC)
        return {"$datetime": v.isoformat()}
    if isinstance(v, dt.date):
        return {"$date": v.isoformat()}
    if isinstance(v, dt.time):
        return {"$time": v.isoformat()}
    if isinstance(v, decimal.Decimal):
        return {"$decimal": str(v.normalize()) if v.is_finite() else str(v)}
    if isinstance(v, uuid.UUID):
        return {"$uuid": str(v)}
    if isinstance(v, PurePath):
        return {"$path": str(v)}
    name = f"{type(v).__module__}.{type(v).__qualname__}"
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        fields = {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
        return {"$type": name, "fields": _to_json(fields, path, seen)}
    dump = getattr(v, "model_dump", None)
    if callable(dump) and hasattr(type(v), "model_fields"):
        try:
            data = dump(mode="json")
        except Exception as exc:
            raise ArgumentError(f"pydantic model {name} could not be dumped: {exc}", path) from exc
        return {"$type": name, "fields": _to_json(data, path, seen)}
    raise ArgumentError(f"cannot canonicalise a value of type {name}", path)
