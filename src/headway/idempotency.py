"""Writes (semantics §5): exactly once per idempotency key; UNKNOWN reconciled first.

The life of a key, as one state machine whose store operations are effects the pipeline
yields (no I/O here, no call back into the pipeline). Its record lives in the store under
``{ns}:idem:{key}``::

    absent --claim (store.add)--> IN_PROGRESS(owner, beat, lease_s)
        the owner keeps the lease alive (``_leases``) while its attempt runs anywhere in
        this process, including an attempt abandoned after a timeout
    IN_PROGRESS -> COMPLETED(result)     the tool returned (or its late attempt did)
                -> released (deleted)    the tool raised: it may run again
                -> FAILED_FINAL(error)   opt-in: a final business error
                -> UNKNOWN               interrupt, a timed-out attempt that cannot act
                                         late, an abandoned attempt that failed, or an
                                         owner that stopped renewing its lease (died)
    UNKNOWN --next use--> reconcile(key, args): found -> COMPLETED, returned as REPLAYED;
                          None -> one new execution; raises or missing -> stays UNKNOWN
    COMPLETED --next use--> REPLAYED (same arguments) | KeyReuseError (other arguments)

``Writes.before`` decides (claim, wait, replay, reconcile) and returns a ticket when the
tool must run; the pipeline runs it and hands the ticket to ``Writes.after``. Every
transition after the claim is a compare-and-set against the exact record read, so only
one owner ever wins. Expiry of a settled record (24 h by default) is decided with the
governor's clock; an in-progress record is governed only by its lease.

An unkeyed write runs every time, except right after an identical write of the session
ended UNKNOWN (§5.4): then it is a retry of that write and is reconciled the same way.

Two store round trips per keyed write, whatever else the call touches: the claim rides
with the session record's read (or swap) before the tool runs, and the completion with
the record's swap after it (or, in a session kept in the process, with the cache
generation's write): a ``Claim`` or ``Completion`` set on the call as ``c.rider`` is sent
by ``with_rider`` in one ``batch`` with that operation.
"""

from __future__ import annotations

import base64
import concurrent.futures
import datetime as dt
import decimal
import math
import pathlib
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._attempts import reconcile_attempt
from ._call import Call, describe, shown
from ._canonical import _to_json, canonical_json, digest
from ._effects import Aborted, AttemptTimeout, Blocking, Plan, Sleep
from ._leases import Held, Keeper, claim_ops, claim_results, lease_key, leased, won_at
from ._recent import Recent
from .errors import KeyReuseError, StoreError
from .outcome import ERROR, EXECUTED, REPLAYED, UNKNOWN, error_info
from .stores._base import Op, batch, in_one_trip, one_by_one

if TYPE_CHECKING:
    from ._context import Context
    from ._state import SessionState

_POLL_S = 0.02  # first wait on an in-flight write; doubles up to _POLL_MAX_S
_POLL_MAX_S = 0.5
_TURNS = 40  # bound on claim attempts in one call (each one follows a store change)
_STATES = ("in_progress", "completed", "unknown", "failed_final")
DEFAULT_LEASE_S = 30.0
_RUNNING_HERE = "an earlier attempt with this key is still running in this process"
RUN = True  # the ticket of a write that runs without a claim (unkeyed, or store_failure="open")


# -- results in the record --------------------------------------------------------------


def encode_result(value: Any) -> tuple[Any, str | None]:
    """(JSON form, None) or (None, why it cannot be recorded).

    Plain JSON is kept as it is. Anything else takes the tagged canonical forms of tool
    arguments (``{"$datetime": ...}``, ``{"$decimal": ...}``, ``{"$bytes": ...}``,
    ``{"$set": [...]}``, ``{"$float": "NaN"}``, ...), marked ``"enc": "tagged"`` in the
    record and turned back into those types on replay. A value with no canonical form
    (an arbitrary object, a dict with non-string keys) cannot be recorded.
    """
    try:
        tagged = _to_json(value, "result", set())
        plain = _same_json(tagged, value)
    except Exception as exc:  # too deep, an int too long, an object whose attributes fail
        return None, f"the result has no JSON form ({type(exc).__name__}: {describe(exc)})"
    if plain:
        return {"v": value}, None
    return {"v": tagged, "enc": "tagged"}, None


