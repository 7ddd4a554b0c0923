"""Writes (semantics §5): exactly once per idempotency key; UNKNOWN reconciled first.

``Writes`` drives a key through its life: ``before`` decides (claim, wait, replay,
reconcile) and returns a ticket when the tool must run; the pipeline runs it and hands
the ticket to ``after``, which moves the key on. Store operations are effects the
pipeline yields (no I/O here, no call back into the pipeline). The write path, by module:

    _keylife       the states of a key and the moves between them (read this first)
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
import enum
import uuid
from typing import TYPE_CHECKING, Any, Literal

from . import _key_store
from ._call import Call, shown
from ._canonical import canonical_json, digest
from ._effects import Plan, Sleep
from ._key_outcomes import (
    ABANDONED_RUNNING,
    RUNNING_HERE,
    busy,
    churned,
    failed_final,
    not_recorded,
    replay,
    replay_found,
    still_unknown,
    store_down,
    store_error,
    unrecorded,
)
from ._key_results import decode_result
from ._keylife import Event, Seen, claim, ended, malformed, move, seen
from ._leases import DEFAULT_LEASE_S, Held, Keeper
from ._recent import Recent
from ._reconcile import LateResults, reconcile
from ._riders import Claim, Completion, flush, with_rider
from .errors import KeyReuseError, StoreError
from .outcome import EXECUTED, UNKNOWN

if TYPE_CHECKING:
    from ._session import Governor
    from ._state import SessionState

__all__ = ["RUN", "Writes", "flush", "step_key", "unkeyed_key", "with_rider"]

RUN = True  # the ticket of a write that runs without a claim (unkeyed, or store_failure="open")
_POLL_S = 0.02  # first wait on an in-flight write; doubles up to _POLL_MAX_S
_POLL_MAX_S = 0.5
_TURNS = 40  # bound on claim attempts in one call (each one follows a store change)


class _Turn(enum.Enum):
    AGAIN = "the record changed under the call: claim again"
    WAIT = "another claim holds the key: wait for its outcome"


def step_key(namespace: str, run_id: str, step_id: str) -> str:
    """The key of a workflow step: sha256 of the canonical JSON array
    ``["step", namespace, run_id, step_id]``, so distinct (run, step) pairs never share a
    key whatever characters they contain; the same step keeps its key across retries."""
    return digest(canonical_json(["step", namespace, run_id, step_id]))


def unkeyed_key(st: SessionState, c: Call) -> str:
    """The session's name for a write by its tool and arguments (the UNKNOWN rule, §5.4)."""
    return f"unkeyed:{st.session_id}:{c.spec.name}:{c.args_digest[:32]}"


