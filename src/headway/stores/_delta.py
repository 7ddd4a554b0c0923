"""A swap's new value sent as edits of the value it replaces, which the store's server
holds: a session record's head changes by a few numbers at each step, a completion adds a
result to the claim it replaces.

``edits(old, new)`` is a list of runs: ``(offset, length)`` copies a run of ``old``, a
text (or bytes) is inserted as it is; ``apply(old, edits)`` is ``new`` again. They work on
characters (``str``: PostgreSQL's ``substr``) or on bytes (``bytes``: Redis's
``string.sub``). Both texts are cut into tokens (a field or an item, with the comma after
it) and compared token by token, in C (``map``): from the front, and from the back past
the one place where tokens were added or removed (a list that grew by an item). Each run
of tokens that differ is trimmed to what differs. A store sends the value whole when its
edits are not shorter. Only a swap's server, having found the stored value equal to the
expected one, applies them: the value it writes is the one the caller computed.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import re
from typing import Any, AnyStr

Edit = tuple[int, int] | str | bytes

_TOKENS: dict[type, re.Pattern[Any]] = {
    str: re.compile(r"[^,]*,|[^,]+"),
    bytes: re.compile(rb"[^,]*,|[^,]+"),
}
_SPLITS = 6  # where tokens were added or removed: among this many candidates at each end
_held: tuple[tuple[Any, Any], ...] = ()  # (text, its tokens and their offsets), newest first

#: a new value this long or longer may be sent as edits
LONG = 32


def _tokens(text: AnyStr) -> tuple[list[AnyStr], list[int]]:
    """The text's tokens and where each starts (and its end); the last few texts kept (a
    value written is most often the one the next swap replaces)."""
    global _held
    memo: tuple[tuple[Any, Any], ...] = _held
    for held, found in memo:
        if held == text:
            return found  # type: ignore[no-any-return]
    tokens: list[AnyStr] = _TOKENS[type(text)].findall(text)
    found = tokens, [0, *itertools.accumulate(map(len, tokens))]
    _held = ((text, found), *memo[:3])  # one tuple, replaced whole: safe across threads
    return found


def _differ(ta: list[Any], tb: list[Any]) -> list[int]:
    """The positions where two token lists differ, compared from the front (in C)."""
    return list(itertools.compress(itertools.count(), map(operator.ne, ta, tb)))


def edits(old: AnyStr, new: AnyStr) -> list[Edit]:
    """Runs that make ``new`` out of ``old`` (``apply``)."""
    ta, oa = _tokens(old)
    tb, ob = _tokens(new)
    na, nb = len(ta), len(tb)
    front = _differ(ta, tb)
    if na == nb:
        split, back = na, []
    else:
        # from the back: position k from the end is old's na-1-k and new's nb-1-k
        back = [na - 1 - k for k in reversed(_differ(ta[::-1], tb[::-1]))]
        split = _split(front, back, min(na, nb))
    # (old start, old end, new start, new end) of each run of tokens that differ
    changes: list[list[int]] = []
    for k in itertools.islice(front, bisect.bisect_left(front, split)):
        _note(changes, k, k + 1, k, k + 1)
    if na != nb:
        _note(changes, split, split + max(0, na - nb), split, split + max(0, nb - na))
    d = nb - na
    for k in back[bisect.bisect_left(back, split + max(0, na - nb)) :]:
        _note(changes, k, k + 1, k + d, k + d + 1)
    out: list[Edit] = []
    at = 0
    for a0, a1, b0, b1 in changes:
        _copy(out, oa[at], oa[a0] - oa[at])
        _change(out, old, new, oa[a0], oa[a1], ob[b0], ob[b1])
        at = a1
    _copy(out, oa[at], oa[na] - oa[at])
    return out if apply(old, out) == new else [new]  # never a wrong value: whole instead


def _split(front: list[int], back: list[int], most: int) -> int:
    """Where tokens were added or removed: the position before which the texts are
    compared from the front and after which from the back, with the fewest differences."""
    candidates = {0, most, *front[:_SPLITS], *back[-_SPLITS:]}
    return min(
        (s for s in candidates if 0 <= s <= most),
        key=lambda s: bisect.bisect_left(front, s) + len(back) - bisect.bisect_left(back, s),
    )


def _note(changes: list[list[int]], a0: int, a1: int, b0: int, b1: int) -> None:
    if changes and changes[-1][1] == a0 and changes[-1][3] == b0:
        changes[-1][1], changes[-1][3] = a1, b1  # next to the one before: one change
    elif a1 > a0 or b1 > b0:
        changes.append([a0, a1, b0, b1])


def _copy(out: list[Edit], at: int, n: int) -> None:
    last = out[-1] if out else None
    if type(last) is tuple and last[0] + last[1] == at:
        out[-1] = (last[0], last[1] + n)  # runs that meet make one
    elif n:
        out.append((at, n))


def _change(out: list[Edit], old: AnyStr, new: AnyStr, a0: int, a1: int, b0: int, b1: int) -> None:
    """``old[a0:a1]`` replaced by ``new[b0:b1]``: what they start and end with alike is
    copied, the rest inserted (a token ``"n":13,`` becoming ``"n":14,`` inserts ``4``)."""
    a, b = old[a0:a1], new[b0:b1]
    most = min(len(a), len(b))
    head = tail = 0
    while head < most and a[head] == b[head]:  # tokens are short: faster than in halves
        head += 1
    while tail < most - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    _copy(out, a0, head)
    if len(b) - tail > head:
        out.append(b[head : len(b) - tail])
    _copy(out, a1 - tail, tail)


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
