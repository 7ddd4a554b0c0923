"""Progress-based loop control (semantics §3, §4): the scenarios of issue 3."""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import headway
from headway import Status
from headway.testing import FakeClock, ScriptedTool

LOOP_KEYS = {
    "terminated_by",
    "signal",
    "limit",
    "consumed",
    "last_progress_step",
    "last_k_steps",
    "suggestion",
}
ORDERS = {"customer_id": "c1", "orders": [], "message": "No orders were found for this customer."}


def run(s: headway.Session, calls: list[tuple[str, dict[str, Any]]]) -> list[headway.Outcome]:
    return [s.call(tool, args) for tool, args in calls]


def test_stuck_read_is_corrected_from_the_third_call_then_stopped(gov: headway.Governor) -> None:
    """An uncached read: headway holds no current result, so every call runs; from the
    3rd unchanged result on the result comes with the correction, then the run stops."""
    tool = ScriptedTool([ORDERS])
    gov.register("search_orders", tool, effect="read")
    s = gov.session("r")
    outs = run(s, [("search_orders", {"customer_id": "c1"})] * 7)
    assert [o.correction for o in outs[:2]] == [None, None]
    assert all(o.status is Status.EXECUTED and o.value == ORDERS for o in outs)
    assert all(o.correction is not None for o in outs[2:])
    text = outs[2].to_model()
    assert "search_orders returned the same result 3 times" in text
    assert '"customer_id":"c1"' in text and "No orders were found" in text  # the result
    assert "did not change" not in text
    assert tool.count == 7
    with pytest.raises(headway.LoopDetected) as info:
        s.call("search_orders", {"customer_id": "c1"})
    d = info.value.diagnostic
    assert set(d) == LOOP_KEYS and d["terminated_by"] == "no_progress"
    assert (d["limit"], d["consumed"], d["last_progress_step"]) == (6, 6, 0)
    assert len(d["last_k_steps"]) == 6 and d["last_k_steps"][-1]["mark"] == "no_progress"
    assert set(d["last_k_steps"][0]) == {"step", "tool", "args_digest", "mark"}
    with pytest.raises(headway.LoopDetected):
        s.call("something_else", {})


def test_near_duplicate_pages_are_corrected_then_stopped(gov: headway.Governor) -> None:
    clock = itertools.count()
    page = (
        "Calendar - November 2026\nMon Tue Wed Thu Fri Sat Sun\n 1  2  3  4  5  6  7\n"
        " 8  9 10 11 12 13 14\nNo events this month. [Previous month] [Next month]\n"
    )
    click = ScriptedTool([lambda target: page + f"Page rendered at 10:{next(clock) % 60:02d}:17\n"])
    gov.register("click", click, effect="read")  # a view change: an uncached read
    s = gov.session("r")
    outs = run(s, [("click", {"target": "Next month"})] * 7)
    assert outs[0].value != outs[1].value  # never byte-identical
    assert all(o.status is Status.EXECUTED for o in outs)  # no current result held: runs
    assert all("apart from volatile parts" in (o.correction or "") for o in outs[2:6])
    with pytest.raises(headway.LoopDetected):
        s.call("click", {"target": "Next month"})


def test_near_duplicates_without_a_normaliser(clock: FakeClock) -> None:
    gov = headway.Governor(clock=clock, normalizers=())
    body = "Search results for 'flights to Lisbon': no flights found on the selected date. " * 3
    n = itertools.count()
    gov.register("search", ScriptedTool([lambda q: body + f"(request {next(n)})"]), effect="read")
    s = gov.session("r")
    outs = run(s, [("search", {"q": "LIS"})] * 4)
    # alike, not the same: no progress, but never said to be "the same result"
    assert [r["mark"] for r in gov.audit_records("r")][1:] == ["no_progress"] * 3
    assert outs[2].correction is None and "returned the same" not in (outs[3].correction or "")
    assert "almost the same result" in (outs[3].correction or "")


def _poll_tool(running: int) -> ScriptedTool:
    return ScriptedTool(
        [{"op": "1", "status": "RUNNING"}] * running + [{"op": "1", "status": "DONE"}]
    )


