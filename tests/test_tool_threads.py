"""The threads that run sync tools with a timeout: a job waited for by a lock, given up on
before it starts (it never runs) or while it runs (its outcome completes a Future later)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import headway
from headway._tool_threads import Job, Threads, _Waiter


def test_a_job_cancelled_before_it_started_never_runs() -> None:
    ran: list[int] = []
    woken: list[int] = []
    job = Job(lambda: ran.append(1), (), lambda: woken.append(1))
    assert job.cancel()
    job.run()  # the worker picks it up after the caller gave up
    assert ran == [] and woken == []


def test_a_job_abandoned_while_running_completes_its_future_when_it_ends() -> None:
    started, release = threading.Event(), threading.Event()

    def tool() -> str:
        started.set()
        release.wait(5)
        return "late answer"

    job, ended = Threads().wait(tool, (), 0.05)
    assert not ended
    assert started.wait(5)
    assert not job.cancel()  # it runs: too late to cancel
    late = job.abandon()
    assert late is not None and not late.done()
    release.set()
    assert late.result(timeout=5) == "late answer"


def test_a_job_that_ended_as_its_wait_timed_out_gives_its_outcome() -> None:
    """The wait timed out, but the job ended before the caller gave up on it: its outcome
    is read, not a timeout (the race abandon() settles)."""
    job = Job(lambda x: x * 2, (21,), lambda: None)
    job.run()
    assert job.abandon() is None
    assert job.outcome() == 42


def test_a_job_s_exception_is_raised_to_its_waiter() -> None:
    def tool() -> None:
        raise KeyError("missing")

    job, ended = Threads().wait(tool, (), 5)
    assert ended
    with pytest.raises(KeyError, match="missing"):
        job.outcome()


def test_acall_runs_a_sync_tool_off_the_event_loop_thread() -> None:
    gov = headway.Governor()
    gov.register("where", threading.get_ident, effect="read")  # default timeout

    async def main() -> tuple[int, headway.Outcome]:
        return threading.get_ident(), await gov.session("s").acall("where", {})

    loop_thread, out = asyncio.run(main())
    assert out.status is headway.Status.EXECUTED
    assert out.value != loop_thread


def test_a_sync_tool_abandoned_by_a_closed_event_loop_ends_quietly() -> None:
    """The tool outlives its timeout and its event loop; when it ends, waking the closed
    loop raises nothing in the tool's thread (an exception there fails this test)."""
    release, finished = threading.Event(), threading.Event()

    def slow() -> str:
        release.wait(5)
        finished.set()
        return "too late"

    gov = headway.Governor()
    gov.register("slow", slow, effect="read", timeout=0.05, retry=headway.Retry(attempts=1))
    out = asyncio.run(gov.session("s").acall("slow", {}))
    assert out.error is not None and out.error["code"] == "timeout"
    release.set()
    assert finished.wait(5)
    time.sleep(0.1)  # the thread wakes the (closed) loop after the tool returns


def test_acall_of_a_sync_tool_that_is_not_quick_leaves_the_event_loop_free() -> None:
    """The loop waits for a sync tool only briefly (``QUICK_S``), then awaits it: a tool
    that waits for something another task on the loop does still gets it."""
    ready = threading.Event()

    def waits_for_the_loop() -> bool:
        return ready.wait(5)

    gov = headway.Governor()
    gov.register("wait", waits_for_the_loop, effect="read")  # default timeout

    async def main() -> headway.Outcome:
        async def set_soon() -> None:
            await asyncio.sleep(0.01)
            ready.set()

        setter = asyncio.create_task(set_soon())
        out = await gov.session("s").acall("wait", {})
        await setter
        return out

    out = asyncio.run(main())
    assert out.status is headway.Status.EXECUTED
    assert out.value is True  # set by the other task while the tool ran


def test_a_job_that_ends_before_the_loop_awaits_it_is_not_waited_for() -> None:
    """The wake-up and the loop's switch to awaiting can cross: a job that has already
    run when the loop starts to await it answers at once, not at the deadline."""
    waiter = _Waiter()
    waiter.wake()  # the job ran before the loop gave up its brief wait
    assert asyncio.run(waiter.ended(time.monotonic() + 0.5)) is True


def test_a_job_that_ends_while_the_loop_awaits_it_wakes_the_loop() -> None:
    async def main() -> bool:
        waiter = _Waiter()
        asyncio.get_running_loop().call_later(
            0.01, lambda: threading.Thread(target=waiter.wake).start()
        )
        return await waiter.ended(time.monotonic() + 5)

    assert asyncio.run(main()) is True
