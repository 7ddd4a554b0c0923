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


def _page(path: str, edit: int) -> str:
    lines = [f"# {path}"] + [
        f"    value = store.get(key_{i}) or default_{i}  # {path}" for i in range(40)
    ]
    lines[20] = f"    edited = {edit}"
    return "\n".join(lines)


def test_a_session_keeps_no_5_gram_sets_of_judged_steps() -> None:
    """Re-reads of edited 2 KB files are compared by 5-grams; the window keeps the compact
    forms only: 50 calls hold ~100 KiB a session (~1 MiB when it kept the 5-gram sets)."""
    gov = headway.Governor(audit=[], no_progress_limit=10**6)
    edits: dict[str, int] = {}
    gov.register("read_file", lambda path: _page(path, edits.get(path, 0)), effect="read")
    gov.register(
        "edit", lambda path: edits.__setitem__(path, edits.get(path, 0) + 1), effect="write"
    )
    sessions = [gov.session(f"run-{i}") for i in range(10)]
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for step in range(50):
            for i, s in enumerate(sessions):
                path = f"src/m{i}_{step // 2 % 4}.py"  # an edit, then a re-read of it
                s.call("edit" if step % 2 else "read_file", {"path": path})
        gc.collect()
        per_session = (tracemalloc.get_traced_memory()[0] - base) / len(sessions)
    finally:
        tracemalloc.stop()
    assert per_session < 300_000, f"{per_session / 1024:.0f} KiB per session"


def test_a_correction_quoting_a_long_result_still_counts_what_it_leaves_out() -> None:
    """The window keeps the head of a long text; the correction quoting it reports the
    full length left out, as it did when the whole text was kept."""
    gov = headway.Governor(audit=[])
    text = "status: " + "y" * 5_000  # under the 8 KiB an observation keeps
    # cached: the 3rd identical call is corrected, quoting the result headway holds
    gov.register("status", lambda job: text, effect="read", deterministic=True)
    s = gov.session("run-long")
    outs = [s.call("status", {"job": 1}) for _ in range(3)]
    correction = outs[-1].to_model()
    assert f"... [{len(text) - 1500} more characters]" in correction, correction[-200:]


def _cache_entries(store: headway.MemoryStore) -> list[str]:
    return [key for key in store._data if ":cache:" in key]


def test_a_write_drops_the_cache_entries_it_made_stale_from_the_memory_store() -> None:
    """Every write makes the session's cached reads stale: their entries can never be
    served again, so the store drops them when the next epoch's entry is written, instead
    of keeping one stale entry per read until its 100,000-entry bound (issue 17)."""
    store = headway.MemoryStore()
    gov = headway.Governor(store=store, audit=[], no_progress_limit=10**6)
    gov.register("fetch", lambda url: "page " + url, effect="read", deterministic=True)
    gov.register("save", lambda path: {"ok": True}, effect="write")
    s = gov.session("run-stale")
    for i in range(100):
        s.call("fetch", {"url": f"https://example.com/{i}"})
        s.call("fetch", {"url": f"https://example.com/{i}/more"})
        s.call("save", {"path": f"/tmp/{i}"})
    assert len(_cache_entries(store)) <= 2  # the two reads since the last write at most
    out = s.call("fetch", {"url": "https://example.com/99/more"})
    assert out.status is headway.Status.EXECUTED  # stale: run again, never served
    again = s.call("fetch", {"url": "https://example.com/99/more"})
    assert again.status is headway.Status.CACHED  # the current epoch's entry is kept


def test_a_write_keeps_the_entries_it_did_not_make_stale() -> None:
    """What a write leaves valid is still served from the store: another session's
    reads, a global-scope read, and reads of resources the write did not name."""
    store = headway.MemoryStore()
    gov = headway.Governor(store=store, audit=[], no_progress_limit=10**6)
    gov.register("fetch", lambda url: "page " + url, effect="read", deterministic=True)
    gov.register("quote", lambda s: {"p": 1}, effect="read", ttl=600, scope="global")
    gov.register(
        "read_file",
        lambda path: "text of " + path,
        effect="read",
        deterministic=True,
        resources=["path"],
    )
    gov.register("write_file", lambda path: None, effect="write", resources=["path"])
    gov.register("save", lambda path: {"ok": True}, effect="write")
    other, s = gov.session("run-other"), gov.session("run-writer")
    other.call("fetch", {"url": "u"})
    s.call("quote", {"s": "X"})
    s.call("read_file", {"path": "a.py"})
    s.call("read_file", {"path": "b.py"})
    s.call("write_file", {"path": "a.py"})
    s.call("read_file", {"path": "c.py"})  # an entry of the epoch after the write
    assert s.call("read_file", {"path": "b.py"}).status is headway.Status.CACHED
    assert s.call("read_file", {"path": "a.py"}).status is headway.Status.EXECUTED
    s.call("save", {"path": "/tmp/x"})  # names nothing: every read of the session is stale
    s.call("fetch", {"url": "u"})
    s.call("read_file", {"path": "c.py"})
    assert other.call("fetch", {"url": "u"}).status is headway.Status.CACHED
    assert s.call("quote", {"s": "X"}).status is headway.Status.CACHED
    assert len(_cache_entries(store)) == 4  # other's fetch, the quote, s's fetch and c.py


def test_an_entry_of_an_older_epoch_leaves_the_newer_entries_in_place() -> None:
    """A read that started before a write may store its result after a read of the newer
    epoch has: that older entry must not drop the newer ones (only the newest epoch
    supersedes)."""
    store = headway.MemoryStore()
    newer = "ns:cache:{run#2.2.0}:fetch:1:a"
    store.set(newer, {"v": 1})
    store.set("ns:cache:{run#1.1.0}:fetch:1:b", {"v": 0})
    store.set("ns:cache:{run#2.2.0}:fetch:1:c", {"v": 2})
    assert store.get(newer) == {"v": 1}
    store.set("ns:cache:{run#3.3.0}:fetch:1:a", {"v": 3})
    assert store.get(newer) is None
    assert store.get("ns:cache:{run#2.2.0}:fetch:1:c") is None
    store.delete("ns:cache:{run#3.3.0}:fetch:1:a")
    assert store._epochs == {}  # a session whose entries are all gone is forgotten
