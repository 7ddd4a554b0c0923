"""The store traffic of a key's life (``_keylife``), as effects the pipeline's driver
performs (``_effects.Blocking``): the claim with its lease, the compare-and-set of a
record, the look at an owner's lease, a held claim's swap. Nothing here decides.

A claim is one atomic operation in every store (the record's ``add`` with its lease, then
the record when the add failed: one ``batch``); every later move is a compare-and-set on
the exact record read. Records are kept by the store an hour past their expiry
(``gc_s``): the expiry that matters is decided by the governor's clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._effects import Blocking, Plan
from ._leases import Held, Keeper, claim_ops, claim_results, lease_key, leased, won_at
from .errors import StoreError
from .stores._base import Op, batch

if TYPE_CHECKING:
    from ._context import Context


def gc_s(ctx: Context) -> float:
    """How long the store keeps a record (garbage collection only)."""
    return ctx.idempotency_ttl_s + 3600


def trip(store: Any, ops: list[Op]) -> Blocking:
    """``batch(store, ops)`` as an effect: the store's own method when it has one (SQLite
    runs it on an event loop's thread when it can, ``_effects``)."""
    native = getattr(store, "batch", None)
    if native is not None:
        return Blocking(native, (ops,), store.blocking)
    return Blocking(batch, (store, ops), store.blocking)


def claim(ctx: Context, rkey: str, record: dict[str, Any]) -> Plan[tuple[bool, Any]]:
    """Claim ``rkey`` with ``record``: (won, the record found when it was not). Store
    errors propagate."""
    store = ctx.store
    results = yield trip(store, claim_ops(store, rkey, record, gc_s(ctx)))
    return claim_results(store, results)


def take_over(
    ctx: Context, rkey: str, expected: dict[str, Any], record: dict[str, Any]
) -> Plan[bool]:
    """Replace ``expected`` (expired, or UNKNOWN confirmed absent) by our claim ``record``,
    its lease written with it. False when the record changed (or the store failed)."""
    store = ctx.store
    op = Op("swap", rkey, record, expected, gc_s(ctx))
    try:
        results = yield trip(store, leased(store, op, record))
    except StoreError:
        return False
    return results[won_at(store)] is True


def swap(ctx: Context, rkey: str, expected: dict[str, Any], new: dict[str, Any]) -> Plan[bool]:
    """Compare-and-set of a record we do not hold. False when it changed (or the store
    failed)."""
    store = ctx.store
    try:
        won = yield Blocking(store.swap, (rkey, expected, new, gc_s(ctx)), store.blocking)
    except StoreError:
        return False
    return bool(won)


def lease_alive(ctx: Context, rkey: str, owner: str) -> Plan[bool]:
    """Whether ``owner``'s lease on ``rkey`` is still in the store. Store errors propagate."""
    store = ctx.store
    return (yield Blocking(store.get, (lease_key(rkey, owner),), store.blocking)) is not None


def swap_held(ctx: Context, held: Held, new: dict[str, Any] | None) -> Plan[bool]:
    """Replace the record of a claim we hold (None deletes it, with its lease). False when
    it is no longer ours; store errors propagate."""
    return bool((yield Blocking(held.swap, (new,), ctx.store.blocking)))


def settle(ctx: Context, keeper: Keeper, held: Held) -> Plan[bool]:
    """Record the outcome of our abandoned attempt if it has ended; True once done."""
    return bool((yield Blocking(keeper.settle, (held,), ctx.store.blocking)))


def read(ctx: Context, rkey: str) -> Plan[Any]:
    return (yield Blocking(ctx.store.get, (rkey,), ctx.store.blocking))


def add(ctx: Context, rkey: str, record: dict[str, Any]) -> Plan[bool]:
    return bool((yield Blocking(ctx.store.add, (rkey, record, gc_s(ctx)), ctx.store.blocking)))
