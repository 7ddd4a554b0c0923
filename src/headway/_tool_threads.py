"""The threads sync tools run in, so that a hung one can be abandoned.

A ``Job`` is one function run by a pool thread and waited for by a bare lock; ``Threads``
is the pool (``_pool``, the process's one); ``_Waiter`` is how an event loop waits for a
job without blocking. What a timeout means for a job's outcome is ``_tool_runs``' concern.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import queue
import threading
import time
from collections.abc import Callable
from typing import Any


class Job:
    """One function run by a pool thread, waited for by a bare lock, not a Future.

    A ``Future`` waits through a ``Condition`` (Python code on both sides of the hand-off);
    the lock makes the hand-off itself the only cost. ``wake`` is called once the job has
    run; a job the caller gave up on before it started (``cancel``) never runs, and one
    it gave up on while running (``abandon``) completes a Future when it ends.
    """

    __slots__ = ("_claim", "_finished", "_late", "args", "ended_at", "error", "fn", "value", "wake")

    def __init__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], wake: Callable[[], Any]
    ) -> None:
        self.fn, self.args, self.wake = fn, args, wake
        self.value: Any = None
        self.error: BaseException | None = None
        self.ended_at = 0.0  # time.monotonic() when fn returned or raised
        self._claim = threading.Lock()  # taken by whoever comes first: the worker or cancel()
        self._finished = False
        self._late: concurrent.futures.Future[Any] | None = None

    def run(self) -> None:
        if not self._claim.acquire(False):
            return  # cancelled before it started
        try:
            self.value = self.fn(*self.args)
        except BaseException as exc:
            self.error = exc
        self.ended_at = time.monotonic()
        self.fn = self.args = None  # type: ignore[assignment]  # hold no arguments once run
        # no lock with abandon(): each side writes its flag, then reads the other's (under
        # the GIL, in that order), so at least one of them sees both
        self._finished = True
        late = self._late
        self.wake()
        if late is not None:
            complete(late, self)

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value

    def cancel(self) -> bool:
        """True when the job had not started: it never will."""
        return self._claim.acquire(False)

    def abandon(self) -> concurrent.futures.Future[Any] | None:
        """The caller stops waiting for a job that started: a Future of its outcome, which
        completes when it ends; None when it has ended already (its outcome is ready)."""
        late: concurrent.futures.Future[Any] = concurrent.futures.Future()
        late.set_running_or_notify_cancel()
        self._late = late
        if self._finished:
            return None  # run() may complete ``late`` too: nobody else holds it
        return late  # run() has yet to read _late: it will complete it


def complete(fut: concurrent.futures.Future[Any], job: Job) -> None:
    """Complete ``fut`` with the outcome of ``job``, which has run."""
    if job.error is not None:
        fut.set_exception(job.error)
    else:
        fut.set_result(job.value)


class Threads:
    """Where sync tools with a timeout run, so that a hung one can be abandoned.

    The pool grows: a call that finds no idle thread starts one, so hung tools never take
    capacity from healthy ones. Threads are daemons (a hung tool never keeps the
    interpreter from exiting) and leave after a minute idle.
    """

    def __init__(self, idle_s: float = 60.0) -> None:
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # idle threads not yet promised a job
        self._idle_s = idle_s

    def start(self, fn: Callable[..., Any], args: tuple[Any, ...], wake: Callable[[], Any]) -> Job:
        """Run ``fn(*args)`` in a pool thread; ``wake()`` is called there once it has run."""
        job = Job(fn, args, wake)
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        self._jobs.put(job)
        if spawn:
            threading.Thread(target=self._work, name="headway-tool", daemon=True).start()
        return job

    def wait(
        self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None
    ) -> tuple[Job, bool]:
        """Run ``fn(*args)`` in a pool thread and wait up to ``timeout`` seconds: the job,
        and whether it ended in time (then read ``outcome()``; else see ``_tool_runs``)."""
        done = threading.Lock()
        done.acquire()
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        job = self.start(fn, args, done.release)
        return job, done.acquire(True, -1 if timeout is None else timeout) and in_time(
            job, deadline
        )

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a pool thread (an event loop of its own, say), waited for."""
        return self.wait(fn, args, None)[0].outcome()

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # nobody was promised this thread: leave
                        self._idle -= 1
                        return
                continue  # a job is on its way to us
            job.run()
            del job
            with self._lock:
                self._idle += 1


_pool = Threads()


def in_time(job: Job, deadline: float) -> bool:
    """Whether a job that has ended answered within its attempt's timeout. A failure after
    the deadline is the timeout it was (a write is UNKNOWN: it may have acted first),
    however soon its caller got to look: a thread that kept the CPU past the deadline, or
    a busy event loop, must not turn a timeout into a retryable error. A result is a
    result, late or not."""
    return job.error is None or job.ended_at < deadline


class _Waiter:
    """How an event loop waits for a job: ``done`` is released when it has run; once the
    loop awaits instead, the job's thread also wakes the loop."""

    __slots__ = ("_future", "_loop", "done")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._future: asyncio.Future[bool] | None = None

    def wake(self) -> None:
        self.done.release()
        # no lock with ended(): each side writes, then reads the other's (under the GIL,
        # in that order), so the loop either finds ``done`` released or is woken
        future = self._future
        if future is not None:
            _wake(self._loop, future)  # type: ignore[arg-type]  # set before the future

    async def ended(self, deadline: float) -> bool:
        """True once the job has run; False at ``deadline`` (a timer answers it)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._loop = loop
        self._future = future
        if self.done.acquire(False):
            return True  # it ran as the loop was getting ready to await it
        # a timer that answers False, not asyncio.timeout: no task cancellation
        timer = None
        if deadline != math.inf:
            timer = loop.call_later(max(deadline - time.monotonic(), 0.0), _resolve, future, False)
        try:
            return await future
        finally:
            if timer is not None:
                timer.cancel()


def _wake(loop: asyncio.AbstractEventLoop, ended: asyncio.Future[bool]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
        loop.call_soon_threadsafe(_resolve, ended, True)


def _resolve(ended: asyncio.Future[bool], answer: bool) -> None:
    if not ended.done():  # the first answer counts; a cancelled waiter cancelled it
        ended.set_result(answer)
