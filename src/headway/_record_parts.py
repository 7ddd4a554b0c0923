"""A session record kept as a small head and immutable parts: what a step writes.

The detector windows are most of a session record (their steps, and the recurrence's
entries, a few hundred bytes each) and change by a step at a time: the oldest leaves,
the newest comes. So the record's head holds everything else, and each of these lists
as the parts that hold its items::

    head["P"] = {"id": run token, "v": [[version, count], ...], "k": [[agent, field, skip], ...],
                 "h": the parts' chain}
    part "{session key}:{id}:{version}" = {"t": time, "r": [[agent, field], ...],
                                           "i": [[agent, field, [item, ...]], ...]}

``v`` names the parts by the versions that wrote them, as runs of consecutive versions.
A list (``field`` "w" or "rc" of the session's monitor, agent None, or of an agent's) is
the items of the parts in ``v``, from the last one that resets it (``r``), without its
first ``skip``. A write adds at most one part, written by the version it makes, holding
the items new since the head it replaces, and drops the parts whose items have all left
(deleted in the same round trip). Parts never change, so a worker reads only the parts
it lacks: none when it wrote the head itself. The head keeps these lists empty, where an
earlier version of headway reads them (a worker of that version sees empty windows).

A part's name is unique while the store keeps what it acknowledged. A store that loses
recent writes (a restart from a snapshot, a failover) lets another worker write the same
version again, with other steps, under the same name. So the head holds a digest of its
parts' contents, in order (``h``, 48 bits: the chance that a part written again looks
unchanged): a worker whose held parts do not make it reads them from the store, and parts
read from the store that do not make it are left out like parts gone.

A part lives twice the session's TTL and a head references only parts written in the
last half of it: a part outlives every head that names it. A head that would name a part
older than that, or more parts than twice its longest list has items (at least
``_MAX_PARTS``: agents' steps far apart), is written again in one part.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import orjson

_FIELDS = ("w", "rc")
_MAX_PARTS = 64  # at least; twice the longest list's items past that
_NAMED_AT_MOST = 100_000  # a head naming more is not one headway wrote

ListPath = tuple[str | None, str]  # (agent, field)


class Part(NamedTuple):
    """A part as held in memory: its time, the lists it resets, its items as JSON texts,
    and a digest of these (``make_part``)."""

    t: float
    resets: frozenset[ListPath]
    items: dict[ListPath, list[str]]
    digest: bytes


def make_part(t: float, resets: frozenset[ListPath], items: dict[ListPath, list[str]]) -> Part:
    """A part, its digest taken over what a reader of its stored value gets again (its time
    as a float: a clock may give whole seconds, which JSON keeps as an integer)."""
    t = float(t)
    text = orjson.dumps(
        [
            t,
            sorted([a or "", a is None, f] for a, f in resets),  # a set: in no fixed order
            [[a, f, orjson.Fragment("[" + ",".join(xs) + "]")] for (a, f), xs in items.items()],
        ]
    )
    return Part(t, resets, items, hashlib.blake2b(text, digest_size=8).digest())


def chain(parts: Iterable[Part]) -> str:
    """The digest of these parts' contents in this order (a head's ``h``)."""
    return hashlib.blake2b(b"".join([p.digest for p in parts]), digest_size=6).hexdigest()


class Written(NamedTuple):
    """A record write: the head's text, the part to write (its key and value), if any, and
    the keys of the parts it no longer needs."""

    head: str
    part: tuple[str, dict[str, Any]] | None
    dropped: list[str]


def part_key(session_key: str, token: str, version: int | str) -> str:
    return f"{session_key}:{token}:{version}"


def layout(rec: Any) -> dict[str, Any] | None:
    """The head's part list (``P``), or None for a record kept whole."""
    p = rec.get("P") if isinstance(rec, dict) else None
    return p if isinstance(p, dict) else None


def versions(p: dict[str, Any]) -> list[int]:
    """The versions of a head's parts, in order (``v`` holds them as runs)."""
    if sum(count for _, count in p["v"]) > _NAMED_AT_MOST:
        raise ValueError("a session record's head names more parts than it may")
    return [v for start, count in p["v"] for v in range(start, start + count)]


