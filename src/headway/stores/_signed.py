"""Record integrity: a ``Store`` wrapper that signs every value it writes.

With a secret configured (``Governor(secret=...)``, ``[governor] secret`` in TOML or the
``HEADWAY_SECRET`` environment variable), every stored value becomes
``{"hmac": HMAC-SHA256(secret, storage key + value), "v": value}``, over the whole key the
wrapped store writes (its prefix, the namespace, the record's key). Whoever can write to the
shared store but does not know the secret cannot plant a cache entry or rewrite an idempotency
record: a value that fails the check is logged as tampering and

- read as absent (a cache entry, a session's epochs, breaker state: recomputed), except
- an idempotency record (a key containing ``:idem:``), which raises ``StoreError``: keyed
  writes fail closed rather than run again or replay a forged result.

The signature is deterministic (values are stored in one canonical form), so ``swap``
compares signed values exactly as the wrapped store compares plain ones.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Sequence
from typing import Any

from ..errors import StoreError
from ._base import SAME, Op, Store, batch, dumps, in_one_trip

log = logging.getLogger("headway")


class SignedStore:
    """Wraps ``inner``; the same five operations (and ``batch``), over signed values."""

    def __init__(self, inner: Store, secret: str | bytes) -> None:
        if not secret:
            raise ValueError("the integrity secret must not be empty")
        self.inner = inner
        self.blocking = inner.blocking
        self._secret = secret.encode() if isinstance(secret, str) else secret
        prefix = getattr(inner, "prefix", "")
        self._prefix = prefix if isinstance(prefix, str) else ""

    def _mac(self, key: str, value: Any) -> str:
        # the whole storage key: the wrapped store's prefix too (two tenants sharing a
        # secret and a namespace, told apart by their prefixes, never accept each other's
        # records). Without a prefix (SQLite, memory) the MAC is the one of earlier versions
        data = (self._prefix + key + "\x1f" + dumps(value)).encode("utf-8", "surrogatepass")
        return hmac.new(self._secret, data, hashlib.sha256).hexdigest()

    def _sign(self, key: str, value: Any) -> dict[str, Any]:
        return {"hmac": self._mac(key, value), "v": value}

    def get(self, key: str) -> Any | None:
        return self._open(key, self.inner.get(key))

    def _open(self, key: str, stored: Any) -> Any | None:
        if stored is None:
            return None
        if (
            isinstance(stored, dict)
            and stored.keys() == {"hmac", "v"}
            and isinstance(stored["hmac"], str)
            and hmac.compare_digest(stored["hmac"], self._mac(key, stored["v"]))
        ):
            return stored["v"]
        log.warning("tampering: the stored record %r failed its integrity check", key)
        if ":idem:" in key:
            raise StoreError(
                f"the idempotency record {key!r} failed its integrity check (tampering, or "
                "written without headway's secret): keyed writes with this key are refused"
            )
        return None

    def set(self, key: str, value: Any, ttl_s: float | None = None) -> None:
        self.inner.set(key, self._sign(key, value), ttl_s)

    def add(self, key: str, value: Any, ttl_s: float | None = None) -> bool:
        return self.inner.add(key, self._sign(key, value), ttl_s)

    def swap(self, key: str, expected: Any, value: Any | None, ttl_s: float | None = None) -> bool:
        new = None if value is None else self._sign(key, value)
        return self.inner.swap(key, self._sign(key, expected), new, ttl_s)

    @property
    def one_trip(self) -> bool:
        return in_one_trip(self.inner)

    def batch(self, ops: Sequence[Op]) -> list[Any]:
        signed = [op if op.name == "delete" else self._signed(op) for op in ops]
        results = batch(self.inner, signed)
        return [
            self._open(op.key, r) if op.name == "get" and r is not SAME else r
            for op, r in zip(ops, results, strict=True)
        ]

    def _signed(self, op: Op) -> Op:
        if op.name == "get":
            return (
                op if op.expected is None else op._replace(expected=self._sign(op.key, op.expected))
            )
        deletes = op.value is None and op.name == "swap"
        return op._replace(
            value=None if deletes else self._sign(op.key, op.value),
            expected=self._sign(op.key, op.expected) if op.name == "swap" else None,
        )

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # a store's extras (purge, path, url)
        return getattr(self.inner, name)
