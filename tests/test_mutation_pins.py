"""Tests that pin documented numbers and rules, one behaviour each, so that a one-line
change of the rule fails here (bench/mutants.py applies those changes and runs this file).

Every similarity figure a test relies on is computed here by an independent reference
(character n-gram Jaccard), never read from headway."""

from __future__ import annotations

import random
from typing import Any

import pytest

import headway
from headway import Status
from headway.testing import FakeClock, MemoryAudit, ScriptedTool

LETTERS = "ghijklmnopqrstuvwxyz"  # no hex digits: no normaliser rewrites these texts


def text(length: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < length:
        words.append("".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 9))))
    return " ".join(words)[:length]


def edited(base: str, every: int) -> str:
    """``base`` with one letter replaced every ``every`` characters."""
    chars = list(base)
    for i in range(every // 2, len(chars), every):
        if chars[i] != " ":
            chars[i] = "g" if chars[i] != "g" else "h"
    return "".join(chars)


def ngram_jaccard(a: str, b: str, n: int) -> float:
    ga = {a[i : i + n] for i in range(len(a) - n + 1)}
    gb = {b[i : i + n] for i in range(len(b) - n + 1)}
    return len(ga & gb) / len(ga | gb)


def marks(audit: MemoryAudit, run_id: str) -> list[str]:
    return [str(r["mark"]) for r in audit.records(run_id)]


def third_identical_call(gov: headway.Governor, first: str, second: str) -> Status:
    """How the 2nd identical read is judged when the first two returned these results:
    CORRECTED when it counts as no progress (a near-duplicate), else EXECUTED. (The 3rd
    identical read itself runs: headway holds no current result of an uncached read.)"""
    gov.register("page", ScriptedTool([first, second, second]), effect="read")
    s = gov.session("third", no_progress_limit=100)
    s.call("page", {"url": "u"})
    s.call("page", {"url": "u"})
    mark = s.audit_records()[-1]["mark"]
    return Status.CORRECTED if mark == "no_progress" else Status.EXECUTED


# -- the near-duplicate rule: 5-grams, Jaccard >= 0.75, short results exact ------------------


def test_a_result_at_0_8_similarity_is_unchanged(gov: headway.Governor) -> None:
    """5-gram Jaccard 0.8 is at or above 0.75: the result did not change, the 3rd identical
    read is corrected (a threshold of 0.9 would execute it)."""
    base = text(800)
    near = edited(base, 50)
    assert 0.78 < ngram_jaccard(base, near, 5) < 0.88
    assert third_identical_call(gov, base, near) is Status.CORRECTED


def test_a_result_at_0_7_similarity_changed(gov: headway.Governor) -> None:
    """5-gram Jaccard 0.7 is below 0.75: the result changed, the 3rd read is executed."""
    base = text(800)
    far = edited(base, 28)
    assert 0.62 < ngram_jaccard(base, far, 5) < 0.74
    assert third_identical_call(gov, base, far) is Status.EXECUTED


def test_similarity_counts_5_grams_not_3_grams(gov: headway.Governor) -> None:
    """Scattered edits that 3-grams forgive (Jaccard >= 0.75) but 5-grams do not: changed."""
    base = text(800)
    far = edited(base, 28)
    assert ngram_jaccard(base, far, 3) >= 0.75 > ngram_jaccard(base, far, 5)
    assert third_identical_call(gov, base, far) is Status.EXECUTED


def test_results_shorter_than_64_characters_compare_exactly(gov: headway.Governor) -> None:
    """Two 60-character results that differ in one letter are different (exact comparison
    below 64 characters), although their 5-gram Jaccard is far above 0.75."""
    short = text(60)
    other = short[:-1] + ("g" if short[-1] != "g" else "h")
    assert ngram_jaccard(short, other, 5) > 0.9
    assert third_identical_call(gov, short, other) is Status.EXECUTED


def test_results_of_64_characters_or_more_are_judged_near_duplicate(
    gov: headway.Governor,
) -> None:
    long = text(70)
    other = long[:-1] + ("g" if long[-1] != "g" else "h")
    assert third_identical_call(gov, long, other) is Status.CORRECTED


# -- new information: near-duplicates of other arguments' results ----------------------------


def gov_with_audit(clock: FakeClock) -> tuple[headway.Governor, MemoryAudit]:
    audit = MemoryAudit()
    return headway.Governor(clock=clock, sleep=clock.sleep, audit=[audit]), audit


def test_a_near_duplicate_of_another_arguments_result_is_no_progress(clock: FakeClock) -> None:
    """Going back to content already read (under other arguments, with a part cut off) is
    not new information: no progress."""
    gov, audit = gov_with_audit(clock)
    page = text(600)
    gov.register("view", ScriptedTool([lambda n: page if n == 0 else page[60:]]), effect="read")
    s = gov.session("back", no_progress_limit=100)
    s.call("view", {"n": 0})
    s.call("view", {"n": 1})
    assert marks(audit, "back") == ["progress", "no_progress"]


def test_near_duplicates_are_looked_for_among_the_last_8_results_of_the_tool(
    clock: FakeClock,
) -> None:
    """The content read 4 calls earlier (other results in between) is still recognised."""
    gov, audit = gov_with_audit(clock)
    page = text(600)
    results = {0: page, 1: text(600, 2), 2: text(600, 3), 3: text(600, 4), 4: page[60:]}
    gov.register("view", ScriptedTool([lambda n: results[n]]), effect="read")
    s = gov.session("eight", no_progress_limit=100)
    for n in range(5):
        s.call("view", {"n": n})
    assert marks(audit, "eight") == ["progress"] * 4 + ["no_progress"]


def test_an_empty_answer_to_each_new_query_is_exploration(clock: FakeClock) -> None:
    """'[]' for new queries is news about each query (nothing matched): progress."""
    gov, audit = gov_with_audit(clock)
    gov.register("search", ScriptedTool(["[]"]), effect="read")
    s = gov.session("explore", no_progress_limit=100)
    for q in ("apples", "pears", "plums"):
        s.call("search", {"q": q})
    assert marks(audit, "explore") == ["progress"] * 3


# -- cycles of every period from 2 to 5 -----------------------------------------------------


@pytest.mark.parametrize("period", [2, 3, 4, 5])
def test_a_cycle_of_unchanged_results_is_corrected_at_the_third_round(
    gov: headway.Governor, period: int
) -> None:
    tools = [f"t{i}" for i in range(period)]
    for name in tools:
        gov.register(name, ScriptedTool([f"result of {name}"]), effect="read")
    s = gov.session(f"cycle{period}", no_progress_limit=100)
    outs = [s.call(tools[i % period], {}) for i in range(3 * period)]
    assert [o.status for o in outs[:-1]] == [Status.EXECUTED] * (3 * period - 1)
    assert outs[-1].status is Status.CORRECTED
    assert f"same {period} tools in a cycle" in (outs[-1].correction or "")


# -- progress=, progress_fields=, writes -----------------------------------------------------


def test_a_progress_predicate_decides(clock: FakeClock) -> None:
    """progress=fn(previous, current) overrides the result comparison both ways."""
    gov, audit = gov_with_audit(clock)
    values = iter([{"done": 1}, {"done": 1}, {"done": 2}, {"done": 1}])
    gov.register(
        "job",
        ScriptedTool([lambda i: next(values)]),
        effect="read",
        progress=lambda prev, cur: cur["done"] > prev["done"],
    )
    s = gov.session("pred", no_progress_limit=100)
    for i in range(4):
        s.call("job", {"i": i})
    # the first result has no predecessor; 1 -> 1 none; 1 -> 2 progress; 2 -> 1 none
    assert marks(audit, "pred")[1:] == ["no_progress", "progress", "no_progress"]


def test_progress_fields_changing_is_progress(clock: FakeClock) -> None:
    """progress_fields: a change in a listed field is progress, in other fields is not."""
    gov, audit = gov_with_audit(clock)
    values = iter(
        [
            {"status": "a", "seen": 1},
            {"status": "a", "seen": 2},
            {"status": "b", "seen": 2},
        ]
    )
    gov.register(
        "ticket",
        ScriptedTool([lambda i: next(values)]),
        effect="read",
        progress_fields=["status"],
    )
    s = gov.session("fields", no_progress_limit=100)
    for i in range(3):
        s.call("ticket", {"i": i})
    assert marks(audit, "fields")[1:] == ["no_progress", "progress"]


def test_the_same_write_with_a_near_duplicate_result_is_no_progress(clock: FakeClock) -> None:
    """The same edit applied again, answered with a near-duplicate of the first answer."""
    gov, audit = gov_with_audit(clock)
    answer = text(400)
    gov.register("edit", ScriptedTool([answer, edited(answer, 80)]), effect="write")
    s = gov.session("write", no_progress_limit=100)
    s.call("edit", {"path": "a", "text": "x"})
    s.call("edit", {"path": "a", "text": "x"})
    assert marks(audit, "write") == ["progress", "no_progress"]


def test_a_write_with_new_arguments_is_progress_whatever_it_returns(clock: FakeClock) -> None:
    gov, audit = gov_with_audit(clock)
    gov.register("edit", ScriptedTool(["ok"]), effect="write")
    s = gov.session("writes", no_progress_limit=100)
    for i in range(3):
        s.call("edit", {"path": "a", "text": str(i)})
    assert marks(audit, "writes") == ["progress"] * 3


# -- boundaries: TTL, wall clock, key reuse --------------------------------------------------


def test_a_ttl_entry_is_stale_exactly_at_its_ttl(gov: headway.Governor, clock: FakeClock) -> None:
    tool = ScriptedTool(["p"])
    gov.register("price", tool, effect="read", ttl=5.0)
    s = gov.session("ttl")
    s.call("price", {"s": "X"})
    clock.advance(4.999)
    assert s.call("price", {"s": "X"}).status is Status.CACHED
    clock.advance(0.001)
    assert s.call("price", {"s": "X"}).status is Status.EXECUTED
    assert tool.count == 2


def test_the_wall_clock_budget_is_used_up_exactly_at_its_limit(
    gov: headway.Governor, clock: FakeClock
) -> None:
    gov.register("step", ScriptedTool([lambda i: i]), effect="read")
    s = gov.session("wall", budgets=headway.Budgets(wall_clock_s=10))
    s.call("step", {"i": 1})
    clock.advance(9.999)
    s.call("step", {"i": 2})
    clock.advance(0.001)
    with pytest.raises(headway.BudgetExceeded) as info:
        s.call("step", {"i": 3})
    assert info.value.diagnostic["budget_type"] == "wall_clock_s"


def test_a_key_used_by_another_tool_is_rejected(gov: headway.Governor) -> None:
    """The same key and arguments under another tool is a reuse, not a replay."""
    pay = ScriptedTool([{"charged": 1}])
    refund = ScriptedTool([{"refunded": 1}])
    gov.register("pay", pay, effect="write")
    gov.register("refund", refund, effect="write")
    s = gov.session("reuse")
    args: dict[str, Any] = {"order": "o1", "amount": 5}
    assert s.call("pay", args, idempotency_key="k").status is Status.EXECUTED
    with pytest.raises(headway.KeyReuseError):
        s.call("refund", args, idempotency_key="k")
    assert refund.count == 0


# -- normalisation: volatile parts and fixed wrappers -----------------------------------------


def test_a_result_that_differs_only_by_timestamp_and_id_is_unchanged(
    gov: headway.Governor,
) -> None:
    first = "job 1f2e3d4c-0000-4000-8000-00000000aaaa done at 2026-12-01T10:00:00Z"
    second = "job 9a8b7c6d-1111-4111-8111-11111111bbbb done at 2026-12-01T10:07:31Z"
    assert third_identical_call(gov, first, second) is Status.CORRECTED


def test_fixed_wrappers_do_not_make_different_outputs_alike(gov: headway.Governor) -> None:
    """Without the <returncode>/<output> wrappers the outputs are short and differ; with
    them their 5-grams would be near-duplicates."""

    def wrapped(out: str) -> str:
        return f"<returncode>0</returncode>\n<output>\n{out}\n</output>\n<stderr>\n</stderr>"

    first, second = wrapped("tests: 3 passed"), wrapped("tests: 4 passed")
    assert ngram_jaccard(first, second, 5) >= 0.75
    assert third_identical_call(gov, first, second) is Status.EXECUTED


def test_a_user_turn_starts_the_no_progress_count_again(gov: headway.Governor) -> None:
    """5 steps without progress (limit 6), a new user turn, then more: no stop, no warning."""
    gov.register("doc", ScriptedTool(["the document"]), effect="read", deterministic=True)
    s = gov.session("turns")
    outs = [s.call("doc", {}) for _ in range(6)]  # executed, then 5 served or corrected
    assert outs[-1].correction is not None  # past half the limit: warned
    s.user_turn()
    after = [s.call("doc", {}) for _ in range(2)]
    assert [o.status for o in after] == [Status.CACHED, Status.CACHED]
    assert all(o.correction is None for o in after)


def test_the_token_budget_is_used_up_exactly_at_its_limit(gov: headway.Governor) -> None:
    gov.register("step", ScriptedTool(["ok"]), effect="read")
    s = gov.session("tokens", budgets=headway.Budgets(tokens=1000))
    s.record_turn(tokens=400)
    s.call("step", {"i": 1})
    s.record_turn(tokens=600)  # reaches the limit: the next call raises
    with pytest.raises(headway.BudgetExceeded) as info:
        s.call("step", {"i": 2})
    assert info.value.diagnostic["budget_type"] == "tokens"
    assert info.value.diagnostic["consumed"] == 1000


def test_sessions_opened_at_the_same_instant_do_not_share_their_cache(
    gov: headway.Governor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new session's cache epoch comes from the wall clock; the session id in the cache
    key keeps two sessions apart even when their epochs are equal."""
    import time

    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0)
    tool = ScriptedTool(["v"])
    gov.register("overview", tool, effect="read", deterministic=True)
    assert gov.session("first").call("overview", {"t": 1}).status is Status.EXECUTED
    assert gov.session("second").call("overview", {"t": 1}).status is Status.EXECUTED
    assert tool.count == 2


def test_a_breaker_opens_when_the_failure_ratio_reaches_its_limit(gov: headway.Governor) -> None:
    """ratio=0.5 over 4 calls: 2 failures of 4 is the limit itself, and opens the breaker."""
    fails = iter([False, True, False, True])

    def tool(i: int) -> str:
        if next(fails):
            raise ConnectionError("down")
        return "ok"

    breaker = headway.Breaker(ratio=0.5, window=4, min_calls=4)
    gov.register("q", tool, effect="read", retry=headway.Retry(attempts=1), breaker=breaker)
    s = gov.session("ratio")
    for i in range(3):
        s.call("q", {"i": i})
    assert gov.breaker_state("q") == "closed"
    s.call("q", {"i": 3})
    assert gov.breaker_state("q") == "open"
