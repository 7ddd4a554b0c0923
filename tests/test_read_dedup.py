"""Read dedup by quadrant (semantics §1): exact, TTL, version, scope, invalidation."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import headway
from headway.testing import FakeClock, ScriptedTool


def counting(result: Any = "r") -> tuple[ScriptedTool, dict[str, int]]:
    tool = ScriptedTool([lambda **kw: {"echo": kw, "result": result}])
    return tool, {}


def test_exact_read_called_three_times_runs_once(gov: headway.Governor) -> None:
    tool = ScriptedTool([{"name": "Apple"}])
    gov.register("overview", tool, effect="read", deterministic=True)
    with gov.session("r1") as s:
        outs = [s.call("overview", {"ticker": "AAPL"}) for _ in range(3)]
    assert tool.count == 1
    assert outs[0].status is headway.Status.EXECUTED and outs[0].executed
    assert outs[1].status is headway.Status.CACHED and not outs[1].executed
    assert outs[1].value == {"name": "Apple"}
    # the 3rd identical call of an unchanged result is a read repeat: corrected, not served
    assert outs[2].status is headway.Status.CORRECTED and outs[2].value is None


def test_identical_reads_of_one_model_turn_are_one_batch_not_repeats(
    gov: headway.Governor,
) -> None:
    """§1: a model's parallel batch is not counted as repeats. A framework runs a batch's
    calls one after the other as often as together (LangGraph's tool threads start in
    turn), so an identical read served in the same model turn as the one that ran is a
    follower, whether or not it overlapped it: never corrected, not counted. The next
    turn's identical read is a repeat again (2nd: served, 3rd: corrected)."""
    tool = ScriptedTool([{"name": "Apple"}])
    gov.register("overview", tool, effect="read", deterministic=True)
    with gov.session("batch") as s:
        s.record_turn()
        first = [s.call("overview", {"ticker": "AAPL"}) for _ in range(4)]
        s.record_turn()
        second = s.call("overview", {"ticker": "AAPL"})
        s.record_turn()
        third = s.call("overview", {"ticker": "AAPL"})
    assert tool.count == 1
    assert [o.status for o in first] == [headway.Status.EXECUTED] + [headway.Status.CACHED] * 3
    assert all(o.correction is None for o in first)
    assert second.status is headway.Status.CACHED and second.correction is None
    assert third.status is headway.Status.CORRECTED
    assert [r["coalesced"] for r in s.audit_records()] == [False, True, True, True, False, False]


def test_without_model_turns_a_session_judges_each_identical_read_as_a_repeat(
    gov: headway.Governor,
) -> None:
    """A session never told of model turns has no batches: the 3rd identical read in a
    row is corrected (the batch rule needs record_turn)."""
    tool = ScriptedTool([{"name": "Apple"}])
    gov.register("overview", tool, effect="read", deterministic=True)
    with gov.session("no-turns") as s:
        outs = [s.call("overview", {"ticker": "AAPL"}) for _ in range(3)]
    assert [o.status for o in outs][2] is headway.Status.CORRECTED


def test_non_consecutive_repeats_are_served_from_cache(gov: headway.Governor) -> None:
    tool = ScriptedTool([{"name": "Apple"}])
    gov.register("overview", tool, effect="read", deterministic=True)
    gov.register("other", ScriptedTool([lambda i: f"page {i}"]), effect="read")
    with gov.session("r1") as s:
        for i in range(5):
            assert s.call("overview", {"ticker": "AAPL"}).status is (
                headway.Status.EXECUTED if i == 0 else headway.Status.CACHED
            )
            s.call("other", {"i": i})
    assert tool.count == 1


def test_same_call_in_another_session_runs_again(gov: headway.Governor) -> None:
    tool = ScriptedTool(["v"])
    gov.register("overview", tool, effect="read", deterministic=True)
    gov.session("a").call("overview", {"t": 1})
    out = gov.session("b").call("overview", {"t": 1})
    assert out.status is headway.Status.EXECUTED
    assert tool.count == 2


def test_global_scope_is_shared_across_sessions(gov: headway.Governor) -> None:
    tool = ScriptedTool(["v"])
    gov.register("ref", tool, effect="read", deterministic=True, scope="global")
    gov.session("a").call("ref", {"t": 1})
    assert gov.session("b").call("ref", {"t": 1}).status is headway.Status.CACHED
    assert tool.count == 1


