"""Every export format ``headway analyze`` reads, from fixtures that follow each format's
documented shape, and from real published runs the test converts into each format: the
figures of the recording (calls, repeats, same-result repeats) and of the replay (served,
stale, corrections, stops) must agree with the uniform reading of the same runs."""

from __future__ import annotations

import gzip
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from headway.analyze._model import Call, Problem, Run
from headway.analyze.figures import Figures
from headway.analyze.formats import detect, read, read_all
from headway.analyze.replay import replay

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
TAU = TRACES / "tau_bench_airline_gpt4o.calls.jsonl.gz"


def _split(items: list[Run | Problem]) -> tuple[list[Run], list[Problem]]:
    return [i for i in items if isinstance(i, Run)], [i for i in items if isinstance(i, Problem)]


def _only(path: Path, fmt: str) -> Run:
    assert detect(path) is not None and detect(path)[0] == fmt  # type: ignore[index]
    runs, problems = _split(list(read(path)))
    assert problems == [], problems
    (run,) = runs
    return run


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# -- one writer per format: a run's calls as that format records them -----------------


def _openai_messages(calls: list[Call]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "hi"},
    ]
    for i, c in enumerate(calls):
        out.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {"name": c.tool, "arguments": json.dumps(c.args)}}]})  # fmt: skip
        out.append(
            {"role": "tool", "tool_call_id": f"call_{i}", "name": c.tool, "content": c.result}
        )
    return out


def write_openai(runs: list[Run], d: Path) -> Path:
    rows = [{"id": r.run_id, "messages": _openai_messages(r.calls)} for r in runs]
    return _jsonl(d / "chats.jsonl", rows)


def write_tau_bench(runs: list[Run], d: Path) -> Path:
    """tau-bench's results file: a JSON list of EnvRunResult (task_id, reward, info, traj, trial)."""
    doc = [{"task_id": k, "reward": 1.0 if r.succeeded else 0.0, "info": {}, "traj": _openai_messages(r.calls), "trial": 0}
           for k, r in enumerate(runs)]  # fmt: skip
    path = d / "results.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def write_inspect(runs: list[Run], d: Path) -> Path:
    """An Inspect AI log as JSON: samples of messages; a tool call's ``function`` is its name."""
    samples = []
    for k, r in enumerate(runs):
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go", "source": "input"}]
        for i, c in enumerate(r.calls):
            messages.append({"role": "assistant", "content": "", "source": "generate", "tool_calls": [{"id": f"t{i}", "function": c.tool, "arguments": c.args, "type": "function"}]})  # fmt: skip
            messages.append({"role": "tool", "content": c.result, "tool_call_id": f"t{i}", "function": c.tool, "error": None})  # fmt: skip
        samples.append({"id": k, "epoch": 1, "input": "go", "target": "", "messages": messages,
                        "scores": {"match": {"value": "C" if r.succeeded else "I"}}})  # fmt: skip
    path = d / "log.json"
    path.write_text(
        json.dumps({"version": 2, "status": "success", "eval": {"task": "t"}, "samples": samples})
    )
    return path


def write_anthropic(runs: list[Run], d: Path) -> Path:
    rows = []
    for r in runs:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        for i, c in enumerate(r.calls):
            messages.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": c.tool, "input": c.args}]})  # fmt: skip
            messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": c.result}]})  # fmt: skip
        rows.append({"id": r.run_id, "messages": messages})
    return _jsonl(d / "claude.jsonl", rows)


def write_claude_code(runs: list[Run], d: Path) -> Path:
    """Session transcript lines: a summary first, then assistant tool_use lines and user
    tool_result lines, all with a sessionId."""
    rows: list[dict[str, Any]] = [{"type": "summary", "summary": "a session", "leafUuid": "u0"}]
    for r in runs:
        for i, c in enumerate(r.calls):
            base = {"sessionId": r.run_id, "isSidechain": False, "cwd": "/w", "version": "1.0", "timestamp": f"2025-05-26T07:{i // 60:02d}:{i % 60:02d}.000Z"}  # fmt: skip
            rows.append({**base, "type": "assistant", "uuid": f"a{i}", "message": {"id": f"msg_{r.run_id}_{i}", "type": "message", "role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": c.tool, "input": c.args}], "usage": {"input_tokens": 10, "output_tokens": 5}}})  # fmt: skip
            rows.append({**base, "type": "user", "uuid": f"u{i}", "message": {"role": "user", "content": [{"tool_use_id": f"toolu_{i}", "type": "tool_result", "content": c.result}]}})  # fmt: skip
    return _jsonl(d / "session.jsonl", rows)


