"""Which content units (line hashes) the detector window has seen.

A dict of the units held ~80 bytes a unit (a 64-bit int object and a dict entry): ~20 KiB
for a coding agent's window of 32 steps. This holds a counting filter instead, two bytes a
slot at a quarter full or less: it answers "not seen" exactly (a unit's slot is empty),
and a unit whose slot is taken is looked up in the window's steps themselves, which keep
their units packed. Those look-ups run only when every unit of a result passes the
filter: the result repeats the window, or a few of its units collide.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Iterable, Sequence
from typing import Protocol

_MIN = 256  # slots of an empty filter


class _Step(Protocol):
    @property
    def units(self) -> Collection[int]: ...


class Seen:
    """The units of the window's steps, counted by slot (``u & mask``)."""

    __slots__ = ("_code", "_counts", "_mask", "_used")

    def __init__(self, most: int) -> None:
        # a slot counts at most ``most`` units (the window's steps times UNITS): 16 bits
        # hold that for a window of up to 255 steps
        self._code = "H" if most < 1 << 16 else "L"
        self.clear()

    def clear(self) -> None:
        self._counts = array(self._code, [0]) * _MIN
        self._mask = _MIN - 1
        self._used = 0  # slots not empty

    def add(self, units: Iterable[int]) -> None:
        counts, mask, used = self._counts, self._mask, self._used
        for u in units:
            i = u & mask
            n = counts[i]
            counts[i] = n + 1
            if not n:
                used += 1
        self._used = used

    def remove(self, units: Iterable[int]) -> None:
        counts, mask, used = self._counts, self._mask, self._used
        for u in units:
            i = u & mask
            n = counts[i] - 1
            counts[i] = n
            if not n:
                used -= 1
        self._used = used

    def fit(self, window: Iterable[_Step]) -> None:
        """Resize when over half full or under a sixteenth (rebuilt from the window)."""
        size, used = len(self._counts), self._used
        if used * 2 <= size and (size == _MIN or used * 16 >= size):
            return
        size = _MIN
        while size < 4 * used:
            size *= 2
        self._counts = array(self._code, [0]) * size
        self._mask, self._used = size - 1, 0
        for step in window:
            self.add(step.units)

    def all_in(self, units: Collection[int], window: Sequence[_Step]) -> bool:
        """Whether every unit is in the window's steps (exact)."""
        counts, mask = self._counts, self._mask
        for u in units:
            if not counts[u & mask]:
                return False
        need = set(units)
        for step in reversed(window):  # the latest steps are the likeliest to hold them
            if not need:
                break
            need.difference_update(step.units)
        return not need