def _same_json(tagged: Any, value: Any) -> bool:
    """Whether ``value`` is already plain JSON that the tagged form leaves unchanged."""
    if type(value) is not type(tagged) and not (type(value) is float and type(tagged) is int):
        return False
    if isinstance(value, dict):
        return value.keys() == tagged.keys() and all(_same_json(tagged[k], value[k]) for k in value)
    if isinstance(value, list):
        return len(value) == len(tagged) and all(map(_same_json, tagged, value))
    return bool(value == tagged)


def decode_result(stored: Any) -> Any:
    if not isinstance(stored, dict):
        return None
    value = stored.get("v")
    return _untag(value) if stored.get("enc") == "tagged" else value


_UNTAG: dict[str, Any] = {
    "$bytes": base64.b64decode,
    "$datetime": dt.datetime.fromisoformat,
    "$date": dt.date.fromisoformat,
    "$time": dt.time.fromisoformat,
    "$decimal": decimal.Decimal,
    "$uuid": uuid.UUID,
    "$path": pathlib.PurePath,
    "$float": float,
    "$int": int,
}


def _untag(v: Any) -> Any:
    if isinstance(v, list):
        return [_untag(x) for x in v]
    if not isinstance(v, dict):
        return v
    if len(v) == 1:
        ((tag, inner),) = v.items()
        if tag in _UNTAG:
            return _UNTAG[tag](inner)
        if tag == "$set":
            items = [_untag(x) for x in inner]
            try:
                return set(items)
            except TypeError:
                return items
    return {(k[1:] if k.startswith("$$") else k): _untag(x) for k, x in v.items()}


def malformed(record: Any) -> str | None:
    """Why a stored idempotency record cannot be trusted, or None."""
    if not isinstance(record, dict):
        return f"not an object but {type(record).__name__}"
    state = record.get("state")
    if state not in _STATES:
        return f"unknown state {state!r}"
    for name in ("tool", "args"):
        if not isinstance(record.get(name), str):
            return f"{name!r} is {record.get(name)!r}"
    for name in ("created", "expires", "lease_s"):
        v = record.get(name)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return f"{name!r} is {v!r}"
    beat = record.get("beat")
    if isinstance(beat, bool) or not isinstance(beat, int):
        return f"'beat' is {beat!r}"
    if state == "in_progress" and (
        not isinstance(record.get("owner"), str) or record["lease_s"] <= 0
    ):
        return "an in-progress record without an owner or a lease"
    return None


def step_key(namespace: str, run_id: str, step_id: str) -> str:
    """The key of a workflow step: sha256 of the canonical JSON array
    ``["step", namespace, run_id, step_id]``, so distinct (run, step) pairs never share a
    key whatever characters they contain; the same step keeps its key across retries."""
    return digest(canonical_json(["step", namespace, run_id, step_id]))


# -- in-process memory of attempts and keys ---------------------------------------------


