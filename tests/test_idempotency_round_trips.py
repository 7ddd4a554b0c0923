"""A keyed write makes two store round trips, whatever else the call touches: its claim
with the session record's read (or swap), its completion with the record's swap (or, in
a session kept in the process, with the cache generation's write). A cached read of a
shared session makes one when this worker holds the entry, two when it looks it up."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

import headway
from conftest import make_store, present, stored
from headway.stores._base import Op, batch

SHARED = [
    "sqlite",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("postgres", marks=pytest.mark.postgres),
]


class Counting:
    """A store that counts round trips (a batch is one) and can lose idempotency records."""

    def __init__(self, inner: headway.Store) -> None:
        self.inner, self.blocking, self.ops, self.lose, self.down = (
            inner,
            inner.blocking,
            0,
            False,
            False,
        )
        self.batches: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)

        def op(*args: Any) -> Any:
            if self.down and name != "close":
                raise headway.StoreError("connection refused")
            self.ops += name != "close"
            return fn(*args)

        return op

    def batch(self, ops: list[Op]) -> list[Any]:
        if self.down:
            raise headway.StoreError("connection refused")
        self.ops += 1
        # the operations, without those on the record's parts (``_record_parts``), which
        # ride with the record's swap, only if it succeeds
        self.batches.append([op.name for op in ops if not PART.search(op.key)])
        if self.lose:  # the store loses the record the completion expects
            for op in ops:
                if ":idem:" in op.key and op.name == "swap":
                    self.inner.delete(op.key)
        return batch(self.inner, ops)


PART = re.compile(r":sess:\{.*\}:[0-9a-f]+:[0-9]+$")


def _gov(store: Counting, **options: Any) -> headway.Governor:
    gov = headway.Governor(store=store, **options)
    gov.register("pay", lambda order: {"ok": order}, effect="write", timeout=None)
    return gov


def _cached(gov: headway.Governor) -> None:
    gov.register("price", lambda sku: {"eur": 3}, effect="read", deterministic=True)


@pytest.mark.parametrize("kind", SHARED)
@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("budgets", [None, headway.Budgets(tool_calls=50)])
def test_a_keyed_write_in_a_shared_session_makes_two_round_trips(
    kind: str, cached: bool, budgets: headway.Budgets | None, tmp_path: Path
) -> None:
    store = Counting(make_store(kind, tmp_path))
    gov = _gov(store)
    if cached:
        _cached(gov)
    s = gov.session("r", budgets=budgets)
    s.call("pay", {"order": 0})  # the record exists
    for i in range(3):
        before = store.ops
        out = s.call("pay", {"order": i}, idempotency_key=f"k{i}")
        assert out.status is headway.Status.EXECUTED
        # with a cache, the write epochs (a record apart from the session's, so that a
        # contended record never loses them) ride in the same two batches: marked pending
        # with the claim, bumped and unmarked with the completion
        assert store.ops - before == 2
    assert store.get(gov.session_key("r")) is not None
    epochs = store.get("default:wep:{r}")
    assert (epochs is not None and epochs["p"] == {}) is cached
    record = store.get(gov.idempotency_record_key("k2"))
    assert record["state"] == "completed" and record["result"] == {"v": {"ok": 2}}
    before = store.ops
    again = s.call("pay", {"order": 2}, idempotency_key="k2")  # replayed: also two
    assert again.status is headway.Status.REPLAYED and again.value == {"ok": 2}
    assert store.ops - before == 2
    store.close()


@pytest.mark.parametrize("kind", ["memory", *SHARED])
@pytest.mark.parametrize("cached", [False, True])
def test_a_keyed_write_in_a_session_kept_in_the_process_makes_two_round_trips(
    kind: str, cached: bool, tmp_path: Path
) -> None:
    store = Counting(make_store(kind, tmp_path))
    gov = _gov(store, share_sessions=False)
    if cached:
        _cached(gov)
    s = gov.session("r")
    for i in range(3):
        before = store.ops
        assert s.call("pay", {"order": i}, idempotency_key=f"k{i}").executed
        assert store.ops - before == 2  # claim; completion (with the cache generation)
    if cached:  # the generation was written with the completion
        assert store.get(gov.generation_key("r")) is not None
        assert ["swap", "swap", "set"] in store.batches  # the lease deleted with it
    store.close()


def test_a_stop_seen_with_the_claim_releases_it(tmp_path: Path) -> None:
    a = _gov(Counting(headway.SQLiteStore(str(tmp_path / "s.db"))))
    b_store = Counting(headway.SQLiteStore(str(tmp_path / "s.db")))
    b = _gov(b_store)
    sb = b.session("r", budgets=headway.Budgets(tool_calls=1))
    sa = a.session("r", budgets=headway.Budgets(tool_calls=1))
    sa.call("pay", {"order": 1})  # worker a spends the budget: the session stops
    with pytest.raises(headway.BudgetExceeded):
        sb.call("pay", {"order": 2}, idempotency_key="k")
    assert b_store.get(b.idempotency_record_key("k")) is None  # claimed, then let go
    assert b.writes.keeper.get(b.idempotency_record_key("k")) is None


def test_a_stop_read_with_the_claim_releases_it_without_call_budgets(tmp_path: Path) -> None:
    a = _gov(Counting(headway.SQLiteStore(str(tmp_path / "s.db"))))
    b_store = Counting(headway.SQLiteStore(str(tmp_path / "s.db")))
    b = _gov(b_store)
    sb = b.session("r", budgets=headway.Budgets(tokens=10))
    sb.call("pay", {"order": 0})
    a.session("r", budgets=headway.Budgets(tokens=10)).record_turn(tokens=11)  # stops it
    with pytest.raises(headway.BudgetExceeded):
        sb.call("pay", {"order": 2}, idempotency_key="k")
    # claimed (and its lease written) with the record's read, then let go with its lease
    assert b_store.batches[-2:] == [["add", "set", "get", "get"], ["swap", "swap"]]
    assert b_store.get(b.idempotency_record_key("k")) is None
    assert b.writes.keeper.get(b.idempotency_record_key("k")) is None


def test_a_completion_the_store_refuses_settles_unknown_and_the_step_once(
    tmp_path: Path,
) -> None:
    store = Counting(headway.SQLiteStore(str(tmp_path / "s.db")))
    gov = _gov(store)
    s = gov.session("r")
    s.call("pay", {"order": 0})
    store.lose = True
    out = s.call("pay", {"order": 1}, idempotency_key="k")
    assert out.status is headway.Status.UNKNOWN and out.error is not None
    assert out.error["code"] == "result_not_recorded"
    # the record's swap waited on the completion: not written with the executed step
    # (a read back in the same round trip), then written with the UNKNOWN one
    assert store.batches[-2:] == [["swap", "swap", "swap", "get"], ["swap", "get"]]
    record = stored(store.inner, gov.session_key("r"))
    assert record["steps"] == 2
    assert record["mon"]["w"][-1][5] == "unknown"  # the step judged as what it became
    audit = s.audit_records()[-1]
    assert audit["status"] == "unknown" and audit["step"] == 1


def test_a_completion_whose_round_trip_fails_is_recorded_by_the_keeper(
    tmp_path: Path,
) -> None:
    store = Counting(headway.SQLiteStore(str(tmp_path / "s.db")))
    gov = _gov(store, lease_s=0.3)
    s = gov.session("r")
    s.call("pay", {"order": 0})
    calls: list[int] = []

    def pay(order: int) -> dict[str, Any]:
        calls.append(order)
        store.down = True  # the store fails while the tool runs
        return {"ok": order}

    out = s.call("pay", {"order": 1}, idempotency_key="k", run=pay)
    assert out.status is headway.Status.UNKNOWN
    assert any(f.startswith("store_error") for f in s.audit_records()[-1]["flags"])
    store.down = False
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        record = store.get(gov.idempotency_record_key("k"))
        if record is not None and record["state"] == "completed":
            break
        time.sleep(0.05)
    assert store.get(gov.idempotency_record_key("k"))["result"] == {"v": {"ok": 1}}
    again = s.call("pay", {"order": 1}, idempotency_key="k", run=pay)
    assert again.status is headway.Status.REPLAYED and calls == [1]


class SessionDown:
    """The five operations only (no batch), failing on the session record when told."""

    def __init__(self, inner: headway.Store) -> None:
        self.inner, self.blocking, self.down = inner, inner.blocking, False

    def __getattr__(self, name: str) -> Any:
        if name not in ("get", "set", "add", "swap", "delete", "close"):
            raise AttributeError(name)
        fn = getattr(self.inner, name)

        def op(*args: Any) -> Any:
            if self.down and ":sess:" in str(args[0]):
                raise headway.StoreError("connection reset")
            return fn(*args)

        return op


@pytest.mark.parametrize("secret", [None, "s3cret"])
def test_without_batch_a_claim_and_completion_stand_when_the_session_record_fails(
    secret: str | None, tmp_path: Path
) -> None:
    store = SessionDown(headway.SQLiteStore(str(tmp_path / "s.db")))
    gov = headway.Governor(store=store, secret=secret)
    gov.register("pay", lambda order: {"ok": order}, effect="write", timeout=None)
    s = gov.session("r")
    s.call("pay", {"order": 0})
    store.down = True
    out = s.call("pay", {"order": 1}, idempotency_key="k")
    assert out.status is headway.Status.EXECUTED and out.value == {"ok": 1}
    assert any(f.startswith("session_state_local") for f in s.audit_records()[-1]["flags"])
    assert present(gov.store.get(gov.idempotency_record_key("k")))["state"] == "completed"
    store.down = False
    assert s.call("pay", {"order": 1}, idempotency_key="k").status is headway.Status.REPLAYED


@pytest.mark.parametrize("kind", SHARED)
@pytest.mark.parametrize("budgets", [None, headway.Budgets(tool_calls=50)])
def test_a_cached_read_of_an_entry_this_worker_holds_makes_one_round_trip(
    kind: str, budgets: headway.Budgets | None, tmp_path: Path
) -> None:
    """The worker that stored (or served) an entry under the record's cache epochs judges
    the read with it and sends only the record's swap; another worker looks it up once."""
    store = Counting(make_store(kind, tmp_path))
    a, b = _gov(store), _gov(store)  # two workers on one store
    for gov in (a, b):
        _cached(gov)
    sa = a.session("r", budgets=budgets)
    for sku in (1, 2, 3):  # steps 0-2; each read twice at most: served, never corrected
        assert sa.call("price", {"sku": sku}).status is headway.Status.EXECUTED
    before = store.ops
    out = sa.call("price", {"sku": 1})
    assert out.status is headway.Status.CACHED and out.value == {"eur": 3} and out.step == 3
    assert store.ops - before == 1
    # guarded by the write epochs; the record read back if the swap fails
    assert store.batches[-1] == ["swap", "swap", "get"]
    sb = b.session("r", budgets=budgets)
    before = store.ops
    assert sb.call("price", {"sku": 2}).status is headway.Status.CACHED  # not held by b
    assert store.ops - before == 2  # looked up, then the swap
    assert sb.call("price", {"sku": 4}).executed  # stored by b, held by b
    before = store.ops
    assert sb.call("price", {"sku": 4}).step == 6
    # the swap; this step stops the run (no progress in 7 steps), and the stop is kept in
    # the session's epochs record too (once per run: a fresh worker raises it even if the
    # record is rolled back)
    assert store.ops - before == 2
    assert store.batches[-2:] == [["swap", "swap", "get"], ["swap", "get"]]
    record = orjson.loads(store.get(a.session_key("r")))
    assert record["steps"] == 7 and record["meter"][2] == 7  # every step counted once
    store.close()


