"""Writes (semantics §5): exactly once per idempotency key; UNKNOWN reconciled first.

A keyed write's record lives in the store under ``{ns}:idem:{key}``::

    IN_PROGRESS(owner, lease) -> COMPLETED(result)        the tool returned
                              -> released (deleted)        the tool raised: it may run again
                              -> FAILED_FINAL(error)       opt-in: a final business error
                              -> UNKNOWN                   timeout, interrupt, lost lease,
                                                           result not stored
    UNKNOWN -> reconcile(key, args) on next use: found -> COMPLETED (REPLAYED),
               None -> one new execution, raises or missing -> stays UNKNOWN

The claim is ``store.add`` (atomic in every store); every later transition is a
``store.swap`` against the exact record read, so only one owner ever wins. Expiry (24 h by
default) is decided here with the governor's clock; the store's TTL only collects garbage.

An unkeyed write runs every time, except right after an identical write of the session
ended UNKNOWN (§5.4): then it is a retry of that write and is reconciled the same way.
"""

from __future__ import annotations

import concurrent.futures
import threading
import uuid
from typing import TYPE_CHECKING, Any

from ._canonical import digest
from ._effects import Blocking, Plan, Sleep
from .errors import KeyReuseError, StoreError
from .outcome import ERROR, EXECUTED, REPLAYED, UNKNOWN, error_info

if TYPE_CHECKING:
    from ._call import Call
    from ._session import Governor
    from ._state import SessionState

