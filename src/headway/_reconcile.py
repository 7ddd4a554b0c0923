"""Reconciling UNKNOWN (semantics §5.3, §5.4): when a key (or an unkeyed write reported
UNKNOWN) is next used, look for what the earlier attempt did before anything runs.

First the abandoned attempt's own late answer, if it has arrived (``LateResults``); else
the tool's ``reconcile(key, args)``, run as an effect with its own timeout. Found: the
key moves to COMPLETED and the call is REPLAYED; confirmed absent: one new execution;
reconcile failing, timing out or missing: it stays UNKNOWN and nothing runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._attempts import reconcile_attempt
from ._call import Call, describe
from ._effects import Aborted, AttemptTimeout, Plan
from ._key_memory import LateResults
from ._key_outcomes import ABANDONED_RUNNING, still_unknown

if TYPE_CHECKING:
    from ._context import Context


def reconcile(
    ctx: Context, c: Call, late: LateResults, key: str, record: dict[str, Any] | None = None
) -> Plan[tuple[str, Any]]:
    """('found', (how, result)), ('absent', None) or ('unknown', None) (then the call
    is settled as UNKNOWN: nothing runs). ``record``: the UNKNOWN record, whose
    ``unknown_at`` times the resolution."""
    c.reconcile_key = key
    state, answer = late.look(key)
    if state == "running":
        still_unknown(c, ABANDONED_RUNNING)
        return ("unknown", None)
    found: tuple[str, Any] | None = None
    if state == "done":
        found = ("late", answer)
    elif c.spec.reconcile is not None:
        try:
            answer = yield reconcile_attempt(ctx, c, c.spec.reconcile, key)
        except AttemptTimeout as exc:
            still_unknown(c, f"reconcile gave no answer within {exc.seconds:.3g} s")
            return ("unknown", None)
        except Exception as exc:
            failure = exc.exc if isinstance(exc, Aborted) else exc
            still_unknown(c, f"reconcile failed: {type(failure).__name__}: {describe(failure)}")
            return ("unknown", None)
        found = None if answer is None else ("reconciled", answer)
    else:
        # no reconcile: even an attempt that failed late may have acted first
        still_unknown(c, f"{c.spec.name} has no reconcile function")
        return ("unknown", None)
    since = (record or {}).get("unknown_at")
    if isinstance(since, int | float) and not isinstance(since, bool):
        c.reconcile_s = round(max(ctx.clock() - since, 0.0), 6)
    late.forget(key)
    if found is None:
        c.flag("reconciled_absent")
        return ("absent", None)
    return ("found", found)
