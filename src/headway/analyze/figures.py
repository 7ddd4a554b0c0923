"""Figures from replayed runs: per source, per tool and overall (the ``--json`` keys).

- ``rcr``: repeated-call rate, calls that repeat an earlier call of the run (same tool,
  same canonical arguments) over calls; ``same_result_rcr``: those whose previous
  occurrence returned the same result (the ``oracle``: every repeat a perfect cache
  could have served).
- ``served``: calls headway would have answered without running the tool; ``stale``:
  served answers that differ from what the tool really returned (always reported);
  ``harness_stubs``: served answers where the recording holds a harness's "unchanged"
  stub instead of a result; ``captured``: correct served answers over the oracle.
- ``corrections``: calls where the model would have been sent a correction;
  ``stops``: runs headway would have stopped; ``executions_saved``: tool executions that
  would not have happened (served, corrected, after a stop); ``tokens_saved``: tokens
  of the results the model would not have read (corrected calls and calls after a stop).
- ``not_replayed``: records that are no tool call (a harness's format-error answer, a
  delegation without its reply); ``malformed``: arguments headway refused.
- with recorded outcomes: ``succeeded`` runs and ``stopped_succeeded`` (false kills).
- rates carry a 95% Wilson interval: ``rcr_ci``, ``same_result_rcr_ci``,
  ``captured_ci``, ``stop_rate_ci``, ``false_kill_rate_ci``.
"""

from __future__ import annotations

import collections
import math
from typing import Any

from . import tokens
from .replay import Replayed, Step
from .replay import signal_of as _signal

_COUNTS = (
    "runs", "calls", "repeats", "oracle", "served", "served_ok", "stale", "harness_stubs",
    "corrections", "runs_corrected", "stops", "executions_saved", "tokens_saved",
    "runs_with_outcome", "succeeded", "stopped_succeeded", "malformed", "not_replayed",
)  # fmt: skip


def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    """95% Wilson score interval for k successes in n trials ([0, 0] when n is 0)."""
    if n == 0:
        return [0.0, 0.0]
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [round(max(0.0, c - h), 4), round(min(1.0, c + h), 4)]


class Tally:
    """Counts for one group of calls (a source, a tool, everything)."""

    def __init__(self) -> None:
        self.n: collections.Counter[str] = collections.Counter(dict.fromkeys(_COUNTS, 0))
        self.stop_signals: collections.Counter[str] = collections.Counter()
        self.correction_signals: collections.Counter[str] = collections.Counter()

    def figures(self) -> dict[str, Any]:
        n = self.n
        calls, runs = n["calls"], n["runs"]
        out: dict[str, Any] = dict(n)
        out["rcr"] = _rate(n["repeats"], calls)
        out["rcr_ci"] = wilson(n["repeats"], calls)
        out["same_result_rcr"] = _rate(n["oracle"], calls)
        out["same_result_rcr_ci"] = wilson(n["oracle"], calls)
        out["captured"] = _rate(min(n["served_ok"], n["oracle"]), n["oracle"])
        out["captured_ci"] = wilson(min(n["served_ok"], n["oracle"]), n["oracle"])
        out["stop_rate_ci"] = wilson(n["stops"], runs)
        out["false_kill_rate_ci"] = wilson(n["stopped_succeeded"], n["succeeded"])
        out["stop_signals"] = dict(self.stop_signals)
        out["correction_signals"] = dict(self.correction_signals)
        return out


def _rate(k: int, n: int) -> float:
    return round(k / n, 4) if n else 0.0