def _runs(vs: list[int]) -> list[list[int]]:
    """``vs`` as runs of consecutive versions, [first, count] each."""
    if vs and vs == list(range(vs[0], vs[0] + len(vs))):  # most often one run (in C)
        return [[vs[0], len(vs)]]
    runs: list[list[int]] = []
    for v in vs:
        if runs and runs[-1][0] + runs[-1][1] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    return runs


def needed(rec: Any) -> list[str]:
    """The names (token:version) of the parts a head references."""
    p = layout(rec)
    return [] if p is None else names_in(p)


def names_in(p: dict[str, Any]) -> list[str]:
    """The names (token:version) of the parts a head's part list ``p`` references."""
    return [f"{p['id']}:{v}" for v in versions(p)]


def _monitors(rec: dict[str, Any]) -> Iterator[tuple[str | None, dict[str, Any]]]:
    yield None, rec["mon"]
    yield from rec["agents"].items()


def parse_part(stored: Any) -> Part | None:
    """A part as read from the store (a JSON object; a JSON text from an earlier version),
    or None when it is not one."""
    try:
        data = orjson.loads(stored) if isinstance(stored, str) else stored
        return make_part(
            float(data["t"]),
            frozenset((a, f) for a, f in data["r"]),
            {(a, f): [orjson.dumps(x).decode() for x in xs] for a, f, xs in data["i"]},
        )
    except (KeyError, TypeError, ValueError, OverflowError, orjson.JSONEncodeError):
        return None


def part_value(part: Part) -> dict[str, Any]:
    """A part as the store keeps it: a JSON object, not a JSON text in a string, whose
    quotes a store would escape again (about 15% more bytes to send)."""
    items = [[a, f, orjson.Fragment("[" + ",".join(xs) + "]")] for (a, f), xs in part.items.items()]
    value: dict[str, Any] = orjson.loads(
        orjson.dumps({"t": part.t, "r": [list(p) for p in part.resets], "i": items})
    )
    return value


def lists_of(p: dict[str, Any], parts: dict[str, Part]) -> dict[ListPath, list[str]] | None:
    """The lists a head's parts make (None: a part is not held here, or those held are not
    the head's)."""
    token = p["id"]
    held = [parts.get(f"{token}:{v}") for v in versions(p)]
    if any(part is None for part in held) or not mine(p, held):  # type: ignore[arg-type]
        return None
    out: dict[ListPath, list[str]] = {}
    for agent, field, skip in p["k"]:
        path = (agent, field)
        items: list[str] = []
        for part in held:
            assert part is not None
            if path in part.resets:
                items = []
            items += part.items.get(path, ())
        out[path] = items[skip:]
    return out


def mine(p: dict[str, Any], held: list[Part]) -> bool:
    """Whether these parts are the ones the head whose part list is ``p`` names (a head
    written by an earlier version holds no chain: yes)."""
    return "h" not in p or p["h"] == chain(held)


def not_its(p: dict[str, Any], parts: dict[str, Part]) -> bool:
    """Whether ``parts`` holds every part the head whose part list is ``p`` names, and
    they are not the ones it names (a store that lost writes had the names written
    again)."""
    held = [parts.get(n) for n in names_in(p)]
    return all(q is not None for q in held) and not mine(p, held)  # type: ignore[arg-type]


def join(rec: dict[str, Any], parts: dict[str, Part]) -> bool:
    """Put a head's lists back in its snapshots from ``parts``; False when a part is not
    held (the lists it would give are left empty)."""
    p = layout(rec)
    if p is None:
        return True
    lists = lists_of(p, parts)
    if lists is None:
        return False
    for agent, snap in _monitors(rec):
        for field in _FIELDS:
            snap[field] = [orjson.loads(x) for x in lists.get((agent, field), ())]
    return True


def _dropped_front(old: list[str], new: list[str]) -> int | None:
    """How many items left the front of ``old`` for ``new`` to continue it (new = old[d:] +
    more), or None when it does not."""
    if not old:
        return 0
    if not new:
        return len(old)
    try:
        d = old.index(new[0])
    except ValueError:
        return len(old)  # all left: ``new`` holds only new items
    keep = len(old) - d
    return d if new[:keep] == old[d:] else None


