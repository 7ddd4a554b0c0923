"""How a shared session's record is written and read back: its writes are the only ones
a PostgreSQL store commits without waiting for the WAL flush (``Op.durable``), and the
record, a JSON text stored as a string, reads back exactly on every store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import headway
from conftest import Recording, make_store
from headway.stores._base import Op, batch, dumps, loads

SHARED = [
    "sqlite",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("postgres", marks=pytest.mark.postgres),
]


def _record_writes(store: Recording) -> list[bool]:
    """Whether each write of the session record sent since the last look was durable (its
    parts, written with it, are written alike)."""
    writes = [op for ops in store.batches for op in ops if ":sess:" in op.key and op.name != "get"]
    seen = [op.durable for op in writes if op.key.endswith("}")]
    assert all(op.durable is seen[-1] for op in writes if not op.key.endswith("}"))
    store.batches.clear()
    return seen


def test_a_record_write_is_durable_when_it_bumps_epochs_or_stops_the_run(
    tmp_path: Path,
) -> None:
    """Only steps, counts and windows are sent ``durable=False``: a write's cache epochs
    (else a crash could serve a read from before it), a stop (else the run would go on)
    and every idempotency record stay durable."""
    store = Recording(headway.SQLiteStore(str(tmp_path / "s.db")))
    gov = headway.Governor(store=store)
    gov.register("price", lambda sku: {"eur": 3}, effect="read", deterministic=True)
    gov.register("note", lambda text: "ok", effect="write")
    gov.register("pay", lambda order: {"ok": order}, effect="write", timeout=None)
    with gov.session("run", budgets=headway.Budgets(tool_calls=6)) as s:
        s.call("price", {"sku": 1})
        s.call("price", {"sku": 2})
        _record_writes(store)
        s.call("price", {"sku": 1})  # served: a step, nothing else
        assert _record_writes(store) == [False]  # one swap takes and judges the step
        s.call("note", {"text": "a"})  # an unkeyed write: its epochs bump
        assert _record_writes(store)[-1] is True
        s.call("pay", {"order": 1}, idempotency_key="k1")
        assert all(op.durable for ops in store.batches for op in ops if ":sess:" not in op.key)
        _record_writes(store)
        s.call("price", {"sku": 2})  # the 6th call: it reaches the budget, the run stops
        assert _record_writes(store)[0] is True
        with pytest.raises(headway.BudgetExceeded):
            s.call("price", {"sku": 3})


@pytest.mark.postgres
def test_a_postgres_batch_of_lazy_writes_commits_without_waiting_for_the_flush() -> None:
    """A batch whose writes are all ``durable=False`` sets ``synchronous_commit`` off for its
    own transaction; one durable write among them keeps the server's setting."""
    from headway.stores.postgres import PostgresStore

    sent: list[str] = []

    class Spy(PostgresStore):
        def _run(self, sql: str, params: tuple[Any, ...] | dict[str, Any]) -> tuple[int, Any]:
            sent.append(sql)
            return super()._run(sql, params)

    from conftest import POSTGRES_URL

    store = Spy(POSTGRES_URL, prefix="t-record-writes:")
    try:
        store.set("rec", "v1")
        assert store.batch([Op("swap", "rec", "v2", "v1", 60, durable=False)]) == [True]
        assert "synchronous_commit" in sent[-1]
        assert store.batch([Op("swap", "rec", "v3", "v2", 60), Op("get", "rec")]) == [True, "v2"]
        assert "synchronous_commit" not in sent[-1]
        assert store.batch(
            [Op("add", "idem", {"s": 1}), Op("swap", "rec", "v4", "v3", durable=False)]
        ) == [True, True]
        assert "synchronous_commit" not in sent[-1]
        # the setting does not outlive the statement's transaction on the pooled connection
        _, row = store._run("SHOW synchronous_commit", ())
        assert row[0] == "on"
        # committed: another connection reads it at once
        other = PostgresStore(POSTGRES_URL, prefix="t-record-writes:")
        assert other.get("rec") == "v4"
        other.close()
    finally:
        store.delete("rec")
        store.delete("idem")
        store.close()