class Figures:
    """Accumulates replayed runs; ``result()`` is the ``--json`` document."""

    def __init__(self, max_timelines: int = 40) -> None:
        self.overall = Tally()
        self.sources: dict[str, Tally] = {}
        self.tools: dict[str, dict[str, Tally]] = {}
        self.flagged: list[dict[str, Any]] = []  # runs corrected or stopped: step and signal
        # the first few flagged runs, call by call: stale first, then stopped, then corrected
        self._timelines: tuple[list[dict[str, Any]], ...] = ([], [], [])
        self.max_timelines = max_timelines

    def add(self, r: Replayed) -> None:
        source = r.run.source
        src = self.sources.setdefault(source, Tally())
        tools = self.tools.setdefault(source, {})
        groups = (self.overall, src)
        corrections = []
        for s in r.steps:
            per_tool = tools.get(s.tool) or tools.setdefault(s.tool, Tally())
            saved = (s.served != "" or s.would == "correct" or s.after_stop) and not s.malformed
            for t in (*groups, per_tool):
                c = t.n
                c["calls"] += 1
                c["repeats"] += s.repeat
                c["oracle"] += s.same_result
                c["malformed"] += bool(s.malformed)
                c["served"] += s.served != ""
                c["served_ok"] += s.served == "ok"
                c["stale"] += s.served == "stale"
                c["harness_stubs"] += s.served == "stub"
                c["corrections"] += s.correction
                c["executions_saved"] += saved
            if s.correction:
                corrections.append([s.step, _signal(s.signals)])
                for t in (*groups, per_tool):
                    t.correction_signals[_signal(s.signals)] += 1
            if (s.would == "correct" or s.after_stop) and not s.malformed:
                spent = tokens.count(s.result, r.run.calls[s.step].full_size())
                for t in (*groups, per_tool):
                    t.n["tokens_saved"] += spent
        stopped = r.stop_step is not None
        for t in groups:
            c = t.n
            c["runs"] += 1
            c["not_replayed"] += r.run.not_replayed
            c["runs_corrected"] += bool(corrections)
            c["stops"] += stopped
            if r.run.succeeded is not None:
                c["runs_with_outcome"] += 1
                c["succeeded"] += r.run.succeeded
                c["stopped_succeeded"] += r.run.succeeded and stopped
            if stopped:
                t.stop_signals[r.stop_signal] += 1
        stale = any(s.served == "stale" for s in r.steps)
        kept = self._timelines[0 if stale else 1 if stopped else 2]
        if (corrections or stopped or stale) and len(kept) < self.max_timelines:
            kept.append(
                {
                    "source": source,
                    "run_id": r.run.run_id,
                    "succeeded": r.run.succeeded,
                    "steps": [_event(s) for s in r.steps],
                }
            )
        if corrections or stopped:
            self.flagged.append(
                {
                    "source": source,
                    "run_id": r.run.run_id,
                    "calls": len(r.steps),
                    "succeeded": r.run.succeeded,
                    "stop_step": r.stop_step,
                    "stop_signal": r.stop_signal or None,
                    "corrections": corrections,
                }
            )

    @property
    def timelines(self) -> list[dict[str, Any]]:
        """Runs to draw: those with a stale answer, then stopped, then corrected ones."""
        return [t for kept in self._timelines for t in kept][: self.max_timelines]

    def result(self) -> dict[str, Any]:
        sources = {}
        for name, tally in self.sources.items():
            figs = tally.figures()
            figs["tools"] = {tool: t.figures() for tool, t in sorted(self.tools[name].items())}
            sources[name] = figs
        return {
            "sources": sources,
            "overall": self.overall.figures(),
            "runs": self.flagged,
            "tokens_method": tokens.method(),
        }


def _event(s: Step) -> list[Any]:
    """One call of a timeline: [step, tool, what headway would have done, signal]."""
    if s.after_stop:
        what = "after_stop"
    elif s.would == "stop":
        what = "stop"
    elif s.would == "correct":
        what = "corrected"
    elif s.served:
        what = {"ok": "served", "stale": "stale", "stub": "served"}[s.served]
    elif s.correction:
        what = "warned"
    else:
        what = "executed"
    return [s.step, s.tool, what, _signal(s.signals) if s.signals else ""]
