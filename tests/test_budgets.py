"""Budgets (semantics §4.3): every kind stops the session with the exact diagnostic."""

from __future__ import annotations

import asyncio
import json

import pytest

import headway
from headway.testing import FakeClock, ScriptedTool

KEYS = {"terminated_by", "budget_type", "limit", "consumed", "last_progress_step", "hint"}


def fresh(gov: headway.Governor) -> None:
    gov.register("step", ScriptedTool([lambda i: f"result {i}"]), effect="read")


def test_tool_call_budget_stops_after_the_limit_reaching_call(gov: headway.Governor) -> None:
    fresh(gov)
    s = gov.session("r", budgets=headway.Budgets(tool_calls=5))
    outs = [s.call("step", {"i": i}) for i in range(5)]
    assert all(o.status is headway.Status.EXECUTED for o in outs)
    with pytest.raises(headway.BudgetExceeded) as info:
        s.call("step", {"i": 99})
    d = info.value.diagnostic
    assert set(d) == KEYS
    assert d["terminated_by"] == "budget" and d["budget_type"] == "total_tool_calls"
    assert (d["limit"], d["consumed"], d["last_progress_step"]) == (5, 5, 4)
    json.dumps(d)
    # once stopped, every further call raises the same stop
    with pytest.raises(headway.BudgetExceeded) as again:
        s.call("step", {"i": 100})
    assert again.value.diagnostic == d


@pytest.mark.parametrize("budget", ["tool_calls", "per_tool_calls"])
def test_concurrent_calls_never_run_past_a_call_budget(budget: str) -> None:
    """A model's parallel calls (tasks of one event loop, as Pydantic AI and the OpenAI
    Agents SDK run them) take their steps before they run: with a budget of 2, two calls
    run and the others are stopped before their tool starts, and the diagnostic says 2."""
    ran: list[int] = []

    async def lookup(n: int) -> str:
        await asyncio.sleep(0.01)  # all five are under way before the first one ends
        ran.append(n)
        return f"page {n}"

    gov = headway.Governor()
    gov.register("lookup", lookup, effect="read")
    session = gov.session("batch", budgets=headway.Budgets(**{budget: 2}))

    async def one(n: int) -> str:
        try:
            return (await session.acall("lookup", {"n": n})).status.value
        except headway.BudgetExceeded as stop:
            return f"stopped at {stop.diagnostic['consumed']}"

    async def batch() -> list[str]:
        return await asyncio.gather(*(one(n) for n in range(5)))

    answers = asyncio.run(batch())
    assert sorted(answers) == ["executed"] * 2 + ["stopped at 2"] * 3
    assert len(ran) == 2


def test_per_tool_budget_names_the_tool(gov: headway.Governor) -> None:
    fresh(gov)
    gov.register("other", ScriptedTool([lambda i: f"o{i}"]), effect="read")
    s = gov.session("r", budgets=headway.Budgets(per_tool_calls={"step": 2}))
    s.call("step", {"i": 1})
    for i in range(5):
        s.call("other", {"i": i})
    s.call("step", {"i": 2})
    with pytest.raises(headway.BudgetExceeded) as info:
        s.call("other", {"i": 9})
    assert info.value.diagnostic["budget_type"] == "per_tool_calls"
    assert "step" in info.value.diagnostic["hint"]


def test_wall_clock_budget(gov: headway.Governor, clock: FakeClock) -> None:
    fresh(gov)
    s = gov.session("r", budgets=headway.Budgets(wall_clock_s=10))
    s.call("step", {"i": 1})
    clock.advance(10.5)
    with pytest.raises(headway.BudgetExceeded) as info:
        s.call("step", {"i": 2})
    d = info.value.diagnostic
    assert set(d) == KEYS and d["budget_type"] == "wall_clock_s" and d["consumed"] >= 10


@pytest.mark.parametrize(
    ("budgets", "turn", "kind"),
    [
        (headway.Budgets(turns=2), {"tokens": 1}, "turns"),
        (headway.Budgets(tokens=1000), {"tokens": 600}, "tokens"),
        (headway.Budgets(cost=0.01), {"cost": 0.006}, "cost"),
    ],
)
def test_turn_token_and_cost_budgets(
    gov: headway.Governor, budgets: headway.Budgets, turn: dict[str, float], kind: str
) -> None:
    fresh(gov)
    s = gov.session("r", budgets=budgets)
    s.call("step", {"i": 0})
    s.record_turn(**turn)  # type: ignore[arg-type]
    s.call("step", {"i": 1})
    s.record_turn(**turn)  # type: ignore[arg-type]  # reaches the limit: returns normally
    with pytest.raises(headway.BudgetExceeded) as info:
        s.call("step", {"i": 2})
    assert info.value.diagnostic["budget_type"] == kind and set(info.value.diagnostic) == KEYS


def test_retry_budget(clock: FakeClock) -> None:
    gov = headway.Governor(clock=clock, sleep=clock.sleep)
    tool = ScriptedTool([ConnectionError("down")])
    gov.register("fetch", tool, effect="read", retry=headway.Retry(attempts=10), breaker=False)
    s = gov.session("r", budgets=headway.Budgets(retries_per_tool=3))
    out = s.call("fetch", {})
    assert out.status is headway.Status.ERROR and tool.count == 4  # 1 try + 3 retries
    with pytest.raises(headway.BudgetExceeded) as info:
        s.call("fetch", {})
    assert info.value.diagnostic["budget_type"] == "retries_per_tool"


def test_hint_says_whether_progress_was_being_made(gov: headway.Governor) -> None:
    gov.register("same", ScriptedTool(["same page " * 20]), effect="read")
    fresh(gov)
    s = gov.session("r", budgets=headway.Budgets(tool_calls=4), no_progress_limit=50)
    s.call("step", {"i": 0})
    for i in range(3):
        s.call("same", {"p": i})
    with pytest.raises(headway.BudgetExceeded) as info:
        s.call("same", {"p": 9})
    assert info.value.diagnostic["last_progress_step"] == 1
    assert "No progress in the last 2" in info.value.diagnostic["hint"]


def test_new_user_turn_does_not_reset_budgets(gov: headway.Governor) -> None:
    fresh(gov)
    s = gov.session("r", budgets=headway.Budgets(tool_calls=2))
    s.call("step", {"i": 0})
    s.user_turn()
    s.call("step", {"i": 1})
    with pytest.raises(headway.BudgetExceeded):
        s.call("step", {"i": 2})


def test_negative_budget_is_a_config_error() -> None:
    with pytest.raises(headway.ConfigError):
        headway.Budgets(tool_calls=-1)
