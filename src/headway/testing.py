"""Public test doubles: a fake clock, a scripted tool, and re-exports useful in tests."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from .audit import MemoryAudit
from .retry import set_testing

__all__ = ["FakeClock", "MemoryAudit", "ScriptedTool", "set_testing"]


class FakeClock:
    """A clock that moves only when told; ``sleep`` advances it (pass it as ``sleep=``)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)


class ScriptedTool:
    """A tool that returns (or raises) the scripted items in order, then repeats the last.

    An item that is an exception instance is raised; a callable is called with the
    arguments. ``calls`` records every call's keyword arguments.
    """

    def __init__(self, script: Iterable[Any], name: str = "scripted") -> None:
        self.script = list(script)
        if not self.script:
            raise ValueError("a scripted tool needs at least one item")
        self.calls: list[dict[str, Any]] = []
        self.__name__ = name
        self._lock = threading.Lock()

    def __call__(self, **kwargs: Any) -> Any:
        with self._lock:
            index = min(len(self.calls), len(self.script) - 1)
            self.calls.append(kwargs)
        item = self.script[index]
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            fn: Callable[..., Any] = item
            return fn(**kwargs)
        return item

    @property
    def count(self) -> int:
        return len(self.calls)
