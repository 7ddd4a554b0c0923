"""A write's result in its idempotency record: the JSON form it is stored in, and back.

Plain JSON is stored as it is; anything else takes the tagged canonical forms of tool
arguments (``_canonical``) and is turned back into its type on replay.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import pathlib
import uuid
from typing import Any

from ._call import describe
from ._canonical import _to_json


def encode_result(value: Any) -> tuple[Any, str | None]:
    """(JSON form, None) or (None, why it cannot be recorded).

    Plain JSON is kept as it is. Anything else takes the tagged canonical forms of tool
    arguments (``{"$datetime": ...}``, ``{"$decimal": ...}``, ``{"$bytes": ...}``,
    ``{"$set": [...]}``, ``{"$float": "NaN"}``, ...), marked ``"enc": "tagged"`` in the
    record and turned back into those types on replay. A value with no canonical form
    (an arbitrary object, a dict with non-string keys) cannot be recorded.
    """
    try:
        tagged = _to_json(value, "result", set())
        plain = _same_json(tagged, value)
    except Exception as exc:  # too deep, an int too long, an object whose attributes fail
        return None, f"the result has no JSON form ({type(exc).__name__}: {describe(exc)})"
    if plain:
        return {"v": value}, None
    return {"v": tagged, "enc": "tagged"}, None


def _same_json(tagged: Any, value: Any) -> bool:
    """Whether ``value`` is already plain JSON that the tagged form leaves unchanged."""
    if type(value) is not type(tagged) and not (type(value) is float and type(tagged) is int):
        return False
    if isinstance(value, dict):
        return value.keys() == tagged.keys() and all(_same_json(tagged[k], value[k]) for k in value)
    if isinstance(value, list):
        return len(value) == len(tagged) and all(map(_same_json, tagged, value))
    return bool(value == tagged)


def decode_result(stored: Any) -> Any:
    if not isinstance(stored, dict):
        return None
    value = stored.get("v")
    return _untag(value) if stored.get("enc") == "tagged" else value


_UNTAG: dict[str, Any] = {
    "$bytes": base64.b64decode,
    "$datetime": dt.datetime.fromisoformat,
    "$date": dt.date.fromisoformat,
    "$time": dt.time.fromisoformat,
    "$decimal": decimal.Decimal,
    "$uuid": uuid.UUID,
    "$path": pathlib.PurePath,
    "$float": float,
    "$int": int,
}


def _untag(v: Any) -> Any:
    if isinstance(v, list):
        return [_untag(x) for x in v]
    if not isinstance(v, dict):
        return v
    if len(v) == 1:
        ((tag, inner),) = v.items()
        if tag in _UNTAG:
            return _UNTAG[tag](inner)
        if tag == "$set":
            items = [_untag(x) for x in inner]
            try:
                return set(items)
            except TypeError:
                return items
    return {(k[1:] if k.startswith("$$") else k): _untag(x) for k, x in v.items()}