class LateResults:
    """Attempts abandoned after a timeout, kept so a late answer can settle UNKNOWN."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, concurrent.futures.Future[Any] | tuple[str, Any]] = {}

    def keep(self, key: str, late: concurrent.futures.Future[Any] | tuple[str, Any]) -> None:
        with self._lock:
            self._by_key[key] = late
            while len(self._by_key) > 10_000:
                self._by_key.pop(next(iter(self._by_key)))

    def look(self, key: str) -> tuple[str, Any]:
        """('running', None), ('done', result), ('failed', None) or ('none', None)."""
        with self._lock:
            late = self._by_key.get(key)
        if late is None:
            return ("none", None)
        if isinstance(late, tuple):
            return late
        if not late.done():
            return ("running", None)
        if late.cancelled() or late.exception() is not None:
            return ("failed", None)
        return ("done", late.result())

    def forget(self, key: str) -> None:
        with self._lock:
            self._by_key.pop(key, None)


class Writes:
    """The write path: what happens to a write before and after its tool runs."""

    def __init__(self) -> None:
        self.late = LateResults()
        self.keeper = Keeper()
        # keys this process claimed (their claim) or saw settled (when their record
        # expires): a record that disappears before then was lost by the store
        self.used: Recent[Held | float] = Recent()

    # -- before the tool runs ---------------------------------------------------------

    def before(self, gov: Context, st: SessionState, c: Call) -> Plan[Held | bool | None]:
        """A ticket to run the tool (a claim, or ``RUN``), or None when settled here."""
        if c.idem_key is not None:
            return (yield from self._keyed(gov, c))
        if not st.unknown_writes:  # the common case: no digest of the arguments to make
            return RUN
        rkey = unkeyed_key(st, c)
        if rkey in st.unknown_writes:
            verdict, result = yield from self._reconcile(gov, c, rkey)
            if verdict == "found":
                st.unknown_writes.pop(rkey, None)
                self._replay(c, result, "late" if result[0] == "late" else "reconciled")
                return None
            if verdict != "absent":
                return None
            st.unknown_writes.pop(rkey, None)
        return RUN

    def _keyed(self, gov: Context, c: Call) -> Plan[Held | bool | None]:
        key = c.idem_key or ""
        rkey = gov.idempotency_record_key(key)
        gc_s = gov.idempotency_ttl_s + 3600
        c.reconcile_key = key
        ahead, c.claimed = c.claimed, None  # made with the session record's read
        owner = ahead.claim["owner"] if ahead is not None else uuid.uuid4().hex
        waited, poll = 0.0, _POLL_S
        for turn in range(_TURNS):
            if turn >= 3:  # the record keeps changing under us: back off
                yield Sleep(min(_POLL_S * 2 ** (turn - 3), _POLL_MAX_S))
            held = None
            if ahead is not None and turn == 0:
                if ahead.error is not None:
                    return self._store_down(gov, c, ahead.error)
                claim, now, held, record = (
                    ahead.claim,
                    ahead.claim["created"],
                    ahead.held,
                    ahead.record,
                )
                won = held is not None
            else:
                now = gov.clock()
                claim = self._claim(gov, c, owner, now)
                store = gov.store
                try:
                    results = yield _batch(store, claim_ops(store, rkey, claim, gc_s))
                except Exception as exc:
                    return self._store_down(gov, c, exc)
                won, record = claim_results(store, results)
            if won:
                if held is None:
                    held = Held(gov.store, rkey, claim, gc_s)
                    self.keeper.hold(held)
                before = self.used.get(rkey)
                if before is not None and before is not held and now < _until(before):
                    # this process claimed or saw this key before, and its record is gone:
                    # the store lost it
                    return (yield from self._restore(gov, c, held, before))
                self.used.put(rkey, held)
                return held
            if record is None:
                continue  # released or collected in between: claim again
            problem = malformed(record)
            if problem is not None:
                return self._store_down(
                    gov, c, StoreError(f"malformed idempotency record for key {key}: {problem}")
                )
            state = record["state"]
            if state != "in_progress" and now >= record["expires"]:
                # an expired record is as good as absent: take it over atomically
                taken = yield from _swap(gov, rkey, record, claim, lease=True)
                if taken:
                    return self._took(gov, rkey, claim, gc_s)
                continue
            if record["args"] != c.args_digest or record["tool"] != c.spec.name:
                raise KeyReuseError(key, str(record["tool"]))
            if state == "completed":
                self.used.put(rkey, record["expires"])
                if record.get("unrecordable"):
                    _unrecorded(c, key, str(record["unrecordable"]))
                else:
                    self._replay(c, ("stored", decode_result(record.get("result"))), None)
                return None
            if state == "failed_final":
                c.status, c.idem_state = ERROR, "failed_final"
                c.error = record.get("error")
                return None
            if state == "unknown":
                if self._running_here(rkey):  # it may still act: nothing to reconcile yet
                    self._still_unknown(c, _RUNNING_HERE)
                    return None
                verdict, result = yield from self._reconcile(gov, c, key, record)
                if verdict == "found":
                    done = self._done(gov, record, result[1], "reconciled")
                    if (yield from _swap(gov, rkey, record, done)):
                        self.used.put(rkey, done["expires"])
                        self._replay(c, result, "late" if result[0] == "late" else "reconciled")
                        return None
                    continue
                if verdict == "absent":
                    if (yield from _swap(gov, rkey, record, claim, lease=True)):
                        return self._took(gov, rkey, claim, gc_s)
                    continue
                return None
            # in progress: its owner is alive while its lease is in the store
            mine = self.keeper.get(rkey)
            if mine is not None and mine.owner == record["owner"]:
                if mine.late is not None:  # our own attempt, abandoned after a timeout
                    if (yield Blocking(self.keeper.settle, (mine,), gov.store.blocking)):
                        continue  # it has just ended: its outcome is recorded now
                    self._still_unknown(c, "the abandoned attempt is still running")
                    return None
            else:
                try:
                    lease = yield Blocking(
                        gov.store.get, (lease_key(rkey, record["owner"]),), gov.store.blocking
                    )
                except Exception as exc:
                    return self._store_down(gov, c, exc)
                if lease is None:
                    # the store let its owner's lease lapse (the owner died, or could not
                    # reach the store for a whole lease): the write may have happened
                    unknown = {**record, "state": "unknown", "owner": None, "unknown_at": now}
                    unknown["expires"] = now + gov.idempotency_ttl_s
                    yield from _swap(gov, rkey, record, unknown)
                    c.flag("lease_expired")
                    continue
            if waited >= gov.in_progress_wait_s:
                c.status, c.idem_state = ERROR, "in_progress"
                c.error = error_info(
                    "in_progress",
                    f"this operation (key {key}) is being performed by another caller",
                    retryable=True,
                    hint="Wait for it, then call again with the same key to get its result.",
                    retry_after=round(min(max(poll, min(float(record["lease_s"]), 1.0)), 60.0), 3),
                )
                return None
            step = min(poll, max(gov.in_progress_wait_s - waited, 0.001))
            yield Sleep(step)
            waited, poll = waited + step, min(poll * 2, _POLL_MAX_S)
        c.status, c.idem_state = ERROR, "in_progress"
        c.error = error_info(
            "in_progress",
            f"the record of key {key} kept changing; nothing was done",
            retryable=True,
            hint="Call again with the same key shortly.",
            retry_after=_POLL_MAX_S,
        )
        return None

    def _running_here(self, rkey: str) -> bool:
        """Whether an attempt of this process on this key has not ended."""
        used = self.used.get(rkey)
        return isinstance(used, Held) and used.running

    def _took(self, gov: Context, rkey: str, claim: dict[str, Any], gc_s: float) -> Held:
        """A record taken over by a compare-and-set (expired, or UNKNOWN confirmed absent):
        ours now, held while the attempt runs."""
        held = Held(gov.store, rkey, claim, gc_s)
        self.keeper.hold(held)
        self.used.put(rkey, held)
        return held

    def _claim(self, gov: Context, c: Call, owner: str, now: float) -> dict[str, Any]:
        return {
            "state": "in_progress",
            "tool": c.spec.name,
            "args": c.args_digest,
            "owner": owner,
            "beat": 0,
            "lease_s": float(gov.lease_s or DEFAULT_LEASE_S),
            "created": now,
            "expires": now + gov.idempotency_ttl_s,
        }

    def _done(self, gov: Context, base: dict[str, Any], value: Any, how: str) -> dict[str, Any]:
        result, why = encode_result(value)
        done = {**base, "state": "completed", "result": result, "owner": None, "by": how}
        done["done_at"] = now = gov.clock()
        done["expires"] = now + gov.idempotency_ttl_s
        if why is not None:
            done["unrecordable"] = why
        return done

    def _replay(self, c: Call, found: tuple[str, Any], how: str | None) -> None:
        c.status, c.value, c.idem_state = REPLAYED, found[1], "completed"
        c.text = shown(found[1])  # what settling needs, even for a result with no text
        if how is not None:
            c.flag(f"reconciled_by_{how}")

    def _restore(
        self, gov: Context, c: Call, held: Held, before: Held | float
    ) -> Plan[Held | None]:
        """We hold a fresh claim on a key this process claimed or saw settled before:
        the store lost its record. Reconcile first (§5.3); run only when the remote
        confirms absence. While our earlier attempt still runs, nothing runs and the key
        is UNKNOWN: that attempt's result is found on the next use."""
        c.flag("record_lost")
        key = c.idem_key or ""
        verdict, result = "unknown", ("", None)
        if isinstance(before, Held) and before.running:
            self._still_unknown(c, _RUNNING_HERE)
        else:
            verdict, result = yield from self._reconcile(gov, c, key, held.record)
        if verdict == "absent":
            self.used.put(held.rkey, held)
            return held
        if verdict == "found":
            new: dict[str, Any] = self._done(gov, held.record, result[1], "reconciled")
        else:
            new = {**held.record, "state": "unknown", "owner": None, "unknown_at": gov.clock()}
        try:
            yield Blocking(held.swap, (new,), gov.store.blocking)
        except Exception as exc:
            c.flag(f"store_error: {describe(exc)}"[:300])
        self.keeper.drop(held)
        held.ended(None)
        if verdict == "found":
            self.used.put(held.rkey, new["expires"])
            self._replay(c, result, "late" if result[0] == "late" else "reconciled")
        return None

    # -- after the tool ran -----------------------------------------------------------

    def after(self, gov: Context, st: SessionState, c: Call, ticket: Held | bool) -> Plan[None]:
        """Record what happened to the write we ran."""
        if not isinstance(ticket, Held):
            if c.idem_key is None and c.status is UNKNOWN:
                rkey = unkeyed_key(st, c)
                c.reconcile_key = rkey
                st.unknown_writes[rkey] = gov.clock()
                if c.late is not None:
                    self.late.keep(rkey, c.late)
            return
        held, key = ticket, c.idem_key or ""
        held.ended(c.late if c.status is UNKNOWN else None)
        if c.status is EXECUTED:
            done = self._done(gov, held.record, c.value, "owner")
            if "unrecordable" in done:
                # it ran: this caller gets its result; the key replays a structured error
                # that says so (never a stand-in value), and it never runs again
                c.flag("result_not_recordable")
                c.text = shown(c.value)
            if st.shared or gov.has_session_cache():
                # the next store write of the call (the session record's swap, or the
                # cache generation's) carries it: one round trip for both
                c.rider = Completion(self, gov, c, held, done)
                return
            try:
                saved = yield Blocking(held.swap, (done,), gov.store.blocking)
            except Exception as exc:
                saved = exc
            self.recorded(gov, c, held, saved)
            return
        if c.status is UNKNOWN:
            c.idem_state = "unknown"
            late = c.late
            if late is not None and not held.lost:
                # the attempt runs on: keep the claim until it ends, then record its outcome
                self.late.keep(key, late)
                self._abandon(gov, held, late)
                return
            yield from self.interrupted(gov, c, held)
            return
        if c.status is ERROR and c.spec.failed_final and c.error and not c.error.get("retryable"):
            final = {**held.record, "state": "failed_final", "error": c.error, "owner": None}
            final["expires"] = gov.clock() + gov.idempotency_ttl_s
            yield from _held_swap(gov, c, held, final)
            self.keeper.drop(held)
            c.idem_state = "failed_final"
            return
        # the tool raised (before its side effect, by the tool's contract): release the key
        yield from _held_swap(gov, c, held, None)
        self.keeper.drop(held)
        self.used.forget(held.rkey, held)  # it may run again: nothing to reconcile
        c.idem_state = "released"

    def recorded(self, gov: Context, c: Call, held: Held, saved: bool | Exception) -> None:
        """The completion of an executed write was written (True), found the record no
        longer ours (False) or failed (the exception)."""
        if isinstance(saved, Exception):
            c.flag(f"store_error: {type(saved).__name__}: {describe(saved)}"[:300])
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
        c.status, c.idem_state, c.value = UNKNOWN, "unknown", None
        c.error = error_info(
            "result_not_recorded",
            "the operation ran but its result could not be recorded",
            retryable=False,
            hint="Do not run it again under a new key: a call with the same key returns its result.",
        )

    def claim_ahead(self, gov: Context, c: Call) -> None:
        """A keyed write about to run: its claim is sent with the session record's read."""
        if c.idem_key is not None and gov.enforce and not c.early and c.claimed is None:
            c.rider = Claim(self, gov, c)

    def unclaim(self, gov: Context, c: Call) -> Plan[None]:
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
            yield Blocking(held.swap, (None,), gov.store.blocking)
        except Exception:
            held.finish, held.late = (lambda _: None), _finished(None)  # deleted on a beat
            return
        self.keeper.drop(held)

    def interrupted(self, gov: Context, c: Call, ticket: Held | bool) -> Plan[None]:
        """The attempt may have acted and nothing runs on: the record becomes UNKNOWN."""
        if isinstance(ticket, Held):
            ticket.ended(None)
            unknown = {**ticket.record, "state": "unknown", "owner": None}
            unknown["unknown_at"] = now = gov.clock()
            unknown["expires"] = now + gov.idempotency_ttl_s
            try:
                yield from _held_swap(gov, c, ticket, unknown)
            finally:
                self.keeper.drop(ticket)
                c.idem_state = "unknown"

    def _abandon(self, gov: Context, held: Held, late: concurrent.futures.Future[Any]) -> None:
        clock, ttl = gov.clock, gov.idempotency_ttl_s

        def finish(h: Held) -> dict[str, Any]:
            assert h.late is not None
            if h.late.cancelled() or h.late.exception() is not None:
                # it failed late: whether it acted first is unknown, so it stays UNKNOWN
                final = {**h.record, "state": "unknown", "owner": None, "unknown_at": clock()}
                final["expires"] = clock() + ttl
                return final
            return self._done(gov, h.record, h.late.result(), "late")

        held.finish = finish
        held.late = late
        late.add_done_callback(lambda _: self.keeper.poke())

    # -- reconciling UNKNOWN ----------------------------------------------------------

    def _reconcile(
        self, gov: Context, c: Call, key: str, record: dict[str, Any] | None = None
    ) -> Plan[tuple[str, Any]]:
        """('found', (how, result)), ('absent', None) or ('unknown', None) (then the call
        is settled as UNKNOWN: nothing runs)."""
        c.reconcile_key = key
        state, late = self.late.look(key)
        if state == "running":
            self._still_unknown(c, "the abandoned attempt is still running")
            return ("unknown", None)
        found: tuple[str, Any] | None = None
        if state == "done":
            found = ("late", late)
        elif c.spec.reconcile is not None:
            try:
                answer = yield reconcile_attempt(gov, c, c.spec.reconcile, key)
            except AttemptTimeout as exc:
                self._still_unknown(c, f"reconcile gave no answer within {exc.seconds:.3g} s")
                return ("unknown", None)
            except Exception as exc:
                failure = exc.exc if isinstance(exc, Aborted) else exc
                self._still_unknown(
                    c, f"reconcile failed: {type(failure).__name__}: {describe(failure)}"
                )
                return ("unknown", None)
            found = None if answer is None else ("reconciled", answer)
        else:
            # no reconcile: even an attempt that failed late may have acted first
            self._still_unknown(c, f"{c.spec.name} has no reconcile function")
            return ("unknown", None)
        since = (record or {}).get("unknown_at")
        if isinstance(since, int | float) and not isinstance(since, bool):
            c.reconcile_s = round(max(gov.clock() - since, 0.0), 6)
        self.late.forget(key)
        if found is None:
            c.flag("reconciled_absent")
            return ("absent", None)
        return ("found", found)

    def _still_unknown(self, c: Call, why: str) -> None:
        c.status, c.idem_state = UNKNOWN, "unknown"
        c.error = error_info(
            "unknown_outcome",
            f"the outcome of an earlier identical call is unknown ({why})",
            retryable=False,
            hint="Do not repeat this call; it may already have taken effect.",
        )

    def _store_down(self, gov: Context, c: Call, exc: Exception) -> bool | None:
        """The store cannot be reached (or holds a malformed record): keyed writes fail
        closed by default."""
        c.flag(f"store_error: {type(exc).__name__}: {describe(exc)}"[:300])
        if gov.store_failure == "open":
            c.flag("store_failure_open")
            return RUN
        c.status, c.idem_state = ERROR, "store_unavailable"
        c.error = error_info(
            "store_unavailable",
            f"the idempotency store failed ({describe(exc)}); the write was not performed",
            retryable=True,
            hint="Try again shortly with the same key; nothing was done.",
        )
        return None

    # -- shadow mode ------------------------------------------------------------------

    def shadow(self, gov: Context, c: Call) -> Plan[None]:
        """Shadow mode runs the write as if headway were absent; note what it would do."""
        if c.idem_key is None:
            return
        try:
            record = yield Blocking(
                gov.store.get, (gov.idempotency_record_key(c.idem_key),), gov.store.blocking
            )
        except Exception as exc:
            c.flag(f"store_error: {type(exc).__name__}: {describe(exc)}"[:300])
            return
        if record is None or malformed(record) is not None:
            return
        if record["args"] != c.args_digest or record["tool"] != c.spec.name:
            c.would = "key_reuse"
        else:
            c.would = {"completed": "replay", "unknown": "reconcile"}.get(
                record["state"], record["state"]
            )

    def shadow_record(self, gov: Context, c: Call) -> Plan[None]:
        """Keep the result of a keyed write run in shadow mode, so that a later identical
        call shows it would have been replayed."""
        if c.idem_key is None or c.status is not EXECUTED:
            return
        now = gov.clock()
        base = self._claim(gov, c, "shadow", now)
        try:
            yield Blocking(
                gov.store.add,
                (
                    gov.idempotency_record_key(c.idem_key),
                    self._done(gov, base, c.value, "shadow"),
                    gov.idempotency_ttl_s + 3600,
                ),
                gov.store.blocking,
            )
        except Exception as exc:
            c.flag(f"store_error: {type(exc).__name__}: {describe(exc)}"[:300])