class Layout(NamedTuple):
    """A head's parts, decoded: its token, its parts' versions, each list's skip, and the
    lists they make (JSON texts)."""

    token: str
    versions: list[int]
    skips: dict[ListPath, int]
    lists: dict[ListPath, list[str]]
    held: list[Part]  # the parts, in the order of ``versions``

    def names(self) -> list[str]:
        return [f"{self.token}:{v}" for v in self.versions]


def layout_of(rec: Any, parts: dict[str, Part]) -> Layout | None:
    """A head's layout (None: a record kept whole or unreadable, or a part not held)."""
    try:
        p = layout(rec)
        lists = None if p is None else lists_of(p, parts)
        if p is None or lists is None:
            return None
        vs = versions(p)
        held = [parts[f"{p['id']}:{v}"] for v in vs]
        return Layout(p["id"], vs, {(a, f): s for a, f, s in p["k"]}, lists, held)
    except (KeyError, TypeError, ValueError):
        return None


def split(
    rec: dict[str, Any],
    lists: dict[ListPath, list[str]],
    old: Layout | None,
    parts: dict[str, Part],
    version: int,
    now: float,
    ttl_s: float,
) -> tuple[dict[str, Any], Part | None, list[int], Layout]:
    """The head replacing the one ``old`` decodes (None: a record kept whole, or to be
    written again whole), the part it adds (held in ``parts`` under its name), the
    versions of the parts it drops, and its own layout."""
    dropped: list[int] = []
    if old is not None:
        oldest = old.held[0].t if old.held else now
        most = max(_MAX_PARTS, 2 * max(map(len, lists.values()), default=0))
        if len(old.versions) >= most or oldest < now - ttl_s / 2:
            dropped = list(old.versions)  # written again whole: none is named any more
            old = Layout(old.token, [], {}, {}, [])
    token = secrets.token_hex(4) if old is None else old.token
    kept: list[int] = [] if old is None else list(old.versions)
    held: list[Part] = [] if old is None else list(old.held)
    skips = {} if old is None else dict(old.skips)
    resets: set[ListPath] = set()
    new_items: dict[ListPath, list[str]] = {}
    for path, items in lists.items():
        before = None if old is None else old.lists.get(path)
        d = None if before is None else _dropped_front(before, items)
        if d is None or before is None:
            resets.add(path)
            skips[path] = 0
            if items:
                new_items[path] = items
            continue
        skips[path] += d
        if len(items) > len(before) - d:
            new_items[path] = items[len(before) - d :]
    for path in [q for q in skips if q not in lists]:
        del skips[path]  # an agent no longer kept
    part = None
    if resets or new_items:
        part = parts[f"{token}:{version}"] = make_part(now, frozenset(resets), new_items)
        kept.append(version)
        held.append(part)
    # each list's start: the last part that resets it (the parts before give it nothing)
    starts = dict.fromkeys(skips, 0)
    for i, q in enumerate(held):
        for path in q.resets:
            if path in starts:
                starts[path] = i
    while held:  # the front part goes once all its items have left every list
        front, counts = held[0], {}
        for path, skip in skips.items():
            if starts[path] == 0:
                n = len(front.items.get(path, ()))
                if n > skip:
                    break
                counts[path] = n
        else:
            for path, n in counts.items():
                skips[path] -= n
            for path in starts:
                starts[path] = max(0, starts[path] - 1)
            held.pop(0)
            dropped.append(kept.pop(0))
            continue
        break
    head = dict(rec)
    head["P"] = {
        "id": token,
        "v": _runs(kept),
        "k": [[a, f, s] for (a, f), s in skips.items()],
        "h": chain(held),
    }
    return head, part, dropped, Layout(token, kept, skips, lists, held)


def prune(parts: dict[str, Part], *layouts: Layout | None) -> None:
    """Keep only the parts these heads reference (once a few more are held)."""
    named = [lay for lay in layouts if lay is not None]
    if len(parts) <= sum(len(lay.versions) for lay in named) + 8:
        return
    keep = {name for lay in named for name in lay.names()}
    for name in [n for n in parts if n not in keep]:
        del parts[name]
