"""The window's content units as a counting filter: exact answers, bounded memory."""

from __future__ import annotations

import random
import sys
import tracemalloc
from array import array
from collections.abc import Iterator

from headway._seen import Seen


class Step:
    def __init__(self, units: list[int]) -> None:
        self.units = array("Q", units)


def filled(steps: list[Step]) -> Seen:
    seen = Seen(32 * 256)
    for n, s in enumerate(steps, 1):
        seen.add(s.units)
        seen.fit(steps[:n])
    return seen


def test_a_unit_whose_slot_another_unit_took_is_not_seen() -> None:
    """An empty filter has 256 slots: 7 and 7 + 256 share one, and only 7 is held."""
    window = [Step([7])]
    seen = filled(window)
    assert seen.all_in([7], window)
    assert not seen.all_in([7 + 256], window)
    assert not seen.all_in([7, 7 + 256], window)


def test_no_units_are_all_seen_even_in_an_empty_window() -> None:
    assert Seen(256).all_in([], [])


class Unread(list[Step]):
    """A window that must not be read: the filter alone answers."""

    def __reversed__(self) -> Iterator[Step]:
        raise AssertionError("the window was read")


def test_a_unit_whose_step_left_is_answered_by_the_filter_alone() -> None:
    window = [Step([7, 9]), Step([9])]
    seen = filled(window)
    seen.remove(window.pop(0).units)
    seen.fit(window)
    assert seen.all_in([9], window)
    assert not seen.all_in([7], Unread(window))


def test_the_filter_shrinks_when_the_window_s_large_results_leave() -> None:
    rng = random.Random(9)
    window = [Step([rng.getrandbits(64) for _ in range(256)]) for _ in range(32)]
    seen = filled(window)
    large = sys.getsizeof(seen._counts)
    for i in range(32):
        seen.remove(window.pop(0).units)
        window.append(Step([i]))
        seen.add(window[-1].units)
        seen.fit(window)
    assert sys.getsizeof(seen._counts) * 16 < large
    assert seen.all_in(range(32), window)


def test_answers_equal_a_set_s_as_the_window_grows_and_shrinks() -> None:
    """Growing past half full and shrinking back rebuild the filter from the window."""
    rng = random.Random(5)
    window: list[Step] = []
    seen = Seen(32 * 256)
    pool = [rng.getrandbits(64) for _ in range(3000)]
    for n in range(200):
        step = Step(rng.sample(pool, rng.choice((1, 5, 256))))
        if len(window) == 32:
            seen.remove(window.pop(0).units)
        window.append(step)
        seen.add(step.units)
        seen.fit(window)
        held = {u for s in window for u in s.units}
        for probe in (rng.sample(pool, 3), [rng.choice(list(held))], rng.sample(list(held), 3)):
            assert seen.all_in(probe, window) == held.issuperset(probe), n


def test_the_filter_of_a_coding_window_holds_a_few_kib() -> None:
    """265 distinct line hashes (a coding agent's window): a dict of them held ~20 KiB."""
    rng = random.Random(3)
    units = [rng.getrandbits(64) for _ in range(265)]
    window = [Step(units[i : i + 40]) for i in range(0, 265, 8)]
    tracemalloc.start()
    try:
        seen = filled(window)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert seen.all_in(units, window)
    assert held < 4096, held