@pytest.mark.parametrize("kind", SHARED)
def test_an_entry_held_under_epochs_another_worker_moved_is_never_served(
    kind: str, tmp_path: Path
) -> None:
    """Worker a holds a read's entry; worker b writes, which bumps the cache epochs in the
    record. a's view is stale: the swap conditioned on it fails, and the read is looked up
    under the new epochs and runs, never served from before the write."""
    store = Counting(make_store(kind, tmp_path))
    a, b = _gov(store), _gov(store)
    balance = [90]
    for gov in (a, b):
        gov.register("balance", lambda: {"eur": balance[0]}, effect="read", deterministic=True)
    sa, sb = a.session("r"), b.session("r")
    assert sa.call("balance", {}).value == {"eur": 90}
    assert sa.call("balance", {}).status is headway.Status.CACHED  # held by a
    balance[0] = 65
    assert sb.call("pay", {"order": 1}).executed  # b's write: the epochs move
    out = sa.call("balance", {})
    assert out.status is headway.Status.EXECUTED and out.value == {"eur": 65}
    assert out.step == 3
    assert sa.call("balance", {}).value == {"eur": 65}  # the new entry, held
    store.close()


def test_an_entry_held_is_not_served_while_the_store_is_down(tmp_path: Path) -> None:
    """Reads fail open (semantics §6: executed, uncached, flagged): a swap the store does
    not answer leaves the entry held unserved, and the step is taken once."""
    store = Counting(headway.SQLiteStore(str(tmp_path / "s.db")))
    gov = _gov(store)
    calls: list[int] = []

    def price(sku: int) -> dict[str, int]:
        calls.append(sku)
        return {"eur": 3}

    gov.register("price", price, effect="read", deterministic=True)
    s = gov.session("r")
    s.call("price", {"sku": 1})
    s.call("price", {"sku": 2})
    assert s.call("price", {"sku": 1}).status is headway.Status.CACHED  # held
    store.down = True
    out = s.call("price", {"sku": 2})  # held too
    assert out.status is headway.Status.EXECUTED and calls == [1, 2, 2] and out.step == 3
    flags = s.audit_records()[-1]["flags"]
    assert any(f.startswith("session_state_local") for f in flags)
    assert any(f.startswith("store_error") for f in flags)
    store.down = False
    assert s.call("price", {"sku": 3}).step == 4
