"""``headway analyze``: the command reads paths, prints a summary, writes the JSON with
the keys acceptance checks use, and exits 1 (not 0) when some input could not be read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

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
