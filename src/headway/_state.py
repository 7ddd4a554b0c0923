"""One session's state: everything the decision core reads and updates, nothing else."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from .budgets import Budgets, Meter
from .detectors import Monitor
from .errors import Stop

_MAX_AGENTS = 1_000


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
    # a session shared by workers (``_shared``): the record as last read or written here,
    # and the step whose budget stop is provisional until that step settles
    shared: bool = False
    remote: str | None = None
    provisional: int | None = None
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    # multi-agent runs: each named agent's own repeat / cycle / no-progress stream
    agents: dict[str, Monitor] = dataclasses.field(default_factory=dict)
    make_monitor: Callable[[], Monitor] | None = None

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
