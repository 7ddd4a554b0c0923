"""Riders: a keyed write's store operations sent with the call's next one.

Two store round trips per keyed write, whatever else the call touches: the claim rides
with the session record's read (or swap) before the tool runs, and the completion with
the record's swap after it (or, in a session kept in the process, with the cache
generation's write). A ``Claim`` or ``Completion`` set on the call as ``c.rider`` is sent
by ``with_rider`` in one ``batch`` with that operation; ``flush`` sends one that nothing
carried.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._call import Call
from ._effects import Blocking, Plan
from ._key_store import gc_s
from ._leases import Held, Keeper, claim_ops, claim_results
from .errors import StoreError
from .stores._base import Op, batch, in_one_trip, one_by_one

if TYPE_CHECKING:
    from ._context import Context


class Claim:
    """The claim of a keyed write, sent with the session record's read or swap before the
    write is decided (``Writes.before`` then starts from its result)."""

    required = False  # never sent (the session stopped first): nothing was claimed

    def __init__(self, keeper: Keeper, ctx: Context, c: Call, claim: dict[str, Any]) -> None:
        self.keeper, self.c = keeper, c
        # an event loop sends it on its own thread when the store can (SQLite's ``inline``:
        # a batch it cannot make at once does nothing and goes to a thread, _effects._blocking)
        self.inline: Callable[..., Any] | None = getattr(ctx.store, "inline", None)
        self.rkey = ctx.idempotency_record_key(c.idem_key or "")
        self.gc_s = gc_s(ctx)
        self.claim = claim
        self.held: Held | None = None
        self.record: Any = None
        self.error: Exception | None = None
        self._sent = False  # the claim's own operations were made

    def send(self, store: Any, ops: list[Op]) -> list[Any]:
        own = claim_ops(store, self.rkey, self.claim, self.gc_s)
        if not in_one_trip(store):  # one by one: the claim stands even if the rest fails
            self._claimed(store, one_by_one(store, own))
            return one_by_one(store, ops)
        results = batch(store, [*own, *ops])
        self._claimed(store, results)
        return results[len(own) :]

    def _claimed(self, store: Any, results: list[Any]) -> None:
        won, self.record = claim_results(store, results)
        if won:  # held at once: the keeper renews it while the call goes on
            self.held = Held(store, self.rkey, self.claim, self.gc_s)
            self.keeper.hold(self.held)
        self._sent = True

    def done(self, error: Exception | None) -> None:
        # an error after the claim was made is the session operation's, not the claim's
        self.error = None if self._sent else error
        self.c.claimed = self


#: what becomes of an executed write once its completion was sent: written (True), the
#: record no longer ours (False), or the store's failure
Recorded = Callable[["Context", Call, Held, "bool | Exception"], None]


class Completion:
    """The completion of an executed keyed write, sent with the session record's swap
    (which is performed only if the completion was) or the cache generation's write."""

    required = True  # the tool ran: its result is recorded whatever happens to the call

    def __init__(
        self, recorded: Recorded, ctx: Context, c: Call, held: Held, done: dict[str, Any]
    ) -> None:
        self.recorded, self.ctx, self.c, self.held, self.new = recorded, ctx, c, held, done
        self.inline: Callable[..., Any] | None = getattr(ctx.store, "inline", None)  # as Claim
        self._saved: bool | None = None  # None: not known to have been made

    def send(self, store: Any, ops: list[Op]) -> list[Any]:
        if not in_one_trip(store):  # one by one: the completion stands if the rest fails
            self._saved = self.held.swap(self.new)
            return one_by_one(store, ops, self._saved)
        results = self.held.swap_with(self.new, ops)
        self._saved = results[0]
        return results[1:]

    def done(self, error: Exception | None) -> None:
        saved: bool | Exception | None = self._saved
        if saved is None:
            saved = error or StoreError("the completion was not sent")
        self.recorded(self.ctx, self.c, self.held, saved)


def with_rider(ctx: Context, c: Call, ops: list[Op], chained: bool = False) -> Plan[list[Any]]:
    """``ops`` in one round trip with the call's rider (``chained``: the first of them only
    if a required rider succeeded); their results. A store error propagates, once the
    rider has acted on it."""
    rider, c.rider = c.rider, None
    if chained and rider.required and ops:
        ops = [ops[0]._replace(only_if=True), *ops[1:]]
    try:
        results = yield Blocking(rider.send, (ctx.store, ops), ctx.store.blocking)
    except Exception as exc:
        rider.done(exc)
        raise
    rider.done(None)
    return results  # type: ignore[no-any-return]


def flush(ctx: Context, c: Call) -> Plan[None]:
    """Send a required rider that nothing carried (the call ended another way); drop a
    claim never sent."""
    if c.rider is None:
        return
    if not c.rider.required:
        c.rider = None
        return
    try:
        yield from with_rider(ctx, c, [])
    except Exception:
        return  # the rider has acted on it (an unrecorded result: UNKNOWN)