def test_polling_keeps_going_until_done(gov: headway.Governor) -> None:
    tool = _poll_tool(25)
    gov.register("get_operation_status", tool, effect="read", poll=True)
    s = gov.session("r")
    outs = run(s, [("get_operation_status", {"op": "1"})] * 26)
    assert all(o.status is Status.EXECUTED and o.correction is None for o in outs)
    assert outs[-1].value["status"] == "DONE" and tool.count == 26
    marks = [r["mark"] for r in gov.audit_records("r")]
    assert marks[0] == "progress" and set(marks[1:25]) == {"waiting"} and marks[25] == "progress"


def test_poll_budget_stops_with_a_budget_diagnostic(gov: headway.Governor) -> None:
    gov.register("get_operation_status", _poll_tool(25), effect="read", poll=True, max_polls=10)
    s = gov.session("r")
    with pytest.raises(headway.BudgetExceeded) as info:
        run(s, [("get_operation_status", {"op": "1"})] * 26)
    d = info.value.diagnostic
    assert d["budget_type"] == "max_polls" and d["limit"] == 10 and d["consumed"] == 10
    assert set(d) == {
        "terminated_by",
        "budget_type",
        "limit",
        "consumed",
        "last_progress_step",
        "hint",
    }
    assert s.steps == 10


def test_poll_wait_budget(gov: headway.Governor, clock: FakeClock) -> None:
    def status(op: str) -> str:
        clock.advance(20)
        return "RUNNING"

    gov.register("status", status, effect="read", poll=True, max_wait_s=60)
    s = gov.session("r")
    with pytest.raises(headway.BudgetExceeded) as info:
        run(s, [("status", {"op": "x"})] * 10)
    assert info.value.diagnostic["budget_type"] == "max_wait_s"


def test_undeclared_poll_with_changing_output_is_never_stopped(gov: headway.Governor) -> None:
    n = itertools.count(1)
    gov.register("tail_log", ScriptedTool([lambda job: f"line {next(n)}"]), effect="read")
    s = gov.session("r")
    outs = run(s, [("tail_log", {"job": "j"})] * 40)
    assert all(o.status is Status.EXECUTED and o.correction is None for o in outs)


def test_runaway_with_changing_output_is_stopped_by_a_budget(gov: headway.Governor) -> None:
    n = itertools.count()
    gov.register("exec", ScriptedTool([lambda cmd: f"{next(n) % 60:02d}"]))  # unannotated: a write
    s = gov.session("r", budgets=headway.Budgets(tool_calls=50))
    with pytest.raises(headway.BudgetExceeded) as info:
        run(s, [("exec", {"cmd": "date +%S"})] * 60)
    assert info.value.diagnostic["terminated_by"] == "budget"
    assert info.value.diagnostic["budget_type"] == "total_tool_calls" and s.steps == 50


def _ab(gov: headway.Governor, changing: bool) -> headway.Session:
    n = itertools.count()
    gov.register(
        "open",
        ScriptedTool([lambda url: f"page {url}" + (f" visit {next(n)}" if changing else "")]),
        effect="read",
    )
    return gov.session("r")


def test_oscillation_with_unchanged_results_is_a_cycle_and_corrected(gov: headway.Governor) -> None:
    s = _ab(gov, changing=False)
    outs = run(s, [("open", {"url": "A"}), ("open", {"url": "B"})] * 3)
    cycles = [r["signals"]["cycle"] for r in gov.audit_records("r") if "cycle" in r["signals"]]
    assert cycles and cycles[0] == {"period": 2, "start": 0}
    assert outs[-1].status is Status.CORRECTED
    assert "cycle" in outs[-1].to_model()


def test_oscillation_with_changing_results_is_never_stopped(gov: headway.Governor) -> None:
    s = _ab(gov, changing=True)
    outs = run(s, [("open", {"url": "A"}), ("open", {"url": "B"})] * 10)
    assert sum(o.status is Status.CORRECTED for o in outs) <= 1
    assert not s.stopped


@pytest.mark.parametrize(
    "sequence",
    [
        ["A", "B", "A", "B", "C", "A", "B", "A", "B"],
        ["ls", "read f1", "pwd", "read f2", "pwd", "read f2"],
    ],
)
def test_sequences_that_are_not_loops(gov: headway.Governor, sequence: list[str]) -> None:
    results = {
        "ls": "f1 f2",
        "read f1": "contents of f1",
        "pwd": "/repo",
        "read f2": "contents of f2",
    }
    gov.register(
        "act", ScriptedTool([lambda step: results.get(step, f"page {step}")]), effect="read"
    )
    s = gov.session("r")
    outs = run(s, [("act", {"step": x}) for x in sequence])
    assert all(o.status is Status.EXECUTED for o in outs)
    assert not any("cycle" in r["signals"] for r in gov.audit_records("r"))
    assert not s.stopped


