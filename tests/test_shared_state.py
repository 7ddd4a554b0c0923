"""The session record in one process: two Governors on one store are two workers.

(Real worker processes are in test_shared_sessions.py.)
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

import headway
from conftest import present
from headway._state import Turns
from headway.detectors import Monitor
from headway.similarity import DEFAULT_NORMALIZERS


class Switch:
    """A store that can be made unreachable."""

    def __init__(self, inner: headway.Store) -> None:
        self.inner, self.blocking, self.down = inner, inner.blocking, False

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)

        def op(*args: Any) -> Any:
            if self.down and name != "close":
                raise headway.StoreError("connection refused")
            return fn(*args)

        return op


def _gov(path: Path, **options: Any) -> headway.Governor:
    gov = headway.Governor(store=headway.SQLiteStore(str(path / "s.db")), **options)
    _tools(gov)
    return gov


def _tools(gov: headway.Governor) -> None:
    gov.register("search", lambda q: "No results found.", effect="read")
    gov.register("price", lambda sku: {"eur": 3}, effect="read", deterministic=True)
    gov.register("pay", lambda order: {"ok": order}, effect="write")


def _record(gov: headway.Governor, run_id: str) -> Any:
    """The session record as the store holds it (one JSON text), parsed."""
    text = gov.store.get(gov.session_key(run_id))
    return None if text is None else orjson.loads(text)


def test_memory_store_keeps_the_session_in_the_process(tmp_path: Path) -> None:
    gov = headway.Governor()
    _tools(gov)
    gov.session("r").call("search", {"q": "x"})
    assert _record(gov, "r") is None


def test_share_sessions_false_keeps_the_session_in_each_process(tmp_path: Path) -> None:
    a, b = _gov(tmp_path, share_sessions=False), _gov(tmp_path, share_sessions=False)
    a.session("r").call("search", {"q": "x"})
    assert _record(a, "r") is None
    assert b.session("r").steps == 0


def test_a_second_worker_continues_the_steps_and_budgets(tmp_path: Path) -> None:
    a, b = _gov(tmp_path), _gov(tmp_path)
    budgets = headway.Budgets(tool_calls=3, per_tool_calls={"pay": 2})
    assert a.session("r", budgets=budgets).call("pay", {"order": 1}).step == 0
    assert b.session("r", budgets=budgets).call("pay", {"order": 2}).step == 1
    with pytest.raises(headway.BudgetExceeded) as stop:
        a.session("r", budgets=budgets).call("pay", {"order": 3})
    assert stop.value.diagnostic["budget_type"] == "per_tool_calls"


def test_model_turns_reported_on_two_workers_spend_one_turn_budget(tmp_path: Path) -> None:
    a, b = _gov(tmp_path), _gov(tmp_path)
    budgets = headway.Budgets(turns=2)
    a.session("r", budgets=budgets).record_turn(tokens=5)
    b.session("r", budgets=budgets).record_turn(tokens=5)
    with pytest.raises(headway.BudgetExceeded) as stop:
        a.session("r", budgets=budgets).call("search", {"q": "x"})
    assert stop.value.diagnostic["budget_type"] == "turns"


def test_a_user_turn_on_one_worker_resets_the_repeat_count_on_the_other(tmp_path: Path) -> None:
    a, b = _gov(tmp_path), _gov(tmp_path)
    for _ in range(2):
        a.session("r").call("search", {"q": "x"})
    b.session("r").user_turn()
    # without the reset this would be the third identical read: corrected
    assert a.session("r").call("search", {"q": "x"}).status is headway.Status.EXECUTED


def test_a_write_on_one_worker_bumps_the_cache_epochs_of_the_other(tmp_path: Path) -> None:
    a, b = _gov(tmp_path), _gov(tmp_path)
    assert a.session("r").call("price", {"sku": 1}).status is headway.Status.EXECUTED
    assert b.session("r").call("price", {"sku": 1}).status is headway.Status.CACHED
    a.session("r").call("pay", {"order": 1})
    assert b.session("r").call("price", {"sku": 1}).status is headway.Status.EXECUTED


def test_the_store_failing_mid_session_degrades_to_local_state_with_a_flag(
    tmp_path: Path,
) -> None:
    store = Switch(headway.SQLiteStore(str(tmp_path / "s.db")))
    gov = headway.Governor(store=store)
    _tools(gov)
    s = gov.session("r", budgets=headway.Budgets(tool_calls=4))
    s.call("search", {"q": "a"})
    store.down = True
    out = s.call("search", {"q": "b"})  # reads fail open: no exception out of call()
    assert out.status is headway.Status.EXECUTED and out.step == 1
    assert any(f.startswith("session_state_local") for f in s.audit_records()[-1]["flags"])
    keyed = s.call("pay", {"order": 1}, idempotency_key="k1")  # keyed writes fail closed
    assert keyed.status is headway.Status.ERROR and keyed.error is not None
    assert keyed.error["code"] == "store_unavailable"
    s.user_turn()  # no exception either
    s.record_turn(tokens=1)
    s.call("search", {"q": "c"})  # the budget still counts, in this process
    with pytest.raises(headway.BudgetExceeded):
        s.call("search", {"q": "d"})


def test_the_record_expires_session_ttl_after_the_last_call(tmp_path: Path) -> None:
    a = _gov(tmp_path, session_ttl_s=0.4)
    a.session("r").call("search", {"q": "x"})
    assert _record(a, "r")["steps"] == 1
    time.sleep(0.6)
    assert _record(a, "r") is None
    assert _gov(tmp_path).session("r").steps == 0  # a worker opening it starts afresh
    assert a.session("r").steps == 0  # so does the worker that knew it


def test_session_ttl_must_be_positive() -> None:
    with pytest.raises(headway.ConfigError, match="session_ttl_s"):
        headway.Governor(session_ttl_s=0)


def test_the_record_stays_bounded_however_long_the_run(tmp_path: Path) -> None:
    gov = headway.Governor(store=headway.SQLiteStore(str(tmp_path / "s.db")), audit=[])
    page = "\n".join(f"line {i} of a long page" for i in range(2000))  # ~50 KB each
    gov.register("read", lambda n: f"page {n}\n{page}\n{n}", effect="read")
    s = gov.session("r")
    sizes = []
    for n in range(120):
        s.call("read", {"n": n})
        if n in (59, 119):
            sizes.append(len(present(gov.store.get(gov.session_key("r")))))
    assert sizes[1] < 1.1 * sizes[0]  # a full window: no growth with the run
    # per step at most a shingling excerpt (4 KB), a text head (1.5 KB), content units
    assert sizes[1] < 32 * 10_000


def test_threads_of_one_process_sharing_a_session_lose_no_step(tmp_path: Path) -> None:
    gov = _gov(tmp_path)
    barrier = threading.Barrier(8)
    steps: list[int] = []

    def work(i: int) -> None:
        s = gov.session("r")
        barrier.wait()
        for j in range(10):
            steps.append(s.call("pay", {"order": f"{i}-{j}"}).step)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(steps) == list(range(80))
    assert _record(gov, "r")["meter"][2] == 80


def _monitor() -> Monitor:
    return Monitor(limit=6, window=8, normalizers=DEFAULT_NORMALIZERS)


def test_a_monitor_restored_from_its_snapshot_judges_every_step_alike() -> None:
    """Long results (compared by digest in the record) and short ones, repeats, cycles."""
    from headway._spec import make_spec

    rnd = random.Random(5)
    spec = make_spec("t", lambda **_: None, effect="read")
    base = "\n".join(f"row {i}: some content here" for i in range(300))
    texts = [base, base + "\nmore", "short", "No results.", base.replace("row 7", "row 8")]
    kept, moved = _monitor(), _monitor()
    for i in range(300):
        text = rnd.choice(texts)
        key = f"t:{rnd.randrange(4)}"
        verdicts = []
        for m in (kept, moved):
            obs = m.observation(i, "t", key, key, "read", headway.Status.EXECUTED, text)
            before = m.before(spec, key, "read")
            v = m.after(spec, obs, text, float(i), 6)
            verdicts.append((before, v.mark, v.signals, v.correction, v.stop))
        assert verdicts[0] == verdicts[1], i
        restored = _monitor()
        # the step moves to another worker, through the record's JSON
        restored.restore(orjson.loads(orjson.dumps(moved.snapshot())))
        moved = restored


def _flaky_gov(path: Path) -> headway.Governor:
    gov = headway.Governor(store=headway.SQLiteStore(str(path / "s.db")), sleep=lambda s: None)
    failed: set[int] = set()

    def fetch(n: int) -> str:
        if n not in failed:  # each new n fails once, then answers
            failed.add(n)
            raise ConnectionError("reset")
        return f"page {n}"

    gov.register("fetch", fetch, effect="read", retry=headway.Retry(attempts=5), breaker=False)
    return gov


def test_retries_on_two_workers_spend_one_retry_budget(tmp_path: Path) -> None:
    a, b = _flaky_gov(tmp_path), _flaky_gov(tmp_path)
    budgets = headway.Budgets(retries_per_tool=3)
    assert a.session("r", budgets=budgets).call("fetch", {"n": 1}).attempts == 2
    assert b.session("r", budgets=budgets).call("fetch", {"n": 2}).attempts == 2
    assert _record(a, "r")["meter"][6] == {"fetch": 2}
    assert a.session("r", budgets=budgets).call("fetch", {"n": 3}).attempts == 2  # the third
    with pytest.raises(headway.BudgetExceeded) as stop:
        b.session("r", budgets=budgets).call("fetch", {"n": 4})
    assert stop.value.diagnostic["budget_type"] == "retries_per_tool"


async def test_async_calls_share_the_session_like_sync_ones(tmp_path: Path) -> None:
    a, b = _gov(tmp_path), _gov(tmp_path)
    assert (await a.session("r").acall("price", {"sku": 1})).status is headway.Status.EXECUTED
    assert (await b.session("r").acall("price", {"sku": 1})).status is headway.Status.CACHED
    await b.session("r").acall("pay", {"order": 1})
    assert (await a.session("r").acall("price", {"sku": 1})).step == 3
    assert (await a.session("r").acall("price", {"sku": 1})).status is headway.Status.CACHED


def test_an_unreadable_record_starts_the_run_afresh_and_is_replaced(tmp_path: Path) -> None:
    gov = _gov(tmp_path)
    gov.store.set(gov.session_key("r"), {"steps": "many"})
    out = gov.session("r").call("search", {"q": "x"})
    assert out.status is headway.Status.EXECUTED and out.step == 0
    assert _record(gov, "r")["steps"] == 1


def test_a_worker_holding_a_handle_never_serves_a_read_from_before_anothers_write(
    tmp_path: Path,
) -> None:
    a, b = _gov(tmp_path), _gov(tmp_path)
    sa, sb = a.session("r"), b.session("r")  # b's copy of the record goes stale below
    assert sa.call("price", {"sku": 1}).status is headway.Status.EXECUTED
    assert sb.call("price", {"sku": 1}).status is headway.Status.CACHED
    sa.call("pay", {"order": 1})
    out = sb.call("price", {"sku": 1})  # looked up under b's old epochs first: redone
    assert out.status is headway.Status.EXECUTED and out.step == 3


class Counting:
    def __init__(self, inner: headway.Store) -> None:
        self.inner, self.blocking, self.ops = inner, inner.blocking, 0

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)

        def op(*args: Any) -> Any:
            self.ops += name != "close"
            return fn(*args)

        return op


def test_a_cached_read_on_an_unchanged_record_costs_one_or_two_round_trips(
    tmp_path: Path,
) -> None:
    store = Counting(headway.SQLiteStore(str(tmp_path / "s.db")))
    gov = headway.Governor(store=store)
    _tools(gov)
    s = gov.session("r")
    s.call("price", {"sku": 1})
    before = store.ops
    assert s.call("price", {"sku": 2}).status is headway.Status.EXECUTED
    # look up, take the step, claim the flight, cache the result and end the claim in one
    # trip, settle
    assert store.ops - before == 5
    before = store.ops
    assert s.call("price", {"sku": 1}).status is headway.Status.CACHED
    assert store.ops - before == 1  # held here: take and settle the step in one swap
    gov.held.clear()
    before = store.ops
    assert s.call("price", {"sku": 1}).status is headway.Status.CACHED
    assert store.ops - before == 2  # look up, then take and settle the step in one swap


def test_a_result_with_a_lone_surrogate_is_judged_and_shared_without_an_error(
    tmp_path: Path,
) -> None:
    a, b = _gov(tmp_path), _gov(tmp_path)
    for gov in (a, b):
        gov.register("odd", lambda: "half a pair: \ud800", effect="read")
    assert a.session("r").call("odd").status is headway.Status.EXECUTED
    assert b.session("r").call("odd").status is headway.Status.EXECUTED
    assert _record(a, "r")["steps"] == 2


def test_each_agents_stream_continues_on_another_worker(tmp_path: Path) -> None:
    a, b = _gov(tmp_path), _gov(tmp_path)
    a.session("r").call("search", {"q": "x"}, agent="scout")
    b.session("r").call("search", {"q": "x"}, agent="scout")
    a.session("r").call("search", {"q": "x"}, agent="writer")  # its own stream: new to it
    out = b.session("r").call("search", {"q": "x"}, agent="scout")  # the scout's third
    assert out.status is headway.Status.EXECUTED  # uncached: it runs, with the correction
    assert out.correction is not None and out.correction.startswith("[agent scout]")
    assert "returned the same result 3 times" in out.correction


def test_shadow_mode_records_the_stop_another_worker_would_have_made(tmp_path: Path) -> None:
    a, b = _gov(tmp_path, enforce=False), _gov(tmp_path, enforce=False)
    budgets = headway.Budgets(tool_calls=2)
    a.session("r", budgets=budgets).call("pay", {"order": 1})
    b.session("r", budgets=budgets).call("pay", {"order": 2})  # the second call of the run
    assert b.audit_records("r")[-1]["would"] == "stop"
    out = a.session("r", budgets=budgets).call("pay", {"order": 3})  # runs: shadow mode
    assert out.status is headway.Status.EXECUTED


def test_the_toml_config_turns_sharing_off_and_sets_the_ttl(tmp_path: Path) -> None:
    config = tmp_path / "headway.toml"
    config.write_text(
        f'[governor]\nstore = "sqlite:///{tmp_path}/s.db"\n'
        "share_sessions = false\nsession_ttl_s = 60\n"
    )
    gov = headway.Governor.from_config(config)
    _tools(gov)
    gov.session("r").call("search", {"q": "x"})
    assert _record(gov, "r") is None and gov.session_ttl_s == 60


class Swaps:
    """A store that counts the swaps that found the record changed."""

    def __init__(self, inner: headway.Store) -> None:
        self.inner, self.blocking, self.failed, self.gets = inner, inner.blocking, 0, 0

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)

        def op(*args: Any) -> Any:
            result = fn(*args)
            self.failed += name == "swap" and not result
            # a cache lookup: alone, or with the write epochs in one batch
            self.gets += name == "get" or (
                name == "batch" and any(o.name == "get" and ":cache:" in o.key for o in args[0])
            )
            return result

        return op


def _threads(work: Any, n: int = 8) -> None:
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        barrier.wait()
        work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_threads_sharing_a_session_never_redo_each_others_swaps(tmp_path: Path) -> None:
    """The threads of one worker write the record one at a time: no swap is built on
    another still in flight, and no read of the record rolls a newer state back."""
    store = Swaps(headway.SQLiteStore(str(tmp_path / "s.db")))
    gov = headway.Governor(store=store)
    _tools(gov)
    s = gov.session("r")
    steps: list[int] = []
    _threads(lambda i: steps.extend(s.call("pay", {"order": f"{i}-{j}"}).step for j in range(15)))
    assert sorted(steps) == list(range(120))
    assert store.failed == 0
    assert _record(gov, "r")["meter"][2] == 120


def test_cached_reads_in_threads_are_not_looked_up_again_for_each_others_steps(
    tmp_path: Path,
) -> None:
    """Another thread's step moves the record but not the cache epochs: a read served
    from the cache settles in its one swap, without a second lookup."""
    store = Swaps(headway.SQLiteStore(str(tmp_path / "s.db")))
    gov = headway.Governor(store=store, no_progress_limit=10**6)
    _tools(gov)
    s = gov.session("r")
    for sku in range(40):  # a cycle longer than the window: served, never corrected
        s.call("price", {"sku": sku})
    gov.held.clear()  # looked up in the store, not served from the entries this worker holds
    gets = store.gets
    statuses: list[headway.Status] = []
    _threads(lambda i: statuses.extend(s.call("price", {"sku": j}).status for j in range(i, 40, 8)))
    assert statuses == [headway.Status.CACHED] * 40
    assert store.gets - gets == 40  # one lookup each
    assert store.failed == 0


def test_a_turn_given_up_passes_to_the_next_waiter() -> None:
    """A waiter that leaves (a cancelled task) never keeps the record's turn from the
    others, whether it left before or after the turn reached it."""
    turns = Turns()
    assert turns.enter() is None  # the holder
    first, second, third = turns.enter(), turns.enter(), turns.enter()
    assert first is not None and second is not None and third is not None
    turns.give_up(first)  # before its turn
    turns.leave()
    assert not first.done() or first.cancelled()
    assert second.done() and not second.cancelled()
    turns.give_up(second)  # after the turn reached it: passed on
    assert third.done() and not third.cancelled()
    turns.leave()
    assert turns.enter() is None  # free again


def test_turns_taken_one_after_another_make_no_queue() -> None:
    """Every session has its record-write turns; only a session whose writers wait for
    each other needs the queue (an empty deque is ~760 bytes)."""
    import sys

    turns = Turns()
    for _ in range(3):
        assert turns.enter() is None
        turns.leave()
    assert sys.getsizeof(turns) + sys.getsizeof(turns._queue) < 200
