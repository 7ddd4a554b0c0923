"""What every integration needs: a spec for a tool the framework runs, the step id of one
of its tool calls, a stop as the framework's own exception, and the lazy import of the
framework itself."""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Mapping
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from .._canonical import canonical_json, digest
from ..errors import BudgetExceeded, Stop
from ..outcome import Outcome, Status, render

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


def stop_text(diagnostic: Mapping[str, Any]) -> str:
    """A stop as sentences for the model and the people reading the run: what repeated or
    ran out, which signal, what to do. The diagnostic itself stays data, on the stop."""
    if diagnostic.get("terminated_by") == "budget":
        used = (
            f" ({diagnostic['consumed']} of {diagnostic['limit']})" if "limit" in diagnostic else ""
        )
        what = f"its {diagnostic.get('budget_type', '')} budget is used up{used}."
        advice = str(diagnostic.get("hint") or "")
    else:
        steps = diagnostic.get("last_k_steps") or []
        tools = ", ".join(dict.fromkeys(str(s["tool"]) for s in steps if s.get("tool")))
        signal = str(diagnostic.get("signal") or "no_progress")
        why = _SIGNALS.get(signal, signal) + (f"; tools: {tools}" if tools else "")
        count = diagnostic.get("consumed", len(steps))
        what = f"{count} tool calls in a row made no progress ({why})."
        advice = str(diagnostic.get("suggestion") or "")
    done = "Do not call more tools in this run: finish with what you have."
    return " ".join(p for p in ("headway stopped this run:", what, advice, done) if p)


_SIGNALS = {
    "cycle": "the same calls went round in a cycle",
    "repeat": "the same call was repeated",
    "repeated_error": "the same error came back",
    "same_result": "the results did not change",
    "near_duplicate": "the results were nearly the same",
    "no_progress": "nothing new was learned",
}


def caller_local(name: str, kind: type[Any] | tuple[type[Any], ...], depth: int = 12) -> Any:
    """The nearest caller's local ``name`` that is a ``kind`` (None if none within ``depth``
    frames): how a tool finds the framework run calling it where the framework passes the
    tool nothing that names the run (the runner, the agent)."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(depth):
        frame = frame.f_back if frame is not None else None
        if frame is None:
            return None
        value = frame.f_locals.get(name)
        if isinstance(value, kind):
            return value
    return None


def fresh(prefix: str) -> str:
    """A new session id: a run the framework does not name is a session of its own."""
    return f"{prefix}-{uuid.uuid4().hex}"


def answer(out: Outcome) -> Any:
    """What the model reads for a usable outcome: the tool's own value when it ran and
    headway has nothing to add, else ``served(out)``."""
    if out.status is Status.EXECUTED and out.correction is None:
        return out.value
    return served(out)


def served(out: Outcome) -> Any:
    """What the model reads for an answer headway served (cached, replayed, a fallback) or
    one with a correction, in the type the tool gave it: text gets headway's note (and any
    correction) appended, in full; another value (a dict, a structured output) is returned
    as it is, since a note would change its type, unless headway has a correction for the
    model, which then reads headway's text."""
    value = out.value
    if isinstance(value, str):
        full, head = out.to_model(), render(value)
        return value + full[len(head) :] if full.startswith(head) else full
    return value if out.correction is None else out.to_model()
