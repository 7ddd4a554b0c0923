"""The life of an idempotency key as data: its moves make the records §5.2 names, no other
move is made, and a record found by a claim means what its state says."""

from __future__ import annotations

import pytest

from headway._keylife import (
    ABSENT,
    COMPLETED,
    FAILED_FINAL,
    IN_PROGRESS,
    MOVES,
    UNKNOWN,
    Event,
    Seen,
    claim,
    malformed,
    move,
    seen,
)

CLAIM = claim("pay", "digest", "owner-1", 100.0, 30.0, 86_400.0)


def test_a_claim_is_a_well_formed_in_progress_record_owned_while_its_lease_lives() -> None:
    assert CLAIM["state"] == IN_PROGRESS and CLAIM["owner"] == "owner-1"
    assert CLAIM["expires"] == 100.0 + 86_400.0
    assert malformed(CLAIM) is None


@pytest.mark.parametrize(
    ("event", "state"),
    [
        (Event.RETURNED, COMPLETED),
        (Event.FAILED, FAILED_FINAL),
        (Event.LOST, UNKNOWN),
        (Event.FOUND, COMPLETED),
    ],
)
def test_each_move_out_of_in_progress_makes_a_settled_record_without_an_owner(
    event: Event, state: str
) -> None:
    new = move(CLAIM, event, 200.0, 10.0, value={"ok": 1}, error={"code": "x"})
    assert new is not None and new["state"] == state == MOVES[IN_PROGRESS, event]
    assert new["owner"] is None and new["expires"] == 210.0
    assert malformed(new) is None


def test_a_tool_that_raised_releases_its_key() -> None:
    assert move(CLAIM, Event.RAISED, 200.0, 10.0) is None
    assert MOVES[IN_PROGRESS, Event.RAISED] == ABSENT


def test_a_completed_record_keeps_the_result_and_says_who_found_it() -> None:
    new = move(CLAIM, Event.RETURNED, 200.0, 10.0, value={"ok": 1}, by="late")
    assert new is not None
    assert (new["result"], new["by"], new["done_at"]) == ({"v": {"ok": 1}}, "late", 200.0)


def test_no_move_is_made_that_the_table_does_not_name() -> None:
    done = move(CLAIM, Event.RETURNED, 200.0, 10.0, value=1)
    assert done is not None
    with pytest.raises(ValueError, match="no move LOST from completed"):
        move(done, Event.LOST, 300.0, 10.0)
    with pytest.raises(ValueError, match="no move CLAIM"):
        move(CLAIM, Event.CLAIM, 300.0, 10.0)


def test_a_record_found_by_a_claim_means_what_its_state_says() -> None:
    done = move(CLAIM, Event.RETURNED, 200.0, 10.0, value=1)
    lost = move(CLAIM, Event.LOST, 200.0, 10.0)
    final = move(CLAIM, Event.FAILED, 200.0, 10.0, error={"code": "x"})
    assert seen(None, 0.0, "pay", "digest") is Seen.GONE
    assert seen({"state": "odd"}, 0.0, "pay", "digest") is Seen.MALFORMED
    assert seen(CLAIM, 1e9, "pay", "digest") is Seen.IN_PROGRESS  # only its lease ends it
    assert seen(done, 205.0, "pay", "digest") is Seen.REPLAY
    assert seen(done, 210.0, "pay", "digest") is Seen.EXPIRED
    assert seen(done, 205.0, "pay", "other") is Seen.KEY_REUSE
    assert seen(done, 205.0, "refund", "digest") is Seen.KEY_REUSE
    assert seen(lost, 205.0, "pay", "digest") is Seen.RECONCILE
    assert seen(final, 205.0, "pay", "digest") is Seen.FAILED_FINAL
