"""Write epochs, published apart from the session record (semantics §1 workspaces, §6).

A shared session's record is swapped by every step of every worker; a write that had to
win that race to publish its invalidation could lose it. So the cache epochs of a shared
session (or of a ``workspace``: every governor of one store and one workspace name) live
in a record of their own, ``{ns}:wep:{session}`` (``{ns}:wep:ws:{workspace}``), which only
writes change:

    {"g": {epoch name: counter}, "p": {write token: [expiry, [epoch names]]},
     "s": [stop kind, diagnostic, record version] (a session's own record only)}

A write publishes twice, each a compare-and-set retried until it lands (only writes
contend for this record):

    before it runs:  its epoch names bumped, and marked pending ("p")
    after it ran:    bumped again, its mark removed

A read computes its cache key from "g" as it reads it, in the same round trip as its
lookup, and serves or stores an entry only while no pending write touches its epochs.
So a write whose second publication fails (a store error, a dead connection) leaves its
first one in place: no worker serves those reads until it is published (this process
retries on its next call) or its mark expires (the call's deadline, and a minute, later).
While this process owes a publication, it serves and stores none of those reads either.

A session's own epochs record also keeps its stop ("s"), with the version of the
session record that first held it: a worker that has seen nothing of the session still
raises the stop when the session record was rolled back to a copy from before it.
"""

from __future__ import annotations

import math
import random
import secrets
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ._effects import Blocking, Plan, Sleep, Wait
from ._state import Turns
from .stores._base import Op, batch, in_one_trip

if TYPE_CHECKING:
    from ._call import Call
    from ._context import Context
    from ._state import SessionState

# (kind, write token, epoch names, expiry of a start's mark | a stop's [kind, diagnostic,
# version]): a change this process owes to an epochs record
Owed = tuple[str, str, tuple[str, ...], Any]
_ROUNDS = 1_000  # compare-and-set rounds before the publication is owed (writes only contend)
_MARGIN_S = 60.0  # a pending mark outlives its write's deadline by this much


class Epochs:
    """This process's view of one epochs record: the value last read or written (the next
    swap's expected value) and the publications it owes."""

    __slots__ = ("key", "lock", "owed", "serial", "turns", "value")

    def __init__(self, key: str) -> None:
        self.key = key
        self.value: dict[str, Any] | None = None
        self.serial = 0  # bumped whenever ``value`` changes (cache-key prefixes memo)
        self.owed: list[Owed] = []  # (kind, token, names, expiry)
        self.lock = threading.Lock()
        self.turns = Turns()  # one publication in flight per process

    def generation(self) -> dict[str, int]:
        value = self.value
        return {} if value is None else value["g"]

    def seen(self, value: Any) -> None:
        """The record as the store just returned it."""
        if not _valid(value):
            value = None
        with self.lock:
            if value != self.value:
                self.value = value
                self.serial += 1

    def open_for(self, names: tuple[str, ...], now: float) -> bool:
        """Whether reads of these epoch names may be served or stored: nothing owed here,
        no pending write touching them in the record."""
        if self.owed or self.value is None:
            return False
        for expiry, touched in self.value["p"].values():
            if expiry > now and any(n in names for n in touched):
                return False
        return True


def _valid(value: Any) -> bool:
    return (
        type(value) is dict
        and type(value.get("g")) is dict
        and type(value.get("p")) is dict
        and all(type(v) is int for v in value["g"].values())
        and all(
            type(p) is list and len(p) == 2 and isinstance(p[0], int | float) and type(p[1]) is list
            for p in value["p"].values()
        )
        and (
            "s" not in value
            or (type(value["s"]) is list and len(value["s"]) == 3 and type(value["s"][2]) is int)
        )
    )


def key_of(ctx: Context, st: SessionState) -> str | None:
    """The epochs record of a session, or None: a session kept in this process alone, whose
    epochs are its own (``SessionState.generation``)."""
    if ctx.workspace is not None:
        return f"{ctx.namespace}:wep:ws:{{{ctx.workspace}}}"
    if st.shared:
        return f"{ctx.namespace}:wep:{{{st.session_id}}}"
    return None