def test_ttl_read_reruns_after_its_ttl(gov: headway.Governor, clock: FakeClock) -> None:
    prices = iter([100.0, 101.5, 99.0])
    tool = ScriptedTool([lambda **_: next(prices)])
    gov.register("price", tool, effect="read", ttl=5.0)
    s = gov.session("r")
    assert s.call("price", {"t": "AAPL"}).value == 100.0
    clock.advance(4.9)
    assert s.call("price", {"t": "AAPL"}).status is headway.Status.CACHED
    clock.advance(0.2)
    out = s.call("price", {"t": "AAPL"})
    assert out.status is headway.Status.EXECUTED and out.value == 101.5
    assert tool.count == 2


def test_bumping_version_reruns(clock: FakeClock) -> None:
    tool = ScriptedTool(["v1"])
    gov = headway.Governor(clock=clock)
    gov.register("doc", tool, effect="read", deterministic=True, version="1")
    gov.session("r").call("doc", {"id": 1})
    gov.register("doc", tool, effect="read", deterministic=True, version="2", replace=True)
    assert gov.session("r").call("doc", {"id": 1}).status is headway.Status.EXECUTED
    assert tool.count == 2
    # the same session object: its remembered key prefix must follow the new spec
    s = gov.session("same")
    s.call("doc", {"id": 1})
    assert s.call("doc", {"id": 1}).status is headway.Status.CACHED
    gov.register("doc", tool, effect="read", deterministic=True, version="3", replace=True)
    s.user_turn()  # (a third identical read would otherwise be corrected, §4.2)
    assert s.call("doc", {"id": 1}).status is headway.Status.EXECUTED
    assert tool.count == 4


def test_unannotated_tool_is_a_non_idempotent_write(gov: headway.Governor) -> None:
    spec = gov.register("mystery", ScriptedTool(["ok"]))
    assert spec.effect == "write" and not spec.idempotent
    assert spec.effect_for({}) == "write"


def test_write_with_identical_arguments_runs_twice(gov: headway.Governor) -> None:
    tool: ScriptedTool = ScriptedTool([lambda **kw: {"order": len(tool.calls)}])
    gov.register("create_order", tool, effect="write")
    s = gov.session("r")
    a = s.call("create_order", {"sku": "X", "qty": 1})
    b = s.call("create_order", {"sku": "X", "qty": 1})
    assert (a.status, b.status) == (headway.Status.EXECUTED, headway.Status.EXECUTED)
    assert tool.count == 2 and a.value != b.value


def test_write_invalidates_the_sessions_read_cache(gov: headway.Governor) -> None:
    reads = ScriptedTool([lambda **_: {"items": len(writes.calls)}])
    writes: ScriptedTool = ScriptedTool(["ok"])
    gov.register("list_cart", reads, effect="read", deterministic=True)
    gov.register("add_to_cart", writes, effect="write")
    s = gov.session("r")
    assert s.call("list_cart", {}).value == {"items": 0}
    s.call("add_to_cart", {"sku": "A"})
    out = s.call("list_cart", {})
    assert out.status is headway.Status.EXECUTED and out.value == {"items": 1}
    other = gov.session("other")
    other.call("list_cart", {})
    assert reads.count == 3


def test_invalidates_narrows_what_a_write_invalidates(gov: headway.Governor) -> None:
    a, b = ScriptedTool(["a"]), ScriptedTool(["b"])
    gov.register("read_a", a, effect="read", deterministic=True)
    gov.register("read_b", b, effect="read", deterministic=True)
    gov.register("write_a", ScriptedTool(["ok"]), effect="write", invalidates=["read_a"])
    s = gov.session("r")
    s.call("read_a", {}), s.call("read_b", {})
    s.call("write_a", {})
    assert s.call("read_a", {}).status is headway.Status.EXECUTED
    assert s.call("read_b", {}).status is headway.Status.CACHED


def test_errors_are_never_cached(gov: headway.Governor) -> None:
    tool = ScriptedTool([ValueError("boom"), {"ok": True}])
    gov.register("flaky", tool, effect="read", deterministic=True)
    s = gov.session("r")
    assert s.call("flaky", {}).status is headway.Status.ERROR
    assert s.call("flaky", {}).status is headway.Status.EXECUTED
    assert s.call("flaky", {}).status is headway.Status.CACHED


