"""``batch``: several store operations in one round trip, on every store (and signed)."""

from __future__ import annotations

import random
import threading
import uuid
from typing import Any

import pytest

import headway
from conftest import present
from headway.stores._base import SAME, Op, batch, one_by_one
from headway.stores._signed import SignedStore


def test_a_batch_returns_what_each_single_operation_returns(store: headway.Store) -> None:
    store.set("held", {"n": 1})
    store.set("taken", {"x": 0})
    store.set("gone", {"x": 1})
    results = batch(
        store,
        [
            Op("get", "absent"),
            Op("add", "new", {"x": 1}, ttl_s=60),
            Op("add", "taken", {"x": 2}),
            Op("get", "taken", only_if=False),  # read after its failed write
            Op("swap", "held", {"n": 2}, {"n": 1}, 60),
            Op("swap", "other", {"n": 3}, {"n": 1}),
            Op("set", "other", ["é", 1.5]),
            Op("swap", "gone", None, {"x": 1}),
        ],
    )
    assert results == [None, True, False, {"x": 0}, True, False, True, True]
    assert store.get("new") == {"x": 1}
    assert store.get("gone") is None
    assert store.get("held") == {"n": 2}
    assert store.get("other") == ["é", 1.5]


def test_an_operation_only_if_runs_after_its_predecessor_succeeds_or_fails(
    store: headway.Store,
) -> None:
    store.set("k", {"v": 1})
    results = batch(
        store,
        [
            Op("swap", "k", {"v": 2}, {"v": 0}),  # fails
            Op("set", "a", 1, only_if=True),  # skipped
            Op("set", "b", 1, only_if=True),  # skipped after a skipped one
            Op("get", "k", only_if=False),  # performed: the one before did not succeed
            Op("add", "c", 1),
            Op("get", "c", only_if=False),  # skipped: the add succeeded
            Op("get", "k", only_if=True),  # skipped: a get never "succeeds"
        ],
    )
    assert results == [False, None, None, {"v": 1}, True, None, None]
    assert store.get("a") is None and store.get("b") is None


def test_a_batch_refuses_an_unknown_operation_and_a_non_json_value(
    store: headway.Store,
) -> None:
    with pytest.raises(headway.StoreError):
        batch(store, [Op("incr", "k")])
    with pytest.raises(headway.StoreError):
        batch(store, [Op("set", "k", object())])
    assert store.get("k") is None


def test_concurrent_batched_swaps_lose_no_increment(store: headway.Store) -> None:
    store.set("n", {"n": 0})

    def bump() -> None:
        for _ in range(30):
            while True:
                cur = store.get("n")
                new = {"n": present(cur)["n"] + 1}
                done = batch(store, [Op("swap", "n", new, cur), Op("set", "x", 1, only_if=True)])
                if done[0]:
                    break

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.get("n") == {"n": 120}


def test_a_store_without_batch_performs_the_operations_one_by_one() -> None:
    class Plain:  # the five operations only, as a user's own store may have
        def __init__(self) -> None:
            self.inner = headway.MemoryStore()
            self.calls: list[str] = []

        def __getattr__(self, name: str) -> Any:
            if name not in ("get", "set", "add", "swap", "delete"):
                raise AttributeError(name)
            self.calls.append(name)
            return getattr(self.inner, name)

    plain = Plain()
    ops = [Op("add", "k", 1), Op("swap", "j", 2, 1, only_if=True), Op("get", "i")]
    assert batch(plain, ops) == one_by_one(headway.MemoryStore(), ops) == [True, False, None]
    assert plain.calls == ["add", "swap", "get"]


def test_a_signed_store_signs_what_a_batch_writes_and_checks_what_it_reads(
    store: headway.Store,
) -> None:
    signed = SignedStore(store, "secret")
    assert batch(signed, [Op("set", "c", {"v": 1}), Op("add", "a:idem:k", {"s": 1})]) == [
        True,
        True,
    ]
    assert signed.get("c") == {"v": 1} and set(present(store.get("c"))) == {"hmac", "v"}
    assert batch(signed, [Op("swap", "c", {"v": 2}, {"v": 0}), Op("get", "c", only_if=False)]) == [
        False,
        {"v": 1},
    ]
    store.set("c", {"hmac": "0" * 64, "v": {"v": 3}})  # forged: read as absent
    assert batch(signed, [Op("get", "c")]) == [None]
    store.set("a:idem:k", {"hmac": "0" * 64, "v": {"s": 2}})  # a forged idempotency record
    with pytest.raises(headway.StoreError, match="integrity"):
        batch(signed, [Op("get", "a:idem:k")])


