"""Circuit breaker (semantics §8) as pure transitions over a small JSON state.

CLOSED -> OPEN after ``failures`` consecutive failures, or a failure ratio over the last
``window`` calls once ``min_calls`` were seen; OPEN -> HALF_OPEN after a cooldown that
doubles on each consecutive opening (capped); HALF_OPEN admits exactly ``probes`` probes,
each with a lease; a probe that outlives its lease re-opens the breaker; a successful
probe closes it. Ignored errors are never recorded. The state lives in a store (a private
in-process one by default, the governor's store when ``shared=True``) and changes only by
compare-and-set, so no lock is held while a tool runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from .errors import ConfigError

State = dict[str, Any]
Admission = tuple[Literal["allow", "probe", "reject"], float]  # (decision, retry_after)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Breaker:
    failures: int = 5
    ratio: float | None = None
    window: int = 20
    min_calls: int = 10
    cooldown_s: float = 30.0
    max_cooldown_s: float = 600.0
    probes: int = 1
    probe_lease_s: float | None = None
    shared: bool = False
    ignore: tuple[type[BaseException], ...] = ()
    on_store_error: Literal["closed", "open"] = "closed"

    def __post_init__(self) -> None:
        if self.failures < 1 or self.probes < 1 or self.window < 1 or self.min_calls < 1:
            raise ConfigError("Breaker needs failures, probes, window and min_calls >= 1")
        if self.ratio is not None and not 0 < self.ratio <= 1:
            raise ConfigError("Breaker.ratio must be in (0, 1]")
        if self.cooldown_s < 0 or self.max_cooldown_s < self.cooldown_s:
            raise ConfigError("Breaker needs 0 <= cooldown_s <= max_cooldown_s")

    def cooldown(self, opens: int) -> float:
        return min(self.max_cooldown_s, self.cooldown_s * 2.0 ** min(max(opens - 1, 0), 60))


CLOSED: State = {"state": "closed", "fails": 0, "opens": 0}


def steady(b: Breaker, st: State) -> bool:
    """Closed with no failure counted (and no ratio window): admitting a call and recording
    a success both leave this state as it is, so the hot path need not take a lock."""
    return st["state"] == "closed" and st["fails"] == 0 and b.ratio is None


def admit(b: Breaker, st: State, now: float, lease_s: float) -> tuple[State, Admission]:
    """May a call go through now? Returns the new state and the decision."""
    kind = st["state"]
    if kind == "closed":
        return st, ("allow", 0.0)
    if kind == "open":
        if now < st["opened_at"]:  # the clock was set back: the cooldown restarts from now
            st = {**st, "opened_at": now}
        ready_at = st["opened_at"] + b.cooldown(st["opens"])
        if now < ready_at:
            return st, ("reject", ready_at - now)
        st = {**st, "state": "half_open", "leases": []}
        kind = "half_open"
    leases: list[float] = st["leases"]
    if any(expiry <= now for expiry in leases):  # a probe hung past its lease
        return _open(st, now), ("reject", b.cooldown(st["opens"] + 1))
    if len(leases) < b.probes:
        return {**st, "leases": [*leases, now + lease_s]}, ("probe", 0.0)
    return st, ("reject", max(min(leases) - now, 0.0))


def record(b: Breaker, st: State, ok: bool, probe: bool, now: float) -> State:
    """Record one classified attempt (success or counted failure)."""
    kind = st["state"]
    if kind == "half_open" and probe:
        if ok:
            return dict(CLOSED)
        return _open(st, now)
    if kind != "closed":
        return st  # a late result of a call admitted before the breaker opened
    fails = 0 if ok else st["fails"] + 1
    recent = None
    if b.ratio is not None:
        recent = [*st.get("recent", []), 0 if ok else 1][-b.window :]
    if ok and fails == st["fails"] and recent is None:
        return st  # nothing changed: the hot path allocates nothing
    new = {**st, "fails": fails}
    if recent is not None:
        new["recent"] = recent
    if recent is None:
        tripped = fails >= b.failures
    else:  # ratio mode: only the ratio over enough calls trips
        tripped = len(recent) >= b.min_calls and sum(recent) / len(recent) >= (b.ratio or 1.0)
    return _open(new, now) if tripped else new


def release(st: State, probe: bool) -> State:
    """Give back a probe permit without a verdict (an ignored error)."""
    if probe and st["state"] == "half_open" and st["leases"]:
        return {**st, "leases": st["leases"][1:]}
    return st


def _open(st: State, now: float) -> State:
    return {"state": "open", "fails": 0, "opens": st.get("opens", 0) + 1, "opened_at": now}