def test_results_over_the_size_limit_are_not_cached(clock: FakeClock) -> None:
    gov = headway.Governor(clock=clock, max_cached_bytes=100)
    tool = ScriptedTool(["x" * 500])
    gov.register("big", tool, effect="read", deterministic=True)
    s = gov.session("r")
    s.call("big", {})
    assert s.call("big", {}).status is headway.Status.EXECUTED
    assert "too_large_to_cache" in gov.audit_records("r")[0]["flags"]


def test_served_results_are_copies(gov: headway.Governor) -> None:
    gov.register("cfg", ScriptedTool([{"a": [1]}]), effect="read", deterministic=True)
    s = gov.session("r")
    s.call("cfg", {})
    first = s.call("cfg", {}).value
    first["a"].append(2)
    gov.register("noop", ScriptedTool(["n"]), effect="read")
    s.call("noop", {})
    assert s.call("cfg", {}).value == {"a": [1]}


def _slow_read(calls: list[int]) -> Any:
    def fn(q: str) -> dict[str, str]:
        calls.append(1)
        time.sleep(0.2)
        return {"q": q}

    return fn


def test_single_flight_across_20_threads() -> None:
    calls: list[int] = []
    gov = headway.Governor()
    gov.register("search", _slow_read(calls), effect="read", deterministic=True)
    barrier = threading.Barrier(20)
    outs: list[headway.Outcome] = []

    def worker(i: int) -> None:
        s = gov.session(f"s{i % 1}")
        barrier.wait()
        outs.append(s.call("search", {"q": "x"}))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(outs) == 20 and all(o.value == {"q": "x"} for o in outs)
    assert sum(o.executed for o in outs) == 1


async def test_single_flight_across_20_tasks() -> None:
    calls: list[int] = []
    gov = headway.Governor()

    async def search(q: str) -> dict[str, str]:
        calls.append(1)
        await asyncio.sleep(0.1)
        return {"q": q}

    gov.register("search", search, effect="read", deterministic=True)
    s = gov.session("r")
    outs = await asyncio.gather(*(s.acall("search", {"q": "x"}) for _ in range(20)))
    assert len(calls) == 1
    assert all(o.value == {"q": "x"} for o in outs)
    records = gov.audit_records("r")
    assert sum(r["decision"] == "coalesce" for r in records) == 19
    # followers in one session are not further steps for the detectors
    assert all(o.status is not headway.Status.CORRECTED for o in outs)


async def test_sync_tool_through_acall_runs_in_a_thread(gov: headway.Governor) -> None:
    seen: list[str] = []

    def who() -> str:
        seen.append(threading.current_thread().name)
        return "ok"

    gov.register("who", who, effect="read")
    out = await gov.session("r").acall("who", {})
    assert out.value == "ok" and seen and seen[0] != threading.main_thread().name


def test_async_tool_through_call_works(gov: headway.Governor) -> None:
    async def hello(name: str) -> str:
        await asyncio.sleep(0)
        return f"hi {name}"

    gov.register("hello", hello, effect="read")
    assert gov.session("r").call("hello", {"name": "a"}).value == "hi a"


def test_mcp_annotations_map_to_specs(gov: headway.Governor) -> None:
    """readOnlyHint makes an uncached read whatever openWorldHint says (a closed world
    changes under other writers); only the operator's options make a cache."""
    fn = ScriptedTool(["x"])
    a = gov.register("a", fn, annotations={"readOnlyHint": True, "openWorldHint": False})
    assert a.effect == "read" and not a.deterministic and a.ttl is None and not a.cacheable()
    closed = {"read_only_hint": True, "open_world_hint": False}
    assert not gov.register("a2", fn, annotations=closed).cacheable()
    declared = gov.register("a3", fn, annotations=closed, deterministic=True)
    assert declared.effect == "read" and declared.deterministic
    b = gov.register("b", fn, annotations={"read_only_hint": True})
    assert b.effect == "read" and not b.cacheable()
    c = gov.register("c", fn, annotations={"readOnlyHint": False, "idempotentHint": True})
    assert c.effect == "write" and c.idempotent
    d = gov.register("d", fn, annotations={"readOnlyHint": True}, ttl=10)
    assert d.cacheable()
    e = gov.register(
        "e", fn, annotations={"readOnlyHint": True, "openWorldHint": False}, effect="write"
    )
    assert e.effect == "write"  # the operator wins over the server's hints


