"""The effects the decision pipeline asks its driver to perform, and the two drivers.

The pipeline (``_pipeline.plan``) is a generator: it yields an effect, the driver performs
it (blocking in ``Session.call``, awaiting in ``Session.acall``) and sends the result back
(or throws the exception in). That is the only place where sync and async differ.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import inspect
import math
import queue
import threading
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any, NamedTuple, TypeVar

from ._deadlines import Deadline

T = TypeVar("T")


class AttemptTimeout(Exception):  # noqa: N818 - internal signal, never escapes the pipeline
    """An attempt got no answer in time; ``late`` is the abandoned attempt, if it runs on."""

    def __init__(self, seconds: float, late: concurrent.futures.Future[Any] | None = None) -> None:
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds = seconds
        self.late = late


class Aborted(Exception):  # noqa: N818 - internal signal, never escapes the pipeline
    """An effect ended with a BaseException that is neither an interrupt nor a
    cancellation (a tool raising GeneratorExit, say). The plan gets this ordinary
    exception instead: a generator must never have GeneratorExit thrown into it (that
    closes it half way), and a tool that ended so may have acted."""

    def __init__(self, exc: BaseException) -> None:
        try:
            text = str(exc)
        except Exception:
            text = "message unavailable"
        super().__init__(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
        self.exc = exc


# what an effect's failure is handed to the plan as it is; any other BaseException is Aborted
_PASSED = (Exception, KeyboardInterrupt, SystemExit, asyncio.CancelledError)


class Blocking(NamedTuple):
    """Call ``fn(*args)``: store operations, reconcile functions."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    blocking: bool = True


class Attempt(NamedTuple):
    """Run the tool once with a timeout."""

    fn: Callable[..., Any]
    kwargs: Mapping[str, Any]
    timeout: float | None
    is_async: bool


class Sleep(NamedTuple):
    seconds: float


class Wait(NamedTuple):
    """Wait for another caller's execution (single-flight)."""

    future: concurrent.futures.Future[Any]
    timeout: float | None


Effect = Blocking | Attempt | Sleep | Wait
Plan = Generator[Effect, Any, T]


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
        self._claim = _new_lock()  # taken by whoever comes first: the worker or cancel()
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
            _complete(late, self)

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


_new_lock = threading.Lock


def _complete(fut: concurrent.futures.Future[Any], job: Job) -> None:
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
        and whether it ended in time (then read ``outcome()``; else see ``_timed_out``)."""
        done = _new_lock()
        done.acquire()
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        job = self.start(fn, args, done.release)
        return job, done.acquire(True, -1 if timeout is None else timeout) and _in_time(
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


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _run_coroutine(fn: Callable[..., Any], kwargs: Mapping[str, Any], timeout: float | None) -> Any:
    async def main() -> Any:
        return await asyncio.wait_for(fn(**kwargs), timeout)

    return asyncio.run(main())


# plain results skip inspect.isawaitable (its Awaitable check is slow for them)
_NOT_AWAITABLE = frozenset((dict, list, str, int, float, bool, type(None), tuple, bytes))


def _call_through(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
    """Call ``fn``; an awaitable result (an object with an async ``__call__``) is run."""
    result = fn(**kwargs)
    if type(result) not in _NOT_AWAITABLE and inspect.isawaitable(result):
        return asyncio.run(_awaited(result))
    return result


def _in_time(job: Job, deadline: float) -> bool:
    """Whether a job that has ended answered within its attempt's timeout. A failure after
    the deadline is the timeout it was (a write is UNKNOWN: it may have acted first),
    however soon its caller got to look: a thread that kept the CPU past the deadline, or
    a busy event loop, must not turn a timeout into a retryable error. A result is a
    result, late or not."""
    return job.error is None or job.ended_at < deadline


def _timed_out(job: Job, timeout: float | None) -> Any:
    """The caller's wait for ``job`` ended without its outcome."""
    if job.cancel():  # it had not started yet: it never will
        raise AttemptTimeout(timeout or 0.0, None)
    late = job.abandon()
    if late is None:  # it ended as the wait gave up, or before the waiter could look
        if job.error is None:
            return job.value  # its result is here: nothing is unknown about it
        # it failed after its timeout (see _in_time): handed on as an attempt that failed late
        late = concurrent.futures.Future()
        late.set_running_or_notify_cancel()
        _complete(late, job)
    raise AttemptTimeout(timeout or 0.0, late)  # it runs on, abandoned, or failed late


def _attempt_sync(e: Attempt, sleep: Callable[[float], None]) -> Any:
    if e.is_async:
        job, ended = _pool.wait(_run_coroutine, (e.fn, e.kwargs, e.timeout), e.timeout)
    elif e.timeout is None:
        result = e.fn(**e.kwargs)
        if type(result) not in _NOT_AWAITABLE and inspect.isawaitable(result):
            return _pool.call(asyncio.run, _awaited(result))
        return result
    else:
        job, ended = _pool.wait(_call_through, (e.fn, e.kwargs), e.timeout)
    return job.outcome() if ended else _timed_out(job, e.timeout)