def write_agents_sdk(runs: list[Run], d: Path) -> Path:
    """A trace per run and a function span per call (span_data.type = function)."""
    items: list[dict[str, Any]] = []
    for k, r in enumerate(runs):
        trace = f"trace_{k:032x}"
        items.append({"object": "trace", "id": trace, "workflow_name": "Agent workflow", "group_id": None, "metadata": None})  # fmt: skip
        for i, c in enumerate(r.calls):
            items.append({"object": "trace.span", "id": f"span_{k}_{i}", "trace_id": trace, "parent_id": None,
                          "started_at": f"2025-03-01T10:00:{i:02d}.{i:06d}+00:00", "ended_at": None,
                          "span_data": {"type": "function", "name": c.tool, "input": json.dumps(c.args), "output": c.result, "mcp_data": None},
                          "error": None})  # fmt: skip
    path = d / "traces.json"
    path.write_text(json.dumps({"data": items}))
    return path


def write_langsmith(runs: list[Run], d: Path) -> Path:
    rows: list[dict[str, Any]] = []
    for k, r in enumerate(runs):
        root = f"00000000-0000-0000-0000-{k:012d}"
        rows.append({"id": root, "trace_id": root, "parent_run_id": None, "name": "agent", "run_type": "chain", "inputs": {}, "outputs": {}, "dotted_order": f"20250301T100000000000Z{root}"})  # fmt: skip
        for i, c in enumerate(r.calls):
            rid = f"{k:08d}-0000-0000-0000-{i:012d}"
            rows.append({"id": rid, "trace_id": root, "parent_run_id": root, "name": c.tool, "run_type": "tool",
                         "inputs": {"input": json.dumps(c.args)}, "outputs": {"output": c.result}, "error": None,
                         "start_time": f"2025-03-01T10:00:{i // 60:02d}.{i % 60:06d}",
                         "dotted_order": f"20250301T100000000000Z{root}.20250301T1000{i:06d}Z{rid}"})  # fmt: skip
    return _jsonl(d / "runs.jsonl", rows)


def write_responses(runs: list[Run], d: Path) -> Path:
    rows = []
    for r in runs:
        items: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        for i, c in enumerate(r.calls):
            items.append({"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}", "name": c.tool, "arguments": json.dumps(c.args), "status": "completed"})  # fmt: skip
            items.append(
                {"type": "function_call_output", "call_id": f"call_{i}", "output": c.result}
            )
        rows.append(items)
    return _jsonl(d / "items.jsonl", rows)


def _otlp(runs: list[Run], d: Path, name: str, attrs: Callable[[Call], dict[str, str]]) -> Path:
    spans = []
    for k, r in enumerate(runs):
        for i, c in enumerate(r.calls):
            spans.append({"traceId": f"{k:032x}", "spanId": f"{i:016x}", "name": name.format(tool=c.tool),
                          "startTimeUnixNano": str(1_700_000_000_000_000_000 + i * 1_000_000_000),
                          "attributes": [{"key": key, "value": {"stringValue": v}} for key, v in attrs(c).items()]})  # fmt: skip
    path = d / f"{attrs.__name__}.otlp.json"
    path.write_text(json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "x"}, "spans": spans}]}]}))  # fmt: skip
    return path


def genai(c: Call) -> dict[str, str]:
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": c.tool, "gen_ai.tool.call.arguments": json.dumps(c.args), "gen_ai.tool.call.result": c.result}  # fmt: skip


def write_otel_genai(runs: list[Run], d: Path) -> Path:
    return _otlp(runs, d, "execute_tool {tool}", genai)


def write_otel_pydantic_ai(runs: list[Run], d: Path) -> Path:
    """pydantic-ai's default spans before instrumentation version 3 (Logfire)."""
    return _otlp(runs, d, "running tool", logfire)


def logfire(c: Call) -> dict[str, str]:
    return {"gen_ai.tool.name": c.tool, "gen_ai.tool.call.id": "call_1", "tool_arguments": json.dumps(c.args), "tool_response": c.result, "logfire.msg": f"running tool: {c.tool}"}  # fmt: skip


def write_openinference(runs: list[Run], d: Path) -> Path:
    return _otlp(runs, d, "{tool}", openinference)


def openinference(c: Call) -> dict[str, str]:
    return {"openinference.span.kind": "TOOL", "tool.name": c.tool, "input.value": json.dumps(c.args), "input.mime_type": "application/json", "output.value": c.result}  # fmt: skip