def test_effect_function_routes_each_call(gov: headway.Governor) -> None:
    shell = ScriptedTool([lambda cmd: f"ran {cmd}"])
    gov.register(
        "sh",
        shell,
        effect=lambda a: "read" if a["cmd"].startswith("cat") else "write",
        deterministic=True,
    )
    s = gov.session("r")
    s.call("sh", {"cmd": "cat f"})
    assert s.call("sh", {"cmd": "cat f"}).status is headway.Status.CACHED
    s.call("sh", {"cmd": "rm f"})
    assert s.call("sh", {"cmd": "cat f"}).status is headway.Status.EXECUTED


@pytest.mark.parametrize("bad", [{"effect": "delete"}, {"ttl": -1}, {"scope": "team"}, {"nope": 1}])
def test_invalid_specs_are_config_errors(gov: headway.Governor, bad: dict[str, Any]) -> None:
    with pytest.raises(headway.ConfigError):
        gov.register("t", ScriptedTool(["x"]), **bad)


def test_followers_of_a_non_json_result_get_the_object() -> None:
    gov = headway.Governor()
    marker = object()

    def slow() -> object:
        time.sleep(0.2)
        return marker

    gov.register("obj", slow, effect="read", deterministic=True)
    outs: list[headway.Outcome] = []
    threads = [
        threading.Thread(target=lambda: outs.append(gov.session("s").call("obj", {})))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(o.value is marker for o in outs)


def test_the_default_timer_follows_a_patched_monotonic_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TTLs in this process are measured with time.monotonic (looked up on each call, so a
    patched one, as freezegun does, is honoured); the wall clock does not move them."""
    now = [1_000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    gov = headway.Governor()
    tool = ScriptedTool([lambda t: f"{t} at {now[0]}"])
    gov.register("price", tool, effect="read", ttl=10)
    s = gov.session("r")
    s.call("price", {"t": "A"})
    now[0] += 11
    assert s.call("price", {"t": "A"}).status is headway.Status.EXECUTED


def _racer(url: str, options: dict[str, Any], ledger: str, barrier: Any, out: Any) -> None:
    import sqlite3

    gov = headway.Governor(store=headway.open_store(url, **options))

    def lookup(q: str) -> dict[str, Any]:
        with sqlite3.connect(ledger, timeout=30) as db:
            db.execute("INSERT INTO runs (q) VALUES (?)", (q,))
        time.sleep(0.5)
        return {"q": q, "answer": 42}

    gov.register("lookup", lookup, effect="read", deterministic=True, scope="global")
    barrier.wait()
    out.put(gov.session(f"s-{time.time()}").call("lookup", {"q": "x"}).status.value)


@pytest.mark.parametrize(
    "kind",
    [
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ],
)
def test_single_flight_across_processes_through_the_store(kind: str, tmp_path: Any) -> None:
    import multiprocessing
    import sqlite3
    import uuid

    from conftest import POSTGRES_URL, REDIS_URL, make_store

    make_store(kind, tmp_path).close()
    url = {
        "sqlite": f"sqlite:///{tmp_path}/shared.db",
        "redis": REDIS_URL,
        "postgres": POSTGRES_URL,
    }[kind]
    options = {} if kind == "sqlite" else {"prefix": f"t{uuid.uuid4().hex[:8]}:"}
    ledger = str(tmp_path / "runs.db")
    with sqlite3.connect(ledger) as db:
        db.execute("CREATE TABLE runs (q TEXT)")
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(3), ctx.Queue()
    procs = [
        ctx.Process(target=_racer, args=(url, options, ledger, barrier, out)) for _ in range(3)
    ]
    for p in procs:
        p.start()
    statuses = sorted(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
    with sqlite3.connect(ledger) as db:
        runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    assert runs == 1 and statuses == ["cached", "cached", "executed"]


def test_a_flight_ends_only_its_own_claim(tmp_path: Any) -> None:
    """A process whose claim of a read's flight outlived its time may find another
    process's claim in its place when it finishes: it ends its own claim only, so the
    other process's flight goes on; its entry is stored and its own claim, when still
    there, is gone."""
    db = tmp_path / "shared.db"
    gov = headway.Governor(store=headway.SQLiteStore(str(db)))
    other = {"at": 0, "by": "another process"}

    def slow_lookup(q: str) -> str:
        # meanwhile our claim expired and another process claimed the flight
        flights = [k for k in _keys(db) if k.endswith(":flight")]
        assert len(flights) == 1
        gov.store.set(flights[0], other)
        return f"found {q}"

    gov.register("lookup", slow_lookup, effect="read", deterministic=True)
    gov.register("mine", lambda q: f"mine {q}", effect="read", deterministic=True)
    with gov.session("r") as s:
        assert s.call("lookup", {"q": "x"}).status is headway.Status.EXECUTED
        assert s.call("mine", {"q": "y"}).status is headway.Status.EXECUTED
    flights = {k: gov.store.get(k) for k in _keys(db) if k.endswith(":flight")}
    assert list(flights.values()) == [other]  # ours ended; the other process's stays
    (flight,) = flights
    entry = gov.store.get(flight.removesuffix(":flight"))
    assert entry is not None and entry["v"] == "found x"
    gov.close()


def _keys(db: Any) -> list[str]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT key FROM headway_kv")]


def test_resources_narrow_what_a_write_invalidates(gov: headway.Governor) -> None:
    reads = ScriptedTool([lambda path: f"contents of {path} v{len(writes.calls)}"])
    writes: ScriptedTool = ScriptedTool(["ok"])
    listing = ScriptedTool([lambda: f"files v{len(writes.calls)}"])
    gov.register("read_file", reads, effect="read", deterministic=True, resources=["path"])
    gov.register("list_files", listing, effect="read", deterministic=True)  # declares none
    gov.register("write_file", writes, effect="write", resources=lambda a: [a["path"]])
    gov.register("run", ScriptedTool(["ran"]), effect="write")  # names none: invalidates all
    s = gov.session("r")
    (
        s.call("read_file", {"path": "a.py"}),
        s.call("read_file", {"path": "b.py"}),
        s.call("list_files", {}),
    )
    s.call("write_file", {"path": "a.py", "text": "x"})
    assert s.call("read_file", {"path": "a.py"}).status is headway.Status.EXECUTED
    assert s.call("read_file", {"path": "b.py"}).status is headway.Status.CACHED
    assert s.call("list_files", {}).status is headway.Status.EXECUTED  # no resources: always stale
    s.call("run", {"cmd": "make"})
    assert s.call("read_file", {"path": "b.py"}).status is headway.Status.EXECUTED


def test_a_failing_resources_function_means_everything(gov: headway.Governor) -> None:
    def broken(args: Any) -> list[str]:
        raise KeyError("path")

    gov.register(
        "read_file",
        ScriptedTool([lambda path: f"c {path}"]),
        effect="read",
        deterministic=True,
        resources=["path"],
    )
    gov.register("write_file", ScriptedTool(["ok"]), effect="write", resources=broken)
    s = gov.session("r")
    s.call("read_file", {"path": "b.py"})
    s.call("write_file", {"path": "a.py"})
    assert s.call("read_file", {"path": "b.py"}).status is headway.Status.EXECUTED


def test_shell_tool_with_derived_resources(gov: headway.Governor) -> None:
    from headway.shell import shell_effect, shell_resources

    files = {"a.py": "1", "b.py": "2"}

    def sh(command: str) -> str:
        if command.startswith("cat "):
            return files[command.split()[1]]
        target = command.rsplit(">", maxsplit=1)[-1].strip()
        files[target] = "new"
        return ""

    gov.register("sh", sh, effect=shell_effect, deterministic=True, resources=shell_resources)
    s = gov.session("r")
    s.call("sh", {"command": "cat a.py"}), s.call("sh", {"command": "cat b.py"})
    s.call("sh", {"command": "echo x > a.py"})
    fresh = s.call("sh", {"command": "cat a.py"})
    assert fresh.status is headway.Status.EXECUTED and fresh.value == "new"
    assert s.call("sh", {"command": "cat b.py"}).status is headway.Status.CACHED


class AsyncCallable:
    """A tool object whose __call__ is async (as some frameworks' tool classes are)."""

    async def __call__(self, q: str) -> str:
        await asyncio.sleep(0)
        return f"answer {q}"


@pytest.mark.parametrize("timeout", [None, 5.0])
async def test_objects_with_an_async_call_are_awaited(timeout: float | None) -> None:
    gov = headway.Governor()
    gov.register("ask", AsyncCallable(), effect="read", timeout=timeout)
    assert (await gov.session("a").acall("ask", {"q": "x"})).value == "answer x"
    assert gov.session("b").call("ask", {"q": "y"}).value == "answer y"
