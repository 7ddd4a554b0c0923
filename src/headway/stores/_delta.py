"""A swap's new value sent as edits of the value it replaces, which the store's server
holds: a completion keeps the start of the claim it replaces (its arguments' digest), a
write's cache epochs their counters.

``edits(old, new)`` is a list of runs: ``(offset, length)`` copies a run of ``old``, a
text (or bytes) is inserted as it is; ``apply(old, edits)`` is ``new`` again. They work on
characters (``str``: PostgreSQL's ``substr``) or on bytes (``bytes``: Redis's
``string.sub``). Two JSON texts with the same fields in the same order (a session
record's head: a step changes its counters, the window's last step, the parts' list here
and there) are cut where a field starts (``,"``, or ``,\\"`` in a JSON text held as a
string), the pieces compared in pairs, and only the pieces that differ sent; a long run
of them is cut again where an item starts (``,``). Otherwise, and at the finest cut, what
the two start and end with alike is copied and the rest sent: slices compared in C. A
head's edits take some 15-25 µs in Python and are half the size of its start-and-end
edits (about 0.27 KB against 0.56 KB of a 0.6 KB head). A store sends the value whole
when its edits are not shorter. Only a swap's server, having found the stored value equal
to the expected one, applies them: the value it writes is the one the caller computed.
"""

from __future__ import annotations

from itertools import accumulate, compress, count
from operator import ne
from typing import AnyStr

from ._base import shared_prefix

Edit = tuple[int, int] | str | bytes

#: a new value this long or longer may be sent as edits
LONG = 200


#: where a JSON field starts (in a JSON text, in one held as a JSON string), then where
#: an item of a list or object starts
_CUTS = (',\\"', ',"', ",")
_BYTES = {cut: cut.encode() for cut in _CUTS}
#: what lies between two pieces that changed is sent, not copied, when shorter than this
#: (a copy costs about 6 bytes)
_SHORT = 8


def edits(old: AnyStr, new: AnyStr, cuts: tuple[str, ...] = _CUTS) -> list[Edit]:
    """Runs that make ``new`` out of ``old`` (``apply``): the fields that differ (a long one
    as its own edits: its items cut at ``,``), or when the two do not have the same fields,
    what differs between their common start and end."""
    for n, cut in enumerate(cuts):
        sep = cut if isinstance(old, str) else _BYTES[cut]
        pieces = old.count(sep) + 1
        if pieces > 2:
            if new.count(sep) + 1 == pieces:  # counted first: a long value is cut only then
                return _fields(old, old.split(sep), new.split(sep), sep, cuts[n + 1 :])
            break
    return _ends(old, new)


def _fields(
    old: AnyStr, a: list[AnyStr], b: list[AnyStr], sep: AnyStr, finer: tuple[str, ...]
) -> list[Edit]:
    """Edits of ``old`` (cut into ``a``) making the text that ``b`` joins: the pieces that
    differ (and the short ones between them) inserted, a long run of them as its own edits
    (cut finer)."""
    changed = list(compress(count(), map(ne, a, b)))  # in C
    k = len(sep)
    before = [0, *accumulate(map(len, a))]  # the pieces' lengths before each, cuts left out
    out: list[Edit] = []
    at = 0  # where the next copy from ``old`` starts
    i, n = 0, len(changed)
    while i < n:
        first = last = changed[i]
        i += 1
        # a piece that changed soon after (what lies between shorter than a copy): with it
        while i < n and before[changed[i]] - before[last + 1] + (changed[i] - last) * k < _SHORT:
            last = changed[i]
            i += 1
        start, end = before[first] + first * k, before[last + 1] + last * k
        text = sep.join(b[first : last + 1])
        _copy(out, at, start - at)
        at = end
        if end - start < 6 * _SHORT:
            if text:
                out.append(text)
            continue
        for r in edits(old[start:end], text, finer):  # long: cut finer
            if type(r) is tuple:
                _copy(out, start + r[0], r[1])
            else:
                out.append(r)
    _copy(out, at, len(old) - at)
    return out


def _ends(old: AnyStr, new: AnyStr) -> list[Edit]:
    """Edits that copy what ``old`` and ``new`` start and end with alike (found in C: a few
    microseconds) and insert the rest."""
    head = shared_prefix(old, new)
    most = min(len(old), len(new)) - head
    tail = shared_prefix(old[::-1][:most], new[::-1][:most])
    out: list[Edit] = []
    _copy(out, 0, head)
    if len(new) - tail > head:
        out.append(new[head : len(new) - tail])
    _copy(out, len(old) - tail, tail)
    return out


def _copy(out: list[Edit], at: int, n: int) -> None:
    last = out[-1] if out else None
    if type(last) is tuple and last[0] + last[1] == at:
        out[-1] = (last[0], last[1] + n)  # runs that meet make one
    elif n:
        out.append((at, n))


def worth(runs: list[Edit], size: int, cost: int) -> bool:
    """Whether these runs, each costing about ``cost`` bytes besides its text, are sent in
    fewer bytes than the ``size`` of the value they make."""
    return sum(cost + (0 if type(r) is tuple else len(r)) for r in runs) < size - 16


def apply(old: AnyStr, runs: list[Edit]) -> AnyStr:
    """``new`` from ``old`` and ``edits(old, new)``."""
    empty = old[:0]
    return empty.join(
        old[r[0] : r[0] + r[1]] if isinstance(r, tuple) else r  # type: ignore[misc]
        for r in runs
    )
