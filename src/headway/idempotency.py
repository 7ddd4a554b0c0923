"""Writes (semantics §5): exactly once per idempotency key; UNKNOWN reconciled first.

``Writes`` drives a key through its life: ``before`` decides (claim, wait, replay,
reconcile) and returns a ticket when the tool must run; the pipeline runs it and hands
the ticket to ``after``, which moves the key on. Store operations are effects the
pipeline yields (no I/O here, no call back into the pipeline). The write path, by module:

    _keylife       the states of a key and the moves between them (read this first)
    _claiming      before the tool runs: the claim, and what a record found asks for
    _key_memory    what this process knows of keys: claims held, keys used, late attempts
    _key_store     the store traffic of each move, as effects
    _riders        a claim or a completion sent with the session's own store operation
    _leases        a claim kept alive while its attempt runs (the keeper thread)
    _reconcile     UNKNOWN resolved: the late answer, or the tool's reconcile
    _key_outcomes  what a call is told when its key decides (REPLAYED, UNKNOWN, errors)
    _key_results   a result's JSON form in its record

An unkeyed write runs every time, except right after an identical write of the session
ended UNKNOWN (§5.4): then it is a retry of that write and is reconciled the same way.
"""

from __future__ import annotations

import concurrent.futures
from typing import TYPE_CHECKING, Any

from . import _key_store
from ._call import Call, shown
from ._canonical import canonical_json, digest
from ._claiming import RUN, claim_key, new_claim
from ._effects import Plan
from ._key_memory import KeyMemory
from ._key_outcomes import not_recorded, replay_found, store_error
from ._keylife import Event, ended, malformed, move
from ._leases import Held, new_owner
from ._reconcile import reconcile
from ._riders import Claim, Completion, flush, with_rider
from .outcome import EXECUTED, UNKNOWN

if TYPE_CHECKING:
    from ._context import Context
    from ._state import SessionState

__all__ = ["RUN", "Writes", "flush", "step_key", "unkeyed_key", "with_rider"]


def step_key(namespace: str, run_id: str, step_id: str) -> str:
    """The key of a workflow step: sha256 of the canonical JSON array
    ``["step", namespace, run_id, step_id]``, so distinct (run, step) pairs never share a
    key whatever characters they contain; the same step keeps its key across retries."""
    return digest(canonical_json(["step", namespace, run_id, step_id]))


def unkeyed_key(st: SessionState, c: Call) -> str:
    """The session's name for a write by its tool and arguments (the UNKNOWN rule, §5.4)."""
    return f"unkeyed:{st.session_id}:{c.spec.name}:{c.args_digest[:32]}"


