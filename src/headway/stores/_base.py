"""The ``Store`` protocol (semantics §6): a few atomic primitives over JSON values.

Everything headway keeps (cache entries, idempotency records, cache generations, shared
breaker state) is built from these five operations, so one contract suite checks every
store. Values are JSON, never pickle; ``swap`` compares the stored JSON text exactly,
which is why values are always written in one canonical form (sorted keys).

``ttl_s`` only collects garbage: expiry that matters (a cache entry's freshness, an
idempotency record's 24 h) is decided by headway with its own injectable clock.
"""

from __future__ import annotations

import json
import json.scanner
from typing import Any, Protocol, runtime_checkable

from ..errors import StoreError


@runtime_checkable
class Store(Protocol):
    """Where headway keeps its state. Every method is atomic."""

    #: True when operations do network or disk I/O (async sessions run them in a thread)
    blocking: bool

    def get(self, key: str) -> Any | None:
        """The value, or None when absent."""

    def set(self, key: str, value: Any, ttl_s: float | None = None) -> None:
        """Write unconditionally."""

    def add(self, key: str, value: Any, ttl_s: float | None = None) -> bool:
        """Insert only if absent (the atomic claim); True when this call inserted."""

    def swap(self, key: str, expected: Any, value: Any | None, ttl_s: float | None = None) -> bool:
        """Replace ``expected`` by ``value`` (None deletes) only if the stored value is still
        ``expected``; True when it was."""

    def delete(self, key: str) -> None:
        """Remove the key if present."""

    def close(self) -> None:
        """Release connections."""


def dumps(value: Any) -> str:
    """The one form in which values are stored (``swap`` compares it exactly)."""
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise StoreError(f"stores keep JSON values only: {exc}") from exc


_scan = getattr(json.scanner, "c_make_scanner", None)
_scan_once = _scan(json.JSONDecoder()) if _scan is not None else None


def loads(text: str | bytes | None) -> Any | None:
    """Parse stored JSON. Stored text is always compact JSON written by ``dumps``: the C
    scanner parses it directly, without ``json.loads``'s whitespace handling."""
    if text is None:
        return None
    if _scan_once is not None and isinstance(text, str):
        try:
            value, end = _scan_once(text, 0)
        except StopIteration:
            return json.loads(text)  # not JSON: let json raise its usual error
        if end == len(text):
            return value
    return json.loads(text)