def _unrecorded(c: Call, key: str, why: str) -> None:
    """A completed key whose result could not be recorded: the write happened, and its
    result cannot be replayed."""
    c.status, c.idem_state = ERROR, "completed"
    c.flag("result_not_recordable")
    c.error = error_info(
        "unrecordable_result",
        f"{c.spec.name} already ran with key {key} (it was not run again), but its result "
        f"could not be recorded, so it cannot be shown: {why[:300]}",
        retryable=False,
        hint="Do not repeat it: it took effect. Check its effect with a read if you need "
        "the result.",
    )


def unkeyed_key(st: SessionState, c: Call) -> str:
    """The session's name for a write by its tool and arguments (the UNKNOWN rule, §5.4)."""
    return f"unkeyed:{st.session_id}:{c.spec.name}:{c.args_digest[:32]}"


def _until(used: Held | float) -> float:
    """Until when a key this process used is known to the store (its record's expiry)."""
    return float(used.record["expires"]) if isinstance(used, Held) else used


def _finished(value: Any) -> concurrent.futures.Future[Any]:
    fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
    fut.set_result(value)
    return fut


def _swap(
    gov: Context,
    rkey: str,
    expected: dict[str, Any],
    new: dict[str, Any] | None,
    lease: bool = False,
) -> Plan[bool]:
    """Compare-and-set of a record we do not hold; ``lease``: ``new`` is our claim, its
    lease written with it."""
    store, gc_s = gov.store, gov.idempotency_ttl_s + 3600
    if not lease or new is None:
        try:
            won = yield Blocking(store.swap, (rkey, expected, new, gc_s), store.blocking)
        except StoreError:
            return False
        return bool(won)
    try:
        results = yield _batch(store, leased(store, Op("swap", rkey, new, expected, gc_s), new))
    except StoreError:
        return False
    return results[won_at(store)] is True


