"""Stores: one protocol, one contract suite, several backends (semantics §6)."""

from __future__ import annotations

from typing import Any
from urllib.parse import ParseResult, urlparse

from ..errors import ConfigError
from ._base import Store
from ._urls import Target, target
from .memory import MemoryStore
from .sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "Store", "open_store", "shown"]


def open_store(url: str, **options: Any) -> Store:
    """Open a store from a URL: ``memory://``, ``sqlite:///path`` (``sqlite:////abs/path``),
    ``redis://[:password@]host[:port][/db]``, ``rediss://...``, ``unix:///socket``,
    ``postgresql://[user[:password]@]host[:port]/db`` (or libpq's ``key=value`` string). A
    malformed URL is a ``ConfigError`` that names the problem. The password, if any, is
    shown nowhere (messages, ``repr``, the store's ``url``), in whatever characters it has:
    see ``_urls``."""
    if not isinstance(url, str):
        raise ConfigError(f"a store URL must be a string, not {type(url).__name__}")
    scheme = urlparse(target(url).connect).scheme
    if scheme == "memory":
        if url != "memory://":
            raise ConfigError(f"the in-memory store's URL is 'memory://', not {shown(url)!r}")
        return MemoryStore(**options)
    if scheme == "sqlite":
        # as in SQLAlchemy: sqlite:///relative.db and sqlite:////absolute/path.db
        if not url.startswith("sqlite:///") or len(url) == len("sqlite:///"):
            raise ConfigError(
                f"sqlite URL needs a path: {shown(url)!r} "
                "(sqlite:///relative.db or sqlite:////abs.db)"
            )
        path = url[len("sqlite:///") :]
        if path == ":memory:":
            raise ConfigError("an in-memory SQLite store cannot be shared: use 'memory://'")
        return SQLiteStore(path, **options)
    if scheme in ("redis", "rediss", "unix"):
        _check_redis(url)
        from .redis import RedisStore

        return RedisStore(url, **options)
    if scheme in ("postgresql", "postgres") or (not scheme and "=" in url):
        _check_port(target(url))
        from .postgres import PostgresStore

        return PostgresStore(url, **options)
    raise ConfigError(
        f"unknown store URL scheme {scheme!r} in {shown(url)!r} "
        "(memory://, sqlite:///, redis://, rediss://, unix://, postgresql://)"
    )


def shown(url: str) -> str:
    """``url`` as headway shows it: its password, in whatever form, ``[redacted]``."""
    try:
        return target(url).shown
    except ConfigError:
        return "(a connection string that cannot be parsed)"


def _check_port(where: Target) -> ParseResult:
    parsed = urlparse(where.connect)
    try:
        parsed.port  # noqa: B018 - urlparse checks the port only when it is read
    except ValueError:
        raise ConfigError(f"invalid port in store URL {where.shown!r}") from None
    return parsed


def _check_redis(url: str) -> None:
    where = target(url)
    parsed = urlparse(where.connect)
    if parsed.scheme == "unix":
        if not parsed.path:
            raise ConfigError(
                f"a unix socket URL needs a path: {where.shown!r} (unix:///run/redis.sock)"
            )
        return
    if not parsed.netloc or not parsed.hostname:
        raise ConfigError(
            f"a Redis URL needs a host: {where.shown!r} (redis://host:6379/0, with two slashes)"
        )
    _check_port(where)
    db = parsed.path.strip("/")
    if db and not db.isdigit():
        raise ConfigError(
            f"the Redis database in {where.shown!r} must be a number (redis://host:6379/0)"
        )