def drive_sync(plan: Plan[T], sleep: Callable[[float], None] = time.sleep) -> T:
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = plan.throw(error) if error is not None else plan.send(send)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        send, error = None, None
        try:
            if isinstance(effect, Blocking):
                send = effect.fn(*effect.args)
                if inspect.isawaitable(send):  # an async reconcile function, say
                    send = _pool.call(asyncio.run, _awaited(send))
            elif isinstance(effect, Attempt):
                send = _attempt_sync(effect, sleep)
            elif isinstance(effect, Sleep):
                sleep(effect.seconds)
            else:
                send = effect.future.result(timeout=effect.timeout)
        except BaseException as exc:
            error = exc if isinstance(exc, _PASSED) else Aborted(exc)


async def _attempt_async(e: Attempt) -> Any:
    if e.is_async:
        # cancelled on timeout (asyncio.timeout's rule, one timer per loop: ``_deadlines``)
        due = None if e.timeout is None else Deadline(e.timeout)
        try:
            value = await (e.fn(**e.kwargs) if due is None else _Bounded(e.fn(**e.kwargs), due))
        except BaseException as exc:
            if (due is not None and due.end(exc)) or isinstance(exc, TimeoutError):
                raise AttemptTimeout(e.timeout or 0.0) from None
            raise
        if due is not None:
            due.end(None)
        return value
    # a sync tool must not block the event loop: it runs in a thread, abandoned on timeout.
    # A quick one is waited for briefly without leaving the loop (waking a loop from
    # another thread costs more than most tools take); past that, the thread wakes the loop
    # with one callback (no wrapped Future, no task)
    deadline = math.inf if e.timeout is None else time.monotonic() + e.timeout
    waiter = _Waiter()
    job = _pool.start(_call_through, (e.fn, e.kwargs), waiter.wake)
    window = QUICK_S if e.timeout is None else min(QUICK_S, e.timeout)
    if waiter.done.acquire(True, window):
        in_time = True
    else:
        in_time = await waiter.ended(deadline)
    # the job's wake-up and the timer can both be ready when a busy loop looks, the
    # wake-up first: the job's own end time says whether it was in time
    return job.outcome() if in_time and _in_time(job, deadline) else _timed_out(job, e.timeout)


QUICK_S = 0.0001  # how long an event loop waits for a sync tool before awaiting it


CANCEL_GRACE_S = 0.25  # how long an async tool may run on after its timeout's cancellation


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
                if grace is not None and grace.expired and isinstance(error, CancelledError):
                    _close(it)  # it ran on past its grace: it ends here
                    raise error
                try:
                    step = it.send(sent) if error is None else it.throw(error)
                except StopIteration as done:
                    return done.value
                if grace is None and due.expired and isinstance(error, CancelledError):
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


CancelledError = asyncio.CancelledError
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


class _Waiter:
    """How an event loop waits for a job: ``done`` is released when it has run; once the
    loop awaits instead, the job's thread also wakes the loop."""

    __slots__ = ("_future", "_loop", "done")

    def __init__(self) -> None:
        self.done = _new_lock()
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
    # not contextlib.suppress: no object made per call on the way back to the loop
    try:  # noqa: SIM105
        loop.call_soon_threadsafe(_resolve, ended, True)
    except RuntimeError:  # the loop has closed: nobody is waiting
        pass


def _resolve(ended: asyncio.Future[bool], in_time: bool) -> None:
    if not ended.done():  # the first answer counts; a cancelled waiter cancelled it
        ended.set_result(in_time)


async def _blocking(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """A blocking call in a thread, unless the object it is a method of runs it at once:
    its ``inline(fn, args)``, which raises BlockingIOError when it would have to wait."""
    inline = getattr(getattr(fn, "__self__", None), "inline", None)
    if inline is not None:
        try:
            return inline(fn, args)
        except BlockingIOError:  # it would wait for a lock: in a thread, where it may
            pass
    return await asyncio.to_thread(fn, *args)


async def drive_async(plan: Plan[T], sleep: Callable[[float], Any] = asyncio.sleep) -> T:
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = plan.throw(error) if error is not None else plan.send(send)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        send, error = None, None
        try:
            if isinstance(effect, Blocking):
                if inspect.iscoroutinefunction(effect.fn):
                    send = await effect.fn(*effect.args)
                elif effect.blocking:
                    send = await _blocking(effect.fn, effect.args)
                else:
                    send = effect.fn(*effect.args)
            elif isinstance(effect, Attempt):
                send = await _attempt_async(effect)
            elif isinstance(effect, Sleep):
                result = sleep(effect.seconds)
                if asyncio.iscoroutine(result):
                    await result
            else:
                send = await asyncio.wait_for(asyncio.wrap_future(effect.future), effect.timeout)
        except BaseException as exc:
            error = exc if isinstance(exc, _PASSED) else Aborted(exc)


class Flights:
    """In-process single-flight: the first caller of a key leads, the others wait for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict[str, concurrent.futures.Future[Any]] = {}

    def join(self, key: str) -> tuple[bool, concurrent.futures.Future[Any]]:
        """(leader?, future). The leader must call ``land`` when done."""
        with self._lock:
            fut = self._futures.get(key)
            if fut is not None:
                return False, fut
            fut = self._futures[key] = concurrent.futures.Future()
            return True, fut

    def land(self, key: str, result: Any) -> None:
        with self._lock:
            fut = self._futures.pop(key, None)
        if fut is not None and not fut.done():
            fut.set_result(result)
