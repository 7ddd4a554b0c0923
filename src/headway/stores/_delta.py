"""A swap's new value sent as edits of the value it replaces, which the store's server
holds: a completion keeps the start of the claim it replaces (its arguments' digest), a
write's cache epochs their counters.

``edits(old, new)`` is a list of runs: ``(offset, length)`` copies a run of ``old``, a
text (or bytes) is inserted as it is; ``apply(old, edits)`` is ``new`` again. They work on
characters (``str``: PostgreSQL's ``substr``) or on bytes (``bytes``: Redis's
``string.sub``). Only what the two texts start and end with alike is copied: found by
comparing slices (in C), a few microseconds a value. (Finer edits, token by token, sent a
session record's head in a quarter of its size, but cost a keyed write 10-25% more time
in Python.) A store sends the value whole when its edits are not shorter. Only a swap's
server, having found the stored value equal to the expected one, applies them: the value
it writes is the one the caller computed.
"""

from __future__ import annotations

from typing import AnyStr

from ._base import shared_prefix

Edit = tuple[int, int] | str | bytes

#: a new value this long or longer may be sent as edits
LONG = 200


def edits(old: AnyStr, new: AnyStr) -> list[Edit]:
    """Runs that make ``new`` out of ``old`` (``apply``): what they start and end with alike
    is copied, the rest inserted (slices compared in C: a few microseconds)."""
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
