"""User turns where the MCP client marks none (semantics §4.2): per client session, a call
after an idle gap of ``idle_turn_s`` with no call in flight is a new user turn, and it
lifts a no-progress stop. ``govern`` as both proxy forms call it, on a fake clock."""

from __future__ import annotations

import asyncio
from typing import Any

import headway
from headway._mcp_calls import Taken, Turns, govern
from headway.testing import FakeClock


def test_an_idle_gap_with_nothing_in_flight_is_a_new_turn_per_session() -> None:
    clock = FakeClock()
    turns = Turns(120.0, clock)
    assert not turns.begin("a")  # the first call of a session: nothing to reset
    turns.end("a")
    clock.advance(119)
    assert not turns.begin("a")  # a shorter pause
    assert not turns.begin("a")  # and a call while one is in flight
    clock.advance(300)
    turns.end("a")
    clock.advance(200)
    assert not turns.begin("a")  # one call is still in flight: no pause, however long
    turns.end("a")
    turns.end("a")
    assert not turns.begin("b")  # another client session has its own clock
    turns.end("b")
    clock.advance(121)
    assert turns.begin("a")  # nothing in flight (both ended) for longer than the gap
    turns.end("a")
    assert not Turns(0.0, clock).begin("a")  # 0: never


def test_govern_lifts_a_no_progress_stop_after_an_idle_gap_or_a_marked_turn() -> None:
    clock = FakeClock()
    gov = headway.Governor(clock=clock, sleep=clock.sleep, idle_turn_s=60)
    gov.register("ls", None, effect="read", deterministic=True)
    session = gov.session("stdio-x")
    turns, taken = Turns(gov.idle_turn_s, clock), Taken()

    async def forward() -> dict[str, Any]:
        return {"content": [{"type": "text", "text": "a.txt"}], "isError": False}

    async def calls(n: int, **meta: Any) -> list[Any]:
        return [
            await govern(session, "ls", {"p": "."}, meta, forward, turns, taken) for _ in range(n)
        ]

    async def scenario() -> tuple[list[Any], ...]:
        looped = await calls(12)
        clock.advance(30)
        soon = await calls(1)  # a short pause: still stopped
        marked = await calls(1, **{"headway/user_turn": True})
        looped_again = await calls(12)
        clock.advance(61)
        idle = await calls(1)
        return looped, soon, marked, looped_again, idle

    looped, soon, marked, looped_again, idle = asyncio.run(scenario())
    assert isinstance(looped[-1], tuple) and looped[-1][1]["status"] == "stopped"
    assert "no call is made for 60 s" in looped[-1][0]
    assert isinstance(soon[0], tuple) and soon[0][1]["executed"] is False
    assert isinstance(marked[0], headway.Outcome)
    assert isinstance(looped_again[-1], tuple)
    assert isinstance(idle[0], headway.Outcome)
