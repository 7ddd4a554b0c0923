"""Secrets never leave headway: not in what the model reads, not in any audit sink, not in
log lines, not in exception messages (URL passwords, DSN passwords, secret-named arguments
at any depth, secret shapes inside values)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import headway
from headway._redact import _SHAPES, REDACTED, _holds_a_word, normalise, scrub
from headway.audit import summarize
from headway.testing import ScriptedTool

SECRET = "hunter2xyz"
# a port nothing listens on: the store is down
DOWN_REDIS = f"redis://:{SECRET}@127.0.0.1:6390/0"


def _sinks(tmp_path: Path) -> tuple[list[headway.AuditSink], headway.MemoryAudit]:
    memory = headway.MemoryAudit()
    sinks: list[headway.AuditSink] = [
        memory,
        headway.JSONLSink(tmp_path / "audit.jsonl"),
        headway.SQLiteAuditSink(tmp_path / "audit.db"),
        headway.LoggingSink(),
    ]
    return sinks, memory


def _everything_written(
    tmp_path: Path, memory: headway.MemoryAudit, run: str, caplog: pytest.LogCaptureFixture
) -> str:
    """Every byte headway wrote: all audit sinks (memory, JSONL, SQLite, logging) and logs."""
    parts = [json.dumps(memory.records(run), default=str)]
    parts.append((tmp_path / "audit.jsonl").read_text(encoding="utf-8"))
    parts.append((tmp_path / "audit.db").read_bytes().decode("utf-8", "replace"))
    parts.append(caplog.text)
    parts.extend(r.getMessage() for r in caplog.records)
    return "\n".join(parts)


@pytest.mark.redis
def test_a_store_url_password_reaches_no_surface(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """redis://:password@host with the store down: the password is in no to_model() text,
    audit flag, log line or exception message."""
    caplog.set_level(logging.DEBUG)
    pytest.importorskip("redis")
    sinks, memory = _sinks(tmp_path)
    store = headway.open_store(DOWN_REDIS, timeout_s=0.5)
    gov = headway.Governor(store, audit=sinks)
    gov.register("lookup", ScriptedTool([{"x": 1}]), effect="read", deterministic=True)
    gov.register("pay", ScriptedTool([{"ok": True}]), effect="write")
    s = gov.session("run-url")
    texts = [
        s.call("lookup", {"q": 1}).to_model(),
        s.call("pay", {"n": 1}, idempotency_key="k1").to_model(),
    ]
    with pytest.raises(headway.StoreError) as raised:
        store.get("x")
    assert "store_unavailable" in texts[1]  # the store really was down
    written = _everything_written(tmp_path, memory, "run-url", caplog)
    assert "store_error" in written
    for text in (*texts, written, str(raised.value), repr(raised.value)):
        assert SECRET not in text
    assert "[redacted]" in str(raised.value)


@pytest.mark.postgres
def test_a_postgres_dsn_password_is_not_in_the_store_error() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(headway.StoreError) as raised:
        headway.open_store(
            f"postgresql://nobody:{SECRET}@127.0.0.1:5499/test?connect_timeout=1", timeout_s=1
        )
    with pytest.raises(headway.StoreError) as raised_kv:
        headway.open_store(
            f"postgresql://127.0.0.1:5499/test?password={SECRET}&connect_timeout=1", timeout_s=1
        )
    assert SECRET not in str(raised.value) and SECRET not in str(raised_kv.value)


SPELLINGS = [
    "apiKey",
    "api-key",
    "x-api-key",
    "passwd",
    "private_key",
    "client_secret",
    "access_token",
    "Authorization",
    "cookie",
    "Password",
    "API_KEY",
]


def _hostile_args() -> dict[str, object]:
    deep: object = {"password": SECRET}
    for _ in range(20):  # deeper than any fixed depth limit
        deep = [deep]
    return {
        **{name: f"{SECRET}-{i}" for i, name in enumerate(SPELLINGS)},
        "deep": deep,
        "nested": {"headers": {"X-Api-Key": SECRET}},
        "url": f"https://api.example.com/v1?api_key={SECRET}&q=1",
        "header": f"Bearer {SECRET}abcdefgh",
        "key_in_text": f"use sk-{SECRET}0123456789abcdef please",
        "dsn": f"postgresql://app:{SECRET}@db/prod",
        "query": "weather in Paris",
    }


def test_secret_named_arguments_and_secret_shapes_reach_no_sink_and_no_correction(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every common spelling of a secret name, at any depth, and secrets inside values
    (a URL's api_key, a Bearer token, an sk- key, a DSN password) are masked in every audit
    sink, and in the correction the model reads after repeats."""
    caplog.set_level(logging.INFO)
    sinks, memory = _sinks(tmp_path)
    gov = headway.Governor(audit=sinks)
    gov.register("search", ScriptedTool(["nothing"]), effect="read")
    args = _hostile_args()
    texts = []
    with gov.session("run-args") as s:
        for _ in range(4):
            texts.append(s.call("search", args).to_model())
    assert any("headway:" in t for t in texts)  # a correction naming the arguments was sent
    written = _everything_written(tmp_path, memory, "run-args", caplog)
    assert "weather in Paris" in written  # the harmless argument is still recorded
    for text in (*texts, written):
        assert SECRET not in text


def test_long_arguments_are_redacted_too() -> None:
    """Arguments longer than the summary are redacted without being parsed."""
    long_args = headway.canonical_json({"a": "x" * 5000, "b": {"token": SECRET}, "api_key": SECRET})
    summary = summarize(long_args, ("password", "token", "apikey"))
    assert SECRET not in summary and len(summary) <= 1003


