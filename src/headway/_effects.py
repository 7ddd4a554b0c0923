"""The effects the decision pipeline asks its driver to perform, and the two drivers.

The pipeline (``_pipeline.plan``) is a generator: it yields an effect, the driver performs
it (blocking in ``Session.call``, awaiting in ``Session.acall``) and sends the result back
(or throws the exception in). That is the only place where sync and async differ. How one
attempt of a tool is bounded by its timeout is ``_tool_runs``; the threads sync tools run
in are ``_tool_threads``. ``Flights`` holds the futures a ``Wait`` waits for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any, NamedTuple, TypeVar

from ._tool_runs import AttemptTimeout, attempt_async, attempt_sync, run_to_end

__all__ = [
    "Aborted",
    "Attempt",
    "AttemptTimeout",
    "Blocking",
    "Effect",
    "Flights",
    "Plan",
    "Sleep",
    "Wait",
    "drive_async",
    "drive_sync",
]

T = TypeVar("T")


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
                    send = run_to_end(send)
            elif isinstance(effect, Attempt):
                send = attempt_sync(effect.fn, effect.kwargs, effect.timeout, effect.is_async)
            elif isinstance(effect, Sleep):
                sleep(effect.seconds)
            else:
                send = effect.future.result(timeout=effect.timeout)
        except BaseException as exc:
            error = exc if isinstance(exc, _PASSED) else Aborted(exc)


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
                send = await attempt_async(
                    effect.fn, effect.kwargs, effect.timeout, effect.is_async
                )
            elif isinstance(effect, Sleep):
                result = sleep(effect.seconds)
                if asyncio.iscoroutine(result):
                    await result
            else:
                send = await asyncio.wait_for(asyncio.wrap_future(effect.future), effect.timeout)
        except BaseException as exc:
            error = exc if isinstance(exc, _PASSED) else Aborted(exc)


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
