"""The effects the decision pipeline asks its driver to perform, and the two drivers.

The pipeline (``_pipeline.plan``) is a generator: it yields an effect, the driver performs
it (blocking in ``Session.call``, awaiting in ``Session.acall``) and sends the result back
(or throws the exception in). That is the only place where sync and async differ.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import queue
import threading
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")


class AttemptTimeout(Exception):  # noqa: N818 - internal signal, never escapes the pipeline
    """An attempt got no answer in time; ``late`` is the abandoned attempt, if it runs on."""

    def __init__(self, seconds: float, late: concurrent.futures.Future[Any] | None = None) -> None:
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds = seconds
        self.late = late


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


class Threads:
    """Where sync tools with a timeout run, so that a hung one can be abandoned.

    The pool grows: a call that finds no idle thread starts one, so hung tools never take
    capacity from healthy ones. Threads are daemons (a hung tool never keeps the
    interpreter from exiting) and leave after a minute idle. A job whose caller gave up
    before it started (``Future.cancel``) never starts.
    """

    def __init__(self, idle_s: float = 60.0) -> None:
        self._jobs: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Any, tuple[Any, ...]]]
        self._jobs = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # idle threads not yet promised a job
        self._idle_s = idle_s

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1
        self._jobs.put((fut, fn, args))
        if start:
            threading.Thread(target=self._work, name="headway-tool", daemon=True).start()
        return fut

    def _work(self) -> None:
        while True:
            try:
                fut, fn, args = self._jobs.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # nobody was promised this thread: leave
                        self._idle -= 1
                        return
                continue  # a job is on its way to us
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn(*args))
                except BaseException as exc:
                    fut.set_exception(exc)
            del fut, fn, args
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


def _attempt_sync(e: Attempt, sleep: Callable[[float], None]) -> Any:
    if e.is_async:
        fut = _pool.submit(_run_coroutine, e.fn, e.kwargs, e.timeout)
    elif e.timeout is None:
        result = e.fn(**e.kwargs)
        if type(result) not in _NOT_AWAITABLE and inspect.isawaitable(result):
            return _pool.submit(asyncio.run, _awaited(result)).result()
        return result
    else:
        fut = _pool.submit(_call_through, e.fn, e.kwargs)
    try:
        return fut.result(timeout=e.timeout)
    except TimeoutError:
        if fut.done():
            raise  # the tool's own timeout: the pipeline treats it as one too
        # an attempt that has not started yet never will; one that has runs on, abandoned
        raise AttemptTimeout(e.timeout or 0.0, None if fut.cancel() else fut) from None


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
                    send = _pool.submit(asyncio.run, _awaited(send)).result()
            elif isinstance(effect, Attempt):
                send = _attempt_sync(effect, sleep)
            elif isinstance(effect, Sleep):
                sleep(effect.seconds)
            else:
                send = effect.future.result(timeout=effect.timeout)
        except BaseException as exc:
            error = exc


async def _attempt_async(e: Attempt) -> Any:
    if e.is_async:
        try:
            # cancelled on timeout; asyncio.timeout, unlike wait_for, makes no task per call
            async with asyncio.timeout(e.timeout):
                return await e.fn(**e.kwargs)
        except TimeoutError:
            raise AttemptTimeout(e.timeout or 0.0) from None
    # a sync tool must not block the event loop: it runs in a thread, abandoned on timeout
    fut = _pool.submit(_call_through, e.fn, e.kwargs)
    try:
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), e.timeout)
    except TimeoutError:
        if fut.done():
            raise
        raise AttemptTimeout(e.timeout or 0.0, None if fut.cancel() else fut) from None


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
                    send = await asyncio.to_thread(effect.fn, *effect.args)
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
            error = exc


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