class Writes:
    """The write path: what happens to a write before and after its tool runs."""

    def __init__(self) -> None:
        self.late = LateResults()
        self.keeper = Keeper()
        # keys this process claimed (their claim) or saw settled (when their record
        # expires): a record that disappears before then was lost by the store
        self.used: Recent[Held | float] = Recent()

    # -- before the tool runs ---------------------------------------------------------

    def before(self, gov: Governor, st: SessionState, c: Call) -> Plan[Held | bool | None]:
        """A ticket to run the tool (a claim, or ``RUN``), or None when settled here."""
        if c.idem_key is not None:
            return (yield from self._keyed(gov, c))
        if not st.unknown_writes:  # no write of this session ended UNKNOWN
            return RUN
        rkey = unkeyed_key(st, c)
        if rkey in st.unknown_writes:
            verdict, result = yield from reconcile(gov, c, self.late, rkey)
            if verdict == "found":
                st.unknown_writes.pop(rkey, None)
                replay_found(c, result)
                return None
            if verdict != "absent":
                return None
            st.unknown_writes.pop(rkey, None)
        return RUN

    def _keyed(self, gov: Governor, c: Call) -> Plan[Held | bool | None]:
        """Claim the key; when the claim finds a record, do what its state asks (``seen``)."""
        key = c.idem_key or ""
        rkey = gov.idempotency_record_key(key)
        c.reconcile_key = key
        ahead, c.claimed = c.claimed, None  # sent with the session record's read
        owner = ahead.claim["owner"] if ahead is not None else uuid.uuid4().hex
        waited, poll = 0.0, _POLL_S
        for turn in range(_TURNS):
            if turn >= 3:  # the record keeps changing under us: back off
                yield Sleep(min(_POLL_S * 2 ** (turn - 3), _POLL_MAX_S))
            if ahead is not None and turn == 0:
                if ahead.error is not None:
                    return self._down(gov, c, ahead.error)
                mine, now, held, record = (
                    ahead.claim,
                    ahead.claim["created"],
                    ahead.held,
                    ahead.record,
                )
                won = held is not None
            else:
                now = gov.clock()
                mine, held = self._claim(gov, c, owner, now), None
                try:
                    won, record = yield from _key_store.claim(gov, rkey, mine)
                except Exception as exc:
                    return self._down(gov, c, exc)
            if won:
                return (yield from self._won(gov, c, held or self._hold(gov, rkey, mine), now))
            found = seen(record, now, c.spec.name, c.args_digest)
            if found is Seen.IN_PROGRESS:
                wait = yield from self._in_progress(gov, c, rkey, record, now)
                if wait is _Turn.AGAIN:
                    continue
                if wait is not _Turn.WAIT:
                    return wait
                if waited >= gov.in_progress_wait_s:
                    lease_s = float(record["lease_s"])
                    busy(c, key, round(min(max(poll, min(lease_s, 1.0)), 60.0), 3))
                    return None
                step = min(poll, max(gov.in_progress_wait_s - waited, 0.001))
                yield Sleep(step)
                waited, poll = waited + step, min(poll * 2, _POLL_MAX_S)
                continue
            settled = yield from self._settled(gov, c, found, rkey, record, mine)
            if settled is not _Turn.AGAIN:
                return settled
        churned(c, key, _POLL_MAX_S)
        return None

    def _settled(
        self,
        gov: Governor,
        c: Call,
        found: Seen,
        rkey: str,
        record: Any,
        mine: dict[str, Any],
    ) -> Plan[Held | bool | Literal[_Turn.AGAIN] | None]:
        """A claim that lost to a record that is not in progress: its state decides."""
        key = c.idem_key or ""
        if found is Seen.GONE:
            return _Turn.AGAIN  # released or collected in between
        if found is Seen.MALFORMED:
            problem = f"malformed idempotency record for key {key}: {malformed(record)}"
            return self._down(gov, c, StoreError(problem))
        if found is Seen.EXPIRED:  # as good as absent: take it over atomically
            if (yield from _key_store.take_over(gov, rkey, record, mine)):
                return self._took(gov, rkey, mine)
            return _Turn.AGAIN
        if found is Seen.KEY_REUSE:
            raise KeyReuseError(key, str(record["tool"]))
        if found is Seen.REPLAY:
            self.used.put(rkey, record["expires"])
            replay(c, ("stored", decode_result(record.get("result"))), None)
        elif found is Seen.UNRECORDABLE:
            self.used.put(rkey, record["expires"])
            unrecorded(c, key, str(record["unrecordable"]))
        elif found is Seen.FAILED_FINAL:
            failed_final(c, record)
        elif self._running_here(rkey):  # UNKNOWN, and it may still act: nothing to reconcile
            still_unknown(c, RUNNING_HERE)
        else:
            return (yield from self._reconciled(gov, c, rkey, record, mine))
        return None

    def _reconciled(
        self, gov: Governor, c: Call, rkey: str, record: dict[str, Any], mine: dict[str, Any]
    ) -> Plan[Held | Literal[_Turn.AGAIN] | None]:
        """An UNKNOWN key: found -> COMPLETED (REPLAYED), confirmed absent -> our CLAIM."""
        verdict, result = yield from reconcile(gov, c, self.late, c.idem_key or "", record)
        if verdict == "found":
            ttl = gov.idempotency_ttl_s
            done = move(record, Event.FOUND, gov.clock(), ttl, result[1], "reconciled")
            assert done is not None
            if (yield from _key_store.swap(gov, rkey, record, done)):
                self.used.put(rkey, done["expires"])
                replay_found(c, result)
                return None
            return _Turn.AGAIN
        if verdict == "absent":
            if (yield from _key_store.take_over(gov, rkey, record, mine)):
                return self._took(gov, rkey, mine)
            return _Turn.AGAIN
        return None

    def _in_progress(
        self, gov: Governor, c: Call, rkey: str, record: dict[str, Any], now: float
    ) -> Plan[bool | _Turn | None]:
        """Another claim holds the key: WAIT for it, claim AGAIN when it has just ended,
        or the call's ticket (None: settled here). Its owner is alive while its lease is in
        the store; ours, while its attempt runs in this process."""
        held = self.keeper.get(rkey)
        if held is not None and held.owner == record["owner"]:
            if held.late is None:
                return _Turn.WAIT  # another call of this process runs it
            # our own attempt, abandoned after a timeout
            if (yield from _key_store.settle(gov, self.keeper, held)):
                return _Turn.AGAIN  # it has just ended: its outcome is recorded now
            still_unknown(c, ABANDONED_RUNNING)
            return None
        try:
            alive = yield from _key_store.lease_alive(gov, rkey, record["owner"])
        except Exception as exc:
            return self._down(gov, c, exc)
        if alive:
            return _Turn.WAIT
        # the store let its owner's lease lapse (the owner died, or could not reach the
        # store for a whole lease): the write may have happened
        lost = move(record, Event.LOST, now, gov.idempotency_ttl_s)
        assert lost is not None
        yield from _key_store.swap(gov, rkey, record, lost)
        c.flag("lease_expired")
        return _Turn.AGAIN

    def _won(self, gov: Governor, c: Call, held: Held, now: float) -> Plan[Held | None]:
        """Our claim won: the tool runs, unless this process knows the key from before
        (then the store lost its record)."""
        before = self.used.get(held.rkey)
        if before is not None and before is not held and now < _until(before):
            return (yield from self._restore(gov, c, held, before))
        self.used.put(held.rkey, held)
        return held

    def _restore(
        self, gov: Governor, c: Call, held: Held, before: Held | float
    ) -> Plan[Held | None]:
        """We hold a fresh claim on a key this process claimed or saw settled before:
        the store lost its record. Reconcile first (§5.3); run only when the remote
        confirms absence. While our earlier attempt still runs, nothing runs and the key
        is UNKNOWN: that attempt's result is found on the next use."""
        c.flag("record_lost")
        verdict, result = "unknown", ("", None)
        if isinstance(before, Held) and before.running:
            still_unknown(c, RUNNING_HERE)
        else:
            verdict, result = yield from reconcile(gov, c, self.late, c.idem_key or "", held.record)
        if verdict == "absent":
            self.used.put(held.rkey, held)
            return held
        event = Event.FOUND if verdict == "found" else Event.LOST
        new = move(held.record, event, gov.clock(), gov.idempotency_ttl_s, result[1], "reconciled")
        try:
            yield from _key_store.swap_held(gov, held, new)
        except Exception as exc:
            store_error(c, exc)
        self.keeper.drop(held)
        held.ended(None)
        if new is not None and verdict == "found":
            self.used.put(held.rkey, new["expires"])
            replay_found(c, result)
        return None

    def _running_here(self, rkey: str) -> bool:
        """Whether an attempt of this process on this key has not ended."""
        used = self.used.get(rkey)
        return isinstance(used, Held) and used.running

    def _hold(self, gov: Governor, rkey: str, mine: dict[str, Any]) -> Held:
        """Our claim, renewed by the keeper while its attempt runs."""
        held = Held(gov.store, rkey, mine, _key_store.gc_s(gov))
        self.keeper.hold(held)
        return held

    def _took(self, gov: Governor, rkey: str, mine: dict[str, Any]) -> Held:
        """A record taken over by a compare-and-set (expired, or UNKNOWN confirmed absent):
        ours now, held while the attempt runs."""
        held = self._hold(gov, rkey, mine)
        self.used.put(rkey, held)
        return held

    def _claim(self, gov: Governor, c: Call, owner: str, now: float) -> dict[str, Any]:
        lease_s = float(gov.lease_s or DEFAULT_LEASE_S)
        return claim(c.spec.name, c.args_digest, owner, now, lease_s, gov.idempotency_ttl_s)

    def _down(self, gov: Governor, c: Call, exc: Exception) -> bool | None:
        return RUN if store_down(gov, c, exc) else None

    def claim_ahead(self, gov: Governor, c: Call) -> None:
        """A keyed write about to run: its claim is sent with the session record's read."""
        if c.idem_key is not None and gov.enforce and not c.early and c.claimed is None:
            c.rider = Claim(self.keeper, gov, c, self._claim(gov, c, uuid.uuid4().hex, gov.clock()))

    def unclaim(self, gov: Governor, c: Call) -> Plan[None]:
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
            yield from _key_store.swap_held(gov, held, None)
        except Exception:
            held.finish, held.late = (lambda _: None), _finished(None)  # deleted on a beat
            return
        self.keeper.drop(held)

    # -- after the tool ran -----------------------------------------------------------

    def after(self, gov: Governor, st: SessionState, c: Call, ticket: Held | bool) -> Plan[None]:
        """Move the key on by what happened to the write we ran (``_keylife.ended``)."""
        if not isinstance(ticket, Held):
            if c.idem_key is None and c.status is UNKNOWN:
                rkey = unkeyed_key(st, c)
                c.reconcile_key = rkey
                st.unknown_writes[rkey] = gov.clock()
                if c.late is not None:
                    self.late.keep(rkey, c.late)
            return
        held = ticket
        held.ended(c.late if c.status is UNKNOWN else None)
        final = bool(c.spec.failed_final and c.error and not c.error.get("retryable"))
        event = ended(c.status, final)
        if event is Event.RETURNED:
            done = move(held.record, event, gov.clock(), gov.idempotency_ttl_s, c.value)
            assert done is not None
            if "unrecordable" in done:
                # it ran: this caller gets its result; the key replays a structured error
                # that says so (never a stand-in value), and it never runs again
                c.flag("result_not_recordable")
                c.text = shown(c.value)
            if st.shared or gov.has_session_cache():
                # the next store write of the call (the session record's swap, or the
                # cache generation's) carries it: one round trip for both
                c.rider = Completion(self.recorded, gov, c, held, done)
                return
            try:
                saved: bool | Exception = yield from _key_store.swap_held(gov, held, done)
            except Exception as exc:
                saved = exc
            self.recorded(gov, c, held, saved)
            return
        if event is Event.LOST:
            c.idem_state = "unknown"
            if c.late is not None and not held.lost:
                # the attempt runs on: keep the claim until it ends, then record its outcome
                self.late.keep(c.idem_key or "", c.late)
                self._abandon(gov, held, c.late)
                return
            yield from self.interrupted(gov, c, held)
            return
        if event is Event.FAILED:
            failed = move(held.record, event, gov.clock(), gov.idempotency_ttl_s, error=c.error)
            yield from self._swap_held(gov, c, held, failed)
            self.keeper.drop(held)
            c.idem_state = "failed_final"
            return
        # RAISED (before its side effect, by the tool's contract): released, ABSENT
        yield from self._swap_held(gov, c, held, None)
        self.keeper.drop(held)
        self.used.forget(held.rkey, held)  # it may run again: nothing to reconcile
        c.idem_state = "released"

    def recorded(self, gov: Governor, c: Call, held: Held, saved: bool | Exception) -> None:
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
            self._abandon(gov, held, _finished(c.value))
        else:
            self.keeper.drop(held)
        not_recorded(c)

    def interrupted(self, gov: Governor, c: Call, ticket: Held | bool) -> Plan[None]:
        """The attempt may have acted and nothing runs on: the key is LOST (UNKNOWN)."""
        if isinstance(ticket, Held):
            ticket.ended(None)
            lost = move(ticket.record, Event.LOST, gov.clock(), gov.idempotency_ttl_s)
            try:
                yield from self._swap_held(gov, c, ticket, lost)
            finally:
                self.keeper.drop(ticket)
                c.idem_state = "unknown"

    def _abandon(self, gov: Governor, held: Held, late: concurrent.futures.Future[Any]) -> None:
        """Keep the claim while ``late`` runs on; the keeper moves the key when it ends."""
        clock, ttl = gov.clock, gov.idempotency_ttl_s

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
        self, gov: Governor, c: Call, held: Held, new: dict[str, Any] | None
    ) -> Plan[bool]:
        """``swap_held``; a store failure is noted on the call (the keeper retries it)."""
        try:
            return (yield from _key_store.swap_held(gov, held, new))
        except Exception as exc:
            store_error(c, exc)
            return False

    # -- shadow mode ------------------------------------------------------------------

    def shadow(self, gov: Governor, c: Call) -> Plan[None]:
        """Shadow mode runs the write as if headway were absent; note what it would do."""
        if c.idem_key is None:
            return
        try:
            record = yield from _key_store.read(gov, gov.idempotency_record_key(c.idem_key))
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

    def shadow_record(self, gov: Governor, c: Call) -> Plan[None]:
        """Keep the result of a keyed write run in shadow mode, so that a later identical
        call shows it would have been replayed."""
        if c.idem_key is None or c.status is not EXECUTED:
            return
        base = self._claim(gov, c, "shadow", gov.clock())
        done = move(base, Event.RETURNED, gov.clock(), gov.idempotency_ttl_s, c.value, "shadow")
        assert done is not None
        try:
            yield from _key_store.add(gov, gov.idempotency_record_key(c.idem_key), done)
        except Exception as exc:
            store_error(c, exc)


def _until(used: Held | float) -> float:
    """Until when a key this process used is known to the store (its record's expiry)."""
    return float(used.record["expires"]) if isinstance(used, Held) else used


def _finished(value: Any) -> concurrent.futures.Future[Any]:
    fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
    fut.set_result(value)
    return fut
