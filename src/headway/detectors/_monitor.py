"""The detectors a step goes through, in order (``CALL_SIGNALS``, ``RESULT_SIGNALS``, the
session's plug-ins, ``MARKS``), and ``Monitor``: one session's I/O-free judge over its
window.

The pipeline asks the monitor twice per call: ``before()`` (should this call be
corrected instead of run?) and ``after()`` (run the detectors over the step, then
correct, escalate or stop). Both cost O(window) at most, whatever the length of the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._spec import ToolSpec
from ..outcome import CACHED, CORRECTED, EXECUTED, Status
from ..similarity import Normalizer
from . import _decide, _record
from ._cycle import Cycle, cycle_of
from ._decide import Verdict
from ._near_duplicate import NearDuplicate
from ._observation import Observation
from ._progress import ProgressMark
from ._protocol import Detector, PlugIn
from ._reading import Reader
from ._recurrence import Recurrence
from ._repeat import Repeat
from ._repeated_error import RepeatedError
from ._same_result import SameResult
from ._window import Window

# The detectors, in the order a step goes through them. Signals (semantics §3) of the
# call are read on every step, signals of its result on a step that has one (not one
# served from the cache or corrected); then the session's plug-ins (``detectors=``);
# then the marks (§4.1), which read what the signals and plug-ins found, and last the
# recurrence, which reads the mark (its correction comes after every other one, and only
# on a step with a result). A new signal is one more object in CALL_SIGNALS or
# RESULT_SIGNALS.
CALL_SIGNALS: tuple[Detector, ...] = (Repeat(), Cycle())
RESULT_SIGNALS: tuple[Detector, ...] = (SameResult(), NearDuplicate())
MARKS: tuple[Detector, ...] = (RepeatedError(), ProgressMark(), Recurrence())
SIGNALS = CALL_SIGNALS + RESULT_SIGNALS
DEFAULT_DETECTORS = SIGNALS + MARKS


class Monitor:
    """One session's (or agent's) detectors over its window."""

    __slots__ = ("detectors", "limit", "reader", "served", "versions", "window")

    def __init__(
        self,
        *,
        limit: int,
        window: int,
        normalizers: Sequence[Normalizer],
        threshold: float = 0.75,
        detectors: Sequence[Detector] = (),
    ) -> None:
        self.limit = limit
        self.reader = Reader(normalizers)
        self.window = Window(window, threshold=threshold, plugged=bool(detectors))
        self.versions = self.window.versions  # tool -> the version its steps were made under
        plugins = tuple(PlugIn(d) for d in detectors)
        self.detectors = (*CALL_SIGNALS, *RESULT_SIGNALS, *plugins, *MARKS)
        self.served = (*CALL_SIGNALS, *plugins, *MARKS)  # for a step with no result of its own

    @property
    def last_progress_step(self) -> int | None:
        return self.window.last_progress_step

    def user_turn(self) -> None:
        """A new user request: repeat and no-progress counters start again."""
        self.window.user_turn()

    def adopt(self, tool: str, version: str) -> None:
        """The calls to come of ``tool`` are under ``version`` (``Window.adopt``). Callers
        hold the session's lock and check ``versions.get(tool) != version`` first."""
        self.window.adopt(tool, version)

    # -- before a call ---------------------------------------------------------------------

    def may_correct(self, key: str) -> bool:
        """Whether ``before()`` could correct a call with this key: only a key that repeats
        the previous call's or that is in the window can. Needs no lock (a dict lookup and a
        comparison): most calls skip ``before()`` and the lock it takes."""
        return key == self.window.repeat_key or key in self.window.keys

    def before(
        self,
        spec: ToolSpec,
        key: str,
        effect: str,
        args: str = "",
        held: Mapping[str, Any] | None = None,
    ) -> str | None:
        """A correction text when this call should not run: a read repeat whose result
        headway holds as current (``held``, its cache entry), or a cycle. Without a current
        entry a repeated read runs: its result may have changed out of headway's sight
        (``after()`` then says whether it did)."""
        if spec.poll:
            return None
        window = self.window
        if effect == "read" and held is not None:
            same = _decide.streak(window, key)  # earlier calls in a row with the same result
            if same >= 2:
                return _decide.held_repeat(spec, same, args, held)
        cycle = cycle_of(window, key)
        if cycle is not None:
            period, _start = cycle
            recent = window.recent(2 * period - 1)
            if all(o.mark != "progress" for o in recent):
                prev = window.last_of_key.get(key)
                return _decide.cycle_round(window, period, prev, held is not None)
        return None

    # -- after a call ----------------------------------------------------------------------

    def observation(
        self,
        index: int,
        tool: str,
        key: str,
        args_id: str,
        effect: str,
        status: Status,
        text: str | None,
        error: str | None = None,
        args: str = "",
        targets: Sequence[str] = (),
    ) -> Observation:
        """A step to pass to ``after()``; stored texts are capped so memory stays bounded.
        ``targets``: the tool's arguments that name an element (``ToolSpec.targets``)."""
        window = self.window
        prev = window.last_of_key.get(key)
        return self.reader.read(
            prev,
            index,
            tool,
            key,
            args_id,
            effect,
            status,
            text,
            error,
            args,
            window.recur,
            targets,
        )

    def after(
        self,
        spec: ToolSpec,
        step: Observation,
        value: Any,
        now: float,
        session_limit: int,
    ) -> Verdict:
        """Run the detectors over the step, then correct, escalate or stop (§4.2)."""
        window = self.window
        step.spec, step.value = spec, value
        signals: dict[str, Any] = {}
        served = step.status is CACHED or step.status is CORRECTED
        for detector in self.served if served else self.detectors:
            found = detector.observe(step, window)
            if found:
                signals.update(found)
        correction = None if served else _decide.correction(window, spec, step)
        if step.mark == "progress":
            window.no_progress_run = 0
            window.last_progress_step = step.index
            window.polls.pop(step.key, None)
        elif step.mark == "no_progress":
            window.no_progress_run += 1
        stop = None
        if spec.poll and step.status is EXECUTED:
            stop = _decide.poll_budget(window, spec, step, now)
        window.push(step)
        verdict = _decide.escalate(window, spec, step, signals, correction, stop, session_limit)
        times = signals.get("recurrence")
        if type(times) is int and verdict.correction is None:  # a plug-in's would be a dict
            return verdict._replace(correction=_decide.recurrence_note(step, times))
        return verdict

    # -- a session record (a session shared by workers through the store) ------------------

    def snapshot(self, lists: bool = True) -> dict[str, Any]:
        """The window and counters as JSON (``_record``); ``lists=False``: its steps and
        recurrence entries left empty (``texts()`` gives them)."""
        return _record.snapshot(self.window, lists)

    def texts(self) -> tuple[list[str], list[str]]:
        """The window's steps and recurrence entries as JSON texts, each encoded once."""
        return _record.texts(self.window)

    def restore(self, data: Mapping[str, Any]) -> None:
        """Replace this monitor's state by a ``snapshot()`` (of any worker)."""
        _record.restore(self.window, data)