_POLL_S = 0.02  # how often a duplicate checks on an in-flight write


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
    """The write path of the pipeline (keyed and unkeyed)."""

    def __init__(self) -> None:
        self.late = LateResults()

    def run(self, gov: Governor, st: SessionState, c: Call) -> Plan[None]:
        if c.idem_key is not None:
            yield from self._keyed(gov, st, c)
        else:
            yield from self._unkeyed(gov, st, c)

    # -- unkeyed: the UNKNOWN rule (§5.4) ---------------------------------------------

    def _unkeyed(self, gov: Governor, st: SessionState, c: Call) -> Plan[None]:
        from ._pipeline import execute_write

        rkey = f"unkeyed:{st.session_id}:{c.spec.name}:{c.args_digest[:32]}"
        if rkey in st.unknown_writes:
            verdict = yield from self._reconcile(gov, c, rkey)
            if verdict != "absent":
                if verdict == "found":
                    st.unknown_writes.pop(rkey, None)
                return
            st.unknown_writes.pop(rkey, None)
        yield from execute_write(gov, st, c)
        if c.status is UNKNOWN:
            c.reconcile_key = rkey
            st.unknown_writes[rkey] = gov.clock()
            self._keep_late(c, rkey)

    # -- keyed: exactly once per key (§5.2, §5.3) -------------------------------------

    def _keyed(self, gov: Governor, st: SessionState, c: Call) -> Plan[None]:
        from ._pipeline import execute_write

        key = c.idem_key or ""
        rkey = gov.idempotency_record_key(key)
        c.reconcile_key = key
        owner = uuid.uuid4().hex
        waited = 0.0
        for _ in range(1000):
            now = gov.clock()
            claim = self._claim(gov, c, owner, now)
            try:
                won = yield Blocking(gov.store.add, (rkey, claim, gov.idempotency_ttl_s + 3600))
                record = None if won else (yield Blocking(gov.store.get, (rkey,)))
            except Exception as exc:
                yield from self._store_down(gov, st, c, exc)
                return
            if won:
                break
            if record is None:
                continue  # released or collected in between: claim again
            if now >= record.get("expires", now + 1):
                # an expired record is as good as absent: take it over atomically
                taken = yield from _swap(gov, rkey, record, claim)
                if taken:
                    break
                continue
            if record.get("args") != c.args_digest or record.get("tool") != c.spec.name:
                raise KeyReuseError(key, str(record.get("tool")))
            state = record.get("state")
            if state == "completed":
                c.status, c.value, c.idem_state = REPLAYED, record.get("result"), "completed"
                return
            if state == "failed_final":
                c.status, c.idem_state = ERROR, "failed_final"
                c.error = record.get("error")
                return
            if state == "in_progress":
                if now < record.get("lease", 0):
                    if waited >= gov.in_progress_wait_s:
                        c.status, c.idem_state = ERROR, "in_progress"
                        retry_after = max(record["lease"] - now, _POLL_S)
                        c.error = error_info(
                            "in_progress",
                            f"this operation (key {key}) is being performed by another caller",
                            retryable=True,
                            hint="Wait for it, then call again with the same key to get its result.",
                            retry_after=round(min(retry_after, 60.0), 3),
                        )
                        return
                    yield Sleep(_POLL_S)
                    waited += _POLL_S
                    continue
                # its owner died or hung past the lease: the write may have happened
                unknown = {**record, "state": "unknown", "unknown_at": now, "owner": None}
                yield from _swap(gov, rkey, record, unknown)
                continue
            if state == "unknown":
                verdict = yield from self._reconcile(gov, c, key, rkey, record)
                if verdict == "absent":
                    taken = yield from _swap(gov, rkey, record, claim)
                    if taken:
                        break
                    continue
                if verdict == "raced":
                    continue
                return
            continue  # a state we do not know (newer version): look again
        else:
            c.status = ERROR
            c.error = error_info("in_progress", "could not claim the key", retryable=True, hint="")
            return
        # we own the key: run the tool once
        c.idem_state = "in_progress"
        try:
            yield from execute_write(gov, st, c)
        except BaseException:
            # interrupted while the tool may have acted: UNKNOWN, never deleted
            try:
                unknown = {**claim, "state": "unknown", "unknown_at": gov.clock(), "owner": None}
                yield from _swap(gov, rkey, claim, unknown)
            finally:
                c.idem_state = "unknown"
            raise
        yield from self._settle_claim(gov, c, rkey, claim)

    def _claim(self, gov: Governor, c: Call, owner: str, now: float) -> dict[str, Any]:
        # long enough for every attempt of the call; past it, the owner is presumed dead
        lease = gov.lease_s or (c.spec.timeout or 60.0) * 3 + 5.0
        return {
            "state": "in_progress",
            "tool": c.spec.name,
            "args": c.args_digest,
            "owner": owner,
            "lease": now + lease,
            "created": now,
            "expires": now + gov.idempotency_ttl_s,
        }

    def _settle_claim(self, gov: Governor, c: Call, rkey: str, claim: dict[str, Any]) -> Plan[None]:
        """Record what happened to the write we ran."""
        from ._pipeline import flag_store_error

        key = c.idem_key or ""
        now = gov.clock()
        if c.status is EXECUTED:
            done = {**claim, "state": "completed", "result": c.value, "owner": None, "done_at": now}
            try:
                saved = yield Blocking(
                    gov.store.swap, (rkey, claim, done, gov.idempotency_ttl_s + 3600)
                )
            except Exception as exc:
                saved = False
                flag_store_error(c, exc)
            if saved:
                c.idem_state = "completed"
                return
            # the tool ran but its result is not recorded: UNKNOWN, resolved from here
            self.late.keep(key, ("done", c.value))
            c.status, c.idem_state, c.value = UNKNOWN, "unknown", None
            c.error = error_info(
                "result_not_recorded",
                "the operation ran but its result could not be recorded",
                retryable=False,
                hint="Do not repeat this call; call again with the same key to get its result.",
            )
            return
        if c.status is UNKNOWN:
            unknown = {**claim, "state": "unknown", "unknown_at": now, "owner": None}
            yield from _swap(gov, rkey, claim, unknown)
            c.idem_state = "unknown"
            self._keep_late(c, key)
            return
        if c.status is ERROR and c.spec.failed_final and c.error and not c.error.get("retryable"):
            final = {**claim, "state": "failed_final", "error": c.error, "owner": None}
            yield from _swap(gov, rkey, claim, final)
            c.idem_state = "failed_final"
            return
        # the tool raised (before its side effect, by the tool's contract): release the key
        yield from _swap(gov, rkey, claim, None)
        c.idem_state = "released"

    def _keep_late(self, c: Call, key: str) -> None:
        late = getattr(c, "late", None)
        if late is not None:
            self.late.keep(key, late)

    def _reconcile(
        self,
        gov: Governor,
        c: Call,
        key: str,
        rkey: str | None = None,
        record: dict[str, Any] | None = None,
    ) -> Plan[str]:
        """Settle an UNKNOWN write. 'found' (REPLAYED), 'absent' (may run once), 'unknown'
        (stays UNKNOWN, nothing runs) or 'raced' (another caller changed the record)."""
        c.reconcile_key = key
        since = (record or {}).get("unknown_at")
        state, late = self.late.look(key)
        if state == "running":
            return self._still_unknown(c, "the abandoned attempt is still running")
        found: Any = None
        if state == "done":
            found = ("late", late)
        elif c.spec.reconcile is not None:
            try:
                answer = yield Blocking(c.spec.reconcile, (key, c.args))
            except Exception as exc:
                return self._still_unknown(c, f"reconcile failed: {type(exc).__name__}: {exc}")
            found = None if answer is None else ("reconciled", answer)
        elif state != "failed":
            return self._still_unknown(c, f"{c.spec.name} has no reconcile function")
        if found is None:
            self.late.forget(key)
            c.flag("reconciled_absent")
            return "absent"
        result = found[1]
        if rkey is not None and record is not None:
            done = {
                **record,
                "state": "completed",
                "result": result,
                "owner": None,
                "done_at": gov.clock(),
            }
            won = yield from _swap(gov, rkey, record, done)
            if not won:
                return "raced"
        self.late.forget(key)
        c.status, c.value, c.idem_state = REPLAYED, result, "completed"
        c.flag(f"reconciled_by_{found[0]}")
        if since is not None:
            c.reconcile_s = round(gov.clock() - since, 6)
        return "found"

    def _still_unknown(self, c: Call, why: str) -> str:
        c.status, c.idem_state = UNKNOWN, "unknown"
        c.error = error_info(
            "unknown_outcome",
            f"the outcome of an earlier identical call is unknown ({why})",
            retryable=False,
            hint="Do not repeat this call; it may already have taken effect.",
        )
        return "unknown"

    def _store_down(self, gov: Governor, st: SessionState, c: Call, exc: Exception) -> Plan[None]:
        """The store cannot be reached at claim time: keyed writes fail closed by default."""
        from ._pipeline import execute_write, flag_store_error

        flag_store_error(c, exc)
        if gov.store_failure == "open":
            c.flag("store_failure_open")
            yield from execute_write(gov, st, c)
            return
        c.status, c.idem_state = ERROR, "store_unavailable"
        c.error = error_info(
            "store_unavailable",
            f"the idempotency store is unreachable ({exc}); the write was not performed",
            retryable=True,
            hint="Try again shortly with the same key; nothing was done.",
        )


def _swap(
    gov: Governor, rkey: str, expected: dict[str, Any], new: dict[str, Any] | None
) -> Plan[bool]:
    try:
        won = yield Blocking(gov.store.swap, (rkey, expected, new, gov.idempotency_ttl_s + 3600))
    except StoreError:
        return False
    return bool(won)


def step_key(namespace: str, run_id: str, step_id: str) -> str:
    """The key of a workflow step: the same step keeps its key across retries (§5.1)."""
    return digest(namespace, run_id, step_id)
