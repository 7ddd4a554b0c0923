"""What-if replay and figures: served, stale, oracle, corrections and stops measured
against the recording, through a real Governor in shadow mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from headway.analyze import tokens
from headway.analyze._model import Call, Run
from headway.analyze.figures import Figures, wilson
from headway.analyze.replay import replay


def _call(tool: str, args: object, result: str, **hints: object) -> Call:
    return Call(tool, args, result, "id:" + result, hints=dict(hints))


def _figures(*runs: Run, config: Path | None = None) -> dict[str, Any]:
    f = Figures()
    for r in runs:
        f.add(replay(r, config))
    return f.result()


def test_a_deterministic_read_repeated_with_the_same_result_is_served_correctly() -> None:
    lookup = _call("get_user", {"id": 1}, "alice", side_effect=False)
    run = Run("s", "r", [lookup, _call("get_user", {"id": 1}, "alice", side_effect=False)])
    o = _figures(run)["overall"]
    assert (o["calls"], o["repeats"], o["oracle"], o["served"], o["stale"]) == (2, 1, 1, 1, 0)
    assert o["captured"] == 1.0 and o["rcr"] == 0.5 and o["executions_saved"] == 1


def test_a_read_after_a_write_is_not_served_although_it_repeats() -> None:
    calls = [
        _call("get_order", {"id": 7}, "pending", side_effect=False),
        _call("cancel_order", {"id": 7}, "ok", side_effect=True),
        _call("get_order", {"id": 7}, "cancelled", side_effect=False),
    ]
    o = _figures(Run("s", "r", calls))["overall"]
    assert (o["repeats"], o["oracle"], o["served"], o["stale"]) == (1, 0, 0, 0)


def test_a_policy_that_caches_a_changing_read_reports_every_stale_answer(tmp_path: Path) -> None:
    config = tmp_path / "policy.toml"
    config.write_text('[tools.price]\neffect = "read"\ndeterministic = true\n')
    calls = [_call("price", {"s": "X"}, "10"), _call("price", {"s": "X"}, "11")]
    bad = _figures(Run("s", "r", calls), config=config)["overall"]
    assert (bad["served"], bad["stale"], bad["captured"]) == (1, 1, 0.0)
    safe = _figures(Run("s", "r", calls))["overall"]  # unknown tools are writes by default
    assert (safe["served"], safe["stale"]) == (0, 0)


def test_a_run_spinning_on_one_call_is_stopped_and_what_follows_is_saved() -> None:
    calls = [_call("search", {"q": "same"}, "nothing new here " * 5) for _ in range(12)]
    r = replay(Run("s", "spin", calls, succeeded=True))
    assert r.stop_step is not None and r.stop_step < 11
    assert [s.after_stop for s in r.steps].count(True) == 11 - r.stop_step
    result = _figures(Run("s", "spin", calls, succeeded=True))
    o = result["overall"]
    assert o["stops"] == 1 and o["stopped_succeeded"] == 1 and o["succeeded"] == 1
    assert o["corrections"] >= 1 and o["tokens_saved"] > 0
    assert o["stop_signals"] == {r.stop_signal: 1}
    (flagged,) = result["runs"]
    assert flagged["stop_step"] == r.stop_step and flagged["corrections"]


def test_a_run_making_progress_is_neither_corrected_nor_stopped() -> None:
    calls = [_call("search", {"q": i}, f"page {i} " * 20) for i in range(20)]
    o = _figures(Run("s", "ok", calls, succeeded=True))["overall"]
    assert (o["corrections"], o["stops"], o["tokens_saved"], o["repeats"]) == (0, 0, 0, 0)


def test_figures_are_kept_per_source_and_per_tool() -> None:
    a = Run("alpha", "1", [_call("t1", {}, "x", side_effect=False)] * 2)
    b = Run("beta", "2", [_call("t2", {}, "y")], succeeded=False)
    result = _figures(a, b)
    sources = result["sources"]
    assert set(sources) == {"alpha", "beta"}
    assert sources["alpha"]["tools"]["t1"]["served"] == 1
    assert sources["beta"]["runs_with_outcome"] == 1 and sources["beta"]["succeeded"] == 0
    assert result["overall"]["runs"] == 2 and result["overall"]["calls"] == 3


def test_a_time_dependent_shell_read_is_never_served() -> None:
    calls = [
        _call("bash", {"command": "date"}, "10:00"),
        _call("bash", {"command": "date"}, "10:00"),
    ]
    o = _figures(Run("s", "r", calls))["overall"]
    assert o["served"] == 0 and o["oracle"] == 1
    cat = [
        _call("bash", {"command": "cat a.txt"}, "hi"),
        _call("bash", {"command": "cat a.txt"}, "hi"),
    ]
    assert _figures(Run("s", "r", cat))["overall"]["served"] == 1


def test_wilson_interval_matches_the_formula() -> None:
    assert wilson(5, 10) == pytest.approx([0.2366, 0.7634], abs=1e-4)
    assert wilson(0, 10) == pytest.approx([0.0, 0.2775], abs=1e-4)
    assert wilson(0, 0) == [0.0, 0.0]


def test_tokens_fall_back_to_four_characters_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_encoder", lambda: None)
    monkeypatch.setitem(tokens._why, "fallback", "")  # tiktoken not installed
    assert tokens.count("abcd" * 10) == 10
    assert tokens.count("abcd" * 10, size=400) == 100  # a cut result counts in full
    assert tokens.method() == "characters / 4"


def test_timelines_show_stale_and_stopped_runs_before_merely_corrected_ones() -> None:
    warned = Run("s", "warned", [_call("look", {"q": 1}, "same text " * 10) for _ in range(4)])
    spin = Run("s", "spin", [_call("search", {"q": "x"}, "nothing new " * 10) for _ in range(12)])
    f = Figures(max_timelines=1)
    for r in (warned, spin):
        f.add(replay(r))
    assert [t["run_id"] for t in f.timelines] == ["spin"]
    assert [e[2] for e in f.timelines[0]["steps"]].count("stop") == 1


def test_an_edit_invalidates_the_reads_of_its_file_only() -> None:
    read_a = _call("Read", {"file_path": "/src/a.py"}, "a = 1")
    read_b = _call("Read", {"file_path": "/src/b.py"}, "b = 1")
    edit_a = _call("Edit", {"file_path": "/src/a.py", "old": "1", "new": "2"}, "ok")
    calls = [read_a, read_b, edit_a, _call("Read", {"file_path": "/src/a.py"}, "a = 2"), read_b]
    r = replay(Run("s", "r", calls))
    assert [s.served for s in r.steps] == ["", "", "", "", "ok"]  # b.py served, a.py re-read


def test_a_recorded_error_is_never_served_and_counts_as_a_repeated_error() -> None:
    failing = Call("fetch", {"u": 1}, "timeout", "id:t", error=True, hints={"side_effect": False})
    r = replay(Run("s", "r", [failing] * 4))
    assert all(s.served == "" for s in r.steps)
    assert [s.signals.get("repeated_error") for s in r.steps] == [None, 2, 3, 4]
    assert [s.correction for s in r.steps] == [False, False, True, True]  # from the 3rd
