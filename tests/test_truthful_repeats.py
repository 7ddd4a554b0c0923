"""Every decision stays true on live tools (issue 30 items 3-5; semantics §1, §3, §4.2):
a repeated read is blocked only when headway holds its current result, no text claims an
unchanged result headway did not see, versions are epochs, and volatile parts are set
aside only between results of the same call."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest

import headway
from headway import Status
from headway._fingerprint import file_fingerprint


def read_file(path: str) -> str:
    return Path(path).read_text()


def settled(path: Path) -> None:
    while file_fingerprint(str(path)) is None:
        time.sleep(0.005)


def texts(outs: list[headway.Outcome]) -> str:
    return "\n".join(o.to_model() for o in outs)


def test_the_third_read_of_a_file_changed_outside_runs_and_is_not_corrected(
    tmp_path: Path,
) -> None:
    """``gov.register("read_file", fn, effect="read")``: nothing is cached, so the 3rd
    identical read runs and returns the new content, as a fresh look, uncorrected."""
    f = tmp_path / "a.txt"
    f.write_text("old content")
    gov = headway.Governor()
    gov.register("read_file", read_file, effect="read")
    s = gov.session("r")
    outs = [s.call("read_file", {"path": str(f)}) for _ in range(2)]
    f.write_text("new content")
    outs.append(s.call("read_file", {"path": str(f)}))
    assert (outs[2].status, outs[2].value, outs[2].correction) == (
        Status.EXECUTED,
        "new content",
        None,
    )
    assert "did not change" not in texts(outs) and "old content" not in outs[2].to_model()


def test_an_unchanged_uncached_read_runs_and_says_it_returned_the_same_result(
    tmp_path: Path,
) -> None:
    f = tmp_path / "a.txt"
    f.write_text("same content")
    gov = headway.Governor()
    gov.register("read_file", read_file, effect="read")
    s = gov.session("r")
    outs = [s.call("read_file", {"path": str(f)}) for _ in range(4)]
    assert [o.status for o in outs] == [Status.EXECUTED] * 4
    assert [o.value for o in outs] == ["same content"] * 4
    assert "read_file returned the same result 3 times" in str(outs[2].correction)
    assert "returned the same result 4 times" in str(outs[3].correction)
    assert "did not change" not in texts(outs)
    # a change, then the same result again: counted from the change
    f.write_text("edited")
    outs = [s.call("read_file", {"path": str(f)}) for _ in range(3)]
    assert [o.correction for o in outs[:2]] == [None, None]
    assert "returned the same result 3 times" in str(outs[2].correction)


def test_async_reads_follow_the_same_rule(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("before")

    async def aread(path: str) -> str:
        return Path(path).read_text()

    async def main() -> list[headway.Outcome]:
        gov = headway.Governor()
        gov.register("read_file", aread, effect="read")
        s = gov.session("r")
        outs = [await s.acall("read_file", {"path": str(f)}) for _ in range(2)]
        f.write_text("after")
        outs.append(await s.acall("read_file", {"path": str(f)}))
        outs.append(await s.acall("read_file", {"path": str(f)}))
        outs.append(await s.acall("read_file", {"path": str(f)}))
        return outs

    outs = asyncio.run(main())
    assert [o.value for o in outs] == ["before", "before", "after", "after", "after"]
    assert [o.correction is None for o in outs] == [True, True, True, True, False]
    assert all(o.status is Status.EXECUTED for o in outs)


def test_a_current_cache_entry_is_corrected_without_running(tmp_path: Path) -> None:
    """With ``validate`` headway knows the entry is current: the 3rd identical read is
    CORRECTED with that result; once the file changed it runs again, uncorrected."""
    f = tmp_path / "a.txt"
    f.write_text("v1")
    settled(f)
    runs = itertools.count()

    def counted(path: str) -> str:
        next(runs)
        return read_file(path)

    gov = headway.Governor()
    gov.register("read_file", counted, effect="read", validate="file:path")
    s = gov.session("r")
    outs = [s.call("read_file", {"path": str(f)}) for _ in range(3)]
    assert [o.status for o in outs] == [Status.EXECUTED, Status.CACHED, Status.CORRECTED]
    assert "3 times" in outs[2].to_model() and outs[2].to_model().endswith("Result: v1")
    f.write_text("v2")
    settled(f)
    out = s.call("read_file", {"path": str(f)})
    assert (out.status, out.value, out.correction) == (Status.EXECUTED, "v2", None)
    assert next(runs) == 2


def test_a_shared_sqlite_session_never_corrects_a_changed_file(tmp_path: Path) -> None:
    """Two governors share one session through SQLite: the repeats they count together
    never block a read whose file changed."""
    f = tmp_path / "a.txt"
    f.write_text("first")
    url = f"sqlite:///{tmp_path}/s.db"
    govs = [headway.Governor(store=headway.open_store(url)) for _ in range(2)]
    for gov in govs:
        gov.register("read_file", read_file, effect="read")
    outs = [govs[i % 2].session("r").call("read_file", {"path": str(f)}) for i in range(2)]
    f.write_text("second")
    outs.append(govs[0].session("r").call("read_file", {"path": str(f)}))
    assert (outs[2].status, outs[2].value, outs[2].correction) == (
        Status.EXECUTED,
        "second",
        None,
    )
    outs += [govs[i % 2].session("r").call("read_file", {"path": str(f)}) for i in range(2)]
    assert "returned the same result 3 times" in str(outs[4].correction)


def test_progress_fields_on_a_clock_never_correct_nor_stop_while_the_field_changes() -> None:
    ticks = itertools.count()

    def now(timezone: str) -> dict[str, Any]:
        return {"timezone": timezone, "datetime": f"2026-12-06T10:00:{next(ticks):02d}+00:00"}

    gov = headway.Governor()
    gov.register("get_current_time", now, effect="read", progress_fields=["datetime"])
    s = gov.session("r")
    outs = [s.call("get_current_time", {"timezone": "UTC"}) for _ in range(15)]
    assert all(o.status is Status.EXECUTED and o.correction is None for o in outs)
    assert not s.stopped


def test_no_text_claims_an_unchanged_result_it_did_not_see() -> None:
    """A run that loops until it is stopped: warnings and the stop say what happened."""
    gov = headway.Governor()
    n = itertools.count()
    page = "Orders page\n" + "\n".join(f"order {i}: shipped" for i in range(20))
    gov.register("page", lambda url: page + f"\nrendered {next(n)}", effect="read")
    s = gov.session("r")
    outs: list[headway.Outcome] = []
    while not s.stopped:
        outs.append(s.call("page", {"url": "/orders"}))
    with pytest.raises(headway.LoopDetected):
        s.call("page", {"url": "/orders"})
    said = texts(outs)
    assert "did not change" not in said and "returned the same result" not in said  # alike
    assert "almost the same result" in said and "this run is being stopped" in said


# -- versions are epochs --------------------------------------------------------------


def test_a_new_version_neither_corrects_nor_counts_with_the_old_one() -> None:
    gov = headway.Governor()
    gov.register("search", lambda q: "same", effect="read", deterministic=True)
    s = gov.session("r")
    assert [s.call("search", {"q": 1}).status for _ in range(2)] == [
        Status.EXECUTED,
        Status.CACHED,
    ]
    gov.register(
        "search", lambda q: "same", effect="read", deterministic=True, version="2", replace=True
    )
    outs = [s.call("search", {"q": 1}) for _ in range(3)]
    assert [o.status for o in outs] == [Status.EXECUTED, Status.CACHED, Status.CORRECTED]
    assert [r["signals"].get("repeat") for r in gov.audit_records("r")][2:] == [None, 2, 3]


def test_a_version_registered_by_another_governor_on_a_shared_store_is_a_new_epoch(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    old, new = (headway.Governor(store=headway.open_store(url)) for _ in range(2))
    old.register("search", lambda q: "v1 result", effect="read", deterministic=True)
    new.register("search", lambda q: "v2 result", effect="read", deterministic=True, version="2")
    assert [old.session("r").call("search", {"q": 1}).status for _ in range(2)] == [
        Status.EXECUTED,
        Status.CACHED,
    ]
    out = new.session("r").call("search", {"q": 1})
    assert (out.status, out.value, out.correction) == (Status.EXECUTED, "v2 result", None)
    assert new.session("r").call("search", {"q": 1}).status is Status.CACHED


# -- normalisation never makes different results equal --------------------------------


def test_commits_with_the_same_message_are_progress() -> None:
    """4 rounds of add + commit with the same message: 4 new commit hashes."""
    commits = itertools.count()

    def commit(message: str) -> str:
        sha = hashlib.sha1(f"{next(commits)}".encode()).hexdigest()
        return f"Changes committed successfully with hash {sha}"

    gov = headway.Governor()
    gov.register("git_add", lambda files: "Files staged successfully", effect="write")
    gov.register("git_commit", commit, effect="write")
    s = gov.session("r")
    outs = []
    for _ in range(4):
        outs.append(s.call("git_add", {"files": ["a.txt"]}))
        outs.append(s.call("git_commit", {"message": "update"}))
    assert all(o.correction is None for o in outs) and not s.stopped
    marks = [r["mark"] for r in gov.audit_records("r")]
    assert marks[1::2] == ["progress"] * 4


def test_a_long_write_result_naming_a_new_id_is_progress() -> None:
    ids = itertools.count(4521)
    body = "Order placed. Items: 2 x coffee beans, 1 x grinder. Shipping: standard. " * 4

    def place(cart: str) -> str:
        return body + f"Your order number is ORD-{next(ids)}."

    gov = headway.Governor()
    gov.register("place_order", place, effect="write")
    s = gov.session("r")
    for _ in range(8):
        assert s.call("place_order", {"cart": "c1"}).correction is None
    assert {r["mark"] for r in gov.audit_records("r")} == {"progress"}


def test_time_conversions_of_different_times_are_never_corrected_nor_stopped() -> None:
    def convert(time: str) -> dict[str, Any]:
        h = int(time.split(":", maxsplit=1)[0])
        return {
            "source": {
                "timezone": "America/New_York",
                "datetime": f"2026-12-06T{h:02d}:00:00-05:00",
            },
            "target": {
                "timezone": "Europe/London",
                "datetime": f"2026-12-06T{h + 5:02d}:00:00+00:00",
            },
            "time_difference": "+5.0h",
        }

    gov = headway.Governor()
    gov.register("convert_time", convert, effect="read")
    s = gov.session("r")
    outs = [s.call("convert_time", {"time": f"{h:02d}:00"}) for h in range(1, 9)]
    assert all(o.status is Status.EXECUTED and o.correction is None for o in outs)
    assert {r["mark"] for r in gov.audit_records("r")} == {"progress"} and not s.stopped


def test_a_page_rerendered_with_a_new_request_id_is_the_same_page() -> None:
    n = itertools.count()
    page = "Inbox\n" + "\n".join(f"mail {i}: hello" for i in range(10))
    gov = headway.Governor()
    gov.register(
        "open_inbox",
        lambda: page + f"\nrequest 7f3a{next(n):012x}9c2e1b40",
        effect="read",
    )
    s = gov.session("r")
    outs = [s.call("open_inbox", {}) for _ in range(3)]
    assert [r["mark"] for r in gov.audit_records("r")] == ["progress", "no_progress", "no_progress"]
    assert "returned the same result 3 times" in str(outs[2].correction)
    assert "apart from volatile parts" in str(outs[2].correction)


@pytest.mark.parametrize("cached", [False, True])
def test_a_cycles_correction_says_whether_the_result_it_quotes_is_current(cached: bool) -> None:
    """A cycle's call is not run; the result it quotes is either held as current (a
    cached read) or what the call returned when it last ran, said as such: it may have
    changed since, and the text never presents it as today's."""
    gov = headway.Governor()
    options: dict[str, Any] = {"deterministic": True} if cached else {}
    gov.register("open", lambda url: f"page {url}", effect="read", **options)
    s = gov.session("r")
    outs = [s.call("open", {"url": u}) for u in "ABABAB"]
    cycle = outs[-1].to_model()
    assert outs[-1].status is Status.CORRECTED and "cycle" in cycle
    assert ("held as current" in cycle) is cached
    assert ("may have changed since" in cycle) is not cached


