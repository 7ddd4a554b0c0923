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
from faults import Ledger, run_lost_answers, run_schedules, worker
from headway import Status
from headway.retry import RetryAfter
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
            "owner": "someone",
            "beat": 0,
            "lease_s": 60,
            "created": clock(),
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


def test_a_claim_is_live_while_its_lease_is_in_the_store_and_unknown_once_it_lapses(
    store: headway.Store, clock: FakeClock, ledger: Ledger
) -> None:
    """The owner's lease is an entry the store expires by its own clock: while it is
    there, no observer takes the claim over, however far its own clock moves; once it is
    gone (the store's TTL, here deleted as the TTL would), the next call turns the claim
    UNKNOWN at once, and never re-executes blindly."""
    gov = gov_for(store, clock, lease_s=10, in_progress_wait_s=0.0)
    tool = ScriptedTool([{"charge_id": 1}])
    gov.register("pay", tool, effect="write")
    rkey = gov.idempotency_record_key("k")
    import headway._canonical as canon
    from headway._leases import LEASE, lease_key

    digest = canon.digest(canon.canonical_json({"order": "o", "amount": 1}))
    store.add(
        rkey,
        {
            "state": "in_progress",
            "tool": "pay",
            "args": digest,
            "owner": "elsewhere",
            "beat": 7,
            "lease_s": 10,
            "created": clock(),
            "expires": clock() + 86400,
        },
    )
    store.set(lease_key(rkey, "elsewhere"), LEASE, 600)
    s = gov.session("r")
    for step in (0, 9.99, 10_000, 10**6):  # the observer's clock says nothing about it
        clock.advance(step)
        busy = s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k")
        assert (
            busy.status is Status.ERROR
            and err(busy)["code"] == "in_progress"
            and err(busy)["retry_after"] > 0
        )
    store.delete(lease_key(rkey, "elsewhere"))
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
    # the claim stayed held with the result in this process: the store back, it is recorded
    again = s.call("pay", {"order": "o", "amount": 1}, idempotency_key="k")
    assert again.status is Status.REPLAYED and again.value == ledger.lookup("o")
    assert present(store.get(gov.idempotency_record_key("k")))["state"] == "completed"
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


def test_a_step_keyed_write_left_unknown_is_retried_under_its_key_from_another_step(
    clock: FakeClock, ledger: Ledger
) -> None:
    """A framework keys a write by its tool call id; the model retries a write whose
    outcome is unknown with a new call id: the retry takes the unknown write's key (§5.4),
    so it is reconciled, and without a reconcile nothing runs."""
    gov = gov_for(headway.MemoryStore(), clock)
    gov.register(
        "pay",
        charge_tool(ledger, after=[TimeoutError("t")]),
        effect="write",
        reconcile=lambda key, args: ledger.lookup(args["order"]),
    )
    gov.register("ship", charge_tool(ledger, after=[TimeoutError("t")]), effect="write")
    s = gov.session("r")
    first = s.call("pay", {"order": "o", "amount": 1}, step_id="call-1")
    assert first.status is Status.UNKNOWN
    retry = s.call("pay", {"order": "o", "amount": 1}, step_id="call-2")
    assert retry.status is Status.REPLAYED and not retry.executed
    assert retry.reconcile_key == first.reconcile_key and ledger.counts() == {"o": 1}
    # the write is settled: an identical one with a new step is a new write
    assert s.call("pay", {"order": "o", "amount": 1}, step_id="call-3").executed
    assert ledger.counts() == {"o": 2}
    assert s.call("ship", {"order": "p", "amount": 0}, step_id="call-4").status is Status.UNKNOWN
    assert s.call("ship", {"order": "p", "amount": 0}, step_id="call-5").status is Status.UNKNOWN
    assert s.call("ship", {"order": "q", "amount": 0}, step_id="call-6").executed
    assert ledger.counts() == {"o": 2, "p": 1, "q": 1}


def test_a_step_keyed_write_left_unknown_on_one_worker_is_reconciled_on_another(
    tmp_path: Path, ledger: Ledger
) -> None:
    """The unknown step-keyed writes travel with the shared session record."""
    pay = charge_tool(ledger, after=[TimeoutError("t")])

    def worker() -> headway.Governor:
        gov = headway.Governor(store=headway.SQLiteStore(str(tmp_path / "shared.db")))
        gov.register(
            "pay", pay, effect="write", reconcile=lambda key, args: ledger.lookup(args["order"])
        )
        return gov

    first, second = worker(), worker()
    args = {"order": "o", "amount": 3}
    assert first.session("r").call("pay", args, step_id="call-1").status is Status.UNKNOWN
    retry = second.session("r").call("pay", args, step_id="call-2")
    assert retry.status is Status.REPLAYED and ledger.counts() == {"o": 1}


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
                "beat": 3,
                "lease_s": 0.3,
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