def test_paging_that_returns_the_same_content_stops(gov: headway.Governor) -> None:
    gov.register("read_file", ScriptedTool(["(end of file)"]), effect="read")
    s = gov.session("r")
    outs = run(s, [("read_file", {"path": "a.py", "offset": 100 * i}) for i in range(7)])
    records = gov.audit_records("r")
    assert all(r["signals"].get("same_result") for r in records[1:])
    assert [r["mark"] for r in records[1:]] == ["no_progress"] * 6
    assert all(o.status is Status.EXECUTED for o in outs)  # new arguments: executed, never cached
    with pytest.raises(headway.LoopDetected) as info:
        s.call("read_file", {"path": "a.py", "offset": 700})
    assert info.value.diagnostic["signal"] == "same_result"


class BookingError(Exception):
    pass


def test_failing_retry_gets_a_repeated_error_correction_then_stops(gov: headway.Governor) -> None:
    gov.register("book", ScriptedTool([BookingError("total must be 1002")]))
    s = gov.session("r")
    outs = run(s, [("book", {"amount": a}) for a in (957, 1047, 957)])
    assert all(o.status is Status.ERROR and o.executed for o in outs)
    assert outs[0].correction is None and outs[1].correction is None
    assert outs[2].correction is not None and "total must be 1002" in outs[2].correction
    assert "fail again" in outs[2].to_model()
    with pytest.raises(headway.LoopDetected) as info:
        run(s, [("book", {"amount": 900 + i}) for i in range(10)])
    assert info.value.diagnostic["signal"] == "repeated_error"


def test_twenty_different_edits_with_changing_tests_are_progress(gov: headway.Governor) -> None:
    runs = itertools.count()
    gov.register("edit_file", ScriptedTool(["ok"]), effect="write")
    gov.register("run_tests", ScriptedTool([lambda: f"{20 - next(runs)} failed"]), effect="read")
    s = gov.session("r")
    outs = []
    for i in range(20):
        outs.append(s.call("edit_file", {"path": "a.py", "line": i, "text": f"fix {i}"}))
        outs.append(s.call("run_tests", {}))
    assert all(o.status is Status.EXECUTED and o.correction is None for o in outs)
    assert {r["mark"] for r in gov.audit_records("r")} == {"progress"}


def test_the_same_failing_edit_three_times_is_no_progress(gov: headway.Governor) -> None:
    gov.register(
        "edit_file", ScriptedTool([ValueError("old_str not found in a.py")]), effect="write"
    )
    s = gov.session("r")
    outs = run(s, [("edit_file", {"path": "a.py", "old": "x", "new": "y"})] * 3)
    marks = [r["mark"] for r in gov.audit_records("r")]
    assert marks == ["neutral", "no_progress", "no_progress"]
    assert outs[2].correction is not None


def test_rerun_after_a_write_is_progress(gov: headway.Governor) -> None:
    results = iter(["1 failed", "all passed"])
    gov.register(
        "run_tests", ScriptedTool([lambda: next(results)]), effect="read", deterministic=True
    )
    gov.register("edit_file", ScriptedTool(["ok"]), effect="write")
    s = gov.session("r")
    outs = [s.call("run_tests", {}), s.call("edit_file", {"p": "a"}), s.call("run_tests", {})]
    assert outs[2].status is Status.EXECUTED and outs[2].value == "all passed"
    assert [r["mark"] for r in gov.audit_records("r")] == ["progress"] * 3
    assert all(o.correction is None for o in outs)


def test_key_order_and_ignored_fields_do_not_change_the_repeat_count(clock: FakeClock) -> None:
    gov = headway.Governor(clock=clock, ignore_fields=["request_id"])
    gov.register("search", ScriptedTool(["same"]), effect="read")
    s = gov.session("r")
    outs = [
        s.call("search", {"q": "x", "page": 1, "request_id": "a"}),
        s.call("search", {"page": 1, "q": "x", "request_id": "b"}),
        s.call("search", {"request_id": "c", "q": "x", "page": 1}),
    ]
    assert outs[2].status is Status.EXECUTED and "same result 3 times" in str(outs[2].correction)
    assert gov.audit_records("r")[2]["signals"]["repeat"] == 3


