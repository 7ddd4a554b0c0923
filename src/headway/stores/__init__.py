"""Stores: one protocol, one contract suite, several backends (semantics §6)."""

from __future__ import annotations

from typing import Any
from urllib.parse import ParseResult, urlparse

from ..errors import ConfigError
from ._base import Store
from .memory import MemoryStore
from .sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "Store", "open_store"]


def open_store(url: str, **options: Any) -> Store:
    """Open a store from a URL: ``memory://``, ``sqlite:///path`` (``sqlite:////abs/path``),
    ``redis://[:password@]host[:port][/db]``, ``rediss://...``, ``unix:///socket``,
    ``postgresql://[user[:password]@]host[:port]/db``. A malformed URL is a ``ConfigError``
    that names the problem (the password, if any, never appears in it)."""
    if not isinstance(url, str):
        raise ConfigError(f"a store URL must be a string, not {type(url).__name__}")
    parsed = urlparse(url)
    scheme = parsed.scheme
    if scheme == "memory":
        if url != "memory://":
            raise ConfigError(f"the in-memory store's URL is 'memory://', not {url!r}")
        return MemoryStore(**options)
    if scheme == "sqlite":
        # as in SQLAlchemy: sqlite:///relative.db and sqlite:////absolute/path.db
        if not url.startswith("sqlite:///") or len(url) == len("sqlite:///"):
            raise ConfigError(
                f"sqlite URL needs a path: {url!r} (sqlite:///relative.db or sqlite:////abs.db)"
            )
        path = url[len("sqlite:///") :]
        if path == ":memory:":
            raise ConfigError("an in-memory SQLite store cannot be shared: use 'memory://'")
        return SQLiteStore(path, **options)
    if scheme in ("redis", "rediss", "unix"):
        _check_redis(url, parsed)
        from .redis import RedisStore

        return RedisStore(url, **options)
    if scheme in ("postgresql", "postgres"):
        _check_port(url, parsed)
        from .postgres import PostgresStore

        return PostgresStore(url, **options)
    raise ConfigError(
        f"unknown store URL scheme {scheme!r} in {url!r} "
        "(memory://, sqlite:///, redis://, rediss://, unix://, postgresql://)"
    )


def _check_port(url: str, parsed: ParseResult) -> None:
    try:
        parsed.port  # noqa: B018 - urlparse checks the port only when it is read
    except ValueError as exc:
        raise ConfigError(f"invalid port in store URL {url!r}: {exc}") from None


def _check_redis(url: str, parsed: ParseResult) -> None:
    if parsed.scheme == "unix":
        if not parsed.path:
            raise ConfigError(f"a unix socket URL needs a path: {url!r} (unix:///run/redis.sock)")
        return
    if not parsed.netloc or not parsed.hostname:
        raise ConfigError(
            f"a Redis URL needs a host: {url!r} (redis://host:6379/0, with two slashes)"
        )
    _check_port(url, parsed)
    db = parsed.path.strip("/")
    if db and not db.isdigit():
        raise ConfigError(f"the Redis database in {url!r} must be a number (redis://host:6379/0)")
