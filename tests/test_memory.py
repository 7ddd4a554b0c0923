"""Memory stays flat whatever the argument sizes: audit records keep a bounded summary and
the digest, and no cache is keyed on the full argument text."""

from __future__ import annotations

import gc
import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import headway
from headway.stores._base import dumps, text_of

MB = 1_000_000


def test_twenty_calls_with_10_mb_arguments_keep_memory_flat() -> None:
    gov = headway.Governor()  # the default in-memory audit keeps every record
    gov.register("upload", lambda data, api_key: {"ok": True}, effect="write")
    gov.register("read", lambda data, api_key: "seen", effect="read")
    s = gov.session("run-big")
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(20):
            blob = f"{i:02d}" + "x" * (10 * MB)
            s.call("upload" if i % 2 else "read", {"data": blob, "api_key": "k"})
            del blob
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    records = s.audit_records()
    assert len(records) == 20 and all(len(r["args"]) <= 1010 for r in records)
    assert len({r["args_digest"] for r in records}) == 20
    assert grown < 50 * MB, f"grew {grown / MB:.0f} MB"  # all 20 arguments would be 400 MB


_LEAVES = (
    hs.none()
    | hs.booleans()
    | hs.integers(min_value=-(2**70), max_value=2**70)
    | hs.floats(allow_nan=False, allow_infinity=False)
    | hs.text(hs.characters(blacklist_categories=()), max_size=8)  # control chars, surrogates
)
_VALUES = hs.recursive(
    _LEAVES,
    lambda inner: (
        hs.lists(inner, max_size=4)
        | hs.dictionaries(
            hs.text(hs.characters(blacklist_categories=()), max_size=4), inner, max_size=4
        )
    ),
    max_leaves=12,
)


@settings(max_examples=1500, deadline=None)
@given(_VALUES)
def test_stores_write_every_value_in_the_one_stored_form(value: object) -> None:
    """orjson writes the values it writes as json does, json the rest: the stored text
    (every store's, through ``dumps``) is json's in both cases (swap compares stored text),
    and the value reads back equal."""
    try:
        expected = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError):
        with pytest.raises(headway.StoreError):
            dumps(value)
        return
    assert dumps(value) == text_of(value)[0] == expected
    store = headway.MemoryStore()
    store.set("k", value)
    assert store.swap("k", value, {"next": 1}) is True
    assert store.get("k") == {"next": 1}