def test_new_user_turn_resets_counters_not_budgets(gov: headway.Governor) -> None:
    gov.register("search", ScriptedTool(["same"]), effect="read")
    s = gov.session("r", budgets=headway.Budgets(tool_calls=8))
    run(s, [("search", {"q": 1})] * 3)
    s.user_turn()
    outs = run(s, [("search", {"q": 1})] * 3)
    assert [o.correction is None for o in outs] == [True, True, False]
    s.call("search", {"q": 2})
    s.call("search", {"q": 3})
    with pytest.raises(headway.BudgetExceeded):
        s.call("search", {"q": 4})


def test_escalation_at_half_the_limit_keeps_the_status(gov: headway.Governor) -> None:
    gov.register("page", ScriptedTool(["the same page content"]), effect="read")
    s = gov.session("r", no_progress_limit=8)
    outs = run(s, [("page", {"n": i}) for i in range(6)])
    assert all(o.status is Status.EXECUTED for o in outs)
    assert (
        outs[3].correction is None and outs[4].correction is not None
    )  # 4 = 8/2 no-progress steps
    assert "no progress" in outs[4].to_model()


def test_limit_per_session_task_type_and_tool(clock: FakeClock) -> None:
    gov = headway.Governor(clock=clock, task_limits={"research": 3})
    gov.register("page", ScriptedTool(["same"]), effect="read")
    gov.register("strict", ScriptedTool(["same"]), effect="read", no_progress_limit=2)
    cases: list[tuple[str, dict[str, Any], str, int]] = [
        ("a", {"no_progress_limit": 4}, "page", 4),
        ("b", {"task_type": "research"}, "page", 3),
        ("c", {}, "strict", 2),
    ]
    for session, kw, tool, expected in cases:
        s = gov.session(session, **kw)
        with pytest.raises(headway.LoopDetected) as info:
            run(s, [(tool, {"n": i}) for i in range(20)])
        assert info.value.diagnostic["limit"] == expected


def test_shadow_mode_runs_everything_and_records_would(clock: FakeClock) -> None:
    gov = headway.Governor(clock=clock, enforce=False)
    tool = ScriptedTool([ORDERS])
    gov.register("search_orders", tool, effect="read")
    s = gov.session("r")
    outs = run(s, [("search_orders", {"customer_id": "c1"})] * 8)
    assert tool.count == 8 and all(o.status is Status.EXECUTED for o in outs)
    would = [r["would"] for r in gov.audit_records("r")]
    assert would[:2] == [None, None]
    assert would[2:6] == ["correct"] * 4
    assert would[6] == "stop" and would[7] == "stop"


def test_shadow_mode_records_would_cache(clock: FakeClock) -> None:
    gov = headway.Governor(clock=clock, enforce=False)
    tool = ScriptedTool(["v"])
    gov.register("ref", tool, effect="read", deterministic=True)
    gov.register("other", ScriptedTool([lambda i: f"o{i}"]), effect="read")
    s = gov.session("r")
    s.call("ref", {})
    s.call("other", {"i": 1})
    s.call("ref", {})
    assert tool.count == 2 and [r["would"] for r in gov.audit_records("r")] == [None, None, "cache"]


def test_a_plugged_in_detector_can_mark_duplicates(gov: headway.Governor) -> None:
    class SameTopic:
        name = "topic"

        def observe(self, step: headway.Observation, window: Any) -> dict[str, Any] | None:
            return {"duplicate": True} if step.text and "weather" in step.text else None

    g = headway.Governor(detectors=[SameTopic()], no_progress_limit=4)
    n = itertools.count()
    g.register("ask", ScriptedTool([lambda q: f"weather report number {next(n)}"]), effect="read")
    s = g.session("r")
    with pytest.raises(headway.LoopDetected):
        run(s, [("ask", {"q": i}) for i in range(10)])
    assert g.audit_records("r")[1]["signals"]["topic"] == {"duplicate": True}