def _batch(store: Any, ops: list[Op]) -> Blocking:
    """``batch(store, ops)`` as an effect: the store's own method when it has one (SQLite
    runs it on an event loop's thread when it can, ``_effects``)."""
    native = getattr(store, "batch", None)
    if native is not None:
        return Blocking(native, (ops,), store.blocking)
    return Blocking(batch, (store, ops), store.blocking)


def _held_swap(gov: Context, c: Call, held: Held, new: dict[str, Any] | None) -> Plan[bool]:
    try:
        return bool((yield Blocking(held.swap, (new,), gov.store.blocking)))
    except Exception as exc:
        c.flag(f"store_error: {type(exc).__name__}: {describe(exc)}"[:300])
        return False


# -- riders: a keyed write's operations sent with the call's next one -------------------


class Claim:
    """The claim of a keyed write, sent with the session record's read or swap before the
    write is decided (``_keyed`` then starts from its result)."""

    required = False  # never sent (the session stopped first): nothing was claimed

    def __init__(self, writes: Writes, gov: Context, c: Call) -> None:
        self.writes, self.c = writes, c
        # an event loop sends it on its own thread when the store can (SQLite's ``inline``:
        # a batch it cannot make at once does nothing and goes to a thread, _effects._blocking)
        self.inline: Callable[..., Any] | None = getattr(gov.store, "inline", None)
        self.rkey = gov.idempotency_record_key(c.idem_key or "")
        self.gc_s = gov.idempotency_ttl_s + 3600
        self.claim = writes._claim(gov, c, uuid.uuid4().hex, gov.clock())
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
            self.writes.keeper.hold(self.held)
        self._sent = True

    def done(self, error: Exception | None) -> None:
        # an error after the claim was made is the session operation's, not the claim's
        self.error = None if self._sent else error
        self.c.claimed = self