@pytest.mark.parametrize("kind", SHARED)
def test_a_json_text_stored_as_a_string_reads_back_exactly(kind: str, tmp_path: Path) -> None:
    """A session record is JSON text in a string value: quotes, escapes, non-ASCII and
    surrogate pairs come back as they were written, and a swap compares them exactly."""
    store = make_store(kind, tmp_path)
    record = json.dumps(
        {"w": ['say "hi"\\n', "é 😀 \u2028", "\x00\x1f"], "n": 1.5}, ensure_ascii=False
    )
    try:
        store.set("k", record)
        assert store.get("k") == record
        assert batch(store, [Op("get", "k")]) == [record]
        assert store.swap("k", record, record + " ") is True
        assert store.get("k") == record + " "
    finally:
        store.delete("k")
        store.close()


@settings(max_examples=500, deadline=None)
@given(hs.text(hs.characters(blacklist_categories=()), max_size=40))
def test_a_stored_string_is_read_as_json_reads_it(text: str) -> None:
    """Whatever the characters (control characters, lone surrogates), a string's stored
    form reads back as ``json`` reads it."""
    stored = dumps(text)
    assert loads(stored) == json.loads(stored) == text


def test_a_long_string_is_escaped_once_and_each_gets_its_own_text() -> None:
    """A swap's new record is the next swap's expected one: its stored form is remembered
    (the last two long strings, by identity), never another string's, equal or not."""
    records = [json.dumps({"steps": i, "w": ['say "hi"'] * 200}) for i in range(4)]
    texts = [dumps(r) for r in records]
    assert (
        [dumps(r) for r in records[::-1]]
        == texts[::-1]
        == [json.dumps(r, ensure_ascii=False) for r in records[::-1]]
    )
    assert dumps(records[0]) is dumps(records[0])  # remembered: not escaped again
    same = "".join(records[0])  # an equal string, another object
    assert dumps(same) == texts[0]
    assert dumps(records[1] + " ") == json.dumps(records[1] + " ")


@pytest.mark.redis
@pytest.mark.parametrize("steps", [70, 140])
def test_a_redis_command_with_a_session_record_is_one_socket_write(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, steps: int
) -> None:
    """redis-py writes each argument past 6,000 bytes to the socket apart (one system call
    and one wake-up of the server each): the store joins a command's pieces, so that a
    swap of a 5 or 10 KB record, and the swap-and-read batch of one, is one write."""
    import redis.connection

    pieces: list[int] = []
    send: Any = redis.connection.Connection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        pieces.append(1 if isinstance(command, bytes | str) else len(command))
        send(self, command, check_health)

    store = make_store("redis", tmp_path)
    record = json.dumps({"w": ["x" * 60] * steps})  # 4.6 or 9.1 KB, 5.1 or 10.2 KB stored
    try:
        store.set("rec", record)
        store.swap("rec", record, record + "1")  # the script is loaded before counting
        monkeypatch.setattr(redis.connection.Connection, "send_packed_command", counted)
        assert store.swap("rec", record + "1", record + "2", 60) is True
        ops = [Op("swap", "rec", record + "3", record + "2", 60), Op("get", "rec", only_if=False)]
        assert batch(store, ops) == [True, None]
        assert pieces == [1, 1]
    finally:
        monkeypatch.undo()
        store.delete("rec")
        store.close()


@pytest.mark.redis
def test_a_redis_store_loads_its_scripts_again_when_the_server_has_lost_them(
    tmp_path: Path,
) -> None:
    """The store runs its scripts by their SHA-1 (EVALSHA): a server that no longer knows
    one (restarted, or its scripts flushed) answers NOSCRIPT, and the store loads the
    script and runs it again. Shown with unknown SHA-1s: flushing a shared server's
    scripts would disturb other users of it."""
    store: Any = make_store("redis", tmp_path)
    try:
        store._swap.sha = store._batch.sha = "0" * 40  # as if the server had lost them
        assert batch(store, [Op("add", "k", 1), Op("get", "k")]) == [True, 1]
        assert store.swap("k", 1, 2) is True
        assert store.get("k") == 2
        assert store._swap.sha != "0" * 40 != store._batch.sha
    finally:
        store.delete("k")
        store.close()
