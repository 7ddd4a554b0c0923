"""Figures from replayed runs: per source, per tool and overall (the ``--json`` keys).

- ``rcr``: repeated-call rate, calls that repeat an earlier call of the run (same tool,
  same canonical arguments) over calls; ``same_result_rcr``: those whose previous
  occurrence returned the same result (``same_result_repeats``); the ``oracle``: those of
  them that are reads under the policy (every repeat a perfect cache could have served;
  a repeated write is never a cache's to serve: ``oracle_writes``, apart).
- ``served``: calls headway would have answered without running the tool; ``stale``:
  served answers that differ from what the tool really returned (always reported);
  ``harness_stubs``: served answers where the recording holds a harness's "unchanged"
  stub instead of a result; ``captured``: correct served answers over the oracle.
- ``corrections``: calls where the model would have been sent a correction;
  ``stops``: runs headway would have stopped; ``executions_saved``: tool executions that
  would not have happened (corrected, after a stop; served answers are
  ``served``); ``tokens_saved``: tokens of the results the model would not have read
  (corrected calls and calls after a stop), of ``result_tokens`` (every result).
- model turns and money (``money``): turns, turns a stop avoids, input and output tokens
  (recorded usage, else estimated), cost before and after at the prices given, and cost
  per successful task before and after with its interval.
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
from .money import Prices, RunCost, ratio_interval, run_cost
from .replay import Replayed, Step
from .replay import signal_of as _signal

_COUNTS = (
    "runs", "calls", "repeats", "same_result_repeats", "oracle", "oracle_writes", "served",
    "served_ok", "stale", "harness_stubs", "corrections", "runs_corrected", "stops",
    "executions_saved", "tokens_saved", "result_tokens", "runs_with_outcome", "succeeded",
    "stopped_succeeded", "corrected_succeeded", "malformed", "not_replayed",
)  # fmt: skip
_MONEY = (
    "turns", "recorded_turns", "described_turns", "turns_avoided", "input_tokens",
    "output_tokens", "input_avoided", "output_avoided",
)  # fmt: skip
_EXAMPLES = 3  # texts kept per kind of correction or stop


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
        self.tok: collections.Counter[str] = collections.Counter(dict.fromkeys(_MONEY, 0))
        self.cost = [0.0, 0.0]  # before, after
        self.recorded = [0.0, 0]  # the exports' own cost (USD), and the runs that record one
        # per run with an outcome, for cost per success: n, Σc, Σs, Σc², Σs², Σcs (before, after)
        self.per_success = [[0.0] * 6, [0.0] * 6]

    def add_cost(
        self,
        rc: RunCost,
        prices: Prices,
        succeeded: bool | None,
        stopped: bool,
        recorded: float | None = None,
    ) -> None:
        for key in _MONEY:
            self.tok[key] += getattr(rc, key)
        before, after = rc.before(prices), rc.after(prices)
        if recorded is not None:
            self.recorded[0] += recorded
            self.recorded[1] += 1
        self.cost[0] += before
        self.cost[1] += after
        if succeeded is not None:
            for sums, c, ok in ((self.per_success[0], before, succeeded),
                                (self.per_success[1], after, succeeded and not stopped)):  # fmt: skip
                s = float(ok)
                for i, v in enumerate((1.0, c, s, c * c, s * s, c * s)):
                    sums[i] += v

    def money(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.tok)
        out["cost_before"], out["cost_after"] = round(self.cost[0], 4), round(self.cost[1], 4)
        out["recorded_cost"], out["runs_with_recorded_cost"] = (
            round(self.recorded[0], 4),
            int(self.recorded[1]),
        )
        for name, sums in (("before", self.per_success[0]), ("after", self.per_success[1])):
            n, sc, ss = int(sums[0]), sums[1], sums[2]
            out[f"cost_per_success_{name}"] = round(sc / ss, 4) if ss else None
            out[f"cost_per_success_{name}_ci"] = ratio_interval(n, *sums[1:])
            out[f"successes_{name}"] = int(ss)
        out["runs_with_outcome"] = int(self.per_success[0][0])
        return out

    def figures(self) -> dict[str, Any]:
        n = self.n
        calls, runs = n["calls"], n["runs"]
        out: dict[str, Any] = dict(n)
        out["rcr"] = _rate(n["repeats"], calls)
        out["rcr_ci"] = wilson(n["repeats"], calls)
        out["same_result_rcr"] = _rate(n["same_result_repeats"], calls)
        out["same_result_rcr_ci"] = wilson(n["same_result_repeats"], calls)
        out["tokens_saved_share"] = _rate(n["tokens_saved"], n["result_tokens"])
        out["captured"] = _rate(min(n["served_ok"], n["oracle"]), n["oracle"])
        out["captured_ci"] = wilson(min(n["served_ok"], n["oracle"]), n["oracle"])
        out["stop_rate_ci"] = wilson(n["stops"], runs)
        out["false_kill_rate_ci"] = wilson(n["stopped_succeeded"], n["succeeded"])
        out["stop_signals"] = dict(self.stop_signals)
        out["correction_signals"] = dict(self.correction_signals)
        out["money"] = self.money()
        return out


def _rate(k: int, n: int) -> float:
    return round(k / n, 4) if n else 0.0


class Figures:
    """Accumulates replayed runs; ``result()`` is the ``--json`` document."""

    def __init__(self, max_timelines: int = 40, prices: Prices | None = None) -> None:
        self.prices = prices or Prices()
        self.overall = Tally()
        # tool -> (class, why) -> runs: how the policy took each tool
        self.assumed: dict[str, collections.Counter[tuple[str, str]]] = {}
        self.examples: dict[str, list[dict[str, Any]]] = {}  # kind -> texts the model would read
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
        for tool, taken in r.declared.items():
            self.assumed.setdefault(tool, collections.Counter())[taken] += 1
        result_tokens = [tokens.count(s.result, r.run.calls[s.step].full_size()) for s in r.steps]
        corrected: dict[int, int] = {}
        for s in r.steps:
            per_tool = tools.get(s.tool) or tools.setdefault(s.tool, Tally())
            # a stale answer saves nothing: the model would have been told something false
            served = s.served in ("ok", "stub")
            saved = (served or s.would == "correct" or s.after_stop) and not s.malformed
            spent = result_tokens[s.step]
            for t in (*groups, per_tool):
                c = t.n
                c["calls"] += 1
                c["repeats"] += s.repeat
                c["same_result_repeats"] += s.same_result
                c["oracle"] += s.same_result and s.read
                c["oracle_writes"] += s.same_result and not s.read
                c["result_tokens"] += spent
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
                self._example("correction: " + _signal(s.signals), r, s)
            if s.would == "stop" and not s.after_stop:
                self._example("stop: " + _signal(s.signals), r, s)
            if (s.would == "correct" or s.after_stop) and not s.malformed:
                for t in (*groups, per_tool):
                    t.n["tokens_saved"] += spent
                if not s.after_stop:
                    corrected[s.step] = tokens.count(s.text) if s.text else 0
        stopped = r.stop_step is not None
        rc = run_cost(r.run, result_tokens, r.stop_step, corrected)
        for t in groups:
            c = t.n
            c["runs"] += 1
            c["not_replayed"] += r.run.not_replayed
            c["runs_corrected"] += bool(corrections)
            c["stops"] += stopped
            t.add_cost(rc, self.prices, r.run.succeeded, stopped, r.run.cost)
            if r.run.succeeded is not None:
                c["runs_with_outcome"] += 1
                c["succeeded"] += r.run.succeeded
                c["stopped_succeeded"] += r.run.succeeded and stopped
                c["corrected_succeeded"] += r.run.succeeded and bool(corrections)
            if stopped:
                t.stop_signals[r.stop_signal] += 1
        stale = any(s.served == "stale" for s in r.steps)
        # what the model would have read first in this run, and at the stop
        said = next((s.text[:800] for s in r.steps if s.correction and s.text), None)
        last = r.steps[r.stop_step].text[:800] if stopped and r.stop_step is not None else None
        kept = self._timelines[0 if stale else 1 if stopped else 2]
        if (corrections or stopped or stale) and len(kept) < self.max_timelines:
            kept.append(
                {
                    "source": source,
                    "run_id": r.run.run_id,
                    "succeeded": r.run.succeeded,
                    "steps": [_event(s) for s in r.steps],
                    "first_correction_text": said,
                    "stop_text": last,
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
                    "first_correction_text": said,
                    "stop_text": last or None,
                }
            )

    def _example(self, kind: str, r: Replayed, s: Step) -> None:
        kept = self.examples.setdefault(kind, [])
        if len(kept) < _EXAMPLES and s.text:
            kept.append({"source": r.run.source, "run_id": r.run.run_id, "step": s.step,
                         "tool": s.tool, "text": s.text[:800]})  # fmt: skip

    def assumptions(self) -> list[dict[str, Any]]:
        """Per tool: how the policy took it (class) and why, with the runs it applied to."""
        out = []
        for tool, taken in sorted(self.assumed.items()):
            for (klass, why), runs in taken.most_common():
                out.append({"tool": tool, "class": klass, "why": why, "runs": runs})
        return out

    @property
    def timelines(self) -> list[dict[str, Any]]:
        """Runs to draw: those with a stale answer, then stopped, then corrected ones."""
        return [t for kept in self._timelines for t in kept][: self.max_timelines]

    def result(self) -> dict[str, Any]:
        sources = {}
        for name, tally in self.sources.items():
            figs = tally.figures()
            figs["tools"] = {
                tool: _calls_only(t.figures()) for tool, t in sorted(self.tools[name].items())
            }
            sources[name] = figs
        p = self.prices
        return {
            "sources": sources,
            "overall": self.overall.figures(),
            "runs": self.flagged,
            "tokens_method": tokens.method(),
            "assumptions": self.assumptions(),
            "examples": self.examples,
            "prices": {
                "input_per_million": p.input,
                "output_per_million": p.output,
                "source": "given" if p.given else "default (an assumption)",
            },
        }


def _calls_only(figs: dict[str, Any]) -> dict[str, Any]:
    """A tool's figures: its calls' (runs, turns and money belong to runs, not tools)."""
    for key in ("money", "runs", "runs_corrected", "stops", "runs_with_outcome", "succeeded",
                "stopped_succeeded", "corrected_succeeded", "stop_rate_ci", "false_kill_rate_ci",
                "stop_signals", "not_replayed"):  # fmt: skip
        figs.pop(key, None)
    return figs


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
    flagged = s.correction or s.would in ("correct", "stop")
    # a no-progress warning carries no signal of its own: it is named no_progress
    return [s.step, s.tool, what, _signal(s.signals) if s.signals or flagged else ""]