def test_a_list_read_again_that_gains_entries_is_progress_never_stopped() -> None:
    """A memory graph, an inbox, a log: the identical read returns what it had plus a new
    entry each time (in JSON the entry before it gains a comma). However alike the
    results, each shows something new: no correction, no stop."""
    gov = headway.Governor()
    entries: list[str] = []
    words = iter(
        f"{w} done"
        for w in ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]
    )

    def search_nodes(query: str) -> str:
        entries.append(next(words))
        graph = {"entities": [{"name": query, "observations": list(entries)}], "relations": []}
        return json.dumps(graph, indent=2)

    gov.register("search_nodes", search_nodes, effect="read")
    s = gov.session("r")
    outs = [s.call("search_nodes", {"query": "project"}) for _ in range(9)]
    assert all(o.status is Status.EXECUTED and o.correction is None for o in outs)
    assert [r["mark"] for r in gov.audit_records("r")][1:] == ["progress"] * 8


def test_a_line_changed_in_place_is_not_growth() -> None:
    """A page re-rendered with a counter ("visited 9 seconds ago") keeps its lines but one,
    which changes: that is not a new entry, and the read still counts as no progress."""
    gov = headway.Governor()
    seconds = itertools.count(9)

    def view(url: str) -> str:
        body = "\n".join(f"item {w} of the page" for w in "abcdefgh")
        return f"{body}\nYou previously visited this page {next(seconds)} seconds ago"

    gov.register("view", view, effect="read")
    s = gov.session("r")
    for _ in range(4):
        s.call("view", {"url": "https://example.test/a"})
    assert [r["mark"] for r in gov.audit_records("r")][1:] == ["no_progress"] * 3
