"""One attempt of a tool, bounded by its timeout: a sync tool in a pool thread (abandoned
when its time is up), an async tool in the caller's task (cancelled, then closed after a
grace). An attempt that gets no answer in time raises ``AttemptTimeout``; what the
pipeline makes of it (a retry, UNKNOWN) is not decided here.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import inspect
import math
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any

from ._deadlines import Deadline
from ._tool_threads import Job, _pool, _Waiter, complete, in_time

QUICK_S = 0.0001  # how long an event loop waits for a sync tool before awaiting it
CANCEL_GRACE_S = 0.25  # how long an async tool may run on after its timeout's cancellation


class AttemptTimeout(Exception):  # noqa: N818 - internal signal, never escapes the pipeline
    """An attempt got no answer in time; ``late`` is the abandoned attempt, if it runs on."""

    def __init__(self, seconds: float, late: concurrent.futures.Future[Any] | None = None) -> None:
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds = seconds
        self.late = late


def run_to_end(awaitable: Any) -> Any:
    """An awaitable run on an event loop of its own, in a pool thread, waited for (a sync
    caller that got an awaitable: an async reconcile function, say)."""
    return _pool.call(asyncio.run, _awaited(awaitable))


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _run_coroutine(fn: Callable[..., Any], kwargs: Mapping[str, Any], timeout: float | None) -> Any:
    async def main() -> Any:
        return await asyncio.wait_for(fn(**kwargs), timeout)

    return asyncio.run(main())


# bench/overhead.py (executed path): plain results skip inspect.isawaitable, whose
# Awaitable check is slow for them
_NOT_AWAITABLE = frozenset((dict, list, str, int, float, bool, type(None), tuple, bytes))


def _call_through(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
    """Call ``fn``; an awaitable result (an object with an async ``__call__``) is run."""
    result = fn(**kwargs)
    if type(result) not in _NOT_AWAITABLE and inspect.isawaitable(result):
        return asyncio.run(_awaited(result))
    return result


def _timed_out(job: Job, timeout: float | None) -> Any:
    """The caller's wait for ``job`` ended without its outcome."""
    if job.cancel():  # it had not started yet: it never will
        raise AttemptTimeout(timeout or 0.0, None)
    late = job.abandon()
    if late is None:  # it ended as the wait gave up, or before the waiter could look
        if job.error is None:
            return job.value  # its result is here: nothing is unknown about it
        # it failed after its timeout (see in_time): handed on as an attempt that failed late
        late = concurrent.futures.Future()
        late.set_running_or_notify_cancel()
        complete(late, job)
    raise AttemptTimeout(timeout or 0.0, late)  # it runs on, abandoned, or failed late


def attempt_sync(
    fn: Callable[..., Any], kwargs: Mapping[str, Any], timeout: float | None, is_async: bool
) -> Any:
    """One attempt from a sync caller: a tool with a timeout runs in a pool thread."""
    if is_async:
        job, ended = _pool.wait(_run_coroutine, (fn, kwargs, timeout), timeout)
    elif timeout is None:
        result = fn(**kwargs)
        if type(result) not in _NOT_AWAITABLE and inspect.isawaitable(result):
            return run_to_end(result)
        return result
    else:
        job, ended = _pool.wait(_call_through, (fn, kwargs), timeout)
    return job.outcome() if ended else _timed_out(job, timeout)


async def attempt_async(
    fn: Callable[..., Any], kwargs: Mapping[str, Any], timeout: float | None, is_async: bool
) -> Any:
    """One attempt from an event loop: an async tool in the caller's task, a sync one in
    a pool thread."""
    if is_async:
        # cancelled on timeout (asyncio.timeout's rule, one timer per loop: ``_deadlines``)
        due = None if timeout is None else Deadline(timeout)
        try:
            value = await (fn(**kwargs) if due is None else _Bounded(fn(**kwargs), due))
        except BaseException as exc:
            if (due is not None and due.end(exc)) or isinstance(exc, TimeoutError):
                raise AttemptTimeout(timeout or 0.0) from None
            raise
        if due is not None:
            due.end(None)
        return value
    # a sync tool must not block the event loop: it runs in a thread, abandoned on timeout.
    # A quick one is waited for briefly without leaving the loop (waking a loop from
    # another thread costs more than most tools take); past that, the thread wakes the loop
    # with one callback (no wrapped Future, no task)
    deadline = math.inf if timeout is None else time.monotonic() + timeout
    waiter = _Waiter()
    job = _pool.start(_call_through, (fn, kwargs), waiter.wake)
    window = QUICK_S if timeout is None else min(QUICK_S, timeout)
    ended = waiter.done.acquire(True, window) or await waiter.ended(deadline)
    # the job's wake-up and the timer can both be ready when a busy loop looks, the
    # wake-up first: the job's own end time says whether it was in time
    return job.outcome() if ended and in_time(job, deadline) else _timed_out(job, timeout)


class _Bounded:
    """Awaits an async tool as ``await`` would, in the caller's task (no task of its own:
    one per call would cost more than the rest of a call), except that a tool still
    running after the cancellation of its timeout, by CANCEL_GRACE_S, is closed (a
    GeneratorExit where it waits; it cannot catch that as it did the cancellation) and
    the attempt ends as the timeout it is. The grace lets a tool finish what it does on
    cancellation (tell its server, close a connection). A coroutine is never resumed in
    another task: its cancel scopes (anyio) and context tokens belong to this one."""

    __slots__ = ("_due", "_it")

    def __init__(self, awaitable: Any, due: Deadline) -> None:
        self._it = awaitable.__await__()
        self._due = due

    def __await__(self) -> Generator[Any, Any, Any]:
        it, due = self._it, self._due
        grace: Deadline | None = None
        sent: Any = None
        error: BaseException | None = None
        try:
            while True:
                if (
                    grace is not None
                    and grace.expired
                    and isinstance(error, asyncio.CancelledError)
                ):
                    _close(it)  # it ran on past its grace: it ends here
                    raise error
                try:
                    step = it.send(sent) if error is None else it.throw(error)
                except StopIteration as done:
                    return done.value
                if grace is None and due.expired and isinstance(error, asyncio.CancelledError):
                    grace = Deadline(CANCEL_GRACE_S)  # it runs on after its cancellation
                try:
                    sent, error = (yield step), None
                except GeneratorExit:  # our own caller is being closed: so is the tool
                    it.close()
                    raise
                except BaseException as exc:
                    sent, error = None, exc
        finally:
            if grace is not None:
                grace.end(None)  # its cancellation, if it came, is taken back


_stuck: collections.deque[Any] = collections.deque(maxlen=64)


def _close(it: Any) -> None:
    """Close an async tool that ignored its cancellation. One that waits again while
    closing is closed again, a few times; one that still runs on is kept (never resumed)
    so that it is not closed again, noisily, when collected."""
    for _ in range(3):
        try:
            it.close()
        except RuntimeError:  # it awaited something while closing: at that await, again
            continue
        except Exception:  # its cleanup failed: it has ended
            return
        return
    _stuck.append(it)
