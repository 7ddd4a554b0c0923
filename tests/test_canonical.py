"""Canonical JSON: the fast path equals the RFC 8785 reference; documented forms; errors."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import math
import uuid
from pathlib import PurePosixPath
from typing import Any

import pydantic
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as hs

from headway import ArgumentError, canonical_json
from headway._canonical import _plain

json_values = hs.recursive(
    hs.none()
    | hs.booleans()
    | hs.integers(-(2**53) + 1, 2**53 - 1)
    | hs.floats(allow_nan=False, allow_infinity=False)
    | hs.text(),
    lambda children: (
        hs.lists(children, max_size=5) | hs.dictionaries(hs.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)
any_values = hs.recursive(
    hs.none()
    | hs.booleans()
    | hs.integers()
    | hs.floats()
    | hs.text()
    | hs.binary()
    | hs.datetimes()
    | hs.dates()
    | hs.decimals()
    | hs.uuids(),
    lambda children: (
        hs.lists(children, max_size=4)
        | hs.tuples(children, children)
        | hs.dictionaries(hs.text(max_size=6), children, max_size=4)
        | hs.frozensets(hs.integers() | hs.text(max_size=4), max_size=4)
    ),
    max_leaves=20,
)


def _tagged(value: Any) -> Any:
    """The documented forms, built independently: ``$``-keys escaped by doubling the ``$``,
    NaN and +-Infinity and integers beyond +-(2**53 - 1) tagged."""
    if isinstance(value, dict):
        return {("$" + k if k.startswith("$") else k): _tagged(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_tagged(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return {"$float": "NaN"}
    if isinstance(value, float) and math.isinf(value):
        return {"$float": "Infinity" if value > 0 else "-Infinity"}
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53 - 1:
        return {"$int": str(value)}
    return value


tagged_values = hs.recursive(
    hs.none() | hs.booleans() | hs.integers() | hs.floats() | hs.text(),
    lambda children: (
        hs.lists(children, max_size=5)
        | hs.dictionaries(hs.text(max_size=8) | hs.just("$x"), children, max_size=5)
    ),
    max_leaves=25,
)


@settings(max_examples=400)
@given(json_values)
def test_fast_path_equals_rfc8785_reference(value: Any) -> None:
    """Plain JSON (keys with a leading ``$`` escaped) is written exactly as RFC 8785 does."""
    ours = canonical_json(value)
    assert ours == rfc8785.dumps(_tagged(value)).decode("utf-8", "surrogatepass")


@settings(max_examples=300)
@given(tagged_values)
def test_out_of_range_numbers_and_dollar_keys_take_their_documented_forms(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(_tagged(value)).decode("utf-8", "surrogatepass")


@given(hs.dictionaries(hs.text(max_size=6), json_values, max_size=6))
def test_key_order_never_changes_the_key(d: dict[str, Any]) -> None:
    reordered = dict(reversed(list(d.items())))
    assert canonical_json(d) == canonical_json(reordered)


@settings(max_examples=300)
@given(any_values)
def test_no_input_crashes_and_equal_values_give_equal_keys(value: Any) -> None:
    try:
        first = canonical_json({"v": value})
    except ArgumentError:
        return  # a clear error is allowed; a crash is not
    assert first == canonical_json({"v": value})


@given(hs.floats(allow_nan=False, allow_infinity=False))
def test_one_form_per_number(x: float) -> None:
    if x.is_integer() and abs(x) < 2**53:
        assert canonical_json(x) == canonical_json(int(x))


def test_plain_floats_match_ecmascript_form() -> None:
    assert canonical_json({"a": 1.0}) == '{"a":1}'
    assert canonical_json(1e21) == "1e+21"
    assert canonical_json(0.1) == "0.1"
    assert not _plain(1e16) and _plain(0.5)


def test_tagged_forms_never_raise() -> None:
    assert canonical_json(math.nan) == '{"$float":"NaN"}'
    assert canonical_json(-math.inf) == '{"$float":"-Infinity"}'
    assert canonical_json(2**60) == '{"$int":"1152921504606846976"}'


class Color(enum.Enum):
    RED = "red"


class Size(enum.IntEnum):
    S = 1


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Model(pydantic.BaseModel):
    name: str
    tags: list[str]


def test_documented_forms() -> None:
    assert canonical_json(b"\x00\x01") == '{"$bytes":"AAE="}'
    aware = dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    utc = dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC)
    assert canonical_json(aware) == canonical_json(utc)
    assert canonical_json(dt.date(2024, 1, 2)) == '{"$date":"2024-01-02"}'
    assert canonical_json(decimal.Decimal("1.10")) == canonical_json(decimal.Decimal("1.1"))
    assert canonical_json({3, 1, 2}) == canonical_json({2, 3, 1}) == '{"$set":[1,2,3]}'
    assert canonical_json((1, 2)) == canonical_json([1, 2])
    assert canonical_json(Color.RED) == '"red"'
    assert canonical_json(Size.S) == canonical_json(1)
    assert canonical_json(Point(1, 2)).startswith('{"$type":')
    assert '"fields":{"name":"a","tags":["x"]}' in canonical_json(Model(name="a", tags=["x"]))
    assert canonical_json(uuid.UUID(int=1)) == '{"$uuid":"00000000-0000-0000-0000-000000000001"}'
    assert canonical_json(PurePosixPath("/tmp/a")) == '{"$path":"/tmp/a"}'


def test_user_dollar_keys_do_not_collide_with_tags() -> None:
    assert canonical_json({"$int": "5"}) != canonical_json(5)
    assert canonical_json({"v": {"$int": "1152921504606846976"}}) != canonical_json({"v": 2**60})


def test_argument_error_names_the_path() -> None:
    with pytest.raises(ArgumentError) as info:
        canonical_json({"a": {"b": [1, object()]}})
    assert info.value.path == "args.a.b[1]"
    with pytest.raises(ArgumentError, match="not a string"):
        canonical_json({"a": {1: "x"}})
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ArgumentError, match="circular"):
        canonical_json({"a": loop})


def test_deep_nesting_is_a_clear_error() -> None:
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(ArgumentError, match="nested too deeply"):
        canonical_json({"d": ({1}, deep)})


@settings(max_examples=500)
@given(
    hs.floats(min_value=1e-4, max_value=1e16, exclude_max=True)
    | hs.floats(min_value=-1e16, max_value=-1e-4, exclude_min=True)
    | hs.text()
)
def test_encoder_writes_plain_leaves_as_the_reference_does(leaf: Any) -> None:
    """The fast path's encoder (orjson) agrees with RFC 8785 on every leaf, whichever path
    ``_plain`` sends it down."""
    assert canonical_json([leaf]) == rfc8785.dumps([leaf]).decode("utf-8", "surrogatepass")
