"""Records the store loses, and keys it cannot hold (issue 31, item 11).

A process that claimed a key (or saw it settled) remembers it until the record's expiry:
when the record disappears from the store (Redis restarted without persistence while the
write ran, a row deleted), the next call with the key in that process reconciles first
(§5.3) and never runs the tool again just because the store forgot. And a key or session
id that some store cannot hold is an ``ArgumentError`` naming the problem before anything
runs, the same on every store.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import headway
from conftest import make_store
from faults import Ledger
from headway import Status
from headway.testing import ScriptedTool

BAD_KEYS = [
    ("NUL", "order\x00-7", "NUL"),
    ("lone surrogate", "order-\ud800", "lone surrogate"),
    ("10 KB", "k" * 10_000, "10000 bytes"),
    ("1,025 bytes of UTF-8", "\u20ac" * 341 + "kk", "1025 bytes"),
]


@pytest.mark.parametrize(("_", "key", "problem"), BAD_KEYS, ids=[b[0] for b in BAD_KEYS])
def test_a_key_the_store_cannot_hold_is_an_argument_error_and_nothing_runs(
    store: headway.Store, _: str, key: str, problem: str
) -> None:
    """Not ``store_unavailable`` ("retrying may help") for ever: a clear ArgumentError
    before anything runs, on every store alike."""
    gov = headway.Governor(store=store)
    tool = ScriptedTool([{"ok": 1}])
    gov.register("pay", tool, effect="write")
    with pytest.raises(headway.ArgumentError, match=problem) as raised:
        gov.session("r").call("pay", {"n": 1}, idempotency_key=key)
    assert "idempotency_key" in str(raised.value)
    with pytest.raises(headway.ArgumentError, match=problem) as raised:
        gov.session(key)
    assert "run_id" in str(raised.value)
    assert tool.count == 0


@pytest.mark.parametrize(("_", "name", "problem"), BAD_KEYS, ids=[b[0] for b in BAD_KEYS])
@pytest.mark.parametrize("option", ["namespace", "workspace"])
def test_a_namespace_or_workspace_no_store_can_hold_is_a_config_error(
    option: str, _: str, name: str, problem: str
) -> None:
    """Part of every stored key: refused when the Governor is made, naming the problem,
    not a store error ("retrying may help") on every call."""
    options: dict[str, Any] = {option: name}
    with pytest.raises(headway.ConfigError, match=problem) as raised:
        headway.Governor(**options)
    assert option in str(raised.value)


def test_the_longest_key_and_session_id_allowed_work_on_every_store(store: headway.Store) -> None:
    """1,024 bytes of UTF-8 (4-byte characters too), as a key and as a session id."""
    gov = headway.Governor(store=store)
    tool = ScriptedTool([{"ok": 1}, {"ok": 2}])
    gov.register("pay", tool, effect="write")
    gov.register("look", ScriptedTool([{"v": 1}]), effect="read", deterministic=True)
    longest = "\U0001f600" * 256
    s = gov.session(longest)
    assert s.call("pay", {"n": 1}, idempotency_key=longest).status is Status.EXECUTED
    assert s.call("pay", {"n": 1}, idempotency_key=longest).status is Status.REPLAYED
    assert s.call("look", {"q": 1}).status is Status.EXECUTED
    assert s.call("look", {"q": 1}).status is Status.CACHED
    assert tool.count == 1


# -- records the store loses ----------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnRedis:
    """A redis-server of this test's own, without persistence: restarting it loses
    everything (never the shared server)."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
        )
        for _ in range(500):
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                return
            time.sleep(0.01)
        raise AssertionError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(30)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    pytest.importorskip("redis")
    try:
        subprocess.run(["redis-server", "--version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no redis-server to start: {exc}")
    server = OwnRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _blocked_pay(ledger: Ledger) -> tuple[Any, threading.Event, threading.Event]:
    started, release = threading.Event(), threading.Event()

    def pay(order: str) -> dict[str, Any]:
        result = ledger.charge(order, 1)
        started.set()
        release.wait(30)
        return result

    return pay, started, release


def _in_thread(fn: Any) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


@pytest.mark.redis
@pytest.mark.parametrize("with_reconcile", [True, False])
def test_redis_restarted_without_persistence_while_a_keyed_write_ran_never_runs_it_again(
    own_redis: OwnRedis, tmp_path: Path, with_reconcile: bool
) -> None:
    """The write charged, then Redis restarted empty before its result was recorded: the
    next calls with the key in this process replay the result the attempt returned (or,
    while it still runs, stay UNKNOWN); the charge happens once, with or without a
    reconcile function."""
    ledger = Ledger(tmp_path / "ledger.db")
    pay, started, release = _blocked_pay(ledger)
    gov = headway.Governor(store=headway.open_store(own_redis.url, timeout_s=2), lease_s=0.6)

    def find(key: str, args: Any) -> Any:
        return ledger.lookup(args["order"])

    gov.register(
        "pay", pay, effect="write", timeout=None, reconcile=find if with_reconcile else None
    )
    outs: list[headway.Outcome] = []
    t = _in_thread(
        lambda: outs.append(gov.session("a").call("pay", {"order": "o"}, idempotency_key="k"))
    )
    assert started.wait(30)
    own_redis.restart()  # the claim (and its lease) are gone with it
    during = [
        gov.session(f"b{i}").call("pay", {"order": "o"}, idempotency_key="k") for i in range(3)
    ]
    release.set()
    t.join(30)
    after = [
        gov.session(f"c{i}").call("pay", {"order": "o"}, idempotency_key="k") for i in range(3)
    ]
    assert ledger.counts() == {"o": 1}
    assert all(o.status is Status.UNKNOWN and not o.executed for o in during), during
    assert outs[0].status in (Status.EXECUTED, Status.UNKNOWN)
    assert all(o.status is Status.REPLAYED for o in after), after
    assert all(o.value == ledger.lookup("o") for o in after)
    gov.close()


@pytest.mark.redis
def test_redis_restarted_after_a_keyed_write_completed_reconciles_before_anything_runs(
    own_redis: OwnRedis, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger.db")
    gov = headway.Governor(store=headway.open_store(own_redis.url, timeout_s=2))
    runs: list[int] = []

    def pay(order: str) -> dict[str, Any]:
        runs.append(1)
        return ledger.charge(order, 1)

    gov.register("pay", pay, effect="write", reconcile=lambda k, a: ledger.lookup(a["order"]))
    assert gov.session("a").call("pay", {"order": "o"}, idempotency_key="k").executed
    own_redis.restart()
    out = gov.session("b").call("pay", {"order": "o"}, idempotency_key="k")
    if out.status is Status.UNKNOWN:  # the first command after the restart may fail
        out = gov.session("b").call("pay", {"order": "o"}, idempotency_key="k")
    assert out.status is Status.REPLAYED and runs == [1] and ledger.counts() == {"o": 1}
    gov.close()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_record_row_deleted_while_the_write_ran_is_reconciled_not_run_again(
    kind: str, tmp_path: Path
) -> None:
    """The row of a running write deleted (an operator, a restore): the attempt's result
    is replayed to the next caller in this process; one charge."""
    ledger = Ledger(tmp_path / "ledger.db")
    store = make_store(kind, tmp_path)
    pay, started, release = _blocked_pay(ledger)
    gov = headway.Governor(store=store, lease_s=0.6)
    gov.register("pay", pay, effect="write", timeout=None)
    rkey = gov.idempotency_record_key(f"k-{uuid.uuid4().hex[:6]}")
    key = rkey.split("{", 1)[1].rstrip("}")
    outs: list[headway.Outcome] = []
    t = _in_thread(
        lambda: outs.append(gov.session("a").call("pay", {"order": "o"}, idempotency_key=key))
    )
    assert started.wait(30)
    store.delete(rkey)
    during = gov.session("b").call("pay", {"order": "o"}, idempotency_key=key)
    release.set()
    t.join(30)
    after = gov.session("c").call("pay", {"order": "o"}, idempotency_key=key)
    assert during.status is Status.UNKNOWN and not during.executed
    assert after.status is Status.REPLAYED and after.value == ledger.lookup("o")
    assert ledger.counts() == {"o": 1}
    gov.close()