# -- issue 9: late effects, retries near the lease, skewed clocks ---------------------


def _in_thread(fn: Any) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def _until_claimed(store: headway.Store, gov: headway.Governor) -> None:
    for _ in range(500):
        if store.get(gov.idempotency_record_key("k")) is not None:
            return
        time.sleep(0.01)


def test_a_late_effect_seen_from_another_worker_is_never_executed_twice(
    store: headway.Store, ledger: Ledger
) -> None:
    """Worker A times out while its attempt still runs; worker B (same store) must get
    in_progress, never a second execution, and then the late result as REPLAYED."""
    release = threading.Event()

    def slow_pay(order: str) -> dict[str, Any]:
        release.wait(10)
        return ledger.charge(order, 1)

    reconcile = lambda key, args: ledger.lookup(args["order"])  # noqa: E731
    a = headway.Governor(store=store, lease_s=0.5, in_progress_wait_s=0)
    a.register("pay", slow_pay, effect="write", timeout=0.05, reconcile=reconcile)
    b = headway.Governor(store=store, lease_s=0.5, in_progress_wait_s=0)
    b.register("pay", lambda order: ledger.charge(order, 1), effect="write", reconcile=reconcile)
    assert a.session("a").call("pay", {"order": "o"}, idempotency_key="k").status is Status.UNKNOWN
    seen = []
    for _ in range(10):  # longer than the lease: the owner keeps it alive
        out = b.session("b").call("pay", {"order": "o"}, idempotency_key="k")
        seen.append(out.error["code"] if out.error else out.status.value)
        time.sleep(0.1)
    assert set(seen) == {"in_progress"} and ledger.counts() == {}, seen
    release.set()
    for _ in range(200):
        out = b.session("b").call("pay", {"order": "o"}, idempotency_key="k")
        if out.status is Status.REPLAYED:
            break
        time.sleep(0.05)
    assert out.status is Status.REPLAYED and out.value == ledger.lookup("o")
    assert ledger.counts() == {"o": 1}


def test_a_retry_waiting_past_the_lease_keeps_its_claim(
    store: headway.Store, ledger: Ledger
) -> None:
    """A Retry-After longer than the lease: the owner renews its claim while it waits, so
    no other worker takes the key over, and the retry's one charge is the only one. (The
    failure is a refused connection: one known to come before the write could act.)"""
    fails = [ConnectionRefusedError("overloaded")]

    def pay(order: str) -> dict[str, Any]:
        if fails:
            raise fails.pop()
        return ledger.charge(order, 1)

    reconcile = lambda key, args: ledger.lookup(args["order"])  # noqa: E731
    a = headway.Governor(store=store, lease_s=0.3, in_progress_wait_s=0)
    a.register("pay", pay, effect="write", reconcile=reconcile, classify=lambda e: RetryAfter(0.8))
    b = headway.Governor(store=store, lease_s=0.3, in_progress_wait_s=0)
    b.register("pay", lambda order: ledger.charge(order, 1), effect="write", reconcile=reconcile)
    outs: list[headway.Outcome] = []
    t = _in_thread(
        lambda: outs.append(a.session("a").call("pay", {"order": "o"}, idempotency_key="k"))
    )
    _until_claimed(store, a)
    seen = []
    while t.is_alive():
        out = b.session("b").call("pay", {"order": "o"}, idempotency_key="k")
        seen.append(out.error["code"] if out.error else out.status.value)
        time.sleep(0.05)
    t.join()
    assert outs[0].status is Status.EXECUTED and outs[0].attempts == 2, outs
    assert "executed" not in seen and ledger.counts() == {"o": 1}, seen


