"""Budgets (semantics §4.3): independent limits, any of which stops the session."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError

PerTool = int | Mapping[str, int] | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Budgets:
    """Limits of one session; None means unlimited.

    ``per_tool_calls`` and ``retries_per_tool`` take one number for every tool or a
    mapping from tool name to number (tools not named are unlimited).
    """

    turns: int | None = None
    tool_calls: int | None = None
    per_tool_calls: PerTool = None
    retries_per_tool: PerTool = None
    wall_clock_s: float | None = None
    tokens: int | None = None
    cost: float | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            values = value.values() if isinstance(value, Mapping) else [value]
            if any(v is not None and v < 0 for v in values):
                raise ConfigError(f"budget {f.name} must be >= 0")


def _limit(spec: PerTool, tool: str) -> int | None:
    if spec is None or type(spec) is int:
        return spec
    return spec.get(tool) if isinstance(spec, Mapping) else spec


def diagnostic(
    budget_type: str,
    limit: float,
    consumed: float,
    what: str,
    step: int,
    last_progress_step: int | None,
) -> dict[str, Any]:
    """The exact shape of ``BudgetExceeded.diagnostic``."""
    if last_progress_step is None:
        hint = f"{what} No progress was recorded in the {step + 1} tool calls of this session."
    elif step - last_progress_step >= 2:
        hint = f"{what} No progress in the last {step - last_progress_step} tool calls."
    else:
        hint = (
            f"{what} The session was still making progress: raise this budget if the task needs it."
        )
    return {
        "terminated_by": "budget",
        "budget_type": budget_type,
        "limit": limit,
        "consumed": consumed,
        "last_progress_step": last_progress_step,
        "hint": hint,
    }


class Meter:
    """Counts consumption and names the first budget that ran out. No I/O, no clock."""

    __slots__ = (
        "budgets",
        "calls",
        "cost",
        "deadline",
        "per_tool",
        "retries",
        "started",
        "tokens",
        "turns",
        "unsynced",
    )

    def __init__(self, budgets: Budgets, started: float) -> None:
        self.budgets = budgets
        self.started = started
        # the wall-clock budget as a time: one comparison before each call
        wall = budgets.wall_clock_s
        self.deadline = math.inf if wall is None else started + wall
        self.turns = 0
        self.calls = 0
        self.tokens = 0
        self.cost = 0.0
        self.per_tool: dict[str, int] = {}
        self.retries: dict[str, int] = {}
        # retries counted here that a session shared by workers has not yet written
        self.unsynced: dict[str, int] = {}

    def wall_clock(self, now: float) -> tuple[str, float, float, str] | None:
        """The wall-clock budget, checked before each call and each retry."""
        limit = self.budgets.wall_clock_s
        if limit is not None and now >= self.deadline:
            return (
                "wall_clock_s",
                limit,
                round(now - self.started, 3),
                "The wall-clock budget ran out.",
            )
        return None

    def retry_allowed(self, tool: str) -> bool:
        limit = _limit(self.budgets.retries_per_tool, tool)
        return limit is None or self.retries.get(tool, 0) < limit

    def count_retry(self, tool: str) -> None:
        self.retries[tool] = self.retries.get(tool, 0) + 1
        self.unsynced[tool] = self.unsynced.get(tool, 0) + 1

    def count_call(self, tool: str) -> tuple[str, float, float, str] | None:
        """Count one tool call; the budget it reached, if any (the next call stops)."""
        self.calls += 1
        used = self.per_tool[tool] = self.per_tool.get(tool, 0) + 1
        b = self.budgets
        if b.tool_calls is not None and self.calls >= b.tool_calls:
            return (
                "total_tool_calls",
                b.tool_calls,
                self.calls,
                "The tool-call budget is used up.",
            )
        limit = b.per_tool_calls
        if limit is not None and type(limit) is not int:
            limit = _limit(limit, tool)
        if limit is not None and used >= limit:
            return ("per_tool_calls", limit, used, f"The call budget of {tool} is used up.")
        return None if b.retries_per_tool is None else self.retries_used_up(tool)

    def retries_used_up(self, tool: str) -> tuple[str, float, float, str] | None:
        """The retry budget of ``tool``, when its retries reached it."""
        limit = self.budgets.retries_per_tool
        if limit is not None and type(limit) is not int:
            limit = _limit(limit, tool)
        retries = self.retries.get(tool, 0)
        if limit is not None and retries >= limit:
            return ("retries_per_tool", limit, retries, f"The retry budget of {tool} is used up.")
        return None

    def count_turn(self, tokens: int, cost: float) -> tuple[str, float, float, str] | None:
        """Count one model turn; the budget it reached, if any."""
        self.turns += 1
        self.tokens += tokens
        self.cost += cost
        b = self.budgets
        if b.turns is not None and self.turns >= b.turns:
            return ("turns", b.turns, self.turns, "The model-turn budget is used up.")
        if b.tokens is not None and self.tokens >= b.tokens:
            return ("tokens", b.tokens, self.tokens, "The token budget is used up.")
        if b.cost is not None and self.cost >= b.cost:
            return ("cost", b.cost, round(self.cost, 6), "The cost budget is used up.")
        return None
