"""Stores: one protocol, one contract suite, several backends (semantics §6)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from ..errors import ConfigError
from ._base import Store
from .memory import MemoryStore
from .sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "Store", "open_store"]


def open_store(url: str, **options: Any) -> Store:
    """Open a store from a URL: ``memory://``, ``sqlite:///path``,
    ``redis://host:port/db``, ``postgresql://user@host/db``."""
    scheme = urlparse(url).scheme
    if scheme == "memory":
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
        from .redis import RedisStore

        return RedisStore(url, **options)
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresStore

        return PostgresStore(url, **options)
    raise ConfigError(f"unknown store URL scheme {scheme!r} in {url!r}")
