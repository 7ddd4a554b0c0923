"""A swap's new value sent as edits of the value it replaces, which the store's server
holds: a completion keeps the start of the claim it replaces (its arguments' digest), a
write's cache epochs their counters.

``edits(old, new)`` is a list of runs: ``(offset, length)`` copies a run of ``old``, a
text (or bytes) is inserted as it is; ``apply(old, edits)`` is ``new`` again (on bytes:
Redis's ``string.sub``). PostgreSQL takes them as ``ends(old, new)``, in characters: how
many to keep of the stored text's start and of its end, and the middle between (its
``left`` and ``right``). Only what the two texts start and end with alike is copied: found by
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


def ends(old: AnyStr, new: AnyStr) -> tuple[int, AnyStr, int]:
    """How many characters (bytes) ``new`` starts with alike ``old``, the middle of ``new``
    that follows, and how many it ends with alike (slices compared in C: a few
    microseconds); the two never overlap: ``new`` is ``old[:head] + middle`` and the last
    ``tail`` of ``old``."""
    head = shared_prefix(old, new)
    most = min(len(old), len(new)) - head
    tail = shared_prefix(old[::-1][:most], new[::-1][:most])
    return head, new[head : len(new) - tail], tail


def edits(old: AnyStr, new: AnyStr) -> list[Edit]:
    """Runs that make ``new`` out of ``old`` (``apply``): what they start and end with alike
    is copied, the rest inserted (``ends``)."""
    head, middle, tail = ends(old, new)
    out: list[Edit] = []
    _copy(out, 0, head)
    if middle:
        out.append(middle)
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