class Writes(KeyMemory):
    """The write path: what happens to a write before and after its tool runs (with what
    this process knows about keys: ``KeyMemory``)."""

    # -- before the tool runs ---------------------------------------------------------

    def before(self, ctx: Context, st: SessionState, c: Call) -> Plan[Held | bool | None]:
        """A ticket to run the tool (a claim, or ``RUN``), or None when settled here."""
        if c.idem_key is not None:
            return (yield from claim_key(self, ctx, c))
        if not st.unknown_writes:  # no write of this session ended UNKNOWN
            return RUN
        rkey = unkeyed_key(st, c)
        if rkey in st.unknown_writes:
            verdict, result = yield from reconcile(ctx, c, self.late, rkey)
            if verdict == "found":
                st.unknown_writes.pop(rkey, None)
                replay_found(c, result)
                return None
            if verdict != "absent":
                return None
            st.unknown_writes.pop(rkey, None)
        return RUN

    def claim_ahead(self, ctx: Context, c: Call) -> None:
        """A keyed write about to run: its claim is sent with the session record's read."""
        if c.idem_key is not None and ctx.enforce and not c.early and c.claimed is None:
            c.rider = Claim(self.keeper, ctx, c, new_claim(ctx, c, new_owner(), ctx.clock()))

    def unclaim(self, ctx: Context, c: Call) -> Plan[None]:
        """The call will not run after all (the session stopped): let go of the claim made
        ahead, if it was made. A release the store refuses is left to the keeper."""
        if isinstance(c.rider, Claim):
            c.rider = None  # never sent: nothing was claimed
        ahead, c.claimed = c.claimed, None
        held = None if ahead is None else ahead.held
        if held is None:
            return
        held.ended(None)
        self.used.forget(held.rkey, held)  # it never ran
        try:
            yield from _key_store.swap_held(ctx, held, None)
        except Exception:
            held.finish, held.late = (lambda _: None), _finished(None)  # deleted on a beat
            return
        self.keeper.drop(held)

    # -- after the tool ran -----------------------------------------------------------

    def after(self, ctx: Context, st: SessionState, c: Call, ticket: Held | bool) -> Plan[None]:
        """Move the key on by what happened to the write we ran (``_keylife.ended``)."""
        if not isinstance(ticket, Held):
            if c.idem_key is None and c.status is UNKNOWN:
                rkey = unkeyed_key(st, c)
                c.reconcile_key = rkey
                st.unknown_writes[rkey] = ctx.clock()
                if c.late is not None:
                    self.late.keep(rkey, c.late)
            return
        held = ticket
        held.ended(c.late if c.status is UNKNOWN else None)
        final = bool(c.spec.failed_final and c.error and not c.error.get("retryable"))
        event = ended(c.status, final)
        if event is Event.RETURNED:
            done = move(held.record, event, ctx.clock(), ctx.idempotency_ttl_s, c.value)
            assert done is not None
            if "unrecordable" in done:
                # it ran: this caller gets its result; the key replays a structured error
                # that says so (never a stand-in value), and it never runs again
                c.flag("result_not_recordable")
                c.text = shown(c.value)
            if st.shared or ctx.has_session_cache():
                # the next store write of the call (the session record's swap, or the
                # cache generation's) carries it: one round trip for both
                c.rider = Completion(self.recorded, ctx, c, held, done)
                return
            try:
                saved: bool | Exception = yield from _key_store.swap_held(ctx, held, done)
            except Exception as exc:
                saved = exc
            self.recorded(ctx, c, held, saved)
            return
        if event is Event.LOST:
            c.idem_state = "unknown"
            if c.late is not None and not held.lost:
                # the attempt runs on: keep the claim until it ends, then record its outcome
                self.late.keep(c.idem_key or "", c.late)
                self._abandon(ctx, held, c.late)
                return
            yield from self.interrupted(ctx, c, held)
            return
        if event is Event.FAILED:
            failed = move(held.record, event, ctx.clock(), ctx.idempotency_ttl_s, error=c.error)
            yield from self._swap_held(ctx, c, held, failed)
            self.keeper.drop(held)
            c.idem_state = "failed_final"
            return
        # RAISED (before its side effect, by the tool's contract): released, ABSENT
        yield from self._swap_held(ctx, c, held, None)
        self.keeper.drop(held)
        self.used.forget(held.rkey, held)  # it may run again: nothing to reconcile
        c.idem_state = "released"

    def recorded(self, ctx: Context, c: Call, held: Held, saved: bool | Exception) -> None:
        """The completion of an executed write was written (True), found the record no
        longer ours (False) or failed (the exception)."""
        if isinstance(saved, Exception):
            store_error(c, saved)
        elif saved:
            self.keeper.drop(held)
            self.used.put(held.rkey, float(held.record["expires"]))
            c.idem_state = "completed"
            return
        # the tool ran but its result is not recorded: UNKNOWN, resolved from here
        self.late.keep(c.idem_key or "", ("done", c.value))
        if not held.lost:  # the store failed: the keeper records it when it can
            self._abandon(ctx, held, _finished(c.value))
        else:
            self.keeper.drop(held)
        not_recorded(c)

    def interrupted(self, ctx: Context, c: Call, ticket: Held | bool) -> Plan[None]:
        """The attempt may have acted and nothing runs on: the key is LOST (UNKNOWN)."""
        if isinstance(ticket, Held):
            ticket.ended(None)
            lost = move(ticket.record, Event.LOST, ctx.clock(), ctx.idempotency_ttl_s)
            try:
                yield from self._swap_held(ctx, c, ticket, lost)
            finally:
                self.keeper.drop(ticket)
                c.idem_state = "unknown"

    def _abandon(self, ctx: Context, held: Held, late: concurrent.futures.Future[Any]) -> None:
        """Keep the claim while ``late`` runs on; the keeper moves the key when it ends."""
        clock, ttl = ctx.clock, ctx.idempotency_ttl_s

        def finish(h: Held) -> dict[str, Any] | None:
            assert h.late is not None
            if h.late.cancelled() or h.late.exception() is not None:
                # it failed late: whether it acted first is unknown, so it stays UNKNOWN
                return move(h.record, Event.LOST, clock(), ttl)
            return move(h.record, Event.RETURNED, clock(), ttl, h.late.result(), "late")

        held.finish = finish
        held.late = late
        late.add_done_callback(lambda _: self.keeper.poke())

    def _swap_held(
        self, ctx: Context, c: Call, held: Held, new: dict[str, Any] | None
    ) -> Plan[bool]:
        """``swap_held``; a store failure is noted on the call (the keeper retries it)."""
        try:
            return (yield from _key_store.swap_held(ctx, held, new))
        except Exception as exc:
            store_error(c, exc)
            return False

    # -- shadow mode ------------------------------------------------------------------

    def shadow(self, ctx: Context, c: Call) -> Plan[None]:
        """Shadow mode runs the write as if headway were absent; note what it would do."""
        if c.idem_key is None:
            return
        try:
            record = yield from _key_store.read(ctx, ctx.idempotency_record_key(c.idem_key))
        except Exception as exc:
            store_error(c, exc)
            return
        if record is None or malformed(record) is not None:
            return
        if record["args"] != c.args_digest or record["tool"] != c.spec.name:
            c.would = "key_reuse"
        else:
            c.would = {"completed": "replay", "unknown": "reconcile"}.get(
                record["state"], record["state"]
            )

    def shadow_record(self, ctx: Context, c: Call) -> Plan[None]:
        """Keep the result of a keyed write run in shadow mode, so that a later identical
        call shows it would have been replayed."""
        if c.idem_key is None or c.status is not EXECUTED:
            return
        base = new_claim(ctx, c, "shadow", ctx.clock())
        done = move(base, Event.RETURNED, ctx.clock(), ctx.idempotency_ttl_s, c.value, "shadow")
        assert done is not None
        try:
            yield from _key_store.add(ctx, ctx.idempotency_record_key(c.idem_key), done)
        except Exception as exc:
            store_error(c, exc)


def _finished(value: Any) -> concurrent.futures.Future[Any]:
    fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
    fut.set_result(value)
    return fut
