"""Audit (semantics §10): one record per call, the listed fields, redaction, sinks."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

import headway
from headway.testing import ScriptedTool

FIELDS = {
    "time",
    "agent",
    "session",
    "step",
    "tool",
    "args_digest",
    "args",
    "result_digest",
    "result_size",
    "status",
    "executed",
    "cache_hit",
    "idempotency_key",
    "idempotency_state",
    "attempts",
    "breaker",
    "latency_ms",
    "mark",
    "signals",
    "decision",
    "would",
    "error",
    "budget",
    "tokens_saved",
}


def test_one_record_per_call_with_the_listed_fields(gov: headway.Governor) -> None:
    gov.register("r", ScriptedTool([{"a": 1}]), effect="read", deterministic=True)
    s = gov.session("run-1", agent="planner")
    s.call("r", {"q": 1})
    s.call("r", {"q": 1})
    s.call("nope", {})
    records = gov.audit_records("run-1")
    assert [r["step"] for r in records] == [0, 1, 2]
    assert [r["decision"] for r in records] == ["execute", "cache", "reject"]
    for r in records:
        assert set(r) >= FIELDS
        json.dumps(r)
    assert records[0]["agent"] == "planner" and records[1]["cache_hit"] is True
    assert records[0]["result_digest"] == records[1]["result_digest"]
    assert records[2]["error"] == "unknown_tool"
    assert gov.audit_records("other") == []


def test_secret_looking_argument_names_are_redacted(gov: headway.Governor) -> None:
    gov.register("login", ScriptedTool(["ok"]), effect="write")
    gov.session("r").call(
        "login",
        {"user": "ann", "password": "hunter2", "auth": {"API_KEY": "k", "refresh_token": "t"}},
    )
    args = json.loads(gov.audit_records("r")[0]["args"])
    assert args == {
        "user": "ann",
        "password": "[redacted]",
        "auth": {"API_KEY": "[redacted]", "refresh_token": "[redacted]"},
    }
    assert "hunter2" not in json.dumps(gov.audit_records("r"))


def test_redact_option_adds_names(gov: headway.Governor) -> None:
    gov.register("pay", ScriptedTool(["ok"]), effect="write", redact=["card_number"])
    gov.session("r").call("pay", {"card_number": "4111", "amount": 5})
    assert json.loads(gov.audit_records("r")[0]["args"]) == {
        "card_number": "[redacted]",
        "amount": 5,
    }


def test_jsonl_and_sqlite_sinks(tmp_path: Path) -> None:
    jsonl = headway.JSONLSink(tmp_path / "audit.jsonl")
    table = headway.SQLiteAuditSink(tmp_path / "audit.db")
    gov = headway.Governor(audit=[table, jsonl])
    gov.register("r", ScriptedTool(["x"]), effect="read")
    s = gov.session("s1")
    s.call("r", {"i": 1})
    s.call("r", {"i": 2})
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1]
    assert [r["step"] for r in gov.audit_records("s1")] == [0, 1]  # read from the table
    assert jsonl.records("s1") == table.records("s1")
    table.close()


def test_logging_sink(caplog: pytest.LogCaptureFixture) -> None:
    gov = headway.Governor(audit=[headway.LoggingSink()])
    gov.register("r", ScriptedTool(["x"]), effect="read")
    with caplog.at_level(logging.INFO, logger="headway.audit"):
        gov.session("s").call("r", {})
    assert json.loads(caplog.records[0].getMessage())["tool"] == "r"


def test_a_failing_sink_never_breaks_a_call(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def write(self, record: object) -> None:
            raise OSError("disk full")

    gov = headway.Governor(audit=[Broken()])
    gov.register("r", ScriptedTool(["x"]), effect="read")
    out = gov.session("s").call("r", {})
    assert out.status is headway.Status.EXECUTED
    assert "disk full" in caplog.text


def test_records_keep_what_the_call_returned_when_the_caller_changes_it(
    gov: headway.Governor,
) -> None:
    # records are built lazily, from a snapshot taken when the call settled
    gov.register("get", lambda q: {"q": q, "hits": [1, 2]}, effect="read", deterministic=True)
    s = gov.session("mut")
    first = s.call("get", {"q": "a"})
    served = s.call("get", {"q": "a"})
    before = [dict(r) for r in s.audit_records()]
    first.value["hits"].append(3)
    served.value["q"] = "changed"
    after = s.audit_records()
    assert [r["result_digest"] for r in after] == [r["result_digest"] for r in before]
    assert after[0]["result_digest"] == after[1]["result_digest"] is not None


def test_memory_audit_takes_concurrent_writers_and_readers(gov: headway.Governor) -> None:
    import threading

    gov.register("echo", lambda n: n, effect="read")
    sessions = [gov.session(f"w{i}") for i in range(4)]
    errors: list[BaseException] = []

    def write(s: headway.Session) -> None:
        for n in range(300):
            s.call("echo", {"n": n})

    def read() -> None:
        try:
            for _ in range(200):
                for s in sessions:
                    gov.audit_records(s.id)
        except BaseException as exc:  # a reader must never see a half-changed queue
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s,)) for s in sessions]
    threads += [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [len(gov.audit_records(s.id)) for s in sessions] == [300] * 4
    assert [r["step"] for r in gov.audit_records(sessions[0].id)] == list(range(300))


def _calls(gov: headway.Governor, session: str, n: int) -> None:
    s = gov.session(session)
    for i in range(n):
        s.call("echo", {"n": i, "pad": "p" * 100})


def _audited(audit: headway.MemoryAudit) -> headway.Governor:
    gov = headway.Governor(audit=[audit], no_progress_limit=10**9)
    gov.register("echo", lambda n, pad: {"n": n, "text": "r" * 200}, effect="read", timeout=None)
    return gov


def test_a_session_keeps_its_most_recent_records_within_its_byte_bound() -> None:
    audit = headway.MemoryAudit(per_session_bytes=200_000)
    gov = _audited(audit)
    _calls(gov, "run", 1_000)
    steps = [r["step"] for r in gov.audit_records("run")]
    assert 10 < len(steps) < 1_000  # bounded by bytes, far below the record limit
    assert steps == list(range(1_000 - len(steps), 1_000))  # the most recent, none missing
    assert audit.bytes_held() <= 200_000


def test_the_session_written_to_least_recently_is_dropped_past_the_total_bound() -> None:
    audit = headway.MemoryAudit(per_session_bytes=100_000, max_bytes=250_000)
    gov = _audited(audit)
    _calls(gov, "first", 200)
    _calls(gov, "second", 200)
    _calls(gov, "first", 1)  # "first" is now written to more recently than "second"
    _calls(gov, "third", 200)  # three sessions' worth do not fit: one goes
    assert gov.audit_records("second") == []
    assert gov.audit_records("first") and gov.audit_records("third")
    assert audit.bytes_held() <= 250_000


@pytest.mark.parametrize(
    "bad", [{"per_session_bytes": 0}, {"max_bytes": -1}, {"per_session": 1.5}, {"sessions": None}]
)
def test_memory_audit_bounds_must_be_positive_integers(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="positive int"):
        headway.MemoryAudit(**bad)  # type: ignore[arg-type]


def test_the_memory_the_audit_holds_stays_near_its_byte_bound() -> None:
    """The size estimate tracks what records really hold (tracemalloc), so the bound in
    bytes is one on memory: 5,000 calls under a 1 MiB bound grow memory by < 1.6 MiB more
    than the same calls without an audit."""
    import gc
    import tracemalloc

    def grown(audit: list[headway.AuditSink]) -> int:
        gov = headway.Governor(audit=audit, no_progress_limit=10**9)
        gov.register(
            "echo", lambda n, pad: {"n": n, "text": "r" * 200}, effect="read", timeout=None
        )
        gc.collect()
        tracemalloc.start()
        try:
            _calls(gov, "run", 5_000)
            gc.collect()
            return tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()

    with_audit = grown([headway.MemoryAudit(per_session_bytes=1 << 20)])
    assert with_audit - grown([]) < 1.6 * (1 << 20)


def test_a_kept_record_of_a_long_result_holds_its_digest_not_its_text() -> None:
    """The default audit keeps thousands of records, the detectors a window of 32 steps: a
    record that kept each long result's text would hold every result of the run. 200
    distinct 3 KB results grow memory by far less than their 600 KB, and each record still
    says the result's sha256 and size."""
    import gc
    import hashlib
    import tracemalloc

    texts = [f"{i:05d} " + "x" * 3000 for i in range(200)]
    gov = headway.Governor(no_progress_limit=10**9)
    gov.register("page", lambda n: texts[n][:6] + texts[n][6:].replace("x", "y"), effect="read")
    with gov.session("run") as s:
        gc.collect()
        tracemalloc.start()
        try:
            for n in range(200):
                assert s.call("page", {"n": n}).status is headway.Status.EXECUTED
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
    # measured: 334 KB (the window's 32 texts, 200 records of ~1 KB), 896 KB when kept
    assert grown < 500_000
    records = gov.audit_records("run")
    assert len(records) == 200
    result = texts[7][:6] + texts[7][6:].replace("x", "y")
    assert records[7]["result_digest"] == hashlib.sha256(result.encode()).hexdigest()
    assert records[7]["result_size"] == len(result)


