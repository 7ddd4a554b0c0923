"""The one shape of a detector (``Detector``), built in or plugged in, and how a plug-in
is run (``PlugIn``): its signals under its name, its failures contained."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from .._call import describe
from ._observation import Observation
from ._window import Window


class Detector(Protocol):
    """A signal: one small object with one method over the step being judged and the
    window of the steps before it (a ``Sequence`` of ``Observation``, oldest first).

    ``observe`` returns the signals it found, or None. A plug-in's are reported under its
    ``name``, and ``{"duplicate": True}`` makes the step's result count as a repeat (an
    embedding similarity, say). The built-in detectors have this shape too: they mark the
    step themselves (``duplicate``, ``unchanged``, ``mark``) and read the window's indexes.
    """

    name: str

    def observe(self, step: Observation, window: Window) -> Mapping[str, Any] | None: ...


class PlugIn:
    """A session's own detector as the Monitor runs it: a plug-in must never break a call."""

    __slots__ = ("detector", "name")

    def __init__(self, detector: Detector) -> None:
        self.detector = detector
        self.name = detector.name

    def observe(self, step: Observation, window: Window) -> Mapping[str, Any] | None:
        name = self.detector.name
        try:
            extra = self.detector.observe(step, window)
        except Exception as exc:
            return {name: {"error": describe(exc)[:200]}}
        if not extra:
            return None
        step.duplicate = step.duplicate or bool(extra.get("duplicate"))
        return {name: dict(extra)}
