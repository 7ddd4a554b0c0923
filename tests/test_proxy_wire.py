"""The stdio relay's wire: its JSON gives the values ``json`` gives, both ways (orjson where
that is exact), and its pipe reader hands on every line as ``readline`` would."""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headway import _jsonrpc
from headway._jsonrpc import READ_SIZE, dumps, loads
from headway._jsonrpc import Lines as _Lines

# JSON values, with integers past 64 bits and the floats json writes but JSON has not
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def same(a: Any, b: Any) -> bool:
    """Equal values of equal types (1 is not 1.0, NaN is NaN): json writes them alike."""
    return json.dumps(a) == json.dumps(b)


@given(JSON)
def test_a_line_reads_as_json_reads_it(value: Any) -> None:
    line = json.dumps(value).encode()
    assert same(loads(line), json.loads(line))


def test_a_long_number_in_a_line_reads_as_json_reads_it() -> None:
    # orjson reads integers past 64 bits as floats: json decides for these
    assert loads(b'{"n": 18446744073709551616}') == {"n": 2**64}
    assert type(loads(b'{"n": 18446744073709551616}')["n"]) is int
    assert loads(b'{"n": -9223372036854775809}') == {"n": -(2**63) - 1}
    assert loads(b'\xef\xbb\xbf{"n": 1}') == {"n": 1}  # a BOM: json reads it, orjson not
    long = loads(json.dumps({"page": "x" * 100_000, "n": 2**64}).encode())
    assert type(long["n"]) is int and long["n"] == 2**64


@given(JSON)
def test_a_message_is_written_as_json_writes_it(value: Any) -> None:
    line = dumps({"jsonrpc": "2.0", "id": 1, "result": value})
    assert line.endswith(b"\n")
    assert same(json.loads(line), {"jsonrpc": "2.0", "id": 1, "result": value})


def test_integers_past_64_bits_and_non_finite_numbers_keep_their_values() -> None:
    # orjson writes NaN as null and refuses 2**70: json writes these
    assert math.isnan(json.loads(dumps({"n": float("nan")}))["n"])
    assert json.loads(dumps({"n": float("inf")})) == {"n": float("inf")}
    assert json.loads(dumps({"n": 2**70})) == {"n": 2**70}
    assert json.loads(dumps({1: "a"})) == {"1": "a"}  # json writes int keys as strings


def test_a_value_json_cannot_write_still_raises() -> None:
    with pytest.raises(TypeError):
        dumps({"when": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)})


class Pipe:
    def __init__(self) -> None:
        self.closed = False
        self.max_size = 256 * 1024  # asyncio's

    def close(self) -> None:
        self.closed = True


async def test_lines_split_or_joined_in_chunks_are_handed_on_whole_in_order() -> None:
    got: list[bytes] = []
    lines = _Lines(got.append)
    pipe = Pipe()
    lines.connection_made(pipe)  # type: ignore[arg-type]
    for chunk in (b'{"a"', b": 1}\n{", b'"b": 2}\n{"c": 3}\n', b"\n", b'{"d": 4}'):
        lines.data_received(chunk)
    assert got == [b'{"a": 1}\n', b'{"b": 2}\n', b'{"c": 3}\n', b"\n"]
    assert not lines.ended.done()
    lines.connection_lost(None)  # a last line without its newline, as readline gives it
    assert got[-1] == b'{"d": 4}'
    assert lines.ended.done()
    assert not pipe.closed


async def test_a_line_past_the_limit_closes_the_pipe_and_is_not_handed_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_jsonrpc, "LINE_LIMIT", 8)
    got: list[bytes] = []
    lines = _Lines(got.append)
    pipe = Pipe()
    lines.connection_made(pipe)  # type: ignore[arg-type]
    lines.data_received(b"short\n0123")
    lines.data_received(b"456789")
    assert pipe.closed
    lines.connection_lost(None)
    assert got == [b"short\n"]
    # with its newline in the same chunk too
    lines, pipe = _Lines(got.append), Pipe()
    lines.connection_made(pipe)  # type: ignore[arg-type]
    lines.data_received(b"0123456789\n")
    assert pipe.closed
    assert got == [b"short\n"]


async def test_the_pipe_is_read_in_pieces_malloc_keeps_on_its_heap() -> None:
    # asyncio reads 256 KiB at a time: past malloc's mmap threshold (128 KiB), each read
    # maps and unmaps its buffer (16 us against 1.5 us per read, measured)
    pipe = Pipe()
    _Lines(lambda _: None).connection_made(pipe)  # type: ignore[arg-type]
    assert pipe.max_size == READ_SIZE <= 64 * 1024
