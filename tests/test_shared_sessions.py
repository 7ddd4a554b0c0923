"""A session spans workers: its state lives in the shared store (SQLite, Redis, PostgreSQL).

Every test runs real worker processes, each with its own Governor on the same store URL,
and hands the steps of one run to them as a deployment would.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import headway
from conftest import POSTGRES_URL, REDIS_URL, make_store, purge_prefix
from session_workers import Bank, serve

SHARED = [
    "sqlite",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("postgres", marks=pytest.mark.postgres),
]
SCHEDULES = int(os.environ.get("HEADWAY_SCHEDULES", "200"))


class Workers:
    """N worker processes on one store; ``call(i, ...)`` runs a step on worker i."""

    def __init__(self, kind: str, tmp_path: Path, n: int) -> None:
        make_store(kind, tmp_path).close()  # skips (or fails in CI) when the server is missing
        self.prefix = f"t{uuid.uuid4().hex[:8]}:"
        if kind == "sqlite":
            self.url, self.options = f"sqlite:///{tmp_path}/shared.db", {}
        else:
            self.url = REDIS_URL if kind == "redis" else POSTGRES_URL
            self.options = {"prefix": self.prefix}
        self.namespace = "ns" + uuid.uuid4().hex[:6]
        self.bank_path = str(tmp_path / "bank.db")
        self.bank = Bank(self.bank_path)
        ctx = multiprocessing.get_context("spawn")
        self.inboxes = [ctx.Queue() for _ in range(n)]
        self.outboxes = [ctx.Queue() for _ in range(n)]
        self.procs = [
            ctx.Process(
                target=serve,
                args=(self.url, self.options, self.namespace, self.bank_path, i, o),
                daemon=True,
            )
            for i, o in zip(self.inboxes, self.outboxes, strict=True)
        ]
        for p in self.procs:
            p.start()

    def send(self, i: int, kind: str, run_id: str, budgets: dict[str, Any], payload: Any) -> None:
        self.inboxes[i].put((kind, run_id, budgets, payload))

    def result(self, i: int) -> Any:
        return self.outboxes[i].get(timeout=120)

    def call(
        self,
        i: int,
        run_id: str,
        tool: str,
        args: dict[str, Any] | None = None,
        *,
        budgets: dict[str, Any] | None = None,
        key: str | None = None,
    ) -> list[Any]:
        self.send(i, "call", run_id, budgets or {}, (tool, args or {}, key))
        result: list[Any] = self.result(i)
        return result

    def record(self, run_id: str) -> dict[str, Any]:
        """The session's record as the store holds it."""
        gov = headway.Governor(store=headway.open_store(self.url, **self.options))
        try:
            rec = gov.store.get(f"{self.namespace}:sess:{{{run_id}}}")
        finally:
            gov.close()
        assert isinstance(rec, str)  # one JSON text
        parsed: dict[str, Any] = orjson.loads(rec)
        return parsed

    def close(self) -> None:
        for q in self.inboxes:
            q.put(None)
        for p in self.procs:
            p.join(30)
        if self.options:
            purge_prefix(self.url, self.prefix)


@pytest.fixture
def workers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made: list[Workers] = []

    def start(kind: str, n: int) -> Workers:
        w = Workers(kind, tmp_path, n)
        made.append(w)
        return w

    yield start
    for w in made:
        w.close()


def _loop_script() -> list[tuple[str, dict[str, Any]]]:
    """An agent going round: the same listing under three page numbers, then searches."""
    script: list[tuple[str, dict[str, Any]]] = [("page", {"n": i % 3}) for i in range(9)]
    script += [("search", {"q": "late orders"})] * 8
    return script


def _run(w: Workers, run_id: str, pick: Any) -> list[Any]:
    """The loop script, each step on worker ``pick(step)``, until the session stops."""
    seen = []
    for step, (tool, args) in enumerate(_loop_script()):
        r = w.call(pick(step), run_id, tool, args)
        seen.append(r[:3] if r[0] != "stop" else r)
        if r[0] == "stop":
            break
    return seen