def test_a_worker_whose_clock_is_ahead_does_not_take_over_a_live_claim(
    store: headway.Store, ledger: Ledger
) -> None:
    """Leases do not depend on the workers' clocks agreeing: 30 s of skew changes nothing."""
    release = threading.Event()

    def slow_pay(order: str) -> dict[str, Any]:
        release.wait(10)
        return ledger.charge(order, 1)

    reconcile = lambda key, args: ledger.lookup(args["order"])  # noqa: E731
    a = headway.Governor(store=store, lease_s=5, in_progress_wait_s=0)
    a.register("pay", slow_pay, effect="write", timeout=None, reconcile=reconcile)
    ahead = headway.Governor(
        store=store, lease_s=5, in_progress_wait_s=0, clock=lambda: time.time() + 30
    )
    ahead.register(
        "pay", lambda order: ledger.charge(order, 1), effect="write", reconcile=reconcile
    )
    outs: list[headway.Outcome] = []
    t = _in_thread(
        lambda: outs.append(a.session("a").call("pay", {"order": "o"}, idempotency_key="k"))
    )
    _until_claimed(store, a)
    out = ahead.session("b").call("pay", {"order": "o"}, idempotency_key="k")
    release.set()
    t.join()
    assert out.status is Status.ERROR and err(out)["code"] == "in_progress", out
    assert outs[0].status is Status.EXECUTED and ledger.counts() == {"o": 1}


def test_a_result_that_is_not_json_is_recorded_in_its_tagged_form_and_replayed(
    store: headway.Store, clock: FakeClock
) -> None:
    """datetime, Decimal, bytes, set, NaN: recorded, replayed as the same types; never a
    stuck key, never a wait."""
    import datetime as dt
    import decimal
    import math

    value = {
        "at": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        "amount": decimal.Decimal("1.50"),
        "raw": b"\x00\xff",
        "tags": {"a", "b"},
        "ratio": math.nan,
        "$note": "kept",
    }
    tool = ScriptedTool([value])
    gov = gov_for(store, clock)
    gov.register("pay", tool, effect="write")
    s = gov.session("r")
    assert s.call("pay", {"o": 1}, idempotency_key="k").status is Status.EXECUTED
    again = s.call("pay", {"o": 1}, idempotency_key="k")
    assert again.status is Status.REPLAYED and tool.count == 1 and clock.sleeps == []
    replayed = again.value
    assert math.isnan(replayed.pop("ratio")) and replayed == {
        k: v for k, v in value.items() if k != "ratio"
    }


def test_a_result_with_no_json_form_settles_the_key_and_says_so(
    store: headway.Store, clock: FakeClock
) -> None:
    """The caller that ran it gets its result; a later call with the key never runs it
    again and never replays a stand-in (None): a structured error says it took effect."""
    result = {1: object()}
    tool = ScriptedTool([result])
    gov = gov_for(store, clock)
    gov.register("pay", tool, effect="write")
    s = gov.session("r")
    first = s.call("pay", {"o": 1}, idempotency_key="k")
    assert first.status is Status.EXECUTED and first.value is result
    again = gov.session("r2").call("pay", {"o": 1}, idempotency_key="k")
    assert again.status is Status.ERROR and again.value is None and tool.count == 1
    assert again.error is not None and again.error["code"] == "unrecordable_result"
    assert not again.executed and again.error["retryable"] is False
    text = again.to_model()
    assert "already ran" in text and "not run again" in text and "Do not repeat" in text
    assert "Retrying may help" not in text
    assert "result_not_recordable" in gov.audit_records("r2")[-1]["flags"]
    assert gov.audit_records("r2")[-1]["idempotency_state"] == "completed"
    assert clock.sleeps == []  # no busy loop, no waiting


def test_a_replayed_write_makes_the_sessions_cached_reads_stale(clock: FakeClock) -> None:
    gov = gov_for(headway.MemoryStore(), clock)
    balance: ScriptedTool = ScriptedTool([lambda **_: {"n": balance.count}])
    gov.register("balance", balance, effect="read", deterministic=True)
    gov.register("pay", ScriptedTool([{"ok": 1}]), effect="write")
    s = gov.session("r")
    s.call("pay", {"o": 1}, idempotency_key="k")
    s.call("balance", {})
    assert s.call("pay", {"o": 1}, idempotency_key="k").status is Status.REPLAYED
    assert s.call("balance", {}).status is Status.EXECUTED and balance.count == 2


def test_step_keys_of_distinct_run_and_step_pairs_never_collide(clock: FakeClock) -> None:
    gov = gov_for(headway.MemoryStore(), clock)
    tool = ScriptedTool([lambda o: {"o": o}])
    gov.register("pay", tool, effect="write")
    a = gov.session("a\x1fb").call("pay", {"o": 1}, step_id="c")
    b = gov.session("a").call("pay", {"o": 1}, step_id="b\x1fc")
    c = gov.session("a:b").call("pay", {"o": 1}, step_id="c")
    d = gov.session("a").call("pay", {"o": 1}, step_id="b:c")
    assert [o.status for o in (a, b, c, d)] == [Status.EXECUTED] * 4 and tool.count == 4


