"""How two steps' results (and arguments) compare, with bounded work (semantics §3):
near-duplicates by 5-gram Jaccard, what counts as news between different calls, growth
of the same call's result. The detectors that judge progress share these."""

from __future__ import annotations

from ..similarity import (
    SHORT,
    SKETCH_FLOOR,
    SKETCH_MIN,
    could_be_similar,
    identifiers,
    jaccard,
    overlap,
    shingles,
    volatile_tokens,
)
from ._observation import Observation
from ._window import CANDIDATES, Window

ARGS_SIMILAR = 0.5  # 5-gram Jaccard of two calls' arguments: the same request reworded


def same_call(step: Observation, prev: Observation | None) -> bool:
    """The same result as the identical call before (not merely alike; its volatile parts
    set aside): what the read repeat rule's "returned the same result" means."""
    return prev is not None and prev.nlen >= 0 and prev.same_key == step.same_key


def near(window: Window, a: Observation, b: Observation) -> bool:
    """``a`` (the step judged) is a near-duplicate of ``b`` (a step of the window)."""
    if a.nkey == b.nkey:
        return True
    la, lb = a.nlen, b.nlen
    if la < SHORT or lb < SHORT:
        return False
    if not could_be_similar(la, lb, window.threshold):
        return False
    if b._sketch is None:
        window.hold(b)
    sa, sb = a.anchors(), b.anchors(packed=True)
    if len(sa) >= SKETCH_MIN and len(sb) >= SKETCH_MIN and overlap(sa, sb) < SKETCH_FLOOR:
        return False  # clearly different: no exact comparison needed
    grams = a.grams()
    if b._ngrams >= 0 and not could_be_similar(len(grams), b._ngrams, window.threshold):
        return False  # 5-gram sets this unlike in size cannot reach the threshold
    # b is in the window: its 5-grams are built again rather than kept (memory)
    other = b._shingles or shingles(window.hold(b))
    b._ngrams = len(other)
    return jaccard(grams, other) >= window.threshold


def near_any(window: Window, step: Observation) -> bool:
    """Near-duplicate of one of the last few results of the same tool (bounded work)."""
    if step.nlen < SHORT:
        return False
    tried = 0
    for o in reversed(window):
        if o.tool != step.tool or o.nlen < 0:
            continue
        if near(window, step, o) and (o.key == step.key or not news(window, step, o)):
            return True
        tried += 1
        if tried >= CANDIDATES:
            break
    return False


def news(window: Window, step: Observation, o: Observation) -> bool:
    """The result of another call names a timestamp or an id that ``o``'s does not:
    between different calls volatile parts are content (a converted time, a new id)."""
    mine = volatile_tokens(step.norm or "")
    return bool(mine) and not mine <= volatile_tokens(window.hold(o))


def names_new(window: Window, step: Observation) -> bool:
    """A write's result names an identifier the window has not seen (in a result or in
    arguments): a new commit, a new order."""
    found = identifiers(step.norm or "")
    if not found:
        return False
    seen = [window.hold(o) + " " + o.args for o in window if o.nlen >= 0]
    return any(not any(name in text for text in seen) for name in found)


def similar_call(window: Window, step: Observation) -> bool:
    """Long arguments like those of a recent call of the same tool (an instruction
    re-issued in new words)."""
    if len(step.args) < SHORT:
        return False
    tried = 0
    for o in reversed(window):
        if o.tool != step.tool or len(o.args) < SHORT:
            continue
        mine = step.arg_grams()
        if o._nargs < 0 or could_be_similar(len(mine), o._nargs, ARGS_SIMILAR):
            grams = o._arg_grams or shingles(o.args)
            o._nargs = len(grams)  # next time, sets too unlike in size are not built
            if jaccard(mine, grams) >= ARGS_SIMILAR:
                return True
        tried += 1
        if tried >= CANDIDATES:
            break
    return False


def edits_last(window: Window, step: Observation) -> bool:
    """The result is the last page seen changed in place: a page (several lines) that is a
    near-duplicate of the window's last long result (short answers in between, such as
    "Clicked", do not count). A one-line result says nothing of where it changed."""
    last = window.page
    return len(step.units) > 1 and last is not None and near(window, step, last)


def grew(step: Observation, prev: Observation | None) -> bool:
    """The identical call's result kept the lines it had and shows more new ones than it
    lost (a list or a log read again that gained entries; in JSON the entry before a new
    one gains a comma): new information, however alike the two are. Lines changed in
    place (a re-rendered page, a counter) are not growth."""
    if prev is None or not step.units or not prev.units:
        return False
    before, after = set(prev.units), set(step.units)
    lost = len(before - after)  # at most the line a new entry follows (a comma added)
    return lost <= 1 and len(after - before) > lost
