"""What every integration needs: a spec for a tool the framework runs, the step id of one
of its tool calls, a bounded table of the sessions its runs have open, and the lazy import
of the framework itself."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping, MutableMapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from .._session import Governor
    from .._spec import ToolSpec

V = TypeVar("V")
LIVE = 10_000  # runs whose session an integration keeps at hand (as the Governor keeps states)
_TABLES = threading.Lock()  # a framework's threads may open sessions at once


def require(module: str, extra: str) -> ModuleType:
    """Import an optional dependency, or say exactly what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{module} is needed for this integration: pip install 'headway[{extra}]'"
        ) from exc


def declare(gov: Governor, name: str, annotations: Mapping[str, Any] | None = None) -> ToolSpec:
    """The spec of a tool the framework runs: the one registered (the operator's choice),
    else one from the MCP annotations the framework carries, else the safe default (an
    unkeyed write: never cached, judged by its repeats)."""
    spec = gov.spec(name)
    if spec is None:
        spec = gov.register(name, None, annotations=dict(annotations or {}))
    return spec


def step_of(call_id: str | None, spec: ToolSpec | None = None) -> str | None:
    """The idempotency step of a framework's tool call: a write retried by the framework
    under the same call id keeps its key (scoped to the run by ``gov.session(run_id)``).
    None for a declared read: a read has no key (one given is flagged in its audit)."""
    if not call_id or (spec is not None and spec.effect == "read"):
        return None
    return f"call:{call_id}"


def remember(table: MutableMapping[str, V], key: str, value: V) -> V:
    """Keep ``value`` under ``key``, the table bounded to the ``LIVE`` most recent keys (the
    oldest forgotten first: a forgotten run's session is opened again when next needed)."""
    with _TABLES:
        table.pop(key, None)  # re-inserted: the most recent again
        table[key] = value
        while len(table) > LIVE:
            del table[next(iter(table))]
    return value