@pytest.mark.parametrize("size", [10, 5_000])  # a long expected value goes as its digest
def test_a_get_with_the_expected_value_answers_same_instead_of_the_value(
    store: headway.Store, size: int
) -> None:
    text = "x" * size
    store.set("r", text)
    results = batch(
        store,
        [
            Op("get", "r", expected=text),
            Op("get", "r", expected=text + "y"),
            Op("get", "absent", expected=text),
        ],
    )
    assert results == [SAME, text, None]


@pytest.mark.parametrize("size", [10, 5_000])
def test_a_swap_compares_a_long_expected_value_exactly(store: headway.Store, size: int) -> None:
    text = "é" * size
    store.set("r", text)
    assert not store.swap("r", text[:-1] + "e", "new")  # one character off: no swap
    assert batch(store, [Op("swap", "r", "new", text[1:] + "e")]) == [False]
    assert batch(store, [Op("swap", "r", "new", text), Op("get", "r", only_if=False)]) == [
        True,
        None,
    ]
    assert store.get("r") == "new"
    store.set("r", text)
    assert store.swap("r", text, None) and store.get("r") is None


def test_a_delete_in_a_batch_removes_its_key_after_the_operation_before(
    store: headway.Store,
) -> None:
    store.set("a", 1)
    store.set("b", 1)
    results = batch(
        store,
        [
            Op("swap", "x", 2, 1),  # fails: the delete after it is skipped
            Op("delete", "a", only_if=True),
            Op("add", "n", 1),
            Op("delete", "b", only_if=True),
            Op("get", "b", only_if=False),  # skipped: the delete succeeded
        ],
    )
    assert results == [False, None, True, True, None]
    assert store.get("a") == 1 and store.get("b") is None


def test_a_run_of_deletes_each_after_the_one_before_is_made_or_skipped_as_one(
    store: headway.Store,
) -> None:
    # a session record's parts it no longer needs (PostgreSQL: one DELETE for the run)
    for k in ("p:1", "p:22", "q", "r", "s", "t", "u"):
        store.set(k, 1)
    results = batch(
        store,
        [
            Op("add", "n", 1),
            Op("delete", "p:1", only_if=True),
            Op("delete", "p:22", only_if=True),
            Op("delete", "absent", only_if=True),
            Op("delete", "q", only_if=False),  # skipped: the delete before it was made
            Op("delete", "r", only_if=True),  # skipped after a skipped one
            Op("add", "u", 2),  # fails: the run after it is skipped
            Op("delete", "s", only_if=True),
            Op("delete", "t", only_if=True),
        ],
    )
    assert results == [True, True, True, True, None, None, False, None, None]
    assert [store.get(k) for k in ("p:1", "p:22", "q", "r", "s", "t")] == [None, None, 1, 1, 1, 1]


def test_a_signed_store_answers_same_for_an_unchanged_value(store: headway.Store) -> None:
    signed = SignedStore(store, "secret")
    signed.set("r", "t" * 500)
    assert batch(signed, [Op("get", "r", expected="t" * 500), Op("delete", "r")]) == [
        SAME,
        True,
    ]
    assert signed.get("r") is None


def test_a_batch_finds_keys_that_share_their_first_bytes_with_the_one_before(
    store: headway.Store,
) -> None:
    # a network store may send each key as its tail past what the key before shares: the
    # shared part here ends inside a character ("è" and "é" share their first byte)
    keys = ["éè", "éé", "é", "éé:lease", "éé", "x"]
    ops = [Op("set", k, i) for i, k in enumerate(dict.fromkeys(keys))]
    assert batch(store, ops) == [True] * 5
    assert [store.get(k) for k in ("éè", "éé", "é", "éé:lease", "x")] == [0, 1, 2, 3, 4]
    assert batch(store, [Op("get", k) for k in keys]) == [0, 1, 2, 3, 1, 4]


@pytest.mark.parametrize("expected_ok", [True, False])
def test_a_swap_writes_a_long_value_that_differs_a_little_from_the_one_it_replaces(
    store: headway.Store, expected_ok: bool
) -> None:
    # sent as edits of the stored value (a session record's head, a completion), applied
    # by the store's server only where the stored value is the expected one
    old = {"ver": 13, "log": ["é" * 90, "x" * 200, "ü"], "meter": [1, 13, {"a": 3}], "t": 1.25}
    new = {**old, "ver": 14, "log": ["é" * 90, "y", "x" * 200, "ü"], "meter": [1, 14, {"a": 4}]}
    store.set("r", old)
    expected = old if expected_ok else {**old, "t": 1.5}
    done = batch(store, [Op("swap", "r", new, expected, 60), Op("get", "r", only_if=False)])
    assert done == ([True, None] if expected_ok else [False, old])
    assert store.get("r") == (new if expected_ok else old)
    text = "ö," * 300  # a string value: its edits count characters or bytes alike
    store.set("s", text)
    assert batch(store, [Op("swap", "s", text[:100] + "ä" + text[100:], text)]) == [True]
    assert store.get("s") == text[:100] + "ä" + text[100:]
    # past 64 KiB (Redis's edits count in 16 bits: sent whole), a change near its end
    big = "é" * 40_000
    store.set("b", big)
    changed = big[:39_990] + "ä" + big[39_990:]
    assert batch(store, [Op("swap", "b", changed, big)]) == [True]
    assert store.get("b") == changed


