"""Store passwords with hostile characters never leak (issue 31, item 6).

A password holding ``'``, ``"``, a space, a raw ``@``, ``%``, ``:``, ``/``, ``#``, a
backslash and non-ASCII text, written raw or percent-encoded in ``redis://`` and
``postgresql://`` URLs and quoted in PostgreSQL ``key=value`` strings, opened against real
servers that fail (nothing listening, a wrong password for a real Redis ACL user, a
database that does not exist) and driven through a Governor: the password, its encoded
forms and its pieces appear in no text headway produces: ``to_model()``, every audit sink
(memory, JSONL, SQLite, logging, OpenTelemetry, Prometheus), log lines, exception
messages, reprs and printed tracebacks, ``repr(store)``, ``headway audit``'s output and the
stdio proxy's answers and stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

import headway
from conftest import POSTGRES_URL, REDIS_URL
from headway.testing import ScriptedTool

# every piece between two hostile characters is 3 distinctive characters: a leaked
# piece shows up on its own
PASSWORD = "Zq7'Kv9\"Wm3 Tx5@Rb8%Jn4:Pc6/Hd2#Fg1\u00e9\u20ac\U0001f600Ys0\\Lu5"
PIECES = ["Zq7", "Kv9", "Wm3", "Tx5", "Rb8", "Jn4", "Pc6", "Hd2", "Fg1", "Ys0", "Lu5"]
FORMS = {
    PASSWORD,
    quote(PASSWORD, safe=""),
    quote(PASSWORD),
    quote_plus(PASSWORD),
    json.dumps(PASSWORD)[1:-1],
    repr(PASSWORD)[1:-1],
    PASSWORD.replace("\\", "\\\\").replace("'", "\\'"),
}


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


def _leaks(text: str) -> list[str]:
    return [f for f in [*FORMS, *PIECES] if f in text]


def _libpq_quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _everything(exc: BaseException) -> str:
    """An exception as every surface shows it: str, repr, the printed traceback (with
    its chained causes and contexts)."""
    return "\n".join([str(exc), repr(exc), "".join(traceback.format_exception(exc))])


@pytest.fixture
def surfaces(tmp_path: Path) -> tuple[list[Any], Any]:
    """Every audit sink, and a function reading all they hold as text."""
    memory = headway.MemoryAudit()
    sinks: list[Any] = [
        memory,
        headway.JSONLSink(tmp_path / "audit.jsonl"),
        headway.SQLiteAuditSink(tmp_path / "audit.db"),
        headway.LoggingSink(),
    ]
    exporter = registry = None
    with contextlib.suppress(ImportError):
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from headway.telemetry import OpenTelemetrySink

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        sinks.append(OpenTelemetrySink(provider))
    with contextlib.suppress(ImportError):
        import prometheus_client

        from headway.telemetry import PrometheusSink

        registry = prometheus_client.CollectorRegistry()
        sinks.append(PrometheusSink(registry))

    def read(runs: list[str]) -> str:
        parts = [json.dumps([memory.records(r) for r in runs], default=str)]
        if (tmp_path / "audit.jsonl").exists():  # nothing was called when the store failed to open
            parts.append((tmp_path / "audit.jsonl").read_text(encoding="utf-8"))
        if exporter is not None:
            for span in exporter.get_finished_spans():
                parts.append(span.to_json())
        if registry is not None:
            import prometheus_client

            parts.append(prometheus_client.generate_latest(registry).decode())
        if (tmp_path / "audit.db").exists():
            parts.append((tmp_path / "audit.db").read_bytes().decode("utf-8", "replace"))
            audit = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "headway.cli",
                    "audit",
                    "--store",
                    str(tmp_path / "audit.db"),
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            parts += [audit.stdout, audit.stderr]
        return "\n".join(parts)

    return sinks, read


def _drive(store: headway.Store, sinks: list[Any], run: str) -> list[str]:
    """A read, a keyed write and an unkeyed write through a Governor on ``store``; the
    texts the model reads and the outcomes' errors."""
    gov = headway.Governor(store, audit=sinks)
    gov.register("lookup", ScriptedTool([{"x": 1}] * 3), effect="read", deterministic=True)
    gov.register("pay", ScriptedTool([{"ok": True}] * 3), effect="write")
    s = gov.session(run)
    outs = [
        s.call("lookup", {"q": 1}),
        s.call("pay", {"n": 1}, idempotency_key="k1"),
        s.call("pay", {"n": 2}),
    ]
    assert outs[1].error is not None and outs[1].error["code"] == "store_unavailable", outs[1]
    texts = [o.to_model() for o in outs] + [json.dumps(o.error, default=str) for o in outs]
    texts += [repr(o) for o in outs]
    with contextlib.suppress(Exception):
        gov.close()
    return texts