WRITERS = {
    "openai": write_openai, "tau-bench": write_tau_bench, "inspect": write_inspect,
    "anthropic": write_anthropic, "claude-code": write_claude_code,
    "openai-agents": write_agents_sdk, "langsmith": write_langsmith, "responses": write_responses,
    "otel": write_otel_genai, "otel-pydantic-ai": write_otel_pydantic_ai,
    "otel-openinference": write_openinference,
}  # fmt: skip
EXPECTED = {"otel-pydantic-ai": "otel", "otel-openinference": "otel"}  # detected as
KEYS = ("calls", "repeats", "same_result_repeats", "served", "stale", "corrections", "stops")


def _figures(runs: list[Run], config: Path | None) -> dict[str, Any]:
    f = Figures()
    for r in runs:
        f.add(replay(r, config))
    overall: dict[str, Any] = f.result()["overall"]
    return overall


def _policy(runs: list[Run], d: Path) -> Path:
    """The uniform records' side_effect flags as a config (other formats do not carry them)."""
    flags = {
        c.tool: c.hints["side_effect"] for r in runs for c in r.calls if "side_effect" in c.hints
    }
    text = "".join(
        f'[tools.{t}]\neffect = "write"\n'
        if w
        else f'[tools.{t}]\neffect = "read"\ndeterministic = true\n'
        for t, w in sorted(flags.items())
    )
    (d / "policy.toml").write_text(text)
    return d / "policy.toml"


@pytest.mark.skipif(not TAU.exists(), reason=f"no published traces at {TAU}")
@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_real_runs_converted_to_each_format_give_the_uniform_figures(
    tmp_path: Path, fmt: str
) -> None:
    uniform = _split(list(read(TAU)))[0][:40]
    assert sum(len(r.calls) for r in uniform) > 150
    config = _policy(uniform, tmp_path)
    path = WRITERS[fmt](uniform, tmp_path)
    found = detect(path)
    assert found is not None and found[0] == EXPECTED.get(fmt, fmt)
    runs, problems = _split(list(read_all([path])))
    assert problems == []
    assert len(runs) == len([r for r in uniform if r.calls])
    want, got = _figures(uniform, config), _figures(runs, config)
    assert {k: got[k] for k in KEYS} == {k: want[k] for k in KEYS}
    assert want["repeats"] > 0 and want["served"] > 0  # the runs exercise the figures


# -- the particulars of each format --------------------------------------------------


def test_inspect_tool_calls_name_their_function_as_a_string_and_errors_are_marked(
    tmp_path: Path,
) -> None:
    log = {"eval": {"task": "ctf"}, "samples": [{"id": "s1", "epoch": 2, "scores": {"acc": {"value": "C"}}, "messages": [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "function": "bash", "arguments": {"cmd": "ls"}, "type": "function"}]},
        {"role": "tool", "content": "", "tool_call_id": "a", "function": "bash", "error": {"type": "timeout", "message": "timed out"}}]}]}  # fmt: skip
    path = tmp_path / "log.json"
    path.write_text(json.dumps(log))
    run = _only(path, "inspect")
    (call,) = run.calls
    assert (run.run_id, run.succeeded) == ("s1 epoch 2", True)
    assert (call.tool, call.args, call.error) == ("bash", {"cmd": "ls"}, True)


def test_an_inspect_eval_archive_is_read_sample_by_sample(tmp_path: Path) -> None:
    path = tmp_path / "run.eval"
    sample = {"id": 7, "epoch": 1, "scores": {"acc": {"value": 0}}, "messages": [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "function": "python", "arguments": {"code": "1"}}]},
        {"role": "tool", "content": "1", "tool_call_id": "a", "function": "python"}]}  # fmt: skip
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("header.json", json.dumps({"eval": {}}))
        z.writestr("samples/7_epoch_1.json", json.dumps(sample))
    run = _only(path, "inspect")
    assert (run.run_id, run.succeeded, run.calls[0].result) == ("7 epoch 1", False, "1")


def test_tau_bench_results_name_task_and_trial_and_judge_by_reward(tmp_path: Path) -> None:
    r = Run("x", "r", [Call("get_user_details", {"user_id": "u"}, "{}", "")], succeeded=True)
    path = write_tau_bench([r], tmp_path)
    run = _only(path, "tau-bench")
    assert (run.run_id, run.succeeded, run.calls[0].tool) == (
        "task 0 trial 0",
        True,
        "get_user_details",
    )
    assert run.context[2] > 0  # the system and user messages precede the first call's turn


