"""A swap's new value sent as edits of the value it replaces, which the store's server
holds: a session record's head changes by a few numbers at each step, a completion adds a
result to the claim it replaces.

``edits(old, new)`` is a list of runs: ``(offset, length)`` copies a run of ``old``, a
text (or bytes) is inserted as it is; ``apply(old, edits)`` is ``new`` again. They work on
characters (``str``: PostgreSQL's ``substr``) or on bytes (``bytes``: Redis's
``string.sub``). Both texts are cut into tokens at JSON's punctuation and matched token by
token, with a short look-ahead to find where they agree again after a change: linear in
the texts' length, and a store sends the value whole when its edits are not shorter.
Only a swap's server, having found the stored value equal to the expected one, applies
them: the value it writes is the one the caller computed.
"""

from __future__ import annotations

import itertools
import re
from typing import Any, AnyStr

Edit = tuple[int, int] | str | bytes

_AHEAD = 32  # tokens looked ahead (in each text, in all) to find where the texts agree again
_TOKENS: dict[type, re.Pattern[Any]] = {
    str: re.compile(r"[^,:\[\]{}]+|[,:\[\]{}]"),
    bytes: re.compile(rb"[^,:\[\]{}]+|[,:\[\]{}]"),
}
_held: tuple[tuple[Any, Any], ...] = ()  # (text, its tokens and their offsets), newest first


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


def edits(old: AnyStr, new: AnyStr) -> list[Edit]:
    """Runs that make ``new`` out of ``old`` (``apply``)."""
    ta, oa = _tokens(old)
    tb, ob = _tokens(new)
    out: list[Edit] = []
    i = j = 0
    na, nb = len(ta), len(tb)
    while i < na and j < nb:
        i0 = i
        n = _same(ta, tb, i, j)
        i, j = i + n, j + n
        if n:
            out.append((oa[i0], oa[i] - oa[i0]))
        if i == na or j == nb:
            break
        di, dj = _agree(ta, tb, i, j)
        if dj:
            out.append(new[ob[j] : ob[j + dj]])
        i, j = i + di, j + dj
    if j < nb:
        out.append(new[ob[j] :])
    return out


def _same(ta: list[AnyStr], tb: list[AnyStr], i: int, j: int) -> int:
    """How many tokens from ``i`` and ``j`` are the same (lists compared a run at a time)."""
    most = min(len(ta) - i, len(tb) - j)
    k = 1
    while k <= most and ta[i : i + k] == tb[j : j + k]:
        k *= 2
    lo, hi = k // 2, min(k, most + 1)  # the first lo agree, the first hi do not (or run out)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ta[i : i + mid] == tb[j : j + mid]:
            lo = mid
        else:
            hi = mid
    return lo if hi > most or ta[i : i + hi] != tb[j : j + hi] else hi


def _agree(ta: list[AnyStr], tb: list[AnyStr], i: int, j: int) -> tuple[int, int]:
    """How many tokens of each text to skip from ``i`` and ``j`` (which differ) to where
    they agree again for two tokens (or run out); past the look-ahead, all of the rest."""
    na, nb = len(ta), len(tb)
    for d in range(1, _AHEAD + 1):
        for di in range(d + 1):
            a, b = i + di, j + d - di
            if a > na or b > nb:
                continue
            if a == na or b == nb:
                if a == na and b == nb:
                    return di, d - di
                continue
            if ta[a] == tb[b] and (a + 1 == na or b + 1 == nb or ta[a + 1] == tb[b + 1]):
                return di, d - di
    return na - i, nb - j


#: a new value this long or longer may be sent as edits
LONG = 200


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