def of(ctx: Context, st: SessionState, known: dict[str, Epochs]) -> Epochs | None:
    """The epochs of a session being opened; ``known``: the Governor's, by record key."""
    key = key_of(ctx, st)
    if key is None:
        return None
    if ctx.workspace is None:
        return Epochs(key)  # the session's own: kept with its state
    found = known.get(key)  # a workspace's: one for every session of the governor
    if found is None:
        found = known.setdefault(key, Epochs(key))
    return found


def read_names(tool: str, resources: tuple[str, ...] | None) -> tuple[str, ...]:
    """The epoch names a read's cache key is made of (``_pipeline._generation``)."""
    if resources is None:
        return ("any", "*", tool)
    return ("*", tool, *("r:" + r for r in resources))


def _fresh() -> dict[str, Any]:
    # an epoch no earlier entry can have: a record lost or expired never revives old entries
    return {"g": {"*": int(time.time() * 1000)}, "p": {}}


def _apply(value: dict[str, Any] | None, owed: list[Owed], now: float) -> dict[str, Any]:
    base = _fresh() if value is None else value
    gen = dict(base["g"])
    pending = {t: p for t, p in base["p"].items() if p[0] > now}  # expired marks collected
    stop = base.get("s")
    for kind, token, names, extra in owed:
        for name in names:
            gen[name] = gen.get(name, 0) + 1
        if kind == "start":
            pending[token] = [extra, list(names)]
        elif kind == "stop":
            stop = extra
        else:
            pending.pop(token, None)
    return {"g": gen, "p": pending} if stop is None else {"g": gen, "p": pending, "s": stop}


def owe_start(ctx: Context, ep: Epochs, c: Call, names: tuple[str, ...]) -> None:
    """Before a write runs: its epochs to bump and mark pending (``publish``, or riding
    with the session record's read: ``ride``)."""
    token = secrets.token_hex(6)  # 48 random bits: the writes pending at once never share one
    deadline = ctx.deadline_s if ctx.deadline_s is not None else 3600.0
    expiry = math.ceil(ctx.clock() + deadline + _MARGIN_S)  # whole seconds, rounded up
    c.epoch_token = token
    with ep.lock:
        ep.owed.append(("start", token, names, expiry))


def owe_finish(ep: Epochs, c: Call, names: tuple[str, ...]) -> None:
    """After a write ran (or may have, or was interrupted): its epochs to bump again, its
    mark to remove. Until published, none of these reads is served here."""
    with ep.lock:
        ep.owed.append(("finish", c.epoch_token or "", names, 0.0))


def owe_stop(ep: Epochs, stop: list[Any]) -> None:
    """A session's stop (``[kind, diagnostic, version of the record that holds it]``), kept
    apart from its record too."""
    with ep.lock:
        ep.owed.append(("stop", "", (), stop))


def start(ctx: Context, ep: Epochs, c: Call, names: tuple[str, ...]) -> Plan[None]:
    """``owe_start``, published now."""
    owe_start(ctx, ep, c, names)
    yield from publish(ctx, ep, c)


def finish(ctx: Context, ep: Epochs, c: Call, names: tuple[str, ...]) -> Plan[None]:
    """``owe_finish``, published now."""
    owe_finish(ep, c, names)
    yield from publish(ctx, ep, c)


class Ride(NamedTuple):
    """What is owed, as operations sent with another batch (``ride``)."""

    ep: Epochs
    owed: list[Owed]
    new: dict[str, Any]
    ops: list[Op]