def test_claude_code_counts_one_turn_per_response_and_its_usage_once(tmp_path: Path) -> None:
    base = {"sessionId": "s", "timestamp": "2025-05-26T07:27:40.079Z", "cwd": "/w"}
    rows = [
        {"type": "queue-operation", "operation": "dequeue", "sessionId": "s"},
        {**base, "type": "assistant", "message": {"id": "msg_1", "role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/a"}}], "usage": {"input_tokens": 3, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200, "output_tokens": 40}}},
        {**base, "type": "assistant", "message": {"id": "msg_1", "role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "false"}}], "usage": {"input_tokens": 3, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200, "output_tokens": 40}}},
        {**base, "type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "exit 1", "is_error": True}]}},
        {**base, "type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "A"}]}]}},
    ]  # fmt: skip
    run = _only(_jsonl(tmp_path / "abc.jsonl", rows), "claude-code")
    assert [(c.tool, c.turn, c.result, c.error) for c in run.calls] == [
        ("Read", 0, "A", False), ("Bash", 0, "exit 1", True)]  # fmt: skip
    assert run.usage == {0: (1203, 40)}


def test_agents_sdk_function_spans_with_errors_and_generation_usage(tmp_path: Path) -> None:
    spans = [
        {"object": "trace.span", "id": "s2", "trace_id": "t", "started_at": "2025-01-01T00:00:02+00:00", "span_data": {"type": "function", "name": "lookup", "input": '{"q": 1}', "output": None}, "error": {"message": "Error running tool", "data": {}}},
        {"object": "trace.span", "id": "s1", "trace_id": "t", "started_at": "2025-01-01T00:00:01+00:00", "span_data": {"type": "generation", "usage": {"input_tokens": 50, "output_tokens": 7}}, "error": None},
        {"object": "trace.span", "id": "s0", "trace_id": "t", "started_at": "2025-01-01T00:00:00+00:00", "span_data": {"type": "agent", "name": "A"}, "error": None},
    ]  # fmt: skip
    run = _only(_jsonl(tmp_path / "spans.jsonl", spans), "openai-agents")
    (call,) = run.calls
    assert (call.tool, call.args, call.error, call.turn) == ("lookup", {"q": 1}, True, 0)
    assert run.usage == {0: (50, 7)}


def test_langsmith_tool_runs_grouped_by_trace_in_dotted_order(tmp_path: Path) -> None:
    runs = [
        {"id": "b", "trace_id": "T", "run_type": "tool", "name": "search", "inputs": {"query": "x"}, "outputs": {"output": "two"}, "dotted_order": "1.3", "error": None},
        {"id": "a", "trace_id": "T", "run_type": "tool", "name": "search", "inputs": {"input": '{"query": "y"}'}, "outputs": {"output": "one"}, "dotted_order": "1.2", "error": "boom"},
        {"id": "l", "trace_id": "T", "run_type": "llm", "name": "ChatOpenAI", "inputs": {}, "outputs": {}, "dotted_order": "1.1", "prompt_tokens": 90, "completion_tokens": 9, "total_cost": "0.0125"},
    ]  # fmt: skip
    path = tmp_path / "export.json"
    path.write_text(json.dumps(runs))
    run = _only(path, "langsmith")
    assert [(c.args, c.result, c.error) for c in run.calls] == [({"query": "y"}, "one", True), ({"query": "x"}, "two", False)]  # fmt: skip
    assert run.usage == {0: (90, 9)} and run.calls[0].turn == 0
    assert run.cost == 0.0125
    f = Figures()
    f.add(replay(run))
    money = f.result()["overall"]["money"]
    assert (money["recorded_cost"], money["runs_with_recorded_cost"]) == (0.0125, 1)


def test_responses_items_are_matched_by_call_id_and_a_response_usage_is_kept(
    tmp_path: Path,
) -> None:
    response = {"id": "resp_1", "object": "response", "usage": {"input_tokens": 12, "output_tokens": 3},
                "output": [{"type": "reasoning", "id": "rs"},
                           {"type": "function_call", "call_id": "c2", "name": "b", "arguments": "{}"},
                           {"type": "function_call", "call_id": "c1", "name": "a", "arguments": '{"x": 1}'},
                           {"type": "function_call_output", "call_id": "c1", "output": "A"},
                           {"type": "function_call_output", "call_id": "c2", "output": "B"}]}  # fmt: skip
    path = tmp_path / "resp.json"
    path.write_text(json.dumps(response))
    run = _only(path, "responses")
    assert [(c.tool, c.args, c.result, c.turn) for c in run.calls] == [("b", {}, "B", 0), ("a", {"x": 1}, "A", 0)]  # fmt: skip
    assert run.run_id == "resp_1" and run.usage == {0: (12, 3)}


def test_otel_model_spans_are_turns_with_their_recorded_usage(tmp_path: Path) -> None:
    def attr(k: str, v: Any) -> dict[str, Any]:
        return {
            "key": k,
            "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v},
        }

    spans = [
        {"traceId": "t", "name": "chat gpt-4o", "startTimeUnixNano": "1", "attributes": [attr("gen_ai.operation.name", "chat"), attr("gen_ai.usage.input_tokens", 120), attr("gen_ai.usage.output_tokens", 8)]},
        {"traceId": "t", "name": "running tool", "startTimeUnixNano": "2", "attributes": [attr("gen_ai.tool.name", "f"), attr("tool_arguments", "{}"), attr("tool_response", "r")]},
        {"traceId": "t", "name": "LLM", "startTimeUnixNano": "3", "attributes": [attr("openinference.span.kind", "LLM"), attr("llm.token_count.prompt", 200)]},
        {"traceId": "t", "name": "g", "startTimeUnixNano": "4", "attributes": [attr("openinference.span.kind", "TOOL"), attr("tool.name", "g"), attr("input.value", '{"a": 1}'), attr("output.value", "s")]},
    ]  # fmt: skip
    path = _jsonl(
        tmp_path / "otlp.jsonl", [{"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}]
    )
    run = _only(path, "otel")
    assert [(c.tool, c.args, c.result, c.turn) for c in run.calls] == [("f", {}, "r", 0), ("g", {"a": 1}, "s", 1)]  # fmt: skip
    assert run.usage == {0: (120, 8), 1: (200, 0)}


# -- nothing silently zero, and every unreadable input named -------------------------


def test_otlp_without_a_tool_span_is_a_problem_not_an_empty_report(tmp_path: Path) -> None:
    span = {"traceId": "t", "name": "chat", "startTimeUnixNano": "1", "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]}  # fmt: skip
    path = _jsonl(
        tmp_path / "spans.jsonl", [{"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}]
    )
    runs, problems = _split(list(read(path)))
    assert runs == [] or all(not r.calls for r in runs)
    assert "no tool calls found" in problems[-1].message and "otel" in problems[-1].message


def test_an_empty_file_says_it_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text("")
    (problem,) = _split(list(read(path)))[1]
    assert "empty file" in problem.message


def test_a_jsonl_file_cut_mid_line_says_truncated_at_that_line(tmp_path: Path) -> None:
    good = json.dumps({"id": "a", "messages": _openai_messages([Call("t", {}, "r", "")])})
    path = tmp_path / "chats.jsonl"
    path.write_text(good + "\n" + good[: len(good) // 2])
    runs, problems = _split(list(read(path)))
    assert len(runs) == 1
    assert problems[0].line == 2 and problems[0].message.startswith("truncated")


def test_a_json_document_cut_short_says_truncated_at_its_last_line(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    text = json.dumps([{"task_id": 1, "reward": 1, "trial": 0, "traj": []}], indent=2)
    path.write_text(text[:-10])
    (problem,) = _split(list(read(path)))[1]
    assert problem.message.startswith("truncated at line 6: the JSON document ends")


def test_a_document_over_the_detection_size_says_why_and_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("headway.analyze.formats.MAX_DOCUMENT", 100)
    path = write_tau_bench([Run("x", "r", [Call("t", {"a": 1}, "r" * 200, "")])], tmp_path)
    (problem,) = _split(list(read(path)))[1]
    assert "detection loads whole" in problem.message and "--format" in problem.message
    (run,) = _split(list(read(path, "tau-bench")))[0]  # named: read whole
    assert run.calls[0].tool == "t"


def test_json_of_no_known_shape_names_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"alpha": 1, "beta": [1]}))
    (problem,) = _split(list(read(path)))[1]
    assert "alpha, beta" in problem.message


def test_a_gzip_claude_code_transcript_is_detected(tmp_path: Path) -> None:
    r = Run("x", "s1", [Call("Read", {"file_path": "/a"}, "A", "")])
    plain = write_claude_code([r], tmp_path)
    gz = tmp_path / "s1.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert _only(gz, "claude-code").calls[0].result == "A"