def test_shadow_mode_runs_keyed_writes_every_time_and_records_what_it_would_do(
    clock: FakeClock,
) -> None:
    gov = gov_for(headway.MemoryStore(), clock, enforce=False)
    tool = ScriptedTool([lambda o: {"o": o}])
    gov.register("pay", tool, effect="write")
    s = gov.session("r")
    outs = [
        s.call("pay", {"o": 1}, idempotency_key="k"),
        s.call("pay", {"o": 1}, idempotency_key="k"),
        s.call("pay", {"o": 2}, idempotency_key="k"),  # no KeyReuseError in shadow mode
    ]
    assert [o.status for o in outs] == [Status.EXECUTED] * 3 and tool.count == 3
    assert [r["would"] for r in gov.audit_records("r")] == [None, "replay", "key_reuse"]


@pytest.mark.parametrize(
    "record",
    [
        {"state": "in_progress", "lease": "soon"},
        "not an object",
        {"state": "completed", "tool": "pay", "args": 5},
        {
            "state": "in_progress",
            "tool": "pay",
            "args": "x",
            "owner": 1,
            "beat": 0,
            "lease_s": "soon",
            "created": 0,
            "expires": 1e12,
        },
        {"state": "exploded", "tool": "pay", "args": "x"},
    ],
)
def test_a_malformed_record_is_a_store_fault_and_nothing_runs(
    clock: FakeClock, record: Any
) -> None:
    store = headway.MemoryStore()
    gov = gov_for(store, clock)
    tool = ScriptedTool([{"ok": 1}])
    gov.register("pay", tool, effect="write")
    store.set(gov.idempotency_record_key("k"), record)
    out = gov.session("r").call("pay", {"o": 1}, idempotency_key="k")
    assert out.status is Status.ERROR and err(out)["code"] == "store_unavailable"
    assert "malformed" in err(out)["message"] and tool.count == 0


def test_an_abandoned_attempt_that_fails_late_leaves_the_key_unknown_without_reconcile(
    store: headway.Store, ledger: Ledger
) -> None:
    """It may have acted before failing: without reconcile nothing may run again."""
    release = threading.Event()
    calls: list[int] = []

    def pay(order: str) -> None:
        calls.append(1)
        release.wait(10)
        raise ConnectionError("reset after the request was sent")

    gov = headway.Governor(store=store, lease_s=0.5, in_progress_wait_s=0)
    gov.register("pay", pay, effect="write", timeout=0.05)
    s = gov.session("r")
    assert s.call("pay", {"order": "o"}, idempotency_key="k").status is Status.UNKNOWN
    release.set()
    for _ in range(100):
        record = present(store.get(gov.idempotency_record_key("k")))
        if record["state"] != "in_progress":
            break
        time.sleep(0.02)
    assert record["state"] == "unknown"
    for session in ("r", "other"):
        out = gov.session(session).call("pay", {"order": "o"}, idempotency_key="k")
        assert out.status is Status.UNKNOWN and not out.executed
    assert calls == [1]


def _charges_then_fails(charges: list[str], hold: Any) -> Any:
    """pay(order): ``hold()`` (past the timeout), charges, then fails as a reset does."""

    def pay(order: str) -> None:
        hold()
        charges.append(order)
        raise ConnectionError("reset after the charge")

    return pay


def _retrying_write(gov: headway.Governor, pay: Any, charges: list[str]) -> None:
    gov.register(
        "pay",
        pay,
        effect="write",
        timeout=0.03,
        breaker=False,
        classify=lambda exc: headway.retry.RETRYABLE,  # even a reset after the charge
        retry=headway.Retry(attempts=3, initial_s=0.0, jitter=False),
        reconcile=lambda key, args: {"charged": args["order"]} if charges else None,
    )


def test_a_write_failing_after_its_timeout_is_unknown_when_its_caller_looks_late() -> None:
    """The tool charges and fails after its 30 ms timeout, and its caller gets to look
    only once it has ended (its thread keeps the interpreter, as on a loaded machine): the
    attempt is the timeout it was (UNKNOWN, not a retryable error to retry), and the next
    use of the key reconciles it. One charge, whenever the caller woke."""
    import sys

    def busy() -> None:  # holds the interpreter: no thread switch until it ends
        end = time.perf_counter() + 0.15
        while time.perf_counter() < end:
            pass

    charges: list[str] = []
    gov = headway.Governor(audit=[])
    _retrying_write(gov, _charges_then_fails(charges, busy), charges)
    s = gov.session("r")
    interval = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    try:
        first = s.call("pay", {"order": "o"}, idempotency_key="k")
    finally:
        sys.setswitchinterval(interval)
    assert first.status is Status.UNKNOWN and charges == ["o"], (first, charges)
    again = s.call("pay", {"order": "o"}, idempotency_key="k")
    assert again.status is Status.REPLAYED and charges == ["o"]