def test_a_long_value_changed_anywhere_is_swapped_in_exactly(store: headway.Store) -> None:
    # edits at the start, at the end, next to each other, deletions: the server rebuilds
    # the new value from the stored one, character for character
    rnd = random.Random(7)
    value = ",".join(f'{{"k{i}":[{i},"é{i}"]}}' for i in range(30))
    store.set("r", value)
    for _ in range(40):
        new = list(value)
        for _ in range(rnd.randint(1, 4)):
            at = rnd.randint(0, len(new))
            del new[at : at + rnd.randint(0, 6)]
            new[at:at] = rnd.choice(["", "ü", "7", ',"x":', "[]", "{}"])
        text = "".join(new)
        assert batch(store, [Op("swap", "r", text, value)]) == [True]
        value = text
        assert store.get("r") == value


_ODD = [
    "a",
    "é",
    "€",
    "😀",
    ",",
    ":",
    "[",
    "]",
    "{",
    "}",
    '"',
    "\\",
    " ",
    "0",
    "\n",
    "\x00",
    "\u2028",
]


def _text(rnd: random.Random, n: int) -> str:
    return "".join(rnd.choice(_ODD) for _ in range(n))


def _value(rnd: random.Random, depth: int = 0) -> Any:
    k = rnd.random()
    if depth > 2 or k < 0.3:
        return rnd.choice(
            [_text(rnd, rnd.randint(0, 30)), rnd.randint(-(10**20), 10**20), rnd.random(), -0.0]
        )
    if k < 0.6:
        return [_value(rnd, depth + 1) for _ in range(rnd.randint(0, 5))]
    return {_text(rnd, rnd.randint(0, 4)): _value(rnd, depth + 1) for _ in range(rnd.randint(0, 5))}


def _record(rnd: random.Random) -> dict[str, Any]:  # long: its swaps may go as edits
    return {"head": _text(rnd, 150), "body": [_value(rnd) for _ in range(rnd.randint(1, 6))]}


def _changed(rnd: random.Random, value: Any) -> Any:
    if isinstance(value, dict) and value and rnd.random() < 0.8:
        return {**value, rnd.choice(list(value)): _value(rnd, 2)}
    return _record(rnd)


@pytest.mark.parametrize("signed", [False, True])
def test_random_batches_answer_and_store_what_the_memory_store_does(
    store: headway.Store, signed: bool
) -> None:
    # the wire formats of the network stores (keys as tails of the key before, swaps as
    # edits of the stored value, digests for long expected values) change nothing a batch
    # returns or leaves in the store: every batch within the contract (a key written once,
    # read after its write only when that failed) against MemoryStore's answers
    rnd = random.Random(11 + signed)
    ref: Any = headway.MemoryStore()
    under: Any = store
    if signed:
        under, ref = SignedStore(store, b"k" * 32), SignedStore(ref, b"k" * 32)
    keys = ["bé", "bè", "bé:lease:é", "b😀", "b😁", "b"]
    for n in range(60):
        ops: list[Op] = []
        written: set[str] = set()
        for _ in range(rnd.randint(1, 5)):
            if ops and ops[-1].name != "get" and rnd.random() < 0.3:
                ops.append(Op("get", ops[-1].key, only_if=False))
                continue
            key = rnd.choice([k for k in keys if k not in written])
            only = rnd.choice([None, True, False]) if ops else None
            ttl = rnd.choice([None, 60.0])
            now = ref.get(key)
            kind = rnd.choice(["get", "getx", "set", "add", "swap", "stale swap", "delete"])
            if kind == "get":
                ops.append(Op("get", key, only_if=only))
            elif kind == "getx":
                ops.append(Op("get", key, None, now or _record(rnd), only_if=only))
            elif kind in ("set", "add"):
                ops.append(Op(kind, key, _record(rnd), ttl_s=ttl, only_if=only))
            elif kind == "delete":
                ops.append(Op("delete", key, only_if=only))
            else:
                expected = now if kind == "swap" and now is not None else _changed(rnd, now)
                new = None if rnd.random() < 0.1 else _changed(rnd, expected)
                ops.append(Op("swap", key, new, expected, ttl, only_if=only))
            if ops[-1].name != "get":
                written.add(key)
        assert batch(under, ops) == batch(ref, ops), (n, ops)
        assert [under.get(k) for k in keys] == [ref.get(k) for k in keys], n


