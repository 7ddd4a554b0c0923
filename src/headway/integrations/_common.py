"""What every integration needs: a spec for a tool the framework runs, the step id of one
of its tool calls, a stop as the framework's own exception, and the lazy import of the
framework itself."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from .._canonical import canonical_json, digest
from ..errors import BudgetExceeded, Stop

if TYPE_CHECKING:
    from .._session import Governor
    from .._spec import ToolSpec


S = TypeVar("S", bound=Stop)


def native(stop: Stop, budget: type[S], loop: type[S]) -> S:
    """A stop as the framework's own exception: ``budget`` for a budget, else ``loop``."""
    if isinstance(stop, budget | loop):
        return stop
    return (budget if isinstance(stop, BudgetExceeded) else loop)(stop.diagnostic)


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
    unkeyed write: never cached, judged by its repeats). A registration made later, even
    after the agent is built or has run, replaces it."""
    return gov._declare(name, annotations)


def step_of(call_id: str | None, spec: ToolSpec | None, args: Mapping[str, Any]) -> str | None:
    """The idempotency step of a framework's tool call: a write retried by the framework
    under the same call id keeps its key (scoped to the run by ``gov.session(run_id)``).
    None for a declared read: a read has no key (one given is flagged in its audit).

    The step also names the call's arguments: a model that gives another call the same id
    (ids that restart with each response or each run) makes a new step, not a reuse of the
    key with other arguments (``KeyReuseError``)."""
    if not call_id or not writes(spec):
        return None
    return f"call:{call_id}:{digest(canonical_json(args))}"


def writes(spec: ToolSpec | None) -> bool:
    """Whether a call of this tool may take an idempotency key: anything but a declared read."""
    return spec is None or spec.effect != "read"