def test_an_unread_record_of_a_plain_call_holds_under_300_bytes() -> None:
    """Measured with tracemalloc, the same calls with and without the audit: a record
    keeps the fields most calls leave unset in one slot and a long result's sha256 as its
    32 bytes, and older records are packed and deflated (``_audit_blocks``): 710 and 588
    bytes a record when every record was kept whole, 336 and 151 packed, not deflated."""
    import gc
    import tracemalloc

    def grown(audit: list[headway.AuditSink], tool: str) -> float:
        gov = headway.Governor(audit=audit, no_progress_limit=10**9)
        gov.register("small", lambda q: f"found {q}", effect="read", timeout=None)
        gov.register("long", lambda q: f"{q} " + "x" * 2000, effect="read", timeout=None)
        s = gov.session("run")
        for i in range(50):  # the window full, the session's tables made
            s.call(tool, {"q": -i})
        gc.collect()
        tracemalloc.start()
        try:
            for i in range(2000):
                s.call(tool, {"q": i})
            gc.collect()
            return tracemalloc.get_traced_memory()[0] / 2000
        finally:
            tracemalloc.stop()

    # measured: 261 and 84 bytes; of the small call's, ~210 are its argument summary in a
    # cache all sessions share (4,096 entries): 47 without
    for tool, most in (("small", 300), ("long", 120)):
        per_record = grown([headway.MemoryAudit()], tool) - grown([], tool)
        assert per_record < most, (tool, per_record)


def test_a_kept_record_does_not_hold_the_call_it_was_made_from() -> None:
    """An unread record keeps a flat snapshot of its fields, not the pipeline's ``Call``
    (its instance dict, detector key and runner: ~300 bytes a record the default audit
    holds thousands of); what a reader sees is made from the snapshot alone."""
    import gc

    from headway._call import Call

    audit = headway.MemoryAudit()
    gov = headway.Governor(audit=[audit], no_progress_limit=10**9)
    gov.register("echo", lambda n: f"r{n}", effect="read", timeout=None)
    with gov.session("run") as s:
        for n in range(3):
            s.call("echo", {"n": n})
        gc.collect()
        assert not [o for o in gc.get_objects() if type(o) is Call]
    records = audit.records("run")
    assert [r["args"] for r in records] == ['{"n":0}', '{"n":1}', '{"n":2}']
    assert records[0]["args_digest"] == hashlib.sha256(b'{"n":0}').hexdigest()
    assert [r["decision"] for r in records] == ["execute"] * 3
