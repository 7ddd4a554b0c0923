"""A shared session's record as a head and parts (``_record_parts``): what a step writes
and reads, records of earlier versions, and how parts go."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

import headway
from conftest import Recording, present, stored
from headway.stores._base import Op
from headway.testing import FakeClock


class Plain:
    """A store without ``batch``: its sessions' records are kept whole, as earlier versions
    of headway kept them on every store."""

    def __init__(self, inner: headway.Store) -> None:
        self.inner, self.blocking = inner, inner.blocking

    def __getattr__(self, name: str) -> Any:
        if name == "batch":
            raise AttributeError(name)
        return getattr(self.inner, name)


def _gov(store: Any, **options: Any) -> headway.Governor:
    gov = headway.Governor(store=store, audit=[], no_progress_limit=10**6, **options)
    gov.register("search", lambda q: f"results for {q}", effect="read")
    return gov


def _parts(path: Path, gov: headway.Governor, run: str) -> dict[str, float]:
    """The run's parts in the SQLite file: key -> garbage-collection time."""
    key = gov.session_key(run)
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT key, gc_at FROM headway_kv WHERE key LIKE ?", (key + ":%",)
        ).fetchall()
    return dict(rows)


def test_a_step_writes_the_head_and_one_part_of_its_own_steps(tmp_path: Path) -> None:
    store = Recording(headway.SQLiteStore(str(tmp_path / "s.db")))
    gov = _gov(store)
    s = gov.session("r")
    for n in range(40):  # past the window: steps leave it
        s.call("search", {"q": n})
    store.batches.clear()
    s.call("search", {"q": "last"})
    writes = [op for ops in store.batches for op in ops if op.name != "get"]
    head, part = writes[0], writes[1]
    assert head.name == "swap" and head.key == gov.session_key("r")
    assert part.name == "set" and part.only_if is True and part.ttl_s == 2 * gov.session_ttl_s
    text = orjson.dumps(part.value).decode()  # a JSON object: not escaped again as a string
    assert isinstance(part.value, dict)
    assert "results for last" in text and "results for 39" not in text
    # the part whose steps all left the window goes with it
    assert [op.name for op in writes[2:]] == ["delete"]
    assert len(head.value) < 2_000  # the head does not hold the window
    record = stored(store.inner, gov.session_key("r"))
    window = record["mon"]["w"]
    assert len(window) == 32 and window[-1][0] == 40 and window[0][0] == 9


