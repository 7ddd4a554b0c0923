"""The session record's text: what a session shared by workers is in the store.

``dump`` writes the state the decision core reads (steps, budgets consumed, the stop, the
cache epochs, the detector windows as bounded excerpts and digests, the unknown writes) as
one JSON text (on a store with its own ``batch``, a head and parts: ``_record_parts``);
``load`` makes the local state a record's. How and when the record is read and swapped is
``_shared``'s.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson

from . import _record_parts
from ._call import describe
from ._epochs import trip
from ._record_parts import Written, parse_part
from ._redact import scrub
from .budgets import Meter
from .errors import BudgetExceeded, LoopDetected, Stop
from .stores._base import SAME, Op

if TYPE_CHECKING:
    from ._context import Context
    from ._effects import Plan
    from ._state import SessionState

log = logging.getLogger("headway")

_MAX_AGENTS = 64  # agents whose detector streams the record keeps (the most recent)
STOPS: dict[str, type[Stop]] = {"loop": LoopDetected, "budget": BudgetExceeded}


def dump(st: SessionState, now: float, parts: tuple[str, float] | None = None) -> Written:
    """The session record, bounded by the window, not by the length of the run.

    Stored as one JSON text (a string value): a swap compares the text this worker wrote
    or read, never a value encoded again, and the detector steps are encoded once each.
    ``parts`` (the record's key and TTL): kept as a head and parts (``_record_parts``),
    else whole."""
    now = round(now, 3)  # to the millisecond: a part's time, written to every worker
    m = st.meter
    stop = st.stop
    agents = list(st.agents.items())[-_MAX_AGENTS:]
    record = {
        "ver": st.version + 1,  # newer than every record seen here (``_load``)
        # no time: no worker of any version reads it (a part has its own), and it would be
        # sent at every step
        "steps": st.steps,
        "stop": None
        if stop is None
        else ["loop" if isinstance(stop, LoopDetected) else "budget", stop.diagnostic],
        "prov": st.provisional,
        "would": st.would_stop,
        # copies: the record must not change with the live state after it is written
        "meter": [m.started, m.turns, m.calls, m.tokens, m.cost, dict(m.per_tool), dict(m.retries)],
        "gen": dict(st.generation),
        "uw": dict(st.unknown_writes),
        "us": dict(st.unknown_steps),
        # kept as a head and parts: the lists left empty in the head, their items in parts
        "mon": st.monitor.snapshot(parts is None),
        "agents": {name: mon.snapshot(parts is None) for name, mon in agents},
    }
    if parts is None:
        return Written(orjson.dumps(record).decode(), None, [])
    # the steps and recurrence entries, each encoded once (and kept)
    lists: dict[_record_parts.ListPath, list[str]] = {}
    for name, mon in [(None, st.monitor), *agents]:
        lists[name, "w"], lists[name, "rc"] = mon.texts()
    key, ttl = parts
    held = st.layout  # the head this worker wrote last, decoded: most often the one replaced
    gone: list[str] = []
    if held is not None and held[0] is st.remote:
        old = held[1]
    else:
        prev = _parsed(st.remote)
        old = _record_parts.layout_of(prev, st.parts)
        if old is None:  # kept whole, or a part not held: written again whole
            try:
                gone = _record_parts.needed(prev)
            except (KeyError, TypeError, ValueError):
                gone = []
    version = st.version + 1
    head, part, dropped, new = _record_parts.split(record, lists, old, st.parts, version, now, ttl)
    text = orjson.dumps(head).decode()
    st.layout = (text, new)
    _record_parts.prune(st.parts, old, new)
    pk = _record_parts.part_key
    return Written(
        text,
        None if part is None else (pk(key, new.token, version), _record_parts.part_value(part)),
        [f"{key}:{n}" for n in gone] + [pk(key, new.token, v) for v in dropped],
    )


def _parsed(text: Any) -> Any:
    try:
        return orjson.loads(text) if isinstance(text, str) else None
    except orjson.JSONDecodeError:
        return None


def held(st: SessionState, rec: Any, trust: bool = True) -> tuple[dict[str, Any], list[str]]:
    """The parts a record read from the store names that this worker holds (copied: a
    write of another thread may forget them before the record is loaded), and the names
    of those it does not: all of them when those held are not the record's (a store that
    lost writes had the same names written again) or not to be trusted."""
    if not isinstance(rec, str) or '"P":' not in rec:
        return {}, []
    try:
        p = _record_parts.layout(_parsed(rec))
        names = [] if p is None else _record_parts.names_in(p)
    except (KeyError, TypeError, ValueError):
        return {}, []  # unreadable: ``load`` says so
    found = {n: q for n in names if (q := st.parts.get(n)) is not None} if trust else {}
    if p is not None and _record_parts.not_its(p, found):
        found = {}
    return found, [n for n in names if n not in found]


def load(
    st: SessionState, rec: Any, now: float, floor: int | None = None, parts: Any = None
) -> None:
    """Make the local state the record's (None: a run seen for the first time, or expired).
    A record this version cannot read starts the run afresh; the next swap replaces it.

    A record older than one seen here is refused: a rollback when it is older than
    ``floor`` too (the newest version seen before it was read; None: all seen so far),
    else a read that crossed a newer write of this process (ignored)."""
    try:
        if rec is not None and not isinstance(rec, str):
            raise TypeError(f"a session record is a JSON text, not {type(rec).__name__}")
        if parts:
            st.parts.update(parts)
        _load(st, rec, now, st.version if floor is None else floor, parts)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        log.warning("unreadable session record (%s): %s", st.session_id, scrub(describe(exc)))
        _load(st, None, now, st.version)
        st.remote = rec


def _load(st: SessionState, text: str | None, now: float, floor: int, parts: Any = None) -> None:
    rec: Any = None if text is None else orjson.loads(text)
    if rec is not None:
        # a part not read (gone: ``read_parts`` says so): its steps left out
        held = parts or st.parts
        p = _record_parts.layout(rec)
        if not _record_parts.join(rec, held) and p is not None and _record_parts.not_its(p, held):
            log.warning(
                "session record (%s): its detector steps in the store are not the ones its "
                "head names (a store that lost writes had them written again); the detectors "
                "go on without them",
                st.session_id,
            )
        version = rec.get("ver", 0)  # absent from records of older versions
        if type(version) is not int:
            raise TypeError("a session record's version is an integer")
        if floor <= version < st.version:
            return  # read before a newer write of this process landed: nothing to learn
        if version < st.version:  # an older copy restored: the next swap replaces it
            st.remote = text
            # parts held here may share names with the restored run's: read them again
            st.parts.clear()
            st.parts.update(parts or {})
            log.warning(
                "session record rolled back (%s): version %d, older than version %d seen "
                "here; this worker's state is kept",
                st.session_id,
                version,
                st.version,
            )
            return
        st.version = version
    st.remote = text
    unsynced = st.meter.unsynced
    if text is None:
        st.steps, st.stop, st.provisional, st.would_stop = 0, None, None, None
        st.meter = Meter(st.meter.budgets, now)
        st.meter.unsynced = unsynced
        st.generation.clear()
        # an epoch no earlier entry can have: a run that starts again never reads a stale cache
        st.generation["*"] = int(now * 1000)
        st.unknown_writes.clear()
        st.unknown_steps.clear()
        if st.make_monitor is not None:
            st.monitor = st.make_monitor()
        st.agents.clear()
        st.epoch += 1
        return
    st.steps = rec["steps"]
    stop = rec["stop"]
    st.stop = None if stop is None else STOPS[stop[0]](stop[1])
    st.provisional, st.would_stop = rec["prov"], rec["would"]
    started, turns, calls, tokens, cost, per_tool, retries = rec["meter"]
    m = st.meter = Meter(st.meter.budgets, started)
    m.turns, m.calls, m.tokens, m.cost, m.per_tool = turns, calls, tokens, cost, dict(per_tool)
    m.retries, m.unsynced = dict(retries), unsynced
    for tool, n in unsynced.items():  # retries counted here that no swap carried yet
        m.retries[tool] = m.retries.get(tool, 0) + n
    st.generation.clear()
    st.generation.update(rec["gen"])
    st.epoch += 1  # cache-key prefixes remembered from the older epochs are stale
    st.unknown_writes.clear()
    st.unknown_writes.update(rec["uw"])
    st.unknown_steps.clear()
    st.unknown_steps.update(rec.get("us", {}))  # absent from records of older versions
    st.monitor.restore(rec["mon"])
    st.agents.clear()
    for name, snap in rec["agents"].items():
        st.monitor_of(name).restore(snap)


def _not_its(rec: str, found: dict[str, Any]) -> bool:
    """Whether ``found`` holds every part the record ``rec`` names, and they are not its."""
    p = _record_parts.layout(_parsed(rec))
    return p is not None and _record_parts.not_its(p, found)


def part_ops(w: Written, ttl: float, durable: bool) -> list[Op]:
    """A record write's part and dropped parts, each performed only if the one before it
    was (the first: if the record's swap was). A part lives twice the record's TTL."""
    ops = [] if w.part is None else [Op("set", w.part[0], w.part[1], ttl_s=2 * ttl, only_if=True)]
    ops += [Op("delete", k, only_if=True) for k in w.dropped]
    return [op._replace(durable=durable) for op in ops]


def read_parts(ctx: Context, st: SessionState, rec: Any) -> Plan[tuple[Any, dict[str, Any]]]:
    """The record ``rec`` read from the store, and its parts: those this worker holds, and
    those it does not, read in one more round trip (none when it wrote them) with the
    record again: when another worker's write moved it on meanwhile (and dropped parts it
    named), the newer record and its parts, up to a few times (past those, the next swap
    fails and reads it again). A part gone from an unchanged record is left out."""
    key = ctx.session_key(st.session_id)
    found: dict[str, Any] = {}
    trust = True
    for attempt in range(3):
        found, names = held(st, rec, trust)
        if not names:
            break
        ops = [Op("get", f"{key}:{n}") for n in names]
        *texts, now = yield trip(ctx.store, [*ops, Op("get", key, expected=rec)])
        for name, text in zip(names, texts, strict=True):
            if (part := parse_part(text)) is not None:
                found[name] = part
        if now is SAME and trust and len(found) > len(names) and _not_its(rec, found):
            trust = False  # some held parts are not the record's: read them all again
            continue
        if now is SAME and any(n not in found for n in names):
            log.warning(
                "session record (%s): some detector steps are no longer in the store; "
                "the detectors go on without them",
                st.session_id,
            )
        if now is SAME or now is None or attempt == 2:
            break  # past the last try: the record whose parts were read (no longer stored)
        rec = now
    return rec, found
