from __future__ import annotations

import contextlib
import importlib
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import headway
from headway.stores._base import Op, batch
from headway.testing import FakeClock

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
REDIS_URL = os.environ.get("HEADWAY_TEST_REDIS", "redis://127.0.0.1:6379/15")
POSTGRES_URL = os.environ.get("HEADWAY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def _unavailable(what: str, exc: Exception) -> None:
    message = f"{what} is not reachable ({type(exc).__name__}: {exc})"
    if IN_CI:
        pytest.fail(f"{message}; in CI every server must be running")
    pytest.skip(f"{message}; start it to run these tests")


def err(out: headway.Outcome) -> dict[str, Any]:
    """An outcome's error (for typed tests: it must be there)."""
    assert out.error is not None, out
    return out.error


def present(value: Any) -> Any:
    """A store value that must be there."""
    assert value is not None
    return value


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def gov(clock: FakeClock) -> headway.Governor:
    return headway.Governor(clock=clock, sleep=clock.sleep)


def redis_store() -> headway.Store:
    store = None
    try:
        store = headway.open_store(REDIS_URL, prefix=f"t{uuid.uuid4().hex[:8]}:")
        store.get("ping")
    except ImportError:
        raise
    except Exception as exc:
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
        _unavailable("Redis at " + REDIS_URL, exc)
    assert store is not None
    return store


def postgres_store() -> headway.Store:
    store = None
    try:
        store = headway.open_store(POSTGRES_URL, prefix=f"t{uuid.uuid4().hex[:8]}:")
        store.get("ping")
    except ImportError:
        raise
    except Exception as exc:
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
        _unavailable("PostgreSQL at " + POSTGRES_URL, exc)
    assert store is not None
    return store


STORE_KINDS = [
    "memory",
    "sqlite",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("postgres", marks=pytest.mark.postgres),
]


def make_store(kind: str, tmp_path: Path) -> headway.Store:
    if kind == "memory":
        return headway.MemoryStore()
    if kind == "sqlite":
        return headway.SQLiteStore(str(tmp_path / "store.db"))
    if kind == "redis":
        return redis_store()
    return postgres_store()


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[headway.Store]:
    s = make_store(request.param, tmp_path)
    yield s
    s.close()
    _purge_store(s)


def purge_prefix(url: str, prefix: str) -> None:
    """Delete every key (Redis) or row (PostgreSQL) a test wrote under its prefix."""
    if len(prefix) < 4:
        return  # never a whole namespace: other runs share these servers
    if url.startswith(("redis://", "rediss://")):
        import redis

        client = redis.Redis.from_url(url)
        try:
            pattern = "".join("\\" + ch if ch in "*?[]\\" else ch for ch in prefix) + "*"
            batch: list[Any] = []
            for key in client.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    client.delete(*batch)
                    batch.clear()
            if batch:
                client.delete(*batch)
        finally:
            client.close()
    elif url.startswith(("postgresql://", "postgres://")):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "DELETE FROM headway_kv WHERE left(key, length(%s)) = %s", (prefix, prefix)
            )


@pytest.fixture(scope="session", autouse=True)
def _delete_what_the_tests_wrote() -> Iterator[None]:
    """Every Redis or PostgreSQL store a test opens in this process with a unique prefix
    (one with 6+ hex digits, as the tests make them) is purged when the run ends."""
    opened: set[tuple[str, str]] = set()
    patched: list[tuple[Any, Any]] = []
    for module, name, attr in (
        ("headway.stores.redis", "RedisStore", "url"),
        ("headway.stores.postgres", "PostgresStore", "dsn"),
    ):
        try:
            cls = getattr(importlib.import_module(module), name)
        except ImportError:
            continue
        original = cls.__init__

        def init(
            self: Any, *a: Any, _original: Any = original, _attr: str = attr, **kw: Any
        ) -> None:
            _original(self, *a, **kw)
            if re.search(r"[0-9a-f]{6}", self.prefix):
                opened.add((getattr(self, _attr), self.prefix))

        cls.__init__ = init
        patched.append((cls, original))
    yield
    for cls, original in patched:
        cls.__init__ = original
    for url, prefix in opened:
        with contextlib.suppress(Exception):
            purge_prefix(url, prefix)


def _purge_store(store: headway.Store) -> None:
    url = getattr(store, "url", None) or getattr(store, "dsn", None)
    prefix = getattr(store, "prefix", "")
    if isinstance(url, str) and isinstance(prefix, str):
        with contextlib.suppress(Exception):
            purge_prefix(url, prefix)


class Recording:
    """A store that keeps every batch it is sent."""

    def __init__(self, inner: headway.Store) -> None:
        self.inner, self.blocking = inner, inner.blocking
        self.batches: list[list[Op]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def batch(self, ops: list[Op]) -> list[Any]:
        self.batches.append(list(ops))
        return batch(self.inner, ops)


def stored(store: Any, key: str) -> Any:
    """The session record under ``key`` as a worker reads it, its parts joined (a dict;
    None when absent)."""
    from headway import _record_parts

    text = store.get(key)
    rec: Any = None if text is None else orjson.loads(text)
    if _record_parts.layout(rec) is not None:
        names = _record_parts.needed(rec)
        parts = {n: _record_parts.parse_part(store.get(f"{key}:{n}")) for n in names}
        _record_parts.join(rec, {n: p for n, p in parts.items() if p is not None})
    return rec