def test_parts_are_bounded_by_the_window_and_outlive_the_head(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    gov = _gov(headway.SQLiteStore(str(path)))
    s = gov.session("r")
    for n in range(200):
        s.call("search", {"q": n})
    parts = _parts(path, gov, "r")
    with sqlite3.connect(path) as conn:
        (head_gc,) = conn.execute(
            "SELECT gc_at FROM headway_kv WHERE key = ?", (gov.session_key("r"),)
        ).fetchone()
    assert len(parts) <= 33  # one a step in the window (and the recurrence's), no more
    assert min(parts.values()) >= head_gc  # none expires before the head that names it


def test_a_head_naming_a_part_older_than_half_the_ttl_is_written_in_one_part(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    now = [1_000_000.0]
    gov = _gov(headway.SQLiteStore(str(path)), session_ttl_s=100, clock=lambda: now[0])
    s = gov.session("r")
    for n in range(5):
        s.call("search", {"q": n})
    assert len(_parts(path, gov, "r")) == 5
    now[0] += 51
    s.call("search", {"q": "later"})
    assert len(_parts(path, gov, "r")) == 1  # every step again, in the one new part
    assert len(stored(gov.store, gov.session_key("r"))["mon"]["w"]) == 6


def test_another_worker_reads_only_the_parts_it_lacks(tmp_path: Path) -> None:
    store = Recording(headway.SQLiteStore(str(tmp_path / "s.db")))
    a, b = _gov(store), _gov(store)
    sa, sb = a.session("r"), b.session("r")
    for n in range(5):
        sa.call("search", {"q": n})
    sb.call("search", {"q": "b"})  # reads a's five parts
    sa.call("search", {"q": "a"})  # a lacks b's part only
    sb.call("search", {"q": "b2"})
    store.batches.clear()
    sa.call("search", {"q": "a2"})
    gets = [op.key for ops in store.batches for op in ops if op.name == "get"]
    parts = [k for k in gets if k != a.session_key("r") and ":sess:" in k]
    assert len(parts) == 1 and parts[0].endswith(":8")  # b's last write: version 8
    window = stored(store.inner, a.session_key("r"))["mon"]["w"]
    assert [step[0] for step in window] == list(range(9))


def test_a_record_kept_whole_by_an_earlier_version_still_loads(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    old = _gov(Plain(headway.SQLiteStore(db)))  # writes whole records
    s = old.session("r", budgets=headway.Budgets(tool_calls=5))
    for n in range(3):
        s.call("search", {"q": n})
    text = present(old.store.get(old.session_key("r")))
    assert len(orjson.loads(text)["mon"]["w"]) == 3 and '"P":' not in text
    new = _gov(headway.SQLiteStore(db))
    s2 = new.session("r", budgets=headway.Budgets(tool_calls=5))
    assert s2.call("search", {"q": 3}).step == 3
    assert [step[0] for step in stored(new.store, new.session_key("r"))["mon"]["w"]] == [0, 1, 2, 3]
    s2.call("search", {"q": 4})
    try:
        s2.call("search", {"q": 5})
        raise AssertionError("the budget carried over: the 6th call stops")
    except headway.BudgetExceeded:
        pass


def test_a_head_read_by_an_earlier_version_has_every_field_and_empty_windows(
    tmp_path: Path,
) -> None:
    gov = _gov(headway.SQLiteStore(str(tmp_path / "s.db")))
    s = gov.session("r")
    s.call("search", {"q": 1})
    head = orjson.loads(present(gov.store.get(gov.session_key("r"))))
    whole = stored(gov.store, gov.session_key("r"))
    assert head.keys() - {"P"} == whole.keys() - {"P"}
    assert head["mon"]["w"] == [] and head["steps"] == 1 and len(whole["mon"]["w"]) == 1


def _after_three_steps(path: Path) -> tuple[headway.Governor, headway.Governor]:
    """Two workers on one SQLite file, the first having made three steps of run "r"."""
    a, b = _gov(headway.SQLiteStore(str(path))), _gov(headway.SQLiteStore(str(path)))
    for n in range(3):
        a.session("r").call("search", {"q": f"a{n}"})
    return a, b


def test_a_part_gone_from_the_store_leaves_the_run_going_without_those_steps(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    a, b = _after_three_steps(path)
    for key in _parts(path, a, "r"):
        a.store.delete(key)
    out = b.session("r").call("search", {"q": 3})
    assert out.step == 3  # the steps and budgets are the head's: the run goes on
    assert [step[0] for step in stored(b.store, b.session_key("r"))["mon"]["w"]] == [3]


def test_parts_written_as_json_texts_by_the_version_before_are_read(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    a, b = _after_three_steps(path)
    for key in _parts(path, a, "r"):  # as the version before kept them: a JSON string
        a.store.set(key, orjson.dumps(a.store.get(key)).decode(), ttl_s=3600)
    assert b.session("r").call("search", {"q": 3}).step == 3
    window = stored(b.store, b.session_key("r"))["mon"]["w"]
    assert [step[0] for step in window] == [0, 1, 2, 3]


@pytest.mark.parametrize("forged", ["{not json", {"t": "soon", "r": [], "i": []}, [1, 2], 7])
def test_a_part_that_is_not_one_is_read_as_gone(tmp_path: Path, forged: Any) -> None:
    path = tmp_path / "s.db"
    a, b = _after_three_steps(path)
    for key in _parts(path, a, "r"):
        a.store.set(key, forged, ttl_s=3600)
    out = b.session("r").call("search", {"q": 3})
    assert out.step == 3  # no error: the run goes on without those steps
    assert [step[0] for step in stored(b.store, b.session_key("r"))["mon"]["w"]] == [3]


def test_a_worker_whose_write_lost_the_race_reads_the_winners_part_of_that_version(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "s.db")
    a, b = _gov(headway.SQLiteStore(db)), _gov(headway.SQLiteStore(db))
    for gov in (a, b):
        gov.register("price", lambda sku: {"eur": 3}, effect="read", deterministic=True)
    sa, sb = a.session("r"), b.session("r")
    sa.call("price", {"sku": 1})  # a holds the entry: its next read is one swap, unread
    sb.call("search", {"q": "b"})  # b writes the version a's next write will make too
    assert sa.call("price", {"sku": 1}).status is headway.Status.CACHED
    window = stored(a.store, a.session_key("r"))["mon"]["w"]
    assert [(step[0], step[1]) for step in window] == [(0, "price"), (1, "search"), (2, "price")]


@pytest.mark.parametrize("steps_after", [1, 2])
def test_a_worker_holding_a_part_the_store_lost_reads_the_one_written_again_under_its_name(
    tmp_path: Path, steps_after: int
) -> None:
    """b holds the part of a step the store lost; another worker writes the same version
    (and the next one): b's window is the stored one, not one joined with the lost part."""
    path = tmp_path / "s.db"
    _, b = _after_three_steps(path)
    with sqlite3.connect(path) as conn:  # the store as a snapshot keeps it
        rows = conn.execute("SELECT key, value, gc_at FROM headway_kv").fetchall()
    sb = b.session("r")
    sb.call("search", {"q": "lost"})  # b writes the next version and holds its part
    with sqlite3.connect(path) as conn:  # the store restarts from its snapshot
        conn.execute("DELETE FROM headway_kv")
        conn.executemany("INSERT INTO headway_kv VALUES (?, ?, ?)", rows)
    c = _gov(headway.SQLiteStore(str(path))).session("r")
    for n in range(steps_after):  # the same version as b's lost one, then maybe the next
        c.call("search", {"q": f"c{n}"})
    sb.call("search", {"q": "b"})
    held = [step[2] for step in orjson.loads(orjson.dumps(sb._st.monitor.snapshot()["w"]))]
    assert held == [step[2] for step in stored(b.store, b.session_key("r"))["mon"]["w"]]
    assert "lost" not in str(held) and "c0" in str(held)


def test_a_worker_reading_a_hot_record_never_writes_its_steps_away(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    a = _gov(headway.SQLiteStore(db))
    sa = a.session("r")

    class Hot(Recording):
        """Another worker writes a step before each of the first three reads of parts."""

        moves = 3

        def batch(self, ops: list[Op]) -> list[Any]:
            last = ops[-1]
            if self.moves and len(ops) > 1 and last.name == "get" and last.expected is not None:
                self.moves -= 1
                sa.call("search", {"q": f"a{self.moves}"})
            return super().batch(ops)

    b = _gov(Hot(headway.SQLiteStore(db)))
    sa.call("search", {"q": "first"})
    sb = b.session("r")
    sb.call("search", {"q": "b"})
    window = stored(a.store, a.session_key("r"))["mon"]["w"]
    assert len(window) == stored(a.store, a.session_key("r"))["steps"]


def test_a_clock_giving_whole_seconds_leaves_other_workers_windows_whole(
    tmp_path: Path,
) -> None:
    """A part's digest is taken over its time as a reader gets it back (a float), also when
    the writer's clock gives whole seconds (``FakeClock(1_000_000)``, ``int(time.time())``):
    else every other worker finds the head's chain not made by the parts it reads, leaves
    them out, and its loop detectors see only its own last step."""
    db = str(tmp_path / "s.db")
    clock = FakeClock(1_000_000)  # an int, as a user may well write it
    a = _gov(headway.SQLiteStore(db), clock=clock)
    b = _gov(headway.SQLiteStore(db), clock=clock)
    sa, sb = a.session("r"), b.session("r")
    for n in range(6):
        (sa if n % 2 else sb).call("search", {"q": n})
        clock.advance(1)
    # b made steps 0, 2, 4 and read a's 1, 3 (and 5 at its next read): its window holds all
    assert [o.index for o in sb._st.monitor.window] == [0, 1, 2, 3, 4]
    window = stored(a.store, a.session_key("r"))["mon"]["w"]
    assert [step[0] for step in window] == [0, 1, 2, 3, 4, 5]


def test_a_part_whose_time_is_past_a_float_is_read_as_gone(tmp_path: Path) -> None:
    """A forged part's time too large for a float (``float`` raises OverflowError, not a
    ValueError) is read as gone: the call goes on without those steps."""
    path = tmp_path / "s.db"
    a, b = _after_three_steps(path)
    for key in _parts(path, a, "r"):
        a.store.set(key, {"t": 10**400, "r": [], "i": []}, ttl_s=3600)
    out = b.session("r").call("search", {"q": 3})
    assert out.step == 3
    assert [step[0] for step in stored(b.store, b.session_key("r"))["mon"]["w"]] == [3]


def test_parse_part_returns_none_for_a_time_past_a_float() -> None:
    from headway._record_parts import parse_part

    assert parse_part({"t": 10**400, "r": [], "i": []}) is None
    assert parse_part(orjson.dumps({"t": 1.0, "r": [], "i": []}).decode()) is not None


def test_parts_left_out_for_a_chain_that_does_not_match_are_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Parts in the store that do not make the head's chain are left out, like parts gone,
    and said so in the log: loop detection across workers never goes blind unsaid."""
    path = tmp_path / "s.db"
    a, b = _after_three_steps(path)
    key = a.session_key("r")
    rec = orjson.loads(present(a.store.get(key)))
    rec["P"]["h"] = "0" * 12  # parts written again under the same names: not these
    a.store.set(key, orjson.dumps(rec).decode())
    with caplog.at_level(logging.WARNING):
        assert b.session("r").call("search", {"q": 3}).step == 3
    assert [step[0] for step in stored(b.store, key)["mon"]["w"]] == [3]  # left out
    assert "detector steps" in caplog.text  # ... and said so, as for parts gone
