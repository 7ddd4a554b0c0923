"""An async attempt's timeout (``_deadlines``): asyncio.timeout's rule, one timer per loop."""

from __future__ import annotations

import asyncio
from typing import Any

import headway
from headway._deadlines import Deadline
from headway.outcome import Status

HANG_GUARD_S = 20  # a bound against a hang, not a measure of speed


async def test_a_shorter_timeout_after_a_longer_one_still_ends_its_attempt() -> None:
    """The loop's one timer is set for the longer deadline when the shorter one arrives:
    it is set again for the earlier one, not left for 30 s."""
    gov = headway.Governor()
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "slow done"

    async def hung() -> str:
        await asyncio.Event().wait()
        return "never"

    gov.register("slow", slow, effect="read", timeout=30.0)
    gov.register("hung", hung, effect="write", timeout=0.05)
    session = gov.session("deadlines")
    first = asyncio.create_task(session.acall("slow"))
    await asyncio.sleep(0)  # its attempt (and its 30 s deadline) has started
    async with asyncio.timeout(HANG_GUARD_S):
        out = await session.acall("hung")
    assert out.status is Status.UNKNOWN  # a write that timed out may have happened
    release.set()
    assert (await first).value == "slow done"


async def test_attempts_on_one_loop_share_one_timer() -> None:
    gov = headway.Governor()

    async def quick(n: int) -> int:
        return n

    gov.register("quick", quick, effect="write", timeout=30.0)
    session = gov.session("timers")
    loop: Any = asyncio.get_running_loop()
    scheduled = len(loop._scheduled)
    for n in range(50):
        assert (await session.acall("quick", {"n": n})).value == n
    assert len(loop._scheduled) - scheduled <= 1


async def _cancelled_in_attempt(also_cancelled: bool) -> bool:
    """What ``end`` says of an attempt whose deadline passed, and whose task was also
    cancelled by its caller or not."""
    started = asyncio.Event()
    dues: list[Deadline] = []

    async def attempt() -> bool:
        dues.append(Deadline(30.0))
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError as exc:
            return dues[0].end(exc)
        return False

    task = asyncio.create_task(attempt())
    await started.wait()
    dues[0]._expire()  # the deadline passes (what the loop's timer does)
    if also_cancelled:
        task.cancel()
    return await task


async def test_an_expired_deadline_is_a_timeout() -> None:
    assert await _cancelled_in_attempt(also_cancelled=False) is True


async def test_a_task_its_caller_cancelled_too_stays_cancelled_not_timed_out() -> None:
    assert await _cancelled_in_attempt(also_cancelled=True) is False