async def test_an_async_write_failing_after_its_timeout_is_unknown_when_the_loop_looks_late() -> (
    None
):
    """The same with ``acall``: the loop is busy past the timeout, so the tool's wake-up
    and the timer are both ready when it looks, the wake-up first. The attempt is still
    judged by when the tool ended: UNKNOWN, one charge, reconciled on the next use."""
    import asyncio

    charges: list[str] = []
    gov = headway.Governor(audit=[])
    _retrying_write(gov, _charges_then_fails(charges, lambda: time.sleep(0.06)), charges)
    s = gov.session("r")
    asyncio.get_running_loop().call_later(0.005, time.sleep, 0.3)  # the loop is busy
    first = await s.acall("pay", {"order": "o"}, idempotency_key="k")
    assert first.status is Status.UNKNOWN and charges == ["o"], (first, charges)
    again = await s.acall("pay", {"order": "o"}, idempotency_key="k")
    assert again.status is Status.REPLAYED and charges == ["o"]


def test_a_record_the_store_lost_is_reconciled_before_anything_runs_again(
    store: headway.Store, clock: FakeClock, ledger: Ledger
) -> None:
    """Redis restarted without persistence: this process knows the key was used, so it
    reconciles first (found: REPLAYED; no reconcile: UNKNOWN), never executes blindly."""
    gov = gov_for(store, clock)
    gov.register(
        "pay",
        charge_tool(ledger),
        effect="write",
        reconcile=lambda key, args: ledger.lookup(args["order"]),
    )
    gov.register("pay2", charge_tool(ledger), effect="write")
    s = gov.session("r")
    for tool in ("pay", "pay2"):
        assert s.call(tool, {"order": tool, "amount": 1}, idempotency_key=tool).executed
        store.delete(gov.idempotency_record_key(tool))  # the store lost it
    found = s.call("pay", {"order": "pay", "amount": 1}, idempotency_key="pay")
    assert found.status is Status.REPLAYED and found.value == ledger.lookup("pay")
    unknown = s.call("pay2", {"order": "pay2", "amount": 1}, idempotency_key="pay2")
    assert unknown.status is Status.UNKNOWN and not unknown.executed
    assert ledger.counts() == {"pay": 1, "pay2": 1}
    assert s.call("pay", {"order": "pay", "amount": 1}, idempotency_key="pay").status is (
        Status.REPLAYED
    )


@pytest.mark.parametrize(
    "kind",
    [
        "memory",
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ],
)
def test_randomized_schedules_with_late_effects_skewed_clocks_and_lost_records(
    kind: str, tmp_path: Path
) -> None:
    """250 keys per store, each under one fault (an effect landing after its timeout, a
    failure after acting, a Retry-After near the lease, a record the store loses), driven
    by two workers whose clocks disagree by 30 s: 0 duplicates, 0 lost acknowledged results."""
    store = make_store(kind, tmp_path)
    try:
        counts = run_schedules(store, 250, seed=sum(map(ord, kind)))
    finally:
        store.close()
    assert counts == {
        "schedules": 250,
        "duplicates": 0,
        "lost": 0,
        "unresolved": 0,
        "charged_not_acknowledged": 0,
    }


@pytest.mark.parametrize(
    "kind",
    [
        "memory",
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ],
)
def test_randomized_schedules_where_writes_act_then_lose_their_answer(
    kind: str, tmp_path: Path
) -> None:
    """200 orders per store, keyed and unkeyed, each under one fault: the tool charges and
    then its connection is reset, its pipe breaks, its stream ends, its answer is cut
    short, or it is refused before acting; two workers retry each until acknowledged.
    0 duplicates, 0 lost acknowledged results, every key COMPLETED in the end."""
    store = make_store(kind, tmp_path)
    try:
        counts = run_lost_answers(store, 200, seed=sum(map(ord, kind)) + 31)
    finally:
        store.close()
    assert counts == {
        "schedules": 200,
        "duplicates": 0,
        "lost": 0,
        "keys_not_completed": 0,
        "unresolved": 0,
        "charged_not_acknowledged": 0,
    }