@pytest.mark.postgres
def test_a_postgres_batch_is_planned_once_whatever_its_edits_and_number_of_deletes() -> None:
    # write after write, a session record's swap sent as edits with one delete, and its
    # parts deleted: one statement text each, whose plan PostgreSQL makes once and reuses
    # (a prepared statement's generic plan, taken only when not estimated dearer than a
    # plan made anew)
    from conftest import POSTGRES_URL
    from headway.stores.postgres import PostgresStore

    store = PostgresStore(POSTGRES_URL, prefix=f"t{uuid.uuid4().hex[:8]}:", max_size=1)
    try:
        old = "x" * 300
        store.set("r", old)
        for n in range(15):
            new = f"{n:04d}" + old[4:]
            swap = [Op("swap", "r", new, old, 60), Op("delete", f"o{n:03d}", only_if=True)]
            assert store.batch(swap) == [True, True]
            parts = [Op("delete", f"p{n:03d}:{j}", only_if=True) for j in range(60 + n)]
            assert store.batch([Op("set", f"s{n:03d}", 1), *parts]) == [True] * (61 + n)
            old = new
        _, row = store._run(
            "SELECT count(*), min(generic_plans) FROM pg_prepared_statements "
            "WHERE statement LIKE 'WITH %%'",
            (),
        )
        assert row[0] == 2 and row[1] > 0
        assert store.get("r") == old
    finally:
        store.close()


@pytest.mark.redis
def test_a_redis_connection_the_server_closed_while_idle_is_opened_again_before_a_batch() -> None:
    # the store keeps its connections across commands: one the server closed meanwhile
    # (a restart, CLIENT KILL, an idle timeout) is found before the batch is sent, so the
    # batch runs and answers (never a store error for a command that was never sent)
    from conftest import redis_store

    store: Any = redis_store()
    try:
        assert store.batch([Op("set", "k", 1), Op("get", "k")]) == [True, 1]
        (conn,) = store._idle
        ours = store._command("CLIENT", "ID")
        store._client.execute_command("CLIENT", "KILL", "ID", ours)  # another connection
        assert store.batch([Op("set", "k", 2), Op("get", "k")]) == [True, 2]
        assert store._idle == [conn] and store._command("CLIENT", "ID") != ours
    finally:
        store.close()


@pytest.mark.redis
def test_a_redis_command_whose_connection_fails_is_not_sent_again(monkeypatch: Any) -> None:
    # a reply lost after the command was sent: the command may have run, so it is never
    # sent again by the store (a keyed write's completion unrecorded is UNKNOWN, not run
    # twice); the connection is dropped, and the next command opens it again
    import redis

    from conftest import redis_store

    store: Any = redis_store()
    try:
        assert store.add("n", 0)
        (conn,) = store._idle
        sent: list[Any] = []
        send, read = type(conn).send_packed_command, type(conn).read_response

        def counted(self: Any, packed: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(b"EVALSHA" in b"".join(packed))
            return send(self, packed, *args, **kwargs)

        def lost(self: Any, *args: Any, **kwargs: Any) -> Any:
            read(self, *args, **kwargs)  # the server answered: the reply is lost here
            raise redis.exceptions.ConnectionError("Connection reset by peer")

        monkeypatch.setattr(type(conn), "send_packed_command", counted)
        monkeypatch.setattr(type(conn), "read_response", lost)
        with pytest.raises(headway.StoreError, match="Connection reset"):
            store.batch([Op("swap", "n", 1, 0)])
        monkeypatch.undo()
        assert sent == [True]  # sent once
        assert store.get("n") == 1  # and run
        assert store.batch([Op("swap", "n", 2, 1)]) == [True]  # on a connection opened again
    finally:
        store.close()


@pytest.mark.redis
def test_a_forked_child_never_uses_the_redis_connections_of_its_parent() -> None:
    # a worker forked from a process that used the store (a pre-forking server): replies
    # on a shared socket would be read by the wrong process; the child opens its own
    import os

    from conftest import redis_store

    store: Any = redis_store()
    try:
        assert store.batch([Op("set", "k", "parent")]) == [True]
        (conn,) = store._idle
        parent_port = conn._sock.getsockname()[1]
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: answer with the local port of the connection it used
            code = 1
            try:
                assert store.batch([Op("set", "c", "child"), Op("get", "k")]) == [True, "parent"]
                os.write(write, str(store._idle[0]._sock.getsockname()[1]).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        child_port = int(os.read(read, 64) or b"0")
        os.close(read)
        assert status == 0 and child_port not in (0, parent_port)
        assert store.batch([Op("get", "c"), Op("get", "k")]) == ["child", "parent"]
        assert store._idle == [conn]  # the parent's own, still in use here
    finally:
        store.close()
