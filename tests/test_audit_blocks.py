"""The in-memory audit packs older records (``_audit_blocks``): reading returns exactly
the records written, in order, whatever they hold."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import headway
from headway._audit_blocks import BLOCK
from headway.audit import MemoryAudit


class Kept:
    """A lazy sink that keeps the records it receives, unread."""

    lazy = True

    def __init__(self) -> None:
        self.records: list[Mapping[str, Any]] = []

    def write(self, record: Mapping[str, Any]) -> None:
        self.records.append(record)


def _plain(i: int) -> dict[str, Any]:
    return {
        "session": "s",
        "step": i,
        "time": 1e9 + i / 3,  # float bits survive packing
        "zero": -0.0,
        "big": 10**40 + i,
        "flag": i % 2 == 0,  # bool, not int
        "text": "naïve ☃ \U0001f600 \ud800" + "x" * (i * 97),  # a lone surrogate too
        "nested": {"b": [1, (2, 3)], "a": None},  # key order, list and tuple kept
        "flags": frozenset({"f"}) if i % 3 else [],
    }


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (True is not 1, a tuple not a list)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return repr(a) == repr(b)
    return bool(a == b)


def test_reading_a_packed_audit_returns_the_records_written_with_their_types() -> None:
    audit = MemoryAudit()
    written = [_plain(i) for i in range(5 * BLOCK + 3)]
    for record in written:
        audit.write(record)
    assert _same(audit.records("s"), written)


def test_records_read_from_blocks_are_the_records_the_calls_made() -> None:
    kept, audit = Kept(), MemoryAudit()
    gov = headway.Governor(audit=[audit, kept], no_progress_limit=10**9)
    gov.register("page", lambda n, text: f"ü{n} " + "p" * (3000 * (n % 2)), effect="read")
    gov.register("save", lambda n, text: {"saved": n}, effect="write")
    gov.register("boom", lambda n, text: 1 / 0, effect="read", timeout=None)
    s = gov.session("run")
    for n in range(3 * BLOCK + 5):
        tool = ("page", "save", "boom")[n % 3]
        key = f"k{n}" if tool == "save" else None
        s.call(tool, {"n": n, "text": "ä\u2603" * n}, idempotency_key=key, call_id=f"c{n}")
        if n == 4:
            kept.records[2]["time"]  # one record read before it is packed: its values
    packed = audit.records("run")
    assert len(packed) == 3 * BLOCK + 5
    assert _same(packed, [dict(r.items()) | {"flags": list(r["flags"])} for r in kept.records])


def test_a_packed_block_is_deflated_and_reads_back_exactly() -> None:
    """A block keeps its records' values deflated (a session's texts repeat: paths, keys,
    a page read again): 16 records of one 1 KB text, each with its own end, take less
    than two of them; reading inflates every record exactly (odd values: the test above)."""
    audit = MemoryAudit()
    written = [
        {"session": "s", "step": i, "text": "a line of a page\n" * 60 + f"ü{i}", "t": i / 3}
        for i in range(BLOCK)
    ]
    for record in written:
        audit.write(record)
    (block,) = audit._by_session["s"].records.blocks  # all 16 packed in one block
    assert isinstance(block.data, bytes) and len(block.data) < 2 * len(str(written[0]["text"]))
    assert _same(audit.records("s"), written)


def test_a_full_session_keeps_exactly_its_newest_records_across_blocks() -> None:
    audit = MemoryAudit(per_session=BLOCK + 3)
    for i in range(4 * BLOCK + 5):
        audit.write({"session": "s", "step": i})
        newest = list(range(max(0, i - BLOCK - 2), i + 1))
        assert [r["step"] for r in audit.records("s")] == newest


def test_a_block_marshal_cannot_write_is_kept_whole() -> None:
    audit = MemoryAudit()
    odd = object()
    for i in range(2 * BLOCK):
        audit.write({"session": "s", "step": i, "odd": odd if i == 3 else None})
    records = audit.records("s")
    assert [r["step"] for r in records] == list(range(2 * BLOCK))
    assert records[3]["odd"] is odd


def test_threads_writing_one_session_lose_and_repeat_no_record() -> None:
    audit = MemoryAudit()
    seen: list[list[dict[str, Any]]] = []

    def write(t: int) -> None:
        for i in range(500):
            audit.write({"session": "s", "thread": t, "i": i})
            if i % 50 == 0:
                seen.append(audit.records("s"))

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for records in [*seen, audit.records("s")]:
        for t in range(4):  # each thread's records, in its order, none missing
            mine = [r["i"] for r in records if r["thread"] == t]
            assert mine == list(range(len(mine)))
    assert len(audit.records("s")) == 2000
