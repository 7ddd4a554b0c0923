"""SQLite off the event loop's path: the store's operations run inline on the loop (no
thread hop) unless another process holds the lock, and the background audit sink writes
from a thread of its own, losing no record."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import headway
from headway.audit import SQLiteAuditSink

HOLD = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN IMMEDIATE")  # the write lock, until told to let go
    print("locked", flush=True)
    sys.stdin.readline()
    conn.execute("COMMIT")
    """
)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Another process holds the write lock of the SQLite file ``path`` meanwhile."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline() == "locked\n"
            yield
        finally:
            proc.stdin.write("\n")
            proc.stdin.flush()
            proc.wait(30)


def rows(path: Path) -> list[dict[str, Any]]:
    """The audit records in the file, as another reader sees them."""
    import json

    with contextlib.closing(sqlite3.connect(path)) as conn:
        found = conn.execute("SELECT record FROM headway_audit ORDER BY id").fetchall()
    return [json.loads(r[0]) for r in found]


# -- the store ---------------------------------------------------------------------


def test_inline_is_refused_while_another_process_holds_the_lock_and_does_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    store = headway.SQLiteStore(str(db))
    store.set("old", 1)
    with locked(db):
        with pytest.raises(BlockingIOError, match="is locked"):
            store.inline(store.set, ("k", 2))
        assert store.inline(store.get, ("old",)) == 1  # reads go on beside a writer (WAL)
        assert store.get("k") is None
    assert store.inline(store.set, ("k", 2)) is None
    assert store.get("k") == 2
    store.close()


async def test_an_async_call_runs_its_sqlite_operations_on_the_loop_without_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gov = headway.Governor(headway.SQLiteStore(str(tmp_path / "s.db")))
    gov.register("lookup", lambda key: f"v-{key}", effect="read", ttl=60)
    session = gov.session("s")

    def no_thread(*_: Any, **__: Any) -> Any:
        raise AssertionError("a thread hop for a SQLite operation")

    monkeypatch.setattr(asyncio, "to_thread", no_thread)
    first = await session.acall("lookup", {"key": "a"})
    again = await session.acall("lookup", {"key": "a"})
    assert (first.status, again.status) == (headway.Status.EXECUTED, headway.Status.CACHED)
    assert again.value == "v-a"
    assert [r["flags"] for r in gov.audit_records("s")] == [[], []]  # no store error
    gov.close()


def charging(charges: list[str]) -> Any:
    def pay(order: str) -> dict[str, str]:
        charges.append(order)
        return {"paid": order}

    return pay


@pytest.mark.parametrize("share_sessions", [False, True])
async def test_an_async_keyed_write_sends_its_claim_and_completion_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, share_sessions: bool
) -> None:
    """The claim and the completion ride with the call's other store operations; on
    SQLite they run on the loop as those do, not in a thread (the proxy's keyed writes)."""
    gov = headway.Governor(
        headway.SQLiteStore(str(tmp_path / "s.db")), share_sessions=share_sessions
    )
    charges: list[str] = []
    gov.register("pay", charging(charges), effect="write")
    gov.register("lookup", lambda key: f"v-{key}", effect="read", ttl=60)  # a cached tool
    session = gov.session("s")

    def no_thread(*_: Any, **__: Any) -> Any:
        raise AssertionError("a thread hop for a SQLite operation")

    monkeypatch.setattr(asyncio, "to_thread", no_thread)
    first = await session.acall("pay", {"order": "o"}, idempotency_key="k")
    again = await session.acall("pay", {"order": "o"}, idempotency_key="k")
    assert (first.status, again.status) == (headway.Status.EXECUTED, headway.Status.REPLAYED)
    assert charges == ["o"] and again.value == {"paid": "o"}
    assert [r["flags"] for r in gov.audit_records("s")] == [[], []]  # no store error
    gov.close()


async def test_a_keyed_write_on_a_locked_store_waits_in_a_thread_and_runs_once(
    tmp_path: Path,
) -> None:
    """Another process holds the file's lock: the claim cannot be made on the loop, so
    it is made in a thread once the lock is free (nothing done twice, nothing lost)."""
    db = tmp_path / "s.db"
    gov = headway.Governor(headway.SQLiteStore(str(db)), share_sessions=False)
    charges: list[str] = []
    gov.register("pay", charging(charges), effect="write")
    gov.register("lookup", lambda key: f"v-{key}", effect="read", ttl=60)
    session = gov.session("s")
    await session.acall("lookup", {"key": "warm"})  # the loop's connection is open
    with locked(db):
        call = asyncio.create_task(session.acall("pay", {"order": "o"}, idempotency_key="k"))
        await asyncio.sleep(0.3)
        assert not call.done() and charges == []  # the claim waits for the lock
    out = await call
    assert out.status is headway.Status.EXECUTED and charges == ["o"]
    again = await session.acall("pay", {"order": "o"}, idempotency_key="k")
    assert again.status is headway.Status.REPLAYED and charges == ["o"]
    gov.close()


