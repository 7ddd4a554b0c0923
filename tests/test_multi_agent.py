"""Multi-agent runs: one session (shared cache and budgets), one detector stream per agent."""

from __future__ import annotations

from typing import Any

import pytest

import headway


def _gov() -> tuple[headway.Governor, list[str]]:
    gov = headway.Governor()
    runs: list[str] = []

    @gov.tool(effect="read", deterministic=True)
    def company(ticker: str) -> dict[str, Any]:
        runs.append(ticker)
        return {"ticker": ticker, "name": "Apple Inc."}

    return gov, runs


def test_an_agent_asking_what_another_fetched_is_served_from_the_cache_not_corrected() -> None:
    gov, runs = _gov()
    with gov.session("crew-1") as s:
        a1 = s.call("company", {"ticker": "AAPL"}, agent="researcher")
        b1 = s.call("company", {"ticker": "AAPL"}, agent="writer")
        a2 = s.call("company", {"ticker": "AAPL"}, agent="researcher")
        a3 = s.call("company", {"ticker": "AAPL"}, agent="researcher")
    assert runs == ["AAPL"]  # one execution for the whole crew
    assert a1.status is headway.Status.EXECUTED
    assert b1.status is headway.Status.CACHED and b1.correction is None
    assert a2.status is headway.Status.CACHED
    assert a3.status is headway.Status.CORRECTED  # the researcher's own third identical call
    assert "[agent researcher]" in a3.to_model()


def test_the_same_calls_without_agents_are_one_stream_and_corrected_sooner() -> None:
    gov, _ = _gov()
    with gov.session("solo") as s:
        outs = [s.call("company", {"ticker": "AAPL"}) for _ in range(3)]
    assert outs[2].status is headway.Status.CORRECTED


def test_each_agent_has_its_own_no_progress_count_and_a_stop_names_the_agent() -> None:
    gov = headway.Governor(no_progress_limit=4)
    gov.register("search", lambda q: "nothing found for this query at all, sorry", effect="read")
    with gov.session("crew-2") as s:
        # interleaved: each agent makes 3 no-progress steps, below the limit for each
        for n in range(4):
            s.call("search", {"q": n % 2}, agent="a")
            s.call("search", {"q": n % 2}, agent="b")
        assert not s.stopped
        stop = _until_stopped(lambda n: s.call("search", {"q": n % 2}, agent="a"))
    assert isinstance(stop, headway.LoopDetected) and stop.diagnostic["agent"] == "a"


def _until_stopped(step: Any) -> headway.Stop:
    for n in range(20):
        try:
            step(n)
        except headway.Stop as stop:
            return stop
    raise AssertionError("never stopped")


def test_budgets_are_shared_by_every_agent_of_the_session() -> None:
    gov, _ = _gov()
    with gov.session("crew-3", budgets=headway.Budgets(tool_calls=3)) as s:
        s.call("company", {"ticker": "A"}, agent="a")
        s.call("company", {"ticker": "B"}, agent="b")
        s.call("company", {"ticker": "C"}, agent="c")
        with pytest.raises(headway.BudgetExceeded):
            s.call("company", {"ticker": "D"}, agent="a")


def test_the_audit_records_the_agent_of_each_call() -> None:
    gov, _ = _gov()
    with gov.session("crew-4", agent="crew") as s:
        s.call("company", {"ticker": "A"}, agent="researcher")
        s.call("company", {"ticker": "A"})
    assert [r["agent"] for r in s.audit_records()] == ["researcher", "crew"]


def test_a_user_turn_resets_every_agents_counters() -> None:
    gov, _ = _gov()
    with gov.session("crew-5") as s:
        for _ in range(2):
            s.call("company", {"ticker": "A"}, agent="a")
        s.user_turn()
        assert s.call("company", {"ticker": "A"}, agent="a").status is headway.Status.CACHED


def test_an_agent_name_must_be_a_non_empty_string() -> None:
    gov, _ = _gov()
    with gov.session("crew-6") as s, pytest.raises(headway.ArgumentError):
        s.call("company", {"ticker": "A"}, agent="")


def test_reads_another_agent_fetched_are_news_to_this_agent_and_never_stop_it() -> None:
    """Three roles look up the same ten companies: the later roles are served from the
    cache every time, and that is not a loop of theirs."""
    gov, runs = _gov()
    tickers = [f"T{n}" for n in range(10)]
    with gov.session("crew-7") as s:
        for role in ("researcher", "analyst", "writer"):
            for t in tickers:
                out = s.call("company", {"ticker": t}, agent=role)
                assert out.correction is None
        assert not s.stopped
    assert runs == tickers
    marks = [r["mark"] for r in s.audit_records() if r["agent"] == "writer"]
    assert marks == ["progress"] * 10
