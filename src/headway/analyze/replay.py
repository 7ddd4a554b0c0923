"""What-if replay: each recorded run through a real Governor in shadow mode, the recorded
results standing in for the tools.

Shadow mode (``enforce=False``) runs every call and records in the audit what headway
would have done: ``cache`` (served without running the tool), ``correct``, ``stop``. A
served answer is judged against the recording: it is *stale* when the result the cache
held (the last execution of that call that would really have run) differs from what the
tool really returned at that point.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._canonical import canonical_json
from .._session import Governor
from .._spec import ToolSpec
from ..detectors import Monitor, Verdict
from ..errors import ArgumentError
from ..stores import MemoryStore
from ._model import Call, Run
from .declare import DYNAMIC_SUFFIX, declare, registered_name

# a harness that answers a repeated read of an unchanged file with a stub (Claude Code):
# the recording then differs from the served content although the file did not change
HARNESS_STUBS = ("File unchanged since last read",)


@dataclasses.dataclass(slots=True)
class Step:
    """One replayed call: what was recorded and what headway would have done."""

    step: int
    tool: str
    repeat: bool  # the same tool and arguments were called earlier in the run
    same_result: bool  # ... and the previous such call returned the same result
    would: str  # "", "cache", "correct", "stop" (the stop is reached at this call)
    served: str  # "", "ok", "stale", "stub": a served answer judged against the recording
    after_stop: bool  # headway would have stopped the run before this call
    correction: bool  # headway would have sent the model a correction here
    signals: dict[str, Any]
    mark: str
    result: str
    malformed: str = ""  # arguments headway refused (ArgumentError), with the reason
    read: bool = False  # the call was a read under the policy (the oracle counts reads only)
    text: str = ""  # what the model would have read instead: the correction, or the stop


@dataclasses.dataclass(slots=True)
class Replayed:
    run: Run
    steps: list[Step]
    stop_step: int | None = None
    stop_signal: str = ""
    # tool -> (class, why): how the policy took each tool of the run
    declared: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)


class RecordedError(Exception):
    """A result the recording marks as an error, raised where the tool failed."""


class _Capture:
    """An audit sink keeping the last record (the replay reads it after each call)."""

    def __init__(self) -> None:
        self.last: Mapping[str, Any] = {}

    def write(self, record: Mapping[str, Any]) -> None:
        self.last = record


def _governor(config: Path | None, capture: _Capture, clock: Any) -> Governor:
    options: dict[str, Any] = {
        "enforce": False,
        "audit": [capture],
        "store": MemoryStore(),  # never the configured store: a replay writes nothing real
        "clock": clock,
        "sleep": lambda _s: None,
    }
    return Governor.from_config(config, **options) if config else Governor(**options)


def _args(call: Call) -> Mapping[str, Any]:
    if isinstance(call.args, Mapping):
        return call.args
    return {} if call.args is None else {"input": call.args}  # code blocks, bad JSON text


def _identity(tool: str, args: Mapping[str, Any]) -> str:
    try:
        return tool + "\x00" + canonical_json(args)
    except Exception:  # not canonical: its repr still identifies it
        return tool + "\x00" + repr(args)


def signal_of(signals: Mapping[str, Any]) -> str:
    """The name a stop or correction is reported under: its strongest signal."""
    for name in ("cycle", "repeated_error", "repeat", "same_result", "near_duplicate"):
        if signals.get(name):
            return name
    return next(iter(signals), "no_progress")


def klass(spec: ToolSpec) -> str:
    """How a spec is taken: ``read``, ``uncached read``, ``write``, or ``by command``."""
    if callable(spec.effect):
        return "read or write by command"
    if spec.effect == "write":
        return "write"
    return "read" if spec.cacheable() else "uncached read"


def _said(monitor: Monitor) -> dict[str, Any]:
    """What the session's monitor decides to tell the model, kept as it is said: shadow
    mode computes every correction and stop, and shows the model none of them."""
    said: dict[str, Any] = {}

    class Said(type(monitor)):  # type: ignore[misc]  # the same slots: a view of the same object
        __slots__ = ()

        def before(self, *args: Any, **kwargs: Any) -> str | None:
            text: str | None = super().before(*args, **kwargs)
            if text:
                said["text"] = text
            return text

        def after(self, *args: Any, **kwargs: Any) -> Verdict:
            v: Verdict = super().after(*args, **kwargs)
            if v.correction:
                said["text"] = v.correction
            if v.stop is not None:
                said["stop"] = v.stop
            return v

    monitor.__class__ = Said
    return said


def stop_text(diagnostic: Mapping[str, Any]) -> str:
    """The stop as the run would have ended: its signal, limit and suggestion."""
    return (
        f"headway: stopped ({diagnostic.get('signal') or diagnostic.get('terminated_by')}, "
        f"{diagnostic.get('consumed')} of {diagnostic.get('limit')} steps without progress). "
        f"{diagnostic.get('suggestion', '')}"
    ).strip()


def replay(run: Run, config: Path | None = None) -> Replayed:
    """Replay one run (a fresh Governor: runs share nothing, memory stays flat)."""
    capture = _Capture()
    now = {"t": 0.0}
    gov = _governor(config, capture, lambda: now["t"])
    current: dict[str, Any] = {}

    def tool(**_: Any) -> Any:
        if current["error"]:  # an error outcome: never cached, fingerprinted by its text
            raise RecordedError(current["value"])
        return current["value"]

    session = gov.session(run.run_id)
    said = _said(session._st.monitor)
    configured = gov.tool_config
    out = Replayed(run, [])
    previous: dict[str, str] = {}  # call identity -> result_id of its previous occurrence
    producer: dict[str, str] = {}  # call identity -> result_id a cache would hold
    for index, call in enumerate(run.calls):
        now["t"] = call.time if call.time is not None else float(index)  # 1 s a call if untimed
        args = _args(call)
        name = registered_name(call, args)
        spec = gov.spec(name)
        if spec is None:
            options: dict[str, Any]
            if name.endswith(DYNAMIC_SUFFIX):
                options, why = (
                    {"effect": "read"},
                    "default: a time-dependent command (never cached)",
                )
            else:
                options, why = declare(call)
            if name in configured:
                why = f"config: [tools.{name}] " + ", ".join(sorted(configured[name]))
            # recorded results return at once: no attempt thread (a --config timeout still applies)
            spec = gov.register(name, tool, **{"timeout": None, **options})
            out.declared[name] = (klass(spec), why)
        current["value"], current["error"] = call.result, call.error
        identity = _identity(name, args)
        before = previous.get(identity)
        previous[identity] = call.result_id
        stopped = out.stop_step is not None
        step = Step(index, call.tool, before is not None, before == call.result_id, "", "",
                    stopped, False, {}, "", call.result)  # fmt: skip
        out.steps.append(step)
        step.read = spec.effect_for(args) == "read"
        said.clear()
        try:
            session.call(name, args)
        except ArgumentError as exc:
            step.malformed = str(exc)
            continue
        rec = capture.last
        step.would, step.signals, step.mark = rec["would"] or "", rec["signals"], rec["mark"]
        if stopped:
            continue
        step.correction = step.would == "correct" or bool(rec["correction"])
        if step.correction:
            step.text = str(said.get("text") or "")
        if step.would == "stop":
            out.stop_step, out.stop_signal = index, signal_of(step.signals)
            step.text = stop_text(said["stop"]) if "stop" in said else step.text
        if step.would == "cache":
            held = producer.get(identity)
            if held == call.result_id:
                step.served = "ok"
            elif not call.result or call.result.startswith(HARNESS_STUBS):
                step.served = "stub"
            else:
                step.served = "stale"
        elif step.would != "correct":
            producer[identity] = call.result_id  # it would really have run
    return out
