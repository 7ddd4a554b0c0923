"""What a session remembers of its recent steps (semantics §3): the bounded ``Window`` of
judged steps, the indexes the detectors look things up in (keys, results, short answers,
content units, the last page), the session's counters (repeat, no progress), each tool's
state (its error run, polls, last result) and version (a new version is a new epoch),
and the memory of the recurrence signal (``recur``: targets and states, cleared with the
rest on a user turn or a new version).

The window is a read-only ``Sequence`` of its steps, which is what a plug-in detector is
given; the built-in detectors read its indexes too. Its record for a shared session is in
``_record.py``. Memory stays bounded whatever the run length: a step joining the window
keeps only its compact forms (``Observation._settle``), and a step no decision reads
again keeps only its digest (``retire``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, overload

from .._recurrence import Recurrence
from .._seen import Seen
from ..outcome import CACHED, CORRECTED
from ..similarity import SHORT, UNITS
from ._observation import Observation

CANDIDATES = 8  # earlier results of the same tool compared for near-duplicates


class Window(Sequence[Observation]):
    """One session's (or agent's) recent steps, their indexes and counters."""

    __slots__ = (
        "errors",
        "held",
        "keys",
        "last_of_key",
        "last_progress_step",
        "last_value",
        "no_progress_run",
        "norms",
        "page",
        "plugged",
        "polls",
        "probes",
        "pushed",
        "recur",
        "repeat",
        "repeat_key",
        "steps",
        "threshold",
        "units",
        "versions",
    )

    def __init__(self, size: int, *, threshold: float = 0.75, plugged: bool = False) -> None:
        self.steps: deque[Observation] = deque(maxlen=size)
        self.threshold = threshold  # 5-gram Jaccard from which two results are alike
        self.plugged = plugged  # a plug-in reads the window: every step keeps its text
        self.keys: dict[str, int] = {}  # keys in the window -> count
        self.norms: dict[str, int] = {}  # normalised results (nkey) in the window -> count
        self.probes: dict[int, int] = {}  # (tool, query shape, short result) -> count
        self.units = Seen(size * UNITS)  # content units of the window's results
        self.page: Observation | None = None  # the window's last long result
        self.last_of_key: dict[str, Observation] = {}  # the last result of each call
        self.held: list[Observation] = []  # window steps whose norm was rebuilt (hold)
        self.pushed = 0  # steps ever pushed: the window's version
        self.repeat_key = ""
        self.repeat = 0  # consecutive calls with repeat_key
        self.no_progress_run = 0
        self.last_progress_step: int | None = None
        self.errors: dict[str, tuple[str, int]] = {}  # tool -> (fingerprint, run length)
        self.polls: dict[str, tuple[int, float]] = {}  # key -> (unchanged polls, since)
        # tool -> last successful result, of a tool with its own progress check
        self.last_value: dict[str, Any] = {}
        self.versions: dict[str, str] = {}  # tool -> the version its steps were made under
        self.recur = Recurrence(size)  # the same target, the same state, nothing new

    # -- a read-only sequence of the steps ----------------------------------------------

    def __len__(self) -> int:
        return len(self.steps)

    @overload
    def __getitem__(self, i: int) -> Observation: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Observation]: ...
    def __getitem__(self, i: int | slice) -> Observation | Sequence[Observation]:
        if isinstance(i, slice):
            return list(self.steps)[i]
        return self.steps[i]

    def __iter__(self) -> Iterator[Observation]:
        return iter(self.steps)

    def __reversed__(self) -> Iterator[Observation]:
        return reversed(self.steps)

    @property
    def maxlen(self) -> int | None:
        """How many steps the window holds."""
        return self.steps.maxlen

    def recent(self, n: int) -> list[Observation]:
        """The last ``n`` steps, oldest first."""
        return list(self.steps)[-n:]

    # -- a new user turn, a new version --------------------------------------------------

    def user_turn(self) -> None:
        """A new user request: repeat and no-progress counters start again."""
        self.repeat_key = ""
        self.repeat = 0
        self.no_progress_run = 0
        self.errors.clear()
        self.polls.clear()
        self.steps.clear()
        self.last_of_key.clear()
        self.keys.clear()
        self.norms.clear()
        self.units.clear()
        self.probes.clear()
        self.page = None
        self.held.clear()
        self.recur.clear()
        self.pushed += 1

    def adopt(self, tool: str, version: str) -> None:
        """The calls to come of ``tool`` are under ``version``: when it is not the version
        seen so far, what was counted of the tool under the other one is forgotten (its
        steps, repeats, errors, last results), so nothing of it corrects, counts or
        compares with a call under this one."""
        before = self.versions.get(tool)
        self.versions[tool] = version
        if before is None or before == version:
            return
        kept = [o for o in self.steps if o.tool != tool]
        last = [o for o in self.last_of_key.values() if o.tool != tool]
        page = self.page if self.page is not None and self.page.tool != tool else None
        errors = {t: v for t, v in self.errors.items() if t != tool}
        polls = {k: v for k, v in self.polls.items() if not k.startswith(tool + ":")}
        values = {t: v for t, v in self.last_value.items() if t != tool}
        removed = len(kept) != len(self.steps)
        repeat_key, repeat, run = self.repeat_key, self.repeat, self.no_progress_run
        self.user_turn()
        self.load(kept)
        self.last_of_key = {o.key: o for o in last}
        self.page, self.errors, self.polls, self.last_value = page, errors, polls, values
        if not (kept and repeat_key == kept[-1].key and not removed):
            repeat_key, repeat = (kept[-1].key, 1) if kept else ("", 0)
        self.repeat_key, self.repeat = repeat_key, repeat
        if removed:  # the run of no-progress steps, without the tool's
            run = 0
            for o in reversed(kept):
                if o.mark == "progress":
                    break
                run += o.mark == "no_progress"
        self.no_progress_run = run

    def load(self, steps: Sequence[Observation]) -> None:
        """Put judged steps back in an empty window (a record, the steps kept by
        ``adopt``) and count them in its indexes."""
        keys = self.keys
        for step in steps:
            self.steps.append(step)
            keys[step.key] = keys.get(step.key, 0) + 1
            if step.nlen >= 0:
                self._count_result(step)
        self.units.fit(self.steps)

    # -- a judged step joins the window --------------------------------------------------

    def push(self, step: Observation) -> None:
        # the keys counted inline, without helper frames: every step pays them (bench/overhead.py)
        steps, keys = self.steps, self.keys
        old = steps[0] if len(steps) == steps.maxlen else None
        if old is not None:  # the oldest step leaves the window: uncount it
            if self.last_of_key.get(old.key) is old:
                del self.last_of_key[old.key]
            left = keys[old.key] - 1
            if left:
                keys[old.key] = left
            else:
                del keys[old.key]
            if old.nlen >= 0:
                self._uncount_result(old)
        if steps:
            steps[-1]._compact()
        for o in self.held:
            o._compact()
        self.held.clear()
        step._settle()
        steps.append(step)
        self.pushed += 1
        keys[step.key] = keys.get(step.key, 0) + 1
        if step.nlen >= 0:
            self._count_result(step)
            if step.units:
                self.page = step
        if step.units or (old is not None and old.units):
            self.units.fit(steps)  # the units counted changed: resize if need be
        # the last result of the call (a served one repeats it)
        if self.last_of_key.get(step.key) is None or (
            step.status is not CACHED and step.status is not CORRECTED
        ):
            self.last_of_key[step.key] = step
        if step.nlen >= SHORT and not self.pushed & 1 and not self.plugged:
            self.retire()  # after every other long result, as session records were written

    def _count_result(self, step: Observation) -> None:
        """Count a step's result (one with ``nlen >= 0``) in the result indexes."""
        self.norms[step.nkey] = self.norms.get(step.nkey, 0) + 1
        if step.probe:
            self.probes[step.probe] = self.probes.get(step.probe, 0) + 1
        if step.units:
            self.units.add(step.units)

    def _uncount_result(self, old: Observation) -> None:
        """The oldest step, with a result, leaves the window: uncount its result."""
        _remove(self.norms, old.nkey)
        if old.probe:
            _remove(self.probes, old.probe)
        if old.units:
            self.units.remove(old.units)
        if self.page is old:
            self.page = None

    # -- what an older step keeps --------------------------------------------------------

    def hold(self, o: Observation) -> str:
        """A window step's normalised result, rebuilt from its text if need be and then
        kept until the step being judged joins the window (it may be compared again)."""
        norm = o._norm
        if norm is None:
            norm = o._norm = o.norm or ""
            self.held.append(o)
        return norm

    def retire(self) -> None:
        """Drop the texts and sketches of window steps that no decision reads again: an
        older result is compared only while it is among the last ``CANDIDATES`` of its
        tool, the last of its call, or the window's last page, and none of these comes
        back once lost. Only when no plug-in reads the window."""
        seen: dict[str, int] = {}
        for o in reversed(self.steps):
            if o.nlen < 0:
                continue
            n = seen[o.tool] = seen.get(o.tool, 0) + 1
            if (
                n > CANDIDATES
                and o._body is not None  # not _text: no need to inflate it
                and o.nlen >= SHORT
                and self.last_of_key.get(o.key) is not o
                and o is not self.page
            ):
                o._retire()


def _remove(counts: dict[Any, int], item: Any) -> None:
    left = counts[item] - 1
    if left:
        counts[item] = left
    else:
        del counts[item]
