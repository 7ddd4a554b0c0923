"""A swap's new value sent as edits of the value it replaces (``stores._delta``)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from headway.stores._base import shared_prefix
from headway.stores._delta import apply, edits

_TEXT = st.text(alphabet=',:[]{}"ab1é\\ ', max_size=60)


@given(_TEXT, st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3), _TEXT), max_size=5))
def test_edits_make_the_new_text_out_of_the_old_one(
    old: str, changes: list[tuple[int, int, str]]
) -> None:
    new = old
    for where, cut, text in changes:  # a few replacements anywhere
        at = min(where, len(new))
        new = new[:at] + text[:4] + new[at + cut :]
    # what the store's server does with them: on characters (PostgreSQL), on bytes (Redis)
    assert apply(old, edits(old, new)) == new
    assert apply(old.encode(), edits(old.encode(), new.encode())) == new.encode()


def test_a_record_that_changes_by_a_few_fields_is_sent_in_a_fraction_of_its_size() -> None:
    old = {"ver": 13, "steps": 13, "meter": [0, 13, {"price": 10, "pay": 3}], "n": "é" * 300}
    new = {**old, "ver": 14, "steps": 14, "meter": [0, 14, {"price": 10, "pay": 4}]}
    a, b = (json.dumps(x, separators=(",", ":")) for x in (old, new))
    runs = edits(a, b)
    assert apply(a, runs) == b
    inserted = sum(len(r) for r in runs if isinstance(r, str))
    assert inserted + 6 * len(runs) < len(b) / 4  # sent as about 6 bytes a run


@given(st.text(max_size=20), st.text(max_size=20), st.integers(0, 20))
def test_the_shared_start_of_two_texts_is_found_in_characters_and_in_bytes(
    a: str, b: str, keep: int
) -> None:
    b = a[:keep] + b  # often a long shared start
    same = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    assert shared_prefix(a, b) == same
    ea, eb = a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass")
    same = next(
        (i for i, (x, y) in enumerate(zip(ea, eb, strict=False)) if x != y), min(len(ea), len(eb))
    )
    assert shared_prefix(ea, eb) == same


def test_a_head_changed_at_its_start_middle_and_end_sends_only_those_fields() -> None:
    """A session record's head, held as a JSON string (its quotes escaped): the step's
    counters at the start, the window's last step in the middle and the parts' versions at
    the end change; the fields between them are copied, in characters and in bytes."""
    old = {"ver": 13, "steps": 13, "w": "é" * 150, "rk": 'pay:{"n":1}', "x": "ab" * 150, "v": 13}
    new = {**old, "ver": 14, "steps": 14, "rk": 'pay:{"n":2}', "v": 14}
    a, b = (json.dumps(json.dumps(x, separators=(",", ":"))) for x in (old, new))
    runs, byte_runs = edits(a, b), edits(a.encode(), b.encode())
    assert apply(a, runs) == b and apply(a.encode(), byte_runs) == b.encode()
    for r in (runs, byte_runs):
        assert sum(len(x) for x in r if not isinstance(x, tuple)) < 60