@pytest.mark.parametrize("kind", SHARED)
def test_a_loop_alternating_between_workers_is_corrected_and_stopped_as_on_one(
    kind: str, workers: Any
) -> None:
    w = workers(kind, 3)
    alone = _run(w, "alone", lambda step: 0)
    spread = _run(w, "spread", lambda step: step % 3)
    assert spread == alone
    assert alone[-1][:2] == ["stop", "loop"]  # the script does loop: it is stopped
    assert any(r[2] for r in alone[:-1])  # and was corrected before the stop
    rnd = random.Random(7)
    assert _run(w, "random", lambda step: rnd.randrange(3)) == alone


@pytest.mark.parametrize("kind", SHARED)
def test_a_budget_of_ten_calls_split_across_three_workers_stops_at_exactly_ten(
    kind: str, workers: Any
) -> None:
    w = workers(kind, 3)
    for i in range(3):  # all three at once, each calling until the session stops
        w.send(i, "until_stop", "budget", {"tool_calls": 10}, "tick")
    runs = [w.result(i) for i in range(3)]
    done = [r for run in runs for r in run if r[0] != "stop"]
    assert len(done) == 10 and w.bank.get("ticks") == 10
    assert sorted(r[1] for r in done) == list(range(10))  # each step taken once
    stops = [run[-1] for run in runs]
    assert all(s[:2] == ["stop", "budget"] for s in stops)
    assert all(s[2]["consumed"] == 10 and s[2]["limit"] == 10 for s in stops)


@pytest.mark.parametrize("kind", SHARED)
def test_a_stop_on_one_worker_is_raised_by_every_other_on_its_next_call(
    kind: str, workers: Any
) -> None:
    w = workers(kind, 3)
    w.call(1, "r", "search", {"q": "x"})  # worker 1 and 2 know the session before the stop
    w.call(2, "r", "search", {"q": "y"})
    w.send(0, "until_stop", "r", {}, "search")  # worker 0 loops until it is stopped
    stop = w.result(0)[-1]
    assert stop[:2] == ["stop", "loop"]
    assert w.call(1, "r", "lookup", {"k": "new"}) == stop
    assert w.call(2, "r", "balance") == stop


@pytest.mark.parametrize("kind", SHARED)
def test_a_read_on_one_worker_after_a_write_on_another_is_never_served_from_before_it(
    kind: str, workers: Any
) -> None:
    w = workers(kind, 2)
    rnd = random.Random(3)
    balance = 90
    assert w.call(0, "r", "balance")[3] == {"balance": 90}
    assert w.call(1, "r", "balance")[0] == "cached"  # the cache is shared: one run, one cache
    for _ in range(12):
        if rnd.random() < 0.5:
            balance -= 5
            assert w.call(rnd.randrange(2), "r", "pay", {"amount": 5})[0] == "executed"
        r = w.call(rnd.randrange(2), "r", "balance")
        if r[0] == "corrected":  # a third identical read of an unchanged balance
            assert f'"balance":{balance}' in r[2], r
        else:
            assert r[3] == {"balance": balance}, r


@pytest.mark.parametrize("kind", SHARED)
def test_eight_concurrent_calls_on_four_workers_lose_no_update(kind: str, workers: Any) -> None:
    w = workers(kind, 4)
    rnd = random.Random(int(os.environ.get("HEADWAY_SEED", "16")))
    tools: list[Any] = [
        ("tick", {}, None),
        ("lookup", {"k": "a"}, None),
        ("search", {"q": "x"}, None),
        ("nope", {}, None),  # no such tool: an error that still takes a step
    ]
    ticks = w.bank.get("ticks")
    for n in range(SCHEDULES):
        run_id = f"s{n}"
        calls = [rnd.choice(tools) for _ in range(8)]
        calls = [
            (t, a, f"k{n}-{i}" if t == "tick" and rnd.random() < 0.5 else k)
            for i, (t, a, k) in enumerate(calls)
        ]
        for i in range(4):
            w.send(i, "batch", run_id, {}, (calls[2 * i : 2 * i + 2], rnd.randrange(1 << 30)))
        results = [r for i in range(4) for r in w.result(i)]
        assert sorted(r[1] for r in results) == list(range(8)), (n, results)
        rec = w.record(run_id)
        assert rec["steps"] == 8 and rec["meter"][2] == 8, (n, rec["meter"])
        per_tool: dict[str, int] = {}
        for t, _, _ in calls:
            per_tool[t] = per_tool.get(t, 0) + 1
        assert rec["meter"][5] == per_tool, n
        ticks += per_tool.get("tick", 0)
        assert w.bank.get("ticks") == ticks, n
