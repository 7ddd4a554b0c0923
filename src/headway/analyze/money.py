"""What a run costs in model tokens and money, and what a stop or correction would save.

Each model turn re-sends the whole context: a turn's input tokens are the recorded
``usage`` when the input has it, else an estimate (the characters of the transcript
before the turn / 4 when the reader has the transcript, else the tool calls' arguments and
results so far / 4: a lower bound, without the prompt and the model's text). Its output
tokens are recorded, else its calls' arguments / 4. The turns headway's stop avoids are
those whose first call comes after the stop; a correction replaces a result by a shorter
text in every later turn's context. Money is tokens times the prices per million.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from ._model import Run

# list prices of a mid-range model (USD per million tokens): an assumption, said in the
# report; --price-in / --price-out set the user's own
DEFAULT_PRICE_IN = 3.0
DEFAULT_PRICE_OUT = 15.0


@dataclasses.dataclass(frozen=True, slots=True)
class Prices:
    input: float = DEFAULT_PRICE_IN  # USD per million input tokens
    output: float = DEFAULT_PRICE_OUT
    given: bool = False  # set by the user (else the defaults above, an assumption)

    def cost(self, tin: float, tout: float) -> float:
        return (tin * self.input + tout * self.output) / 1e6


@dataclasses.dataclass(slots=True)
class RunCost:
    turns: int = 0
    recorded_turns: int = 0  # turns whose usage the input records
    described_turns: int = 0  # turns estimated from the transcript text
    input_tokens: int = 0
    output_tokens: int = 0
    turns_avoided: int = 0
    input_avoided: int = 0  # by the stop (turns not taken) and corrections (shorter context)
    output_avoided: int = 0

    def before(self, p: Prices) -> float:
        return p.cost(self.input_tokens, self.output_tokens)

    def after(self, p: Prices) -> float:
        return p.cost(
            self.input_tokens - self.input_avoided, self.output_tokens - self.output_avoided
        )


def _args_chars(args: Any) -> int:
    return len(args) if isinstance(args, str) else len(json.dumps(args, default=str))


def run_cost(
    run: Run, result_tokens: list[int], stop_step: int | None, corrected: dict[int, int]
) -> RunCost:
    """The run's turns and tokens; ``result_tokens`` per call, ``corrected``: call index ->
    tokens of the correction text that would have replaced its result."""
    first: dict[Any, int] = {}  # turn -> its first call
    out_chars: dict[Any, int] = {}
    turn_of: list[Any] = []
    for i, call in enumerate(run.calls):
        t = call.turn if call.turn is not None else ("call", i)
        turn_of.append(t)
        first.setdefault(t, i)
        out_chars[t] = out_chars.get(t, 0) + _args_chars(call.args)
    cost = RunCost(turns=len(first))
    so_far = 0  # tokens of calls' arguments and results before the current call
    seen = 0
    for t, i in sorted(first.items(), key=lambda ti: ti[1]):
        while seen < i:
            so_far += result_tokens[seen] + math.ceil(_args_chars(run.calls[seen].args) / 4)
            seen += 1
        recorded = run.usage.get(t) if isinstance(t, int) else None
        if recorded is not None:
            tin, tout = recorded
            cost.recorded_turns += 1
        else:
            chars = run.context.get(t) if isinstance(t, int) else None
            if chars is not None:
                tin = math.ceil(chars / 4)
                cost.described_turns += 1
            else:
                tin = so_far
            tout = math.ceil(out_chars[t] / 4)
        cost.input_tokens += tin
        cost.output_tokens += tout
        if stop_step is not None and i > stop_step:
            cost.turns_avoided += 1
            cost.input_avoided += tin
            cost.output_avoided += tout
    starts = sorted(first.values())
    for i, text_tokens in corrected.items():
        later = sum(1 for s in starts if s > i and (stop_step is None or s <= stop_step))
        cost.input_avoided += max(0, result_tokens[i] - text_tokens) * later
    return cost


def ratio_interval(n: int, sc: float, ss: float, scc: float, sss: float, scs: float) -> list[float]:
    """95% interval of Σc / Σs over n runs (cost per success) by the delta method, from the
    sums of c, s, c², s² and c·s; [0, 0] when it cannot be computed."""
    if n < 2 or ss <= 0:
        return [0.0, 0.0]
    r = sc / ss
    var = max(0.0, (scc - 2 * r * scs + r * r * sss) / (n - 1))
    half = 1.96 * math.sqrt(var / n) / (ss / n)
    return [round(max(0.0, r - half), 4), round(r + half, 4)]