def _url_cases() -> list[Any]:
    dead = _dead_port()
    raw, encoded = PASSWORD, quote(PASSWORD, safe="")
    return [
        pytest.param(f"redis://hw:{raw}@127.0.0.1:{dead}/0", id="redis-raw-down"),
        pytest.param(f"redis://:{encoded}@127.0.0.1:{dead}/0", id="redis-encoded-down"),
        pytest.param(f"redis://127.0.0.1:{dead}/0?password={encoded}", id="redis-query-down"),
        pytest.param(
            f"postgresql://hw:{raw}@127.0.0.1:{dead}/test",
            id="pg-raw-down",
            marks=[pytest.mark.postgres],
        ),
        pytest.param(
            f"postgresql://hw:{encoded}@127.0.0.1:{dead}/test",
            id="pg-encoded-down",
            marks=[pytest.mark.postgres],
        ),
        pytest.param(
            f"host=127.0.0.1 port={dead} dbname=test user=hw password={_libpq_quoted(raw)}",
            id="pg-keyvalue-down",
            marks=[pytest.mark.postgres],
        ),
    ]


@pytest.mark.parametrize("url", _url_cases())
def test_a_hostile_password_in_a_store_url_reaches_no_surface(
    url: str,
    surfaces: tuple[list[Any], Any],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    """The server is down (nothing listens on the port): the store opens (Redis) or fails
    to (PostgreSQL); either way, no text shows the password in any form."""
    pytest.importorskip("redis" if url.startswith("redis") else "psycopg")
    caplog.set_level(logging.DEBUG)
    sinks, read = surfaces
    texts: list[str] = []
    try:
        store = headway.open_store(url, timeout_s=1)
    except headway.HeadwayError as exc:  # PostgreSQL connects at once
        texts.append(_everything(exc))
    else:
        texts += [repr(store), str(getattr(store, "url", "")), str(getattr(store, "dsn", ""))]
        texts += _drive(store, sinks, "run")
        with pytest.raises(headway.StoreError) as raised:
            store.get("x")
        texts.append(_everything(raised.value))
        assert "[redacted]" in str(raised.value)
    texts += [read(["run"]), caplog.text, *(r.getMessage() for r in caplog.records)]
    for text in texts:
        assert _leaks(text) == [], text[:2000]


@pytest.mark.postgres
def test_a_key_value_string_libpq_cannot_read_is_refused_without_quoting_it() -> None:
    """An unquoted password with a space and a quote: libpq's own message would quote
    the text around the fault, a piece of the password."""
    pytest.importorskip("psycopg")
    with pytest.raises(headway.ConfigError) as raised:
        headway.open_store(f"host=127.0.0.1 dbname=test password={PASSWORD}")
    assert "malformed" in str(raised.value) and _leaks(_everything(raised.value)) == []


@pytest.fixture
def redis_user() -> Iterator[tuple[str, str]]:
    """A Redis ACL user of this test (unique name) whose password is hostile; deleted
    after. (user, prefix its keys may use)"""
    redis = pytest.importorskip("redis")
    admin = redis.Redis.from_url(REDIS_URL)
    name, prefix = f"hw-{uuid.uuid4().hex[:10]}", f"t{uuid.uuid4().hex[:8]}:"
    try:
        admin.acl_setuser(
            name, enabled=True, passwords=[f"+{PASSWORD}"], keys=[f"{prefix}*"], commands=["+@all"]
        )
    except Exception as exc:
        admin.close()
        pytest.skip(f"cannot create a Redis ACL user: {exc}")
    try:
        yield name, prefix
    finally:
        admin.acl_deluser(name)
        for key in admin.scan_iter(match=f"{prefix}*"):
            admin.delete(key)
        admin.close()


def _redis_url(user: str, password: str) -> str:
    db = REDIS_URL.rsplit("/", 1)[-1]
    hostport = REDIS_URL.split("://", 1)[1].rsplit("@", 1)[-1].split("/", 1)[0]
    return f"redis://{user}:{password}@{hostport}/{db}"


@pytest.mark.redis
def test_a_redis_acl_user_with_a_hostile_password_connects_raw_and_encoded_and_a_wrong_one_leaks_nothing(
    redis_user: tuple[str, str],
    surfaces: tuple[list[Any], Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The real server: the password, raw or percent-encoded in the URL, opens the store
    (the driver was handed what the user meant); a wrong one that differs only at its
    end fails with WRONGPASS, and no text shows the password in any form."""
    caplog.set_level(logging.DEBUG)
    user, prefix = redis_user
    for written in (PASSWORD, quote(PASSWORD, safe="")):
        store = headway.open_store(_redis_url(user, written), prefix=prefix, timeout_s=2)
        store.set("k", {"v": 1})
        assert store.get("k") == {"v": 1}
        assert _leaks(repr(store)) == [] and "[redacted]" in repr(store)
        store.close()
    sinks, read = surfaces
    wrong = headway.open_store(_redis_url(user, PASSWORD + "x"), prefix=prefix, timeout_s=2)
    texts = [repr(wrong), *_drive(wrong, sinks, "wrong")]
    with pytest.raises(headway.StoreError) as raised:
        wrong.get("k")
    assert "WRONGPASS" in str(raised.value) or "invalid" in str(raised.value).lower()
    texts += [_everything(raised.value), read(["wrong"]), caplog.text]
    for text in texts:
        assert _leaks(text) == [], text[:2000]


@pytest.fixture
def pg_role() -> Iterator[str]:
    """A PostgreSQL role of this test whose password is hostile (dropped after)."""
    psycopg = pytest.importorskip("psycopg")
    name = f"hw_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(POSTGRES_URL, autocommit=True)
    except Exception as exc:
        pytest.skip(f"PostgreSQL is not reachable: {exc}")
    with admin:
        admin.execute(
            psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                psycopg.sql.Identifier(name), psycopg.sql.Literal(PASSWORD)
            )
        )
        try:
            yield name
        finally:
            admin.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(name)))


@pytest.mark.postgres
@pytest.mark.parametrize("form", ["raw", "encoded", "keyvalue"])
def test_a_postgres_role_with_a_hostile_password_and_a_missing_database_leaks_nothing(
    pg_role: str, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A real role with a hostile password; its URL or key=value string names a database
    that does not exist: the server's refusal is reported, the password is not."""
    caplog.set_level(logging.DEBUG)
    hostport = POSTGRES_URL.split("://", 1)[1].rsplit("@", 1)[-1].split("/", 1)[0]
    host, _, port = hostport.partition(":")
    db = f"no_such_db_{uuid.uuid4().hex[:6]}"
    url = {
        "raw": f"postgresql://{pg_role}:{PASSWORD}@{hostport}/{db}",
        "encoded": f"postgresql://{pg_role}:{quote(PASSWORD, safe='')}@{hostport}/{db}",
        "keyvalue": f"host={host} port={port or 5432} dbname={db} user={pg_role} "
        f"password={_libpq_quoted(PASSWORD)}",
    }[form]
    with pytest.raises(headway.StoreError) as raised:
        headway.open_store(url, timeout_s=5)
    assert db in str(raised.value)  # the server's own reason, not a misread URL
    for text in (_everything(raised.value), caplog.text):
        assert _leaks(text) == [], text[:2000]


def test_the_stdio_proxy_answers_and_logs_without_the_password(tmp_path: Path) -> None:
    """``headway proxy --store <hostile URL of a server that is down>``: a keyed write is
    refused (store_unavailable), and neither the answer nor the proxy's stderr nor its
    audit shows the password."""
    pytest.importorskip("redis")
    fastmcp = pytest.importorskip("fastmcp")
    from fastmcp.client.transports import StdioTransport

    upstream = Path(__file__).with_name("mcp_upstream.py")
    url = f"redis://hw:{PASSWORD}@127.0.0.1:{_dead_port()}/0"
    audit = tmp_path / "audit.jsonl"
    env_path = str(Path(headway.__file__).parent.parent)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([env_path, os.environ.get("PYTHONPATH", "")]),
    }
    transport = StdioTransport(
        command=sys.executable,
        args=[
            "-m",
            "headway.cli",
            "proxy",
            "--store",
            url,
            "--audit",
            str(audit),
            "--",
            sys.executable,
            str(upstream),
            str(tmp_path / "upstream.log"),
        ],
        cwd=str(tmp_path),
        env=env,
        log_file=tmp_path / "proxy.stderr",
    )

    async def calls() -> list[str]:
        async with fastmcp.Client(transport, timeout=60) as client:
            meta = {"headway/idempotency_key": "k1"}
            answers = [
                await client.call_tool(
                    "delete_record", {"record": "r"}, raise_on_error=False, meta=meta
                ),
                await client.call_tool("lookup", {"key": "a"}, raise_on_error=False),
            ]
            return [
                json.dumps(a.model_dump() if hasattr(a, "model_dump") else str(a), default=str)
                for a in answers
            ] + [str(a) for a in answers]

    texts = asyncio.run(calls())
    assert "store_unavailable" in texts[0] or "idempotency store" in texts[0]
    texts.append((tmp_path / "proxy.stderr").read_text(encoding="utf-8", errors="replace"))
    texts.append(audit.read_text(encoding="utf-8") if audit.exists() else "")
    for text in texts:
        assert _leaks(text) == [], text[:2000]


@pytest.mark.parametrize(
    "url",
    [
        f"redis://hw:{PASSWORD}@127.0.0.1:6379/0",
        f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:6379/0",
        f"postgresql://hw@127.0.0.1/test?password={quote(PASSWORD, safe='')}",
        f"host=127.0.0.1 dbname=test password={_libpq_quoted(PASSWORD)}",
    ],
)
def test_a_driver_message_quoting_the_password_in_any_form_is_redacted(url: str) -> None:
    """Whatever a driver's error says, a store's message hides the password in each form
    it may take there (decoded, as written, percent-encoded, escaped)."""
    pytest.importorskip("psycopg")
    from headway.stores._urls import target

    where = target(url)
    for form in FORMS:
        hidden = where.hide(f"the server said: bad password {form} for hw")
        assert form not in hidden and "[redacted]" in hidden and "for hw" in hidden
    assert _leaks(where.shown) == [] and _leaks(headway.stores.shown(url)) == []
