"""``headway analyze``: the command reads paths, prints a summary, writes the JSON with
the keys acceptance checks use, and exits 1 (not 0) when some input could not be read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import headway
from headway.cli import main

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"  # beside the repository
FIGURE_KEYS = {"runs", "calls", "rcr", "same_result_rcr", "served", "stale", "oracle",
               "captured", "tokens_saved", "corrections", "stops"}  # fmt: skip


def _conversation(n: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(n):
        messages.append({"role": "assistant", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}]})  # fmt: skip
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "no results for x"})
    return {"id": f"conv{n}", "messages": messages, "success": True}


def test_analyze_writes_the_json_figures_and_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps(_conversation(12)) + "\n" + json.dumps(_conversation(2)) + "\n")
    (tmp_path / "README.md").write_text("# runs of May\n")  # skipped with a note: exit 0
    out = tmp_path / "out" / "figures.json"
    out.parent.mkdir()
    assert main(["analyze", str(tmp_path), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["sources"]) == {"chats"}
    for figs in (result["sources"]["chats"], result["overall"]):
        assert set(figs) >= FIGURE_KEYS
    assert result["overall"]["runs"] == 2 and result["overall"]["calls"] == 14
    assert result["overall"]["stops"] == 1 and result["overall"]["stopped_succeeded"] == 1
    text = capsys.readouterr()
    assert "chats" in text.out and "overall" in text.out and "stale answers: 0" in text.out
    assert "runs read" not in text.err  # no progress bar when stderr is not a terminal
    assert "skipped" in text.err and "README.md" in text.err


def test_analyze_reports_bad_input_and_still_analyses_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps(_conversation(1)) + "\n{truncated\n")
    out = tmp_path / "figures.json"
    assert main(["analyze", str(chats), "--format", "openai", "--json", str(out)]) == 1
    assert f"{chats}:2: not valid JSON" in capsys.readouterr().err
    result = json.loads(out.read_text())
    assert result["overall"]["runs"] == 1
    assert result["command"]["problems"] == [
        f"{chats}:2: not valid JSON (Expecting property name enclosed in double quotes, column 2)"
    ]


def test_a_bad_config_fails_before_any_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "policy.toml"
    config.write_text("[tools.x]\neffekt = 'read'\n")
    assert main(["analyze", str(tmp_path), "--config", str(config)]) == 2
    assert "unknown key(s) effekt" in capsys.readouterr().err


@pytest.mark.skipif(not TRACES.exists(), reason=f"no published traces at {TRACES}")
def test_the_default_policy_serves_no_stale_answer_on_real_tau_bench_runs(tmp_path: Path) -> None:
    out = tmp_path / "tau.json"
    main(["analyze", str(TRACES / "tau_bench_airline_gpt4o.calls.jsonl.gz"), "--json", str(out)])
    figs = json.loads(out.read_text())["sources"]["tau_bench_airline_gpt4o"]
    assert figs["runs"] > 100 and figs["served"] > 0 and figs["stale"] == 0


def test_a_progress_line_goes_to_stderr_only_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text("".join(json.dumps(_conversation(1)) + "\n" for _ in range(10)))
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    assert main(["analyze", str(chats)]) == 0
    assert "10 runs read" in capsys.readouterr().err


def test_an_invalid_tool_value_in_the_config_exits_2_with_its_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps(_conversation(2)) + "\n")
    for table, said in (('effect = "reed"', "not 'reed'"), ("ttl = -1", "ttl must be >= 0")):
        config = tmp_path / "policy.toml"
        config.write_text(f"[tools.lookup]\n{table}\n")  # a tool no run calls: checked all the same
        assert main(["analyze", str(chats), "--config", str(config)]) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err


def test_a_config_table_for_a_tool_no_run_calls_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps(_conversation(2)) + "\n")
    config = tmp_path / "policy.toml"
    config.write_text('[tools.serch]\neffect = "read"\n[tools.search]\neffect = "read"\n')
    out = tmp_path / "f.json"
    assert main(["analyze", str(chats), "--config", str(config), "--json", str(out)]) == 0
    text = capsys.readouterr()
    assert "[tools.serch]" in text.err and "[tools.serch]" in text.out
    assert "[tools.search]" not in text.err
    (warning,) = json.loads(out.read_text())["command"]["warnings"]
    assert "serch" in warning


def test_input_without_a_tool_call_exits_1_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    assert main(["analyze", str(chats)]) == 1
    text = capsys.readouterr()
    assert "no tool calls found" in text.err and "no tool calls found" in text.out


def test_the_report_names_how_each_tool_was_taken_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps(_conversation(3)) + "\n")
    out = tmp_path / "f.json"
    assert main(["analyze", str(chats), "--json", str(out)]) == 0
    (taken,) = json.loads(out.read_text())["assumptions"]
    assert (taken["tool"], taken["class"]) == ("search", "write")
    assert taken["why"].startswith("default: an unknown tool is a write")
    text = capsys.readouterr().out
    assert "search: write (default: an unknown tool" in text
    assert f"assumptions: headway {headway.__version__}, the default policy, inputs {chats}" in text
    assert json.loads(out.read_text())["command"]["headway"] == headway.__version__
    config = tmp_path / "policy.toml"
    config.write_text('[tools.search]\neffect = "read"\ndeterministic = true\n')
    assert main(["analyze", str(chats), "--config", str(config), "--json", str(out)]) == 0
    (taken,) = json.loads(out.read_text())["assumptions"]
    assert (taken["class"], taken["why"]) == (
        "read",
        "config: [tools.search] deterministic, effect",
    )


def test_the_oracle_counts_repeated_reads_and_shows_repeated_writes_apart(tmp_path: Path) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps(_conversation(3)) + "\n")  # search repeats twice, same result
    out = tmp_path / "f.json"
    main(["analyze", str(chats), "--json", str(out)])  # search: unknown, so a write
    o = json.loads(out.read_text())["overall"]
    assert (o["same_result_repeats"], o["oracle"], o["oracle_writes"]) == (2, 0, 2)
    config = tmp_path / "policy.toml"
    config.write_text('[tools.search]\neffect = "read"\n')
    main(["analyze", str(chats), "--config", str(config), "--json", str(out)])
    o = json.loads(out.read_text())["overall"]
    assert (o["oracle"], o["oracle_writes"]) == (2, 0)


def test_money_uses_the_prices_given_and_counts_the_turns_a_stop_avoids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps(_conversation(12)) + "\n" + json.dumps(_conversation(2)) + "\n")
    out = tmp_path / "f.json"
    args = ["analyze", str(chats), "--json", str(out)]
    assert main([*args, "--price-in", "1", "--price-out", "0"]) == 0
    result = json.loads(out.read_text())
    m = result["overall"]["money"]
    assert result["prices"] == {
        "input_per_million": 1.0,
        "output_per_million": 0.0,
        "source": "given",
    }
    stop = result["runs"][0]["stop_step"]
    assert m["turns"] == 14 and m["turns_avoided"] == 11 - stop  # turns after the stop
    assert m["cost_before"] == pytest.approx(m["input_tokens"] / 1e6, abs=1e-4)
    assert m["cost_after"] < m["cost_before"] and m["input_avoided"] > 0
    # both runs succeeded; the stopped one would not have: one success after
    assert (m["successes_before"], m["successes_after"]) == (2, 1)
    assert "cost per successful task before" in capsys.readouterr().out
    assert main([*args, "--price-in", "2", "--price-out", "0"]) == 0
    doubled = json.loads(out.read_text())["overall"]["money"]
    assert doubled["cost_before"] == pytest.approx(2 * m["cost_before"], abs=1e-4)
    with pytest.raises(SystemExit) as bad:
        main([*args, "--price-in", "-1"])
    assert bad.value.code == 2 and "a price is >= 0" in capsys.readouterr().err


def test_recorded_usage_is_used_for_the_turns_that_have_it(tmp_path: Path) -> None:
    conv = _conversation(1)
    conv["messages"][1]["usage"] = {"prompt_tokens": 1000, "completion_tokens": 10}
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps(conv) + "\n")
    out = tmp_path / "f.json"
    main(["analyze", str(chats), "--json", str(out)])
    m = json.loads(out.read_text())["overall"]["money"]
    assert (m["recorded_turns"], m["input_tokens"], m["output_tokens"]) == (1, 1000, 10)


def test_the_report_shows_what_the_model_would_have_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps(_conversation(12)) + "\n")
    out = tmp_path / "f.json"
    main(["analyze", str(chats), "--json", str(out)])
    examples = json.loads(out.read_text())["examples"]
    corrections = [e for k, v in examples.items() if k.startswith("correction") for e in v]
    stops = [e for k, v in examples.items() if k.startswith("stop") for e in v]
    assert corrections and corrections[0]["text"].startswith("headway: ")
    assert "search" in corrections[0]["text"]  # names the call it corrects
    assert stops and stops[0]["text"].startswith("headway: stopped")
    assert corrections[0]["text"][:60] in capsys.readouterr().out.replace("\n", " ")
    (flagged,) = json.loads(out.read_text())["runs"]  # and per flagged run
    assert flagged["first_correction_text"] == corrections[0]["text"]
    assert flagged["stop_text"] == stops[0]["text"]


def test_corrected_runs_that_still_succeeded_are_counted(tmp_path: Path) -> None:
    chats = tmp_path / "chats.jsonl"
    failed = {**_conversation(4), "id": "f", "success": False}
    chats.write_text(json.dumps(_conversation(4)) + "\n" + json.dumps(failed) + "\n")
    out = tmp_path / "f.json"
    main(["analyze", str(chats), "--json", str(out)])
    o = json.loads(out.read_text())["overall"]
    assert (o["runs_corrected"], o["corrected_succeeded"], o["stops"]) == (2, 1, 0)


def test_a_tokenizer_download_that_never_answers_falls_back_in_bounded_time(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import threading

    from headway.analyze import tokens

    never = threading.Event()
    monkeypatch.setattr(tokens, "_load", lambda found: never.wait())  # a proxy that never answers
    monkeypatch.setattr(tokens, "LOAD_TIMEOUT_S", 0.2)
    monkeypatch.setitem(tokens._why, "fallback", "")
    tokens._encoder.cache_clear()
    try:
        assert tokens.count("abcd" * 3) == 3
        assert tokens.method().startswith("characters / 4 (tiktoken's encoding did not load")
        assert "did not load within 0.2 s" in capsys.readouterr().err
    finally:
        never.set()
        tokens._encoder.cache_clear()


@pytest.mark.skipif(not TRACES.exists(), reason=f"no published traces at {TRACES}")
def test_the_published_traces_keep_todays_figures(tmp_path: Path) -> None:
    """Where the readers and the policy did not change, the figures must not: the replay
    of the uniform files gives docs/benchmarks.md's table."""
    out = tmp_path / "all.json"
    main(["analyze", str(TRACES), "--json", str(out)])
    o = json.loads(out.read_text())["overall"]
    want = {"runs": 1554, "calls": 31362, "repeats": 3533, "served": 72, "stale": 0,
            "corrections": 228, "stops": 18, "executions_saved": 830, "tokens_saved": 389650,
            "stopped_succeeded": 0, "succeeded": 834, "harness_stubs": 4}  # fmt: skip
    got = {k: o[k] for k in want}
    if o["tokens_saved"] != 389650:  # tiktoken installed with its encoding: another count
        got["tokens_saved"] = want["tokens_saved"]
    assert got == want
    assert (o["same_result_repeats"], o["oracle"] + o["oracle_writes"]) == (1109, 1109)
