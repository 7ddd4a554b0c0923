"""Readers of ``headway analyze``: each format from small fixtures written here; bad lines
give a Problem naming the file and line, and the rest of the file is still read."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import headway
from headway.analyze._model import Problem, Run
from headway.analyze.formats import detect, read, read_all


def _jsonl(path: Path, rows: list[Any], *, gz: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def _uniform(run: str, step: int, tool: str, obs: str, **extra: Any) -> dict[str, Any]:
    return {"source": "demo", "run_id": run, "step": step, "tool": tool, "args": {"q": step % 2},
            "observation": obs, "obs_sha1": f"sha-{obs}", "obs_len": len(obs), **extra}  # fmt: skip


def _split(items: list[Run | Problem]) -> tuple[list[Run], list[Problem]]:
    return [i for i in items if isinstance(i, Run)], [i for i in items if isinstance(i, Problem)]


def test_uniform_groups_runs_orders_steps_and_reads_outcomes(tmp_path: Path) -> None:
    rows = [_uniform("a", 1, "get", "y"), _uniform("a", 0, "get", "x", side_effect=False),
            _uniform("b", 0, "book", "ok", side_effect=True)]  # fmt: skip
    path = _jsonl(tmp_path / "demo.calls.jsonl.gz", rows, gz=True)
    _jsonl(tmp_path / "demo.runs.jsonl", [{"run_id": "a", "reward": 1.0},
                                          {"run_id": "b", "outcome": {"passed": False}}])  # fmt: skip
    runs, problems = _split(list(read(path)))
    assert problems == []
    assert [(r.source, r.run_id, r.succeeded) for r in runs] == [
        ("demo", "a", True),
        ("demo", "b", False),
    ]
    assert [c.result for c in runs[0].calls] == ["x", "y"]  # by step, not file order
    assert runs[0].calls[0].result_id == "sha-x"
    assert runs[0].calls[0].hints == {"side_effect": False}


def test_a_bad_line_names_file_and_line_and_the_rest_is_read(tmp_path: Path) -> None:
    path = tmp_path / "demo.calls.jsonl"
    good = json.dumps(_uniform("a", 0, "get", "x"))
    path.write_text(f"{good}\n{{not json\n{json.dumps(_uniform('b', 0, 'get', 'z'))}\n")
    runs, problems = _split(list(read(path)))
    assert [r.run_id for r in runs] == ["a", "b"]
    assert len(problems) == 1 and problems[0].line == 2
    assert str(problems[0]).startswith(f"{path}:2: not valid JSON")


def test_a_truncated_gzip_file_is_reported_after_the_runs_before_the_cut(tmp_path: Path) -> None:
    rows = [_uniform(f"r{i}", 0, "get", "x" * 200 + str(i)) for i in range(50)]
    full = gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode())
    path = tmp_path / "cut.calls.jsonl.gz"
    path.write_bytes(full[: len(full) // 2])
    runs, problems = _split(list(read(path, "uniform")))
    assert 0 < len(runs) < 50
    assert len(problems) == 1 and "ends early" in problems[0].message
    assert problems[0].path == str(path) and problems[0].line > 0


def _openai_conversation(cid: str) -> dict[str, Any]:
    return {"id": cid, "reward": 1, "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "time", "arguments": "{bad"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "noon"},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}]},
    ]}  # fmt: skip


def test_openai_tool_calls_are_matched_to_tool_messages_by_id(tmp_path: Path) -> None:
    path = tmp_path / "chats.json"
    path.write_text(json.dumps([_openai_conversation("x"), _openai_conversation("y")]))
    assert detect(path) == ("openai", True)  # one line: read as JSONL, the same runs
    runs, problems = _split(list(read(path)))
    assert problems == [] and [r.run_id for r in runs] == ["x", "y"]
    calls = runs[0].calls
    assert [(c.tool, c.args, c.result) for c in calls] == [
        ("weather", {"city": "Paris"}, "sunny"), ("time", "{bad", "noon")]  # fmt: skip
    assert runs[0].succeeded is True


def test_openai_jsonl_reports_a_bad_conversation_and_reads_the_others(tmp_path: Path) -> None:
    path = tmp_path / "chats.jsonl"
    path.write_text(
        json.dumps(_openai_conversation("x")) + "\n" + json.dumps({"messages": 3}) + "\n"
        + json.dumps(_openai_conversation("z")) + "\n"
    )  # fmt: skip
    runs, problems = _split(list(read(path)))
    assert [r.run_id for r in runs] == ["x", "z"]
    assert [(p.line, p.path) for p in problems] == [(2, str(path))]


def test_anthropic_tool_use_blocks_are_matched_to_tool_results(tmp_path: Path) -> None:
    conv = [
        {"role": "user", "content": "find it"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "looking"},
            {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "a"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True}]},
    ]  # fmt: skip
    path = _jsonl(tmp_path / "claude.jsonl", [conv])
    assert detect(path) == ("anthropic", True)
    runs, problems = _split(list(read(path)))
    assert problems == []
    (call,) = runs[0].calls
    assert (call.tool, call.args, call.result, call.error) == ("search", {"q": "a"}, "boom", True)


def _span(trace: str, start: int, tool: str, args: str, result: str) -> dict[str, Any]:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
             "gen_ai.tool.call.arguments": args, "gen_ai.tool.call.result": result}  # fmt: skip
    return {"traceId": trace, "name": f"execute_tool {tool}", "startTimeUnixNano": str(start),
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}  # fmt: skip


def test_otel_execute_tool_spans_become_runs_ordered_by_start_time(tmp_path: Path) -> None:
    chat_span = {"traceId": "t1", "name": "chat gpt", "startTimeUnixNano": "1", "attributes": []}
    export = {"resourceSpans": [{"scopeSpans": [{"spans": [
        _span("t1", 2_000_000_000, "b", '{"x": 2}', "two"), chat_span,
        _span("t1", 1_000_000_000, "a", '{"x": 1}', "one"),
        _span("t2", 5, "a", '{"x": 1}', "one")]}]}]}  # fmt: skip
    path = _jsonl(tmp_path / "spans.jsonl", [export, {"oops": 1}])
    assert detect(path) == ("otel", True)
    runs, problems = _split(list(read(path)))
    assert [(r.run_id, [c.tool for c in r.calls]) for r in runs] == [
        ("t1", ["a", "b"]),
        ("t2", ["a"]),
    ]
    assert runs[0].calls[0].args == {"x": 1} and runs[0].calls[0].time == 1.0
    assert [p.line for p in problems] == [2]


def test_headway_audit_jsonl_is_read_back_as_runs(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    gov = headway.Governor(audit=[headway.JSONLSink(path)])
    gov.register("lookup", lambda q: f"found {q}", effect="read")
    for sid in ("s1", "s2"):
        s = gov.session(sid)
        s.call("lookup", {"q": 1})
        s.call("lookup", {"q": 2})
    assert detect(path) == ("audit", True)
    runs, problems = _split(list(read(path)))
    assert problems == []
    assert [(r.run_id, [c.args for c in r.calls]) for r in runs] == [
        ("s1", [{"q": 1}, {"q": 2}]), ("s2", [{"q": 1}, {"q": 2}])]  # fmt: skip
    first, second = runs[0].calls
    assert first.result_id != second.result_id  # the digest stands in for the result
    assert runs[0].calls[0].result_id == runs[1].calls[0].result_id


def test_a_directory_reads_every_file_and_names_what_it_cannot_read(tmp_path: Path) -> None:
    _jsonl(tmp_path / "demo.calls.jsonl.gz", [_uniform("a", 0, "get", "x")], gz=True)
    _jsonl(tmp_path / "demo.runs.jsonl", [{"run_id": "a", "reward": 0}])  # read with its calls
    (tmp_path / "notes.md").write_text("# notes\n")
    runs, problems = _split(list(read_all([tmp_path])))
    assert [(r.run_id, r.succeeded) for r in runs] == [("a", False)]
    assert [(p.path, p.skipped) for p in problems] == [(str(tmp_path / "notes.md"), True)]
    assert "not a recognised trace format" in problems[0].message
    _, named = _split(list(read_all([tmp_path / "notes.md"])))
    assert not named[0].skipped  # named on its own, it is an error


def test_a_missing_path_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    _, problems = _split(list(read_all([tmp_path / "nope.jsonl"])))
    assert "no such file" in problems[0].message


@pytest.mark.parametrize("fmt", ["uniform", "audit"])
def test_an_explicit_format_rejects_records_of_another_shape(tmp_path: Path, fmt: str) -> None:
    path = _jsonl(tmp_path / "x.jsonl", [{"hello": 1}])
    runs, problems = _split(list(read(path, fmt)))
    assert runs == [] and problems[0].line == 1 and fmt in problems[0].message


def test_a_pretty_printed_json_document_names_the_bad_conversation(tmp_path: Path) -> None:
    path = tmp_path / "chats.json"
    path.write_text(
        json.dumps({"conversations": [_openai_conversation("x"), {"messages": 1}]}, indent=2)
    )
    assert detect(path) == ("openai", False)
    runs, problems = _split(list(read(path)))
    assert [r.run_id for r in runs] == ["x"]
    assert str(problems[0]).startswith(f"{path}: conversation 2: ")


def test_a_broken_json_document_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "chats.json"
    path.write_text('[\n {"role": "user",\n  "content": }\n]\n')
    runs, problems = _split(list(read(path, "openai")))
    assert runs == [] and problems[0].line == 3


def test_records_that_never_reached_a_tool_are_counted_not_replayed(tmp_path: Path) -> None:
    format_error = {
        **_uniform("a", 1, "invalid_action", "use one block"),
        "args": {"n_bash_blocks": 2},
    }
    silent = {**_uniform("a", 2, "delegate:Coder", ""), "kind": "delegation", "obs_len": 0}
    path = _jsonl(tmp_path / "d.calls.jsonl", [_uniform("a", 0, "bash", "x"), format_error, silent])
    (run,) = _split(list(read(path)))[0]
    assert [c.tool for c in run.calls] == ["bash"] and run.not_replayed == 2


def test_a_sqlite_audit_table_is_read_by_path_or_url(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    sink = headway.SQLiteAuditSink(db)
    gov = headway.Governor(audit=[sink])
    gov.register("lookup", lambda q: f"found {q}", effect="read")
    s = gov.session("s1")
    for q in (1, 2, 1):
        s.call("lookup", {"q": q})
    sink.close()
    assert detect(db) == ("audit", False)
    for path in (db, f"sqlite:///{db}"):
        runs, problems = _split(list(read_all([path])))
        assert problems == []
        assert [(r.run_id, [c.args["q"] for c in r.calls]) for r in runs] == [("s1", [1, 2, 1])]


def test_a_sqlite_file_without_the_audit_table_is_a_clear_problem(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "other.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.commit()
    _, problems = _split(list(read_all([db])))
    assert "cannot read the headway_audit table" in problems[0].message


def test_reading_a_large_file_keeps_memory_flat(tmp_path: Path) -> None:
    """Streaming: the peak memory while reading 4,000 runs stays far below the data."""
    import tracemalloc

    rows = [_uniform(f"r{i}", 0, "get", f"{i}" + "x" * 2000) for i in range(4000)]
    path = _jsonl(tmp_path / "big.calls.jsonl.gz", rows, gz=True)
    del rows
    tracemalloc.start()
    try:
        count = sum(1 for item in read(path) if isinstance(item, Run))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 4000
    assert peak < 2_000_000  # the observations alone are 8 MB


def test_otel_values_of_every_kind_and_error_status_are_read(tmp_path: Path) -> None:
    span = {"traceId": "t", "name": "execute_tool lookup", "startTimeUnixNano": 7, "status": {"code": 2},
            "attributes": [{"key": "gen_ai.conversation.id", "value": {"stringValue": "conv"}},
                           {"key": "gen_ai.tool.call.arguments", "value": {"kvlistValue": {"values": [
                               {"key": "n", "value": {"intValue": "3"}},
                               {"key": "tags", "value": {"arrayValue": {"values": [{"boolValue": True}]}}}]}}},
                           {"key": "gen_ai.tool.call.result", "value": {"doubleValue": 1.5}}]}  # fmt: skip
    path = tmp_path / "spans.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}, indent=1))
    assert detect(path) == ("otel", False)
    (run,) = _split(list(read(path)))[0]
    (call,) = run.calls
    assert run.run_id == "conv" and call.tool == "lookup"  # the tool named by the span name
    assert call.args == {"n": 3, "tags": [True]} and call.result == "1.5" and call.error


def test_a_damaged_trace_in_a_directory_is_an_error_not_a_skipped_file(tmp_path: Path) -> None:
    (tmp_path / "cut.calls.jsonl.gz").write_bytes(gzip.compress(b'{"run_id": "a", "to')[:30])
    _, problems = _split(list(read_all([tmp_path])))
    assert [(Path(p.path).name, p.skipped) for p in problems] == [("cut.calls.jsonl.gz", False)]