def test_redact_option_adds_to_the_defaults_and_redact_defaults_false_turns_them_off(
    gov: headway.Governor,
) -> None:
    gov.register("pay", ScriptedTool(["ok"]), effect="write", redact=["card_number"])
    gov.register("plain", ScriptedTool(["ok"]), effect="write", redact_defaults=False)
    with gov.session("run-r") as s:
        s.call("pay", {"card_number": "4242", "password": SECRET, "n": 1})
        s.call("plain", {"password": "visible"})
    first, second = (json.loads(r["args"]) for r in gov.audit_records("run-r"))
    assert first == {"card_number": "[redacted]", "password": "[redacted]", "n": 1}
    assert second == {"password": "visible"}


def test_a_tool_error_message_with_a_url_password_is_scrubbed(gov: headway.Governor) -> None:
    gov.register(
        "fetch",
        ScriptedTool([ConnectionError(f"cannot reach https://bot:{SECRET}@api.example.com")]),
        effect="read",
    )
    with gov.session("run-e") as s:
        out = s.call("fetch", {})
    assert out.status is headway.Status.ERROR
    assert SECRET not in out.to_model() and SECRET not in json.dumps(out.error)
    assert "api.example.com" in out.to_model()


# The URL shapes as first written (before they were anchored to avoid quadratic scans):
# scrub() must redact exactly as these, with the other shapes unchanged.
_REFERENCE_SHAPES = (
    (re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@'\"]*):[^@\s'\"]*@"), r"\1:" + REDACTED + "@"),
    (re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*://)[^/\s:@'\"]+@"), r"\1" + REDACTED + "@"),
    *_SHAPES[2:],
)
_PIECES = [
    *"aZ09+.-:/@ _=&'\"\u017f\u212a\u0131\u0130",
    "://",
    "redis://u:pw@h",
    "1http://a:b@c",
    "password=",
    "Bearer abcdefghij",
    "TOKEN ",
    "sk-abcdefghijklmnop",
    "AKIA1234567890ABCDEF",
    "api_key:",
    "ghp_",
    "xoxb-",
    "x" * 40,
    # every word of every shape, so that a shape skipped wrongly shows
    *[
        "bearer",
        "basic",
        "token",
        "pass",
        "pwd",
        "secret",
        "key",
        "auth",
        "sig",
        "credential",
        "cookie",
        "sk",
        "pk",
        "rk",
        "gh",
        "xox",
        "akia",
        "k-",
        "k_",
        "ghp",
        "gho",
        "ghs",
        "AKIA",
    ],
    "SK-abcdefghijklmnop",  # the key shapes are case-sensitive: no lower-cased word matches
    "Akia1234567890ABCDEF",
    # a secret each word alone finds, so that a word left out shows
    *[f"{w}=v" for w in ("pass", "pwd", "secret", "token", "key", "auth", "sig", "cookie")],
    "credentials:v",
    "basic abcdefghij",
    *[f"{p}abcdefghijklmn" for p in ("rk-", "pk_", "ghp_", "gho-", "ghs_", "xoxp-")],
    "Pass",
    "SIG",
    "Cookie",
    "pa\u017f\u017fword=",  # IGNORECASE matches the long s to "s"; lower() keeps it
]


def _reference_scrub(text: str) -> str:
    for pattern, repl in _REFERENCE_SHAPES:
        text = pattern.sub(repl, text)
    return text


@settings(max_examples=2000, deadline=None)
@given(hs.lists(hs.sampled_from(_PIECES), max_size=24).map("".join))
def test_scrub_redacts_exactly_as_the_reference_patterns(text: str) -> None:
    """The skipped shapes (text without their words) and the anchored URL patterns change
    nothing: scrub() gives what running every reference pattern gives, on ASCII and on
    text whose case folding lower() does not reproduce (Kelvin sign, long s)."""
    assert scrub(text) == _reference_scrub(text)


def test_long_arguments_are_redacted_by_their_own_tool_s_names() -> None:
    """Summaries of long arguments are remembered for repeated calls, per set of secret
    names: the same text under another tool's redact= list is redacted by that list."""
    text = headway.canonical_json({"card": "4242", "z": "x" * 5000})
    assert "4242" in summarize(text, ("password",))
    assert "4242" not in summarize(text, ("password", "card"))
    assert "4242" in summarize(text, ("password",))


@settings(max_examples=2000, deadline=None)
@given(
    hs.lists(
        hs.sampled_from(_PIECES) | hs.text(hs.characters(codec="ascii"), max_size=6), max_size=6
    ).map("".join)
)
def test_text_without_any_shape_s_word_matches_no_reference_pattern(text: str) -> None:
    """The quick pre-check that returns ASCII text untouched is sound: when it finds no
    word of any shape, none of the reference patterns matches anywhere in the text."""
    if text.isascii() and not _holds_a_word(text):
        assert all(pattern.search(text) is None for pattern, _ in _REFERENCE_SHAPES)
        assert scrub(text) is text


@settings(max_examples=1000, deadline=None)
@given(
    hs.text(max_size=40)
    | hs.text(hs.characters(codec="ascii"), max_size=40)
    | hs.lists(hs.sampled_from(["Api_Key", "K", "\u212a", "İ", "--", "9", " "])).map("".join)
)
def test_normalised_names_are_the_lower_cased_text_without_non_alphanumerics(text: str) -> None:
    """Names are matched in their normalised form: lower-cased, every character but a-z
    and 0-9 removed (the ASCII fast path gives what the pattern gives, "\u212a" -> "k")."""
    assert normalise(text) == re.sub(r"[^a-z0-9]+", "", text.lower())
