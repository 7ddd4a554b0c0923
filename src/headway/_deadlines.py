"""The timeout of an async attempt: ``asyncio.timeout``'s rule with one timer per event
loop for all attempts, not a timer per attempt.

``asyncio.timeout`` schedules a timer handle when an attempt starts and cancels it when
the attempt ends: a push onto the loop's heap, compared in Python, and heap rebuilds
when cancelled handles pile up; 7-8% of the stdio proxy's event-loop CPU per call
(measured with the attempt's timeout removed). Attempts end long before their timeout
(milliseconds against 30 s), so one timer set for the earliest deadline serves them
all, and starting or ending an attempt is a set insert and delete. When it fires, every
attempt past its deadline has its task cancelled; that cancellation ends the attempt as
``TimeoutError`` unless the task was also cancelled by someone else meanwhile
(``Task.uncancel``, as ``asyncio.timeout`` decides).
"""

from __future__ import annotations

import asyncio
import math
import weakref
from typing import Any


class Deadline:
    """One attempt's deadline, watched by its loop's ``_Timer`` until ``end()``."""

    __slots__ = ("_cancelling", "_expired", "_task", "_timer", "when")

    def __init__(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("an attempt's timeout needs a task")
        timer = _timers.get(loop)
        if timer is None:
            timer = _timers[loop] = _Timer()
        self.when = loop.time() + seconds
        self._task = weakref.ref(task)  # the loop's timer must not keep the loop alive
        self._cancelling = task.cancelling()
        self._expired = False
        self._timer = timer
        timer.watch(self, loop)

    @property
    def expired(self) -> bool:
        """Whether this deadline has passed and cancelled its task."""
        return self._expired

    def end(self, exc: BaseException | None) -> bool:
        """Stop watching; True when ``exc`` is this deadline's cancellation: a timeout."""
        self._timer.deadlines.discard(self)
        task = self._task()
        if not self._expired or task is None:
            return False
        # ours alone (no other cancel() came meanwhile): asyncio.timeout's rule
        ours = task.uncancel() <= self._cancelling
        return ours and type(exc) is asyncio.CancelledError

    def _expire(self) -> None:
        task = self._task()
        if task is not None and not task.done():
            self._expired = True
            task.cancel()


class _Timer:
    """A loop's watched deadlines and the time its one timer is set for."""

    __slots__ = ("at", "deadlines")

    def __init__(self) -> None:
        self.deadlines: set[Deadline] = set()
        self.at = math.inf  # a timer set for this time or earlier is pending

    def watch(self, deadline: Deadline, loop: asyncio.AbstractEventLoop) -> None:
        self.deadlines.add(deadline)
        if deadline.when < self.at:  # the earliest: a timer for it
            self._set(deadline.when, loop)

    def _set(self, when: float, loop: asyncio.AbstractEventLoop) -> None:
        self.at = when
        loop.call_at(when, self._fire, loop, when)

    def _fire(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if when != self.at:  # replaced by a timer for an earlier deadline, which went first
            return
        # the loop runs a timer up to its clock's resolution early: due at ``when``
        now = max(loop.time(), when)
        due = [d for d in self.deadlines if d.when <= now]
        for deadline in due:
            self.deadlines.discard(deadline)
            deadline._expire()
        self.at = math.inf
        if self.deadlines:
            self._set(min(d.when for d in self.deadlines), loop)


_timers: weakref.WeakKeyDictionary[Any, _Timer] = weakref.WeakKeyDictionary()