async def test_a_store_locked_by_another_process_is_waited_for_in_a_thread_not_on_the_loop(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    gov = headway.Governor(headway.SQLiteStore(str(db)))
    gov.register("lookup", lambda key: f"v-{key}", effect="read", ttl=60)
    session = gov.session("s")
    await session.acall("lookup", {"key": "warm"})  # the loop's connection is open
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    ticker = asyncio.create_task(tick())
    with locked(db):
        call = asyncio.create_task(session.acall("lookup", {"key": "a"}))
        await asyncio.sleep(0.3)
        assert not call.done()  # its cache entry waits for the lock...
        assert ticks >= 10  # ...and the loop runs on meanwhile
    out = await call
    ticker.cancel()
    assert out.status is headway.Status.EXECUTED
    assert gov.audit_records("s")[-1]["flags"] == []  # written, not failed open
    assert (await session.acall("lookup", {"key": "a"})).status is headway.Status.CACHED
    gov.close()


# -- the background audit sink -------------------------------------------------------


def test_a_background_sink_writes_the_records_a_plain_one_writes(tmp_path: Path) -> None:
    plain = SQLiteAuditSink(tmp_path / "plain.db")
    background = SQLiteAuditSink(tmp_path / "bg.db", background=True)
    gov = headway.Governor(audit=[plain, background])
    gov.register("lookup", lambda key, api_key: f"v-{key}", effect="read")
    session = gov.session("s")
    for i in range(200):
        session.call("lookup", {"key": str(i), "api_key": "sk-abcdefghijklmnopqrstuv"})
    assert background.records("s") == plain.records("s")  # records() writes what is queued
    background.close()
    plain.close()
    written = rows(tmp_path / "bg.db")
    assert [r["step"] for r in written] == list(range(200))
    assert "sk-abcdefghijklmnopqrstuv" not in str(written)


def test_a_background_sink_does_not_wait_for_a_file_another_process_locked(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    sink = SQLiteAuditSink(db, background=True)
    with locked(db):
        sink.write({"session": "s", "step": 0, "tool": "t", "status": "executed"})
        assert rows(db) == []  # queued: the writer waits for the lock, not the caller
    sink.flush()
    assert [r["step"] for r in rows(db)] == [0]
    sink.close()


def test_a_full_queue_makes_write_wait_for_the_writer_and_drops_nothing(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    sink = SQLiteAuditSink(db, background=True, max_queued=2)

    def write_five() -> None:
        for step in range(5):
            sink.write({"session": "s", "step": step})

    writer = threading.Thread(target=write_five)
    with locked(db):
        writer.start()
        writer.join(0.5)
        assert writer.is_alive()  # 1 record being written, 2 queued: the 4th waits
    writer.join(30)
    sink.close()
    assert [r["step"] for r in rows(db)] == [0, 1, 2, 3, 4]


def test_records_still_queued_when_the_interpreter_exits_are_written(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    script = textwrap.dedent(
        """
        import sqlite3, sys, threading
        from headway.audit import SQLiteAuditSink
        sink = SQLiteAuditSink(sys.argv[1], background=True)
        other = sqlite3.connect(sys.argv[1], isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # the writer cannot write before the exit
        for step in range(50):
            sink.write({"session": "s", "step": step})
        threading.Timer(0.3, other.commit).start()
        """
    )
    subprocess.run([sys.executable, "-c", script, str(db)], check=True, timeout=60)
    assert [r["step"] for r in rows(db)] == list(range(50))


def test_a_batch_that_cannot_be_written_is_logged_with_its_size(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "a.db"
    sink = SQLiteAuditSink(db, background=True)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("DROP TABLE headway_audit")
    with caplog.at_level(logging.ERROR, logger="headway"):
        sink.write({"session": "s", "step": 0})
        sink.flush()
    assert "1 records not written" in caplog.text and "no such table" in caplog.text
    sink.close()


def test_a_closed_background_sink_refuses_records_and_bad_bounds_are_refused(
    tmp_path: Path,
) -> None:
    sink = SQLiteAuditSink(tmp_path / "a.db", background=True)
    sink.close()
    with pytest.raises(ValueError, match="closed"):
        sink.write({"session": "s"})
    bad_bounds: tuple[Any, ...] = (0, -1, 1.5, True)
    for bad in bad_bounds:
        with pytest.raises(ValueError, match="max_queued"):
            SQLiteAuditSink(tmp_path / "b.db", background=True, max_queued=bad)


def test_a_record_the_caller_changes_after_writing_is_written_as_it_was(tmp_path: Path) -> None:
    sink = SQLiteAuditSink(tmp_path / "a.db", background=True)
    record = {"session": "s", "step": 0, "status": "executed"}
    with locked(tmp_path / "a.db"):
        sink.write(record)
        record["status"] = "changed"
    sink.close()
    assert rows(tmp_path / "a.db")[0]["status"] == "executed"


def test_close_waits_until_what_is_queued_is_written(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    sink = SQLiteAuditSink(db, background=True)
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    for step in range(3):
        sink.write({"session": "s", "step": step})
    threading.Timer(0.3, other.commit).start()  # the writer waits for this
    sink.close()
    assert [r["step"] for r in rows(db)] == [0, 1, 2]
    other.close()


async def test_a_record_written_on_an_event_loop_wakes_the_writer_on_the_loops_next_turn(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    sink = SQLiteAuditSink(db, background=True)
    batches = sink._batches
    assert batches is not None
    sink.write({"session": "s", "step": 0})
    # held while the caller's step runs (the proxy's answer is not yet written) ...
    assert list(batches._held) == [{"session": "s", "step": 0}]
    assert batches._queue.empty()
    await asyncio.sleep(0)
    assert not batches._held  # ... and queued on the loop's next turn
    sink.write({"session": "s", "step": 1})
    assert [r["step"] for r in sink.records("s")] == [0, 1]  # records() sees a held one
    sink.write({"session": "s", "step": 2})
    sink.close()  # and close writes it
    assert [r["step"] for r in rows(db)] == [0, 1, 2]


def test_a_record_written_outside_an_event_loop_is_queued_at_once(tmp_path: Path) -> None:
    sink = SQLiteAuditSink(tmp_path / "a.db", background=True)
    assert sink._batches is not None
    sink.write({"session": "s", "step": 0})
    assert not sink._batches._held
    sink.close()


def test_records_held_by_a_loop_that_closed_are_written_by_the_next_loop(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    sink = SQLiteAuditSink(db, background=True)

    batches = sink._batches
    assert batches is not None

    async def write(step: int) -> None:
        sink.write({"session": "s", "step": step})

    async def write_and_stop() -> None:
        await write(0)
        asyncio.get_running_loop().stop()  # it stops before its next turn

    loop = asyncio.new_event_loop()
    loop.run_until_complete(write_and_stop())
    loop.close()
    assert [r["step"] for r in batches._held] == [0]
    asyncio.run(write(1))
    assert not batches._held  # the next loop's turn queued both
    sink.flush()
    assert [r["step"] for r in rows(db)] == [0, 1]
    sink.close()


def test_the_audit_table_keeps_no_autoincrement_counter_and_an_old_table_still_works(
    tmp_path: Path,
) -> None:
    new, old = tmp_path / "new.db", tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(old)) as conn:  # as versions before made it
        conn.execute(
            "CREATE TABLE headway_audit (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "session TEXT NOT NULL, step INTEGER, tool TEXT, status TEXT, record TEXT NOT NULL)"
        )
        conn.execute(
            "INSERT INTO headway_audit (session, step, record) VALUES ('s', 0, '{\"step\": 0}')"
        )
        conn.commit()
    for path in (new, old):
        sink = SQLiteAuditSink(path, background=True)
        for step in (1, 2):
            sink.write({"session": "s", "step": step})
        assert [r["step"] for r in sink.records("s")] == ([0, 1, 2] if path == old else [1, 2])
        sink.close()
    with contextlib.closing(sqlite3.connect(new)) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    # no sqlite_sequence: no counter page written with every commit
    assert tables == {"headway_audit", "headway_audit_session"}


def test_a_new_store_opens_while_another_process_writes_the_file_in_rollback_mode(
    tmp_path: Path,
) -> None:
    # SQLite refuses the switch to WAL at once (no busy wait) while another connection
    # holds a lock on a file still in rollback mode: processes of a fleet that open a new
    # store together must wait their turn, not fail to start
    db = tmp_path / "new.db"
    hold = textwrap.dedent(
        """
        import sqlite3, sys, time
        conn = sqlite3.connect(sys.argv[1], isolation_level=None)
        conn.execute("CREATE TABLE t (a)")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (1)")
        print("locked", flush=True)
        time.sleep(0.4)
        conn.execute("COMMIT")
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", hold, str(db)], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
        store = headway.SQLiteStore(str(db))
        proc.wait(30)
    store.set("k", 1)
    assert store.get("k") == 1
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