class Completion:
    """The completion of an executed keyed write, sent with the session record's swap
    (which is performed only if the completion was) or the cache generation's write."""

    required = True  # the tool ran: its result is recorded whatever happens to the call

    def __init__(self, writes: Writes, gov: Context, c: Call, held: Held, done: Any) -> None:
        self.writes, self.gov, self.c, self.held, self.new = writes, gov, c, held, done
        self.inline: Callable[..., Any] | None = getattr(gov.store, "inline", None)  # as Claim
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
        self.writes.recorded(self.gov, self.c, self.held, saved)


def with_rider(gov: Context, c: Call, ops: list[Op], chained: bool = False) -> Plan[list[Any]]:
    """``ops`` in one round trip with the call's rider (``chained``: the first of them only
    if a required rider succeeded); their results. A store error propagates, once the
    rider has acted on it."""
    rider, c.rider = c.rider, None
    if chained and rider.required and ops:
        ops = [ops[0]._replace(only_if=True), *ops[1:]]
    try:
        results = yield Blocking(rider.send, (gov.store, ops), gov.store.blocking)
    except Exception as exc:
        rider.done(exc)
        raise
    rider.done(None)
    return results  # type: ignore[no-any-return]


def flush(gov: Context, c: Call) -> Plan[None]:
    """Send a required rider that nothing carried (the call ended another way); drop a
    claim never sent."""
    if c.rider is None:
        return
    if not c.rider.required:
        c.rider = None
        return
    try:
        yield from with_rider(gov, c, [])
    except Exception:
        return  # the rider has acted on it (an unrecorded result: UNKNOWN)
