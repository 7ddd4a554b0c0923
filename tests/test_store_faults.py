"""The Redis and PostgreSQL failure branches, on the real servers behind a fault proxy:
reads fail open (the tool runs, nothing is served stale), keyed writes fail closed with
``store_unavailable`` (nothing is done), a shared breaker follows ``on_store_error``."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pytest

import headway
from conftest import POSTGRES_URL, REDIS_URL, postgres_store, purge_prefix, redis_store
from headway import Status
from headway.testing import ScriptedTool
from proxy import FaultProxy


@dataclass
class Faulty:
    proxy: FaultProxy
    store: headway.Store
    kind: str


def _through(url: str, port: int) -> str:
    parsed = urlparse(url)
    netloc = parsed.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    return parsed._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host).geturl()


@pytest.fixture(
    params=[
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
def faulty(request: pytest.FixtureRequest) -> Iterator[Faulty]:
    kind: str = request.param
    direct = redis_store() if kind == "redis" else postgres_store()  # skips when down
    direct.close()
    url = REDIS_URL if kind == "redis" else POSTGRES_URL
    parsed = urlparse(url)
    proxy = FaultProxy((parsed.hostname or "127.0.0.1", parsed.port or 0))
    prefix = f"tf{uuid.uuid4().hex[:8]}:"
    store = headway.open_store(_through(url, proxy.port), prefix=prefix, timeout_s=1.0)
    try:
        yield Faulty(proxy, store, kind)
    finally:
        proxy.heal()
        with contextlib.suppress(Exception):
            store.close()
        proxy.close()
        purge_prefix(url, prefix)


def governor(store: headway.Store, **options: Any) -> headway.Governor:
    return headway.Governor(store=store, **options)


def test_a_read_runs_when_the_store_drops(faulty: Faulty) -> None:
    """Reads fail open: the cached read cannot be looked up, so the tool runs again."""
    tool = ScriptedTool([lambda t: f"overview of {t}"])
    gov = governor(faulty.store)
    gov.register("overview", tool, effect="read", deterministic=True)
    s = gov.session(f"read-{uuid.uuid4().hex}")
    assert s.call("overview", {"t": "A"}).status is Status.EXECUTED
    assert s.call("overview", {"t": "B"}).status is Status.EXECUTED
    assert s.call("overview", {"t": "A"}).status is Status.CACHED  # the store works
    faulty.proxy.drop()
    out = s.call("overview", {"t": "B"})
    assert out.status is Status.EXECUTED and out.value == "overview of B"
    assert tool.count == 3
    flags = gov.audit_records(s.id)[-1]["flags"]
    assert any(f.startswith("store_error: StoreError") for f in flags)


def test_a_keyed_write_fails_closed_when_the_store_drops(faulty: Faulty) -> None:
    """store_unavailable, retryable, the tool not run; after the store heals it runs once."""
    pay = ScriptedTool([{"charged": 5}])
    gov = governor(faulty.store)
    gov.register("pay", pay, effect="write")
    s = gov.session(f"pay-{uuid.uuid4().hex}")
    faulty.proxy.drop()
    out = s.call("pay", {"order": "o1", "amount": 5}, idempotency_key="k1")
    assert out.status is Status.ERROR and out.error is not None
    assert (out.error["code"], out.error["retryable"]) == ("store_unavailable", True)
    assert pay.count == 0
    faulty.proxy.heal()
    deadline = time.monotonic() + 30  # a connection pool reconnects with a back-off
    while out.status is Status.ERROR and time.monotonic() < deadline:
        assert out.error is not None and out.error["code"] == "store_unavailable"
        time.sleep(0.2)
        out = s.call("pay", {"order": "o1", "amount": 5}, idempotency_key="k1")
    assert out.status is Status.EXECUTED and pay.count == 1
    again = s.call("pay", {"order": "o1", "amount": 5}, idempotency_key="k1")
    assert again.status is Status.REPLAYED and again.value == {"charged": 5} and pay.count == 1


@pytest.mark.parametrize("kind", [pytest.param("redis", marks=pytest.mark.redis)])
def test_a_keyed_write_fails_closed_when_redis_stalls(kind: str) -> None:
    """A server that accepts but never answers: the store's timeout, then store_unavailable."""
    redis_store().close()  # skips when Redis is down
    parsed = urlparse(REDIS_URL)
    proxy = FaultProxy((parsed.hostname or "127.0.0.1", parsed.port or 6379))
    prefix = f"tf{uuid.uuid4().hex[:8]}:"
    store = headway.open_store(_through(REDIS_URL, proxy.port), prefix=prefix, timeout_s=0.5)
    try:
        pay = ScriptedTool([{"charged": 5}])
        gov = governor(store)
        gov.register("pay", pay, effect="write")
        proxy.stall()
        out = gov.session("stall").call("pay", {"order": "o"}, idempotency_key="k")
        assert out.status is Status.ERROR and out.error is not None
        assert out.error["code"] == "store_unavailable" and pay.count == 0
    finally:
        proxy.heal()
        store.close()
        proxy.close()
        purge_prefix(REDIS_URL, prefix)


@pytest.mark.parametrize(
    ("on_store_error", "expected"), [("open", Status.FALLBACK), ("closed", Status.EXECUTED)]
)
def test_a_shared_breaker_follows_on_store_error(
    faulty: Faulty, on_store_error: Any, expected: Status
) -> None:
    """A shared breaker whose state cannot be read: "open" rejects (the fallback is
    served), "closed" lets the call through."""
    tool = ScriptedTool(["fresh"])
    gov = governor(faulty.store)
    gov.register(
        "search",
        tool,
        effect="read",
        breaker=headway.Breaker(shared=True, on_store_error=on_store_error),
        fallback="degraded",
    )
    s = gov.session(f"brk-{uuid.uuid4().hex}")
    assert s.call("search", {"q": 1}).status is Status.EXECUTED
    faulty.proxy.drop()
    out = s.call("search", {"q": 2})
    assert out.status is expected
    assert tool.count == (2 if expected is Status.EXECUTED else 1)
