"""Exactly-once writes (semantics §5): the scenarios of issue 4, against every store."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import headway
from conftest import POSTGRES_URL, REDIS_URL, err, make_store, present
from faults import Ledger, worker
from headway import Status
from headway.testing import FakeClock, ScriptedTool


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.db")


def charge_tool(
    ledger: Ledger, before: list[Any] | None = None, after: list[Any] | None = None
) -> Any:
    """pay(order, amount): charges the ledger; ``before``/``after`` pop exceptions to raise."""

    def pay(order: str, amount: int) -> dict[str, Any]:
        if before:
            exc = before.pop(0)
            if exc is not None:
                raise exc
        result = ledger.charge(order, amount)
        if after:
            exc = after.pop(0)
            if exc is not None:
                raise exc
        return result

    return pay


def gov_for(store: headway.Store, clock: FakeClock, **kw: Any) -> headway.Governor:
    return headway.Governor(store=store, clock=clock, sleep=clock.sleep, **kw)


def test_a_keyed_write_runs_once_and_replays(
    store: headway.Store, clock: FakeClock, ledger: Ledger
) -> None:
    gov = gov_for(store, clock)
    gov.register("pay", charge_tool(ledger), effect="write")
    s = gov.session("r")
    first = s.call("pay", {"order": "o1", "amount": 5}, idempotency_key="k1")
    again = gov.session("other-worker").call(
        "pay", {"order": "o1", "amount": 5}, idempotency_key="k1"
    )
    assert first.status is Status.EXECUTED and again.status is Status.REPLAYED
    assert again.value == first.value and not again.executed
    assert ledger.counts() == {"o1": 1}
    assert "already completed" in again.to_model()
    assert gov.audit_records("other-worker")[0]["idempotency_state"] == "completed"


@pytest.mark.parametrize("bad", ["", 7, None])
def test_bad_keys_are_argument_errors(clock: FakeClock, ledger: Ledger, bad: Any) -> None:
    gov = gov_for(headway.MemoryStore(), clock)
    gov.register("pay", charge_tool(ledger), effect="write")
    s = gov.session("r")
    if bad is None:
        with pytest.raises(headway.ArgumentError, match="step_id"):
            s.call("pay", {"order": "o", "amount": 1}, step_id="")
    else:
        with pytest.raises(headway.ArgumentError, match="idempotency_key"):
            s.call("pay", {"order": "o", "amount": 1}, idempotency_key=bad)
    assert ledger.counts() == {}


def test_step_id_keys_are_scoped_to_their_run(
    store: headway.Store, clock: FakeClock, ledger: Ledger
) -> None:
    gov = gov_for(store, clock)
    gov.register("pay", charge_tool(ledger), effect="write")
    a, b = gov.session("run-a"), gov.session("run-b")
    assert a.call("pay", {"order": "x", "amount": 1}, step_id="checkout").status is Status.EXECUTED
    assert a.call("pay", {"order": "x", "amount": 1}, step_id="checkout").status is Status.REPLAYED
    assert b.call("pay", {"order": "x", "amount": 1}, step_id="checkout").status is Status.EXECUTED
    assert ledger.counts() == {"x": 2}


def test_an_exception_before_the_side_effect_releases_the_key(
    store: headway.Store, clock: FakeClock, ledger: Ledger
) -> None:
    gov = gov_for(store, clock)
    gov.register("pay", charge_tool(ledger, before=[ValueError("card declined")]), effect="write")
    s = gov.session("r")
    failed = s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k")
    assert failed.status is Status.ERROR and err(failed)["code"] == "tool_error"
    ok = s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k")
    assert ok.status is Status.EXECUTED and ledger.counts() == {"o": 1}


def test_failed_final_replays_when_opted_in(
    store: headway.Store, clock: FakeClock, ledger: Ledger
) -> None:
    gov = gov_for(store, clock)
    tool = ScriptedTool([ValueError("insufficient funds")])
    gov.register("pay", tool, effect="write", failed_final=True)
    s = gov.session("r")
    first = s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k")
    second = s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k")
    assert first.status is second.status is Status.ERROR
    assert second.error == first.error and not second.executed and tool.count == 1


def test_same_key_different_arguments_is_key_reuse(
    store: headway.Store, clock: FakeClock, ledger: Ledger
) -> None:
    gov = gov_for(store, clock)
    gov.register("pay", charge_tool(ledger), effect="write")
    s = gov.session("r")
    # on first use: another caller holds the key for other arguments
    store.add(
        gov.idempotency_record_key("held"),
        {
            "state": "in_progress",
            "tool": "pay",
            "args": "other",
            "lease": clock() + 60,
            "expires": clock() + 3600,
        },
    )
    with pytest.raises(headway.KeyReuseError):
        s.call("pay", {"order": "o", "amount": 1}, idempotency_key="held")
    # on replay
    s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k")
    with pytest.raises(headway.KeyReuseError, match="other arguments"):
        s.call("pay", {"order": "o", "amount": 2}, idempotency_key="k")
    assert ledger.counts() == {"o": 1}


def test_timeout_after_the_side_effect_is_unknown_then_reconciled(
    store: headway.Store, clock: FakeClock, ledger: Ledger
) -> None:
    gov = gov_for(store, clock)
    gov.register(
        "pay",
        charge_tool(ledger, after=[TimeoutError("gateway")]),
        effect="write",
        reconcile=lambda key, args: ledger.lookup(args["order"]),
    )
    s = gov.session("r")
    out = s.call("pay", {"order": "o", "amount": 3}, idempotency_key="k")
    assert out.status is Status.UNKNOWN and out.reconcile_key == "k" and out.value is None
    assert "Do not repeat" in out.to_model() and "k" in out.to_model()
    clock.advance(2.5)
    again = s.call("pay", {"order": "o", "amount": 3}, idempotency_key="k")
    assert again.status is Status.REPLAYED and again.value == ledger.lookup("o")
    assert ledger.counts() == {"o": 1}
    record = gov.audit_records("r")[1]
    assert "reconciled_by_reconciled" in record["flags"] and record["reconcile_s"] == 2.5
    assert s.call("pay", {"order": "o", "amount": 3}, idempotency_key="k").status is Status.REPLAYED


def test_reconcile_confirming_absence_allows_exactly_one_execution(
    store: headway.Store, clock: FakeClock, ledger: Ledger
) -> None:
    gov = gov_for(store, clock)
    gov.register(
        "pay",
        charge_tool(ledger, before=[TimeoutError("gateway")]),
        effect="write",
        reconcile=lambda key, args: ledger.lookup(args["order"]),
    )
    s = gov.session("r")
    assert s.call("pay", {"order": "o", "amount": 3}, idempotency_key="k").status is Status.UNKNOWN
    assert s.call("pay", {"order": "o", "amount": 3}, idempotency_key="k").status is Status.EXECUTED
    assert s.call("pay", {"order": "o", "amount": 3}, idempotency_key="k").status is Status.REPLAYED
    assert ledger.counts() == {"o": 1}


def test_reconcile_that_raises_or_is_missing_stays_unknown(
    store: headway.Store, clock: FakeClock, ledger: Ledger
) -> None:
    def broken(key: str, args: Any) -> Any:
        raise ConnectionError("payments API down")

    gov = gov_for(store, clock)
    gov.register(
        "pay",
        charge_tool(ledger, after=[TimeoutError("t"), TimeoutError("t")]),
        effect="write",
        reconcile=broken,
    )
    gov.register("pay2", charge_tool(ledger, after=[TimeoutError("t")]), effect="write")
    s = gov.session("r")
    for tool in ("pay", "pay2"):
        assert (
            s.call(tool, {"order": tool, "amount": 1}, idempotency_key=tool).status
            is Status.UNKNOWN
        )
        for _ in range(3):
            out = s.call(tool, {"order": tool, "amount": 1}, idempotency_key=tool)
            assert out.status is Status.UNKNOWN and not out.executed
    assert ledger.counts() == {"pay": 1, "pay2": 1}


def test_expiry_of_the_completed_record(
    store: headway.Store, clock: FakeClock, ledger: Ledger
) -> None:
    gov = gov_for(store, clock, idempotency_ttl_s=100)
    gov.register("pay", charge_tool(ledger), effect="write")
    s = gov.session("r")
    s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k")
    clock.advance(99.9)
    assert s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k").status is Status.REPLAYED
    clock.advance(0.1)
    assert s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k").status is Status.EXECUTED
    assert ledger.counts() == {"o": 2}


def test_expiry_of_the_lease_makes_the_write_unknown(
    store: headway.Store, clock: FakeClock, ledger: Ledger
) -> None:
    gov = gov_for(store, clock, lease_s=10, in_progress_wait_s=0.0)
    tool = ScriptedTool([{"charge_id": 1}])
    gov.register("pay", tool, effect="write")
    rkey = gov.idempotency_record_key("k")
    import headway._canonical as canon

    digest = canon.digest(canon.canonical_json({"order": "o", "amount": 1}))
    store.add(
        rkey,
        {
            "state": "in_progress",
            "tool": "pay",
            "args": digest,
            "owner": "dead",
            "lease": clock() + 10,
            "created": clock(),
            "expires": clock() + 86400,
        },
    )
    s = gov.session("r")
    clock.advance(9.99)
    busy = s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k")
    assert (
        busy.status is Status.ERROR
        and err(busy)["code"] == "in_progress"
        and err(busy)["retry_after"] > 0
    )
    clock.advance(0.01)
    out = s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k")
    assert out.status is Status.UNKNOWN and tool.count == 0  # never re-executed blindly
    assert present(store.get(rkey))["state"] == "unknown"


class DownStore(headway.MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.fail: set[str] = set()

    def add(self, key: str, value: Any, ttl_s: float | None = None) -> bool:
        if "add" in self.fail and ":idem:" in key:
            raise headway.StoreError("connection refused")
        return super().add(key, value, ttl_s)

    def swap(self, key: str, expected: Any, value: Any, ttl_s: float | None = None) -> bool:
        if "swap" in self.fail:
            raise headway.StoreError("connection reset")
        return super().swap(key, expected, value, ttl_s)


def test_store_down_at_claim_does_not_call_the_tool(clock: FakeClock, ledger: Ledger) -> None:
    store = DownStore()
    gov = gov_for(store, clock)
    tool = ScriptedTool([{"ok": 1}])
    gov.register("pay", tool, effect="write")
    s = gov.session("r")
    store.fail = {"add"}
    out = s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k")
    assert (
        out.status is Status.ERROR and err(out)["code"] == "store_unavailable" and tool.count == 0
    )
    assert err(out)["retryable"] is True
    open_gov = gov_for(store, clock, store_failure="open")
    open_gov.register("pay", tool, effect="write")
    assert (
        open_gov.session("r").call("pay", {"order": "o", "amount": 1}, idempotency_key="k").executed
    )


def test_store_down_when_saving_the_result_is_unknown_never_deleted(
    clock: FakeClock, ledger: Ledger
) -> None:
    store = DownStore()
    gov = gov_for(store, clock)
    gov.register("pay", charge_tool(ledger), effect="write")
    s = gov.session("r")
    store.fail = {"swap"}
    out = s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k")
    assert out.status is Status.UNKNOWN and out.executed
    assert (
        present(store.get(gov.idempotency_record_key("k")))["state"] == "in_progress"
    )  # kept, not deleted
    store.fail = set()
    again = s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k")
    assert again.status is Status.ERROR and err(again)["code"] == "in_progress"  # lease still held
    clock.advance(200)  # the lease runs out: the late result in this process settles it
    assert s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k").status is Status.REPLAYED
    assert ledger.counts() == {"o": 1}


def test_unkeyed_write_after_unknown_is_reconciled_first(clock: FakeClock, ledger: Ledger) -> None:
    gov = gov_for(headway.MemoryStore(), clock)
    gov.register(
        "pay",
        charge_tool(ledger, after=[TimeoutError("t")]),
        effect="write",
        reconcile=lambda key, args: ledger.lookup(args["order"]),
    )
    s = gov.session("r")
    first = s.call("pay", {"order": "o", "amount": 1})
    assert first.status is Status.UNKNOWN and first.reconcile_key
    retry = s.call("pay", {"order": "o", "amount": 1})
    assert retry.status is Status.REPLAYED and not retry.executed and ledger.counts() == {"o": 1}
    # an identical unkeyed write after one that completed executes: the user may want two
    assert s.call("pay", {"order": "o", "amount": 1}).status is Status.EXECUTED
    assert ledger.counts() == {"o": 2}


def test_unkeyed_write_after_unknown_without_reconcile_does_not_run(
    clock: FakeClock, ledger: Ledger
) -> None:
    gov = gov_for(headway.MemoryStore(), clock)
    gov.register("send_email", charge_tool(ledger, after=[TimeoutError("t")]), effect="write")
    s = gov.session("r")
    assert s.call("send_email", {"order": "m", "amount": 0}).status is Status.UNKNOWN
    assert s.call("send_email", {"order": "m", "amount": 0}).status is Status.UNKNOWN
    assert s.call("send_email", {"order": "other", "amount": 0}).status is Status.EXECUTED
    assert ledger.counts() == {"m": 1, "other": 1}


def test_a_real_timeout_keeps_the_abandoned_attempt_for_its_late_result(ledger: Ledger) -> None:
    gov = headway.Governor()
    release = threading.Event()

    def slow_pay(order: str) -> dict[str, Any]:
        release.wait(5)
        return ledger.charge(order, 1)

    gov.register("pay", slow_pay, effect="write", timeout=0.1)
    s = gov.session("r")
    assert s.call("pay", {"order": "o"}, idempotency_key="k").status is Status.UNKNOWN
    still = s.call("pay", {"order": "o"}, idempotency_key="k")
    assert still.status is Status.UNKNOWN and "still running" in err(still)["message"]
    release.set()
    for _ in range(600):  # until the abandoned attempt has finished (never re-executes meanwhile)
        late = s.call("pay", {"order": "o"}, idempotency_key="k")
        if late.status is not Status.UNKNOWN:
            break
        time.sleep(0.05)
    assert (
        late.status is Status.REPLAYED
        and late.value == ledger.lookup("o")
        and ledger.counts() == {"o": 1}
    )


def test_concurrent_callers_in_threads_execute_once(store: headway.Store, ledger: Ledger) -> None:
    gov = headway.Governor(store=store, in_progress_wait_s=5)

    def pay(order: str) -> dict[str, Any]:
        time.sleep(0.1)
        return ledger.charge(order, 1)

    gov.register("pay", pay, effect="write")
    outs: list[headway.Outcome] = []
    barrier = threading.Barrier(8)

    def call(i: int) -> None:
        barrier.wait()
        outs.append(gov.session(f"w{i}").call("pay", {"order": "o"}, idempotency_key="same"))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ledger.counts() == {"o": 1}
    assert sorted(o.status.value for o in outs).count("executed") == 1
    assert all(o.status in (Status.EXECUTED, Status.REPLAYED) for o in outs)


SHARED = [
    "sqlite",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("postgres", marks=pytest.mark.postgres),
]


def shared_store(kind: str, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    make_store(kind, tmp_path).close()  # skips (or fails in CI) when the server is missing
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/shared.db", {}
    if kind == "redis":
        return REDIS_URL, {"prefix": prefix}
    return POSTGRES_URL, {"prefix": prefix}


def _claimer(url: str, options: dict[str, Any], ledger_path: str, out: Any) -> None:
    ledger = Ledger(ledger_path)
    gov = headway.Governor(store=headway.open_store(url, **options), in_progress_wait_s=0.05)

    def pay(order: str) -> dict[str, Any]:
        time.sleep(0.2)
        return ledger.charge(order, 1)

    gov.register("pay", pay, effect="write")
    results: list[str] = []
    barrier = threading.Barrier(8)

    def call(i: int) -> None:
        barrier.wait()
        o = gov.session(f"p{i}").call("pay", {"order": "o"}, idempotency_key="one-key")
        results.append(err(o)["code"] if o.error else o.status.value)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(results)


@pytest.mark.parametrize("kind", SHARED)
def test_two_processes_of_eight_threads_claim_one_key_once(kind: str, tmp_path: Path) -> None:
    url, options = shared_store(kind, tmp_path)
    ledger = Ledger(tmp_path / "ledger.db")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claimer, args=(url, options, ledger.path, out)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [r for _ in procs for r in out.get(timeout=60)]
    for p in procs:
        p.join(30)
    assert ledger.counts() == {"o": 1}, results  # the outcomes, should this ever fail
    assert results.count("executed") == 1, results
    assert set(results) <= {"executed", "replayed", "in_progress"}, results


def _orphan(url: str, options: dict[str, Any], ledger_path: str, out: Any) -> None:
    ledger = Ledger(ledger_path)
    gov = headway.Governor(store=headway.open_store(url, **options), in_progress_wait_s=0)
    gov.register(
        "pay",
        lambda order: ledger.charge(order, 1),
        effect="write",
        reconcile=lambda key, args: ledger.lookup(args["order"]),
    )
    s = gov.session("x")
    seen = []
    for _ in range(50):
        o = s.call("pay", {"order": "orphan"}, idempotency_key="orphan-key")
        seen.append(o.status.value)
        if o.status in (Status.EXECUTED, Status.REPLAYED):
            break
        time.sleep(0.02)
    out.put(seen)


@pytest.mark.parametrize("kind", SHARED)
def test_two_processes_find_one_expired_lease_and_only_one_acts(kind: str, tmp_path: Path) -> None:
    url, options = shared_store(kind, tmp_path)
    ledger = Ledger(tmp_path / "ledger.db")
    import headway._canonical as canon

    digest = canon.digest(canon.canonical_json({"order": "orphan"}))
    with headway.Governor(store=headway.open_store(url, **options)) as gov:
        gov.store.add(
            gov.idempotency_record_key("orphan-key"),
            {
                "state": "in_progress",
                "tool": "pay",
                "args": digest,
                "owner": "dead",
                "lease": time.time() - 1,
                "created": time.time() - 10,
                "expires": time.time() + 3600,
            },
        )
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_orphan, args=(url, options, ledger.path, out)) for _ in range(2)]
    for p in procs:
        p.start()
    seen = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert ledger.counts() == {"orphan": 1}  # reconcile found nothing; exactly one ran
    finals = sorted(s[-1] for s in seen)
    assert finals == ["executed", "replayed"]


@pytest.mark.parametrize("kind", SHARED)
def test_randomized_fault_schedules_across_four_processes(kind: str, tmp_path: Path) -> None:
    """charges executed = distinct keys acknowledged; duplicates 0; acknowledged results lost 0."""
    url, options = shared_store(kind, tmp_path)
    ledger = Ledger(tmp_path / "ledger.db")
    n = 2000
    keys = [f"order-{i}" for i in range(n)]
    # every key goes to two processes (concurrent duplicates); one process may crash
    shards = [[k for j, k in enumerate(keys) if j % 4 in (p, (p + 1) % 4)] for p in range(4)]
    ctx = multiprocessing.get_context("spawn")
    outs = [str(tmp_path / f"acks-{p}.jsonl") for p in range(4)]
    procs = [
        ctx.Process(
            target=worker, args=(url, options, ledger.path, shards[p], 1000 + p, outs[p], p == 3)
        )
        for p in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    # three workers finish; the fourth finishes or is killed by its crash schedule
    assert [p.exitcode for p in procs[:3]] == [0, 0, 0]
    assert procs[3].exitcode in (0, 17)
    # a sweep settles whatever the crashed process left behind (as a restarted worker would)
    sweep = str(tmp_path / "acks-sweep.jsonl")
    worker(url, options, ledger.path, keys, 9999, sweep)
    acks: dict[str, list[Any]] = {}
    unresolved = []
    for path in [*outs, sweep]:
        if not Path(path).exists():
            continue
        for line in Path(path).read_text().splitlines():
            rec = json.loads(line)
            if rec.get("unresolved"):
                unresolved.append(rec["key"])
            else:
                acks.setdefault(rec["key"], []).append(rec["result"])
    counts = ledger.counts()
    assert all(c == 1 for c in counts.values()), "a duplicate charge"
    assert set(counts) == set(acks), "charges executed != keys acknowledged"
    for key, results in acks.items():
        truth = ledger.lookup(key)
        assert all(r == truth for r in results), (
            f"an acknowledged result was lost or wrong for {key}"
        )
    assert unresolved == [] or set(unresolved) <= set(acks)


async def test_async_keyed_write_with_an_async_reconcile(
    store: headway.Store, ledger: Ledger
) -> None:
    gov = headway.Governor(store=store)
    attempts: list[int] = []

    async def pay(order: str) -> dict[str, Any]:
        attempts.append(1)
        result = ledger.charge(order, 1)
        if len(attempts) == 1:
            raise TimeoutError("gateway timeout after the charge")
        return result

    async def find(key: str, args: Any) -> Any:
        return ledger.lookup(args["order"])

    gov.register("pay", pay, effect="write", reconcile=find)
    s = gov.session("r")
    first = await s.acall("pay", {"order": "o"}, idempotency_key="ak")
    second = await s.acall("pay", {"order": "o"}, idempotency_key="ak")
    third = s.call("pay", {"order": "o"}, idempotency_key="ak")
    assert first.status is Status.UNKNOWN and second.status is Status.REPLAYED
    assert second.value == ledger.lookup("o") and third.status is Status.REPLAYED
    assert ledger.counts() == {"o": 1} and len(attempts) == 1


def test_sync_call_with_an_async_reconcile(ledger: Ledger) -> None:
    gov = headway.Governor()
    gov.register(
        "pay",
        charge_tool(ledger, after=[TimeoutError("t")]),
        effect="write",
        reconcile=lambda key, args: _async_lookup(ledger, args["order"]),
    )
    s = gov.session("r")
    assert s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k").status is Status.UNKNOWN
    assert s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k").status is Status.REPLAYED


async def _async_lookup(ledger: Ledger, order: str) -> Any:
    return ledger.lookup(order)


def test_an_expired_key_may_be_used_for_other_arguments(clock: FakeClock, ledger: Ledger) -> None:
    gov = gov_for(headway.MemoryStore(), clock, idempotency_ttl_s=60)
    gov.register("pay", charge_tool(ledger), effect="write")
    s = gov.session("r")
    s.call("pay", {"order": "a", "amount": 1}, idempotency_key="k")
    with pytest.raises(headway.KeyReuseError):
        s.call("pay", {"order": "b", "amount": 1}, idempotency_key="k")
    clock.advance(60)
    assert s.call("pay", {"order": "b", "amount": 1}, idempotency_key="k").status is Status.EXECUTED
