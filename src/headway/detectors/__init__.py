"""Signals and progress marks (semantics §3, §4.1, §4.2): detection collects, decisions
follow from progress, never from a repeat count alone.

A step (``Observation``, made by ``_reading``) goes through the detectors listed in
``_monitor``: each a small object with one method, ``observe(step, window)``, the same
shape as a plug-in's (``Detector``). The ``Monitor`` runs them, then corrects, escalates
or stops (``_decide``). What a session remembers is its ``Window`` (``_window``), stored
for a shared session as a record (``_record``).

    _observation     the step, and the compact forms it keeps in the window
    _reading         a call read into a step: normalisation of its result and arguments
    _window          the window, its indexes and the session's counters
    _record          the window as stored in a session record (a fixed format)
    _likeness        how two results compare (near-duplicates, news, growth)
    _protocol        the Detector protocol; how a plug-in is run
    _repeat, _cycle, _same_result, _near_duplicate      the signals
    _repeated_error, _progress                           the marks (errors reported as
                                                         text: ``headway._text_errors``)
    _recurrence      the signal read last, over the marks (``headway._recurrence``)
    _decide          corrections, escalation, stops
    _monitor         the detectors in order, and the Monitor that runs them
"""

from ._cycle import Cycle
from ._decide import Verdict
from ._monitor import CALL_SIGNALS, DEFAULT_DETECTORS, MARKS, RESULT_SIGNALS, SIGNALS, Monitor
from ._near_duplicate import NearDuplicate
from ._observation import Mark, Observation
from ._progress import ProgressMark
from ._protocol import Detector
from ._recurrence import Recurrence
from ._repeat import Repeat
from ._repeated_error import RepeatedError
from ._same_result import SameResult
from ._window import Window

__all__ = [
    "CALL_SIGNALS",
    "DEFAULT_DETECTORS",
    "MARKS",
    "RESULT_SIGNALS",
    "SIGNALS",
    "Cycle",
    "Detector",
    "Mark",
    "Monitor",
    "NearDuplicate",
    "Observation",
    "ProgressMark",
    "Recurrence",
    "Repeat",
    "RepeatedError",
    "SameResult",
    "Verdict",
    "Window",
]
