"""One session's state: everything the decision core reads and updates, nothing else."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from .budgets import Budgets, Meter
from .detectors import Monitor
from .errors import Stop

_MAX_AGENTS = 1_000


class Turns:
    """One write of a shared session's record in flight per process; other threads (and
    tasks) queue for their turn, first come first served. Without it the threads of one
    worker race each other's compare-and-set on the same record: each swap built on one
    still in flight fails and is redone (8 threads ran at a third of one thread's pace).

    A turn is waited for through a future, which both drivers can wait on (``Wait``): an
    event loop never blocks on it."""

    __slots__ = ("_busy", "_lock", "_queue", "entered")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # made on the first wait (~760 bytes empty): most sessions are not shared by
        # workers, and a shared one's threads rarely queue
        self._queue: deque[concurrent.futures.Future[None]] | None = None
        self._busy = False
        self.entered = 0  # turns ever asked for

    def quiet_since(self, entered: int) -> bool:
        """No write from this process in flight, and none since ``entered`` was read: a
        record read meanwhile is not older than what this process last wrote."""
        return not self._busy and self.entered == entered

    def enter(self) -> concurrent.futures.Future[None] | None:
        """None: the turn is the caller's; else a future done when it is."""
        with self._lock:
            self.entered += 1
            if not self._busy:
                self._busy = True
                return None
            fut: concurrent.futures.Future[None] = concurrent.futures.Future()
            if self._queue is None:
                self._queue = deque()
            self._queue.append(fut)
            return fut

    def try_enter(self) -> bool:
        """The turn, if nobody has it (True); never waits."""
        with self._lock:
            if self._busy:
                return False
            self.entered += 1
            self._busy = True
            return True

    def leave(self) -> None:
        """Hand the turn to the next waiter still waiting."""
        with self._lock:
            while self._queue:
                fut = self._queue.popleft()
                if fut.set_running_or_notify_cancel():  # False: its caller gave up waiting
                    fut.set_result(None)
                    return
            self._busy = False

    def give_up(self, fut: concurrent.futures.Future[None]) -> None:
        """A waiter leaves (cancelled, say): the turn, if it came meanwhile, passes on."""
        if not fut.cancel():  # running or done: the turn was handed to it
            self.leave()


@dataclasses.dataclass(slots=True)
class SessionState:
    session_id: str
    monitor: Monitor
    meter: Meter
    no_progress_limit: int
    agent: str | None = None
    task_type: str | None = None
    steps: int = 0
    stop: Stop | None = None  # set when a limit is reached: the next call raises it
    would_stop: dict[str, Any] | None = None  # shadow mode: the stop that did not happen
    generation: dict[str, int] = dataclasses.field(default_factory=dict)  # cache epochs
    epoch: int = 0  # bumped after every change of ``generation``
    # tool -> (its spec, the epoch, its cache-key prefix then)
    key_prefixes: dict[str, tuple[Any, int, str]] = dataclasses.field(default_factory=dict)
    unknown_writes: dict[str, float] = dataclasses.field(default_factory=dict)  # §5.4
    # a step-keyed write left UNKNOWN: its tool and arguments -> its idempotency key
    unknown_steps: dict[str, str] = dataclasses.field(default_factory=dict)
    # the reads of the current model turn (§1: a model's parallel batch): (turn, their keys)
    batch: tuple[int, set[str]] = dataclasses.field(default_factory=lambda: (0, set()))
    # a session shared by workers (``_shared``): the record as last read or written here,
    # and the step whose budget stop is provisional until that step settles
    shared: bool = False
    remote: str | None = None
    version: int = 0  # the newest version of the record read or written here (never older)
    # the record's parts held here (``_record_parts``): name -> part
    parts: dict[str, Any] = dataclasses.field(default_factory=dict)
    layout: Any = None  # the head this worker wrote last: (its text, its layout)
    provisional: int | None = None
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    turns: Turns = dataclasses.field(default_factory=Turns)  # record writes, FIFO
    # multi-agent runs: each named agent's own repeat / cycle / no-progress stream
    agents: dict[str, Monitor] = dataclasses.field(default_factory=dict)
    make_monitor: Callable[[], Monitor] | None = None
    # never resumed (a stdio proxy's session: an id made for this process): its cache
    # epochs stay in memory, since no later run reads them back from the store
    transient: bool = False
    # the write epochs published apart from the record (``_epochs.Epochs``): a shared
    # session's own, or its workspace's; None: the epochs are ``generation``, kept here
    epochs: Any = None

    def in_batch(self, key: str) -> bool:
        """Whether a read with this key ran or was served earlier in the same model turn:
        a model's parallel batch, when the session is told of its turns (``record_turn``)."""
        turn, keys = self.batch
        return turn > 0 and turn == self.meter.turns and key in keys

    def batched(self, key: str) -> None:
        """A read of the current model turn (``in_batch``); the session has had turns."""
        turn = self.meter.turns
        if self.batch[0] != turn:
            self.batch = (turn, set())
        self.batch[1].add(key)

    def monitor_of(self, agent: str | None) -> Monitor:
        """The detector stream of ``agent`` (the session's own for None or its agent)."""
        if agent is None or agent == self.agent or self.make_monitor is None:
            return self.monitor
        monitor = self.agents.get(agent)
        if monitor is None:
            while len(self.agents) >= _MAX_AGENTS:  # bounded: forget the oldest agent
                self.agents.pop(next(iter(self.agents)))
            monitor = self.agents.setdefault(agent, self.make_monitor())  # atomic
        return monitor

    def monitors(self) -> list[Monitor]:
        return [self.monitor, *self.agents.values()]

    @classmethod
    def new(
        cls,
        session_id: str,
        *,
        budgets: Budgets,
        monitor: Monitor,
        limit: int,
        now: float,
        agent: str | None,
        task_type: str | None,
    ) -> SessionState:
        return cls(session_id, monitor, Meter(budgets, now), limit, agent, task_type)