def ride(ctx: Context, ep: Epochs | None) -> Ride | None:
    """What this process owes on ``ep``, as two operations to append to a batch of the
    session record (no round trip of its own): a compare-and-set of the epochs record,
    and its read back when that fails. None: nothing owed, or a publication in flight
    here. ``landed`` must follow."""
    if ep is None or not ep.owed or not ep.turns.try_enter():
        return None
    with ep.lock:
        owed, expected = list(ep.owed), ep.value
    if not owed:
        ep.turns.leave()
        return None
    new = _apply(expected, owed, ctx.clock())
    ttl = ctx.cache_gc_s
    first = (
        Op("add", ep.key, new, ttl_s=ttl)
        if expected is None
        else Op("swap", ep.key, new, expected, ttl)
    )
    return Ride(ep, owed, new, [first, Op("get", ep.key, only_if=False)])


def landed(r: Ride | None, results: Sequence[Any] | None) -> None:
    """The results of a ride's two operations (None: the batch failed: still owed)."""
    if r is None:
        return
    ep = r.ep
    try:
        if results is None:
            return
        done, current = results
        with ep.lock:
            if done is True:
                del ep.owed[: len(r.owed)]  # one publication at a time here: the first ones
                ep.value = r.new
                ep.serial += 1
                return
        ep.seen(current)
    finally:
        ep.turns.leave()


def publish(ctx: Context, ep: Epochs, c: Call | None) -> Plan[bool]:
    """Publish what this process owes on ``ep``; False (still owed) when the store failed."""
    wait = ep.turns.enter()
    if wait is not None:
        try:
            yield Wait(wait, None)
        except BaseException:
            ep.turns.give_up(wait)
            raise
    try:
        return (yield from _publish(ctx, ep, c))
    finally:
        ep.turns.leave()


def _publish(ctx: Context, ep: Epochs, c: Call | None) -> Plan[bool]:
    store, ttl = ctx.store, ctx.cache_gc_s
    unreadable = False
    for round_ in range(_ROUNDS):
        with ep.lock:
            owed = list(ep.owed)
            expected = ep.value
        if not owed:
            return True
        new = _apply(expected, owed, ctx.clock())
        try:
            if expected is None and unreadable:
                # a record there that no worker can read (tampered, or corrupt): replaced by
                # a fresh one, whose new first epoch no cache entry has
                ops = [Op("set", ep.key, new, ttl_s=ttl), Op("get", ep.key, only_if=False)]
            elif expected is None:
                ops = [Op("add", ep.key, new, ttl_s=ttl), Op("get", ep.key, only_if=False)]
            else:
                ops = [Op("swap", ep.key, new, expected, ttl), Op("get", ep.key, only_if=False)]
            done, current = yield trip(store, ops)
        except Exception as exc:  # owed: no cached read of these epochs here until published
            if c is not None:
                c.flag(f"epochs_unpublished: {type(exc).__name__}"[:300])
            return False
        with ep.lock:
            if done is True:
                del ep.owed[: len(owed)]  # one publication at a time here: still the first ones
                ep.value = new
                ep.serial += 1
                return True
        unreadable = expected is None and not _valid(current)
        ep.seen(current)
        if round_ >= 2:  # other writers: spread the retries out
            yield Sleep(random.uniform(0, 0.001 * min(round_, 20)))
    if c is not None:
        c.flag("epochs_unpublished: the epochs record kept changing")
    return False


def trip(store: Any, ops: list[Op]) -> Blocking:
    """``ops`` in one round trip: the store's own ``batch`` (an event loop may run a SQLite
    store's inline), else one by one."""
    if in_one_trip(store):
        return Blocking(store.batch, (ops,), store.blocking)
    return Blocking(batch, (store, ops), store.blocking)


def create(ctx: Context, ep: Epochs) -> Plan[None]:
    """The epochs record, absent (no write yet, or expired): made with an epoch no cache
    entry can have, unless another worker made it first."""
    new = _fresh()
    ops = [Op("add", ep.key, new, ttl_s=ctx.cache_gc_s), Op("get", ep.key, only_if=False)]
    added, current = yield trip(ctx.store, ops)
    ep.seen(new if added else current)
