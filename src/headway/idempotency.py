"""Writes (semantics §5): exactly once per idempotency key, UNKNOWN reconciled first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._effects import Plan
from .outcome import Status

if TYPE_CHECKING:
    from ._pipeline import Call
    from ._session import Governor
    from ._state import SessionState


class Writes:
    def run(self, gov: Governor, st: SessionState, c: Call) -> Plan[None]:
        from ._pipeline import execute, invalidate

        yield from execute(gov, st, c)
        if c.executed or c.status is Status.UNKNOWN:
            yield from invalidate(gov, st, c)