_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "su",
    "ta",
    "vo",
    "ri",
    "pe",
    "du",
    "go",
    "ze",
    "fa",
    "bi",
    "ho",
    "ju",
]
_VOCAB = [a + b for a in _SYLLABLES for b in _SYLLABLES]  # 256 words


def _distinct_result(i: int) -> str:
    """A result unlike every other (words from a sha256 of i: 5-gram Jaccard stays low)."""
    return " ".join(_VOCAB[b] for b in hashlib.sha256(str(i).encode()).digest())


@settings(max_examples=60, deadline=None)
@given(
    hs.lists(
        hs.tuples(hs.sampled_from(["a", "b", "c"]), hs.integers(0, 2)), min_size=1, max_size=80
    )
)
def test_distinct_results_never_stop_a_session_by_a_loop_rule(calls: list[tuple[str, int]]) -> None:
    gov = headway.Governor()
    counter = itertools.count()

    def fresh(**_: Any) -> str:
        return _distinct_result(next(counter))

    for t in ("a", "b", "c"):
        gov.register(t, fresh, effect="read")
    s = gov.session("p")
    for tool, arg in calls:
        out = s.call(tool, {"x": arg})
        assert out.status is Status.EXECUTED
    assert not s.stopped


def test_every_correction_names_the_tool_the_count_and_the_arguments(gov: headway.Governor) -> None:
    gov.register("open", ScriptedTool([lambda url: f"page {url}"]), effect="read")
    gov.register("book", ScriptedTool([BookingError("total must be 1002")]))
    s = gov.session("r")
    cycle = run(s, [("open", {"url": "A"}), ("open", {"url": "B"})] * 3)[-1].to_model()
    assert "open" in cycle and "3 times" in cycle and '{"url":"A"}' in cycle and "page" in cycle
    s.user_turn()
    error = run(s, [("book", {"amount": a}) for a in (1, 2, 3)])[-1].to_model()
    assert "book" in error and "3 times" in error and '{"amount":3}' in error and "1002" in error


def _loop_until_stopped(s: headway.Session) -> None:
    """Repeat a read served from its exact cache (each repeat is no progress) until the
    session stops with LoopDetected."""
    for _ in range(20):
        try:
            s.call("lookup", {"k": "a"})
        except headway.LoopDetected:
            return
    raise AssertionError("never stopped")


def test_a_new_user_turn_lifts_a_no_progress_stop_not_a_budget_stop(
    gov: headway.Governor,
) -> None:
    """A no-progress stop ends the run the user asked for, not the conversation: the next
    user turn lifts it. A budget's stop stays, and the budgets stay spent."""
    gov.register("lookup", ScriptedTool(["v"]), effect="read", deterministic=True)
    gov.register("other", ScriptedTool(["o1", "o2", "o3"]), effect="read")
    s = gov.session("r", budgets=headway.Budgets(tool_calls=12))
    _loop_until_stopped(s)
    spent = s.steps
    with pytest.raises(headway.LoopDetected):
        s.call("other", {})
    s.user_turn()
    assert not s.stopped
    assert s.call("other", {}).status is Status.EXECUTED
    assert s.steps == spent + 1  # the budgets were not reset
    calls = 1
    for i in range(20):
        try:
            s.call("other", {"i": i})
        except headway.BudgetExceeded:
            break
        calls += 1
    assert spent + calls == 12
    s.user_turn()
    with pytest.raises(headway.BudgetExceeded):  # a budget's stop is not lifted
        s.call("other", {})


def test_a_user_turn_lifts_the_stop_of_a_session_shared_through_the_store(
    tmp_path: Any,
) -> None:
    """The lifted stop is written to the session's record: another worker sharing the
    store continues the run, no longer stopped."""
    url = str(tmp_path / "h.db")
    govs = [headway.Governor(headway.SQLiteStore(url)) for _ in range(2)]
    for g in govs:
        g.register("lookup", ScriptedTool(["v"]), effect="read", deterministic=True)
    try:
        first, second = (g.session("shared-run") for g in govs)
        _loop_until_stopped(first)
        with pytest.raises(headway.LoopDetected):
            govs[1].session("shared-run").call("lookup", {"k": "b"})
        second.user_turn()
        assert govs[0].session("shared-run").call("lookup", {"k": "c"}).ok
    finally:
        for g in govs:
            g.close()
