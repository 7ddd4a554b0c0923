"""How one call is read into an ``Observation`` (semantics §3): its result normalised
(cosmetic normalisers for every comparison, volatile ones only against the same call's
previous result), a short answer's probe (by the element a call acts on, when it names
one of the last page: ``headway._recurrence``), a long one's content units, and the caps that
keep a step's memory bounded. What a new rule needs to see of the arguments or the result
is computed here, once per call."""

from __future__ import annotations

from collections.abc import Sequence

from .._recurrence import Recurrence
from ..outcome import CACHED, CORRECTED, Status
from ..similarity import (
    SHORT,
    Normalizer,
    apply,
    content_units,
    is_volatile,
    query_shape,
    stable_hash,
)
from ._observation import CAPPED, NO_UNITS, Observation, sha

KEEP = 8192  # characters of a result kept per step
ARGS_KEPT = 300  # characters of the arguments kept for correction texts


class Reader:
    """Reads calls into steps with a session's normalisers."""

    __slots__ = ("cosmetic", "normalizers", "volatile")

    def __init__(self, normalizers: Sequence[Normalizer]) -> None:
        self.normalizers = tuple(normalizers)
        self.cosmetic = tuple(n for n in self.normalizers if not is_volatile(n))
        self.volatile = tuple(n for n in self.normalizers if is_volatile(n))

    def read(
        self,
        prev: Observation | None,  # the window's last step of the same call
        index: int,
        tool: str,
        key: str,
        args_id: str,
        effect: str,
        status: Status,
        text: str | None,
        error: str | None = None,
        args: str = "",
        recur: Recurrence | None = None,
        targets: Sequence[str] = (),
    ) -> Observation:
        if prev is not None:  # a repeated call: the window keeps its texts once
            key = prev.key
            if args_id == prev.args_id:
                args_id = prev.args_id
            if args == prev.args:
                args = prev.args
        norm = None
        units = NO_UNITS
        probe = 0
        derive = None
        vkey: str | None = None
        if text is not None and error is None and status not in (CACHED, CORRECTED):
            try:
                applied = apply(text, self.cosmetic)
                if len(text) <= CAPPED:  # the window keeps the text whole: it rebuilds norm
                    # with the normalisers only if they changed it (most results)
                    derive = () if applied == text else self.cosmetic
            except Exception:  # a normaliser that fails: judge the text as it is
                applied = text
            norm = " ".join(applied.split())
            if norm == text:
                norm = text  # one string for both
            if self.volatile:
                vkey = self._settled(applied)
            if len(norm) < SHORT:
                probe = stable_hash(f"{tool}\x1f{query_shape(args)}\x1f{norm}") or 1
            else:
                units = content_units(applied)
            if len(norm) > KEEP:
                # head and tail for similarity, a digest so that equality stays exact
                full = sha(norm)
                norm = norm[: KEEP // 2] + "\x00" + full + norm[-KEEP // 2 :]
        if text is not None and len(text) > KEEP:
            text = text[:KEEP]
        if len(args) > ARGS_KEPT:
            args = args[:ARGS_KEPT] + "..."
        if probe and targets and recur is not None:
            # a short answer to a call on an element is probed by the element, read from
            # the last page (``{"index": 12}`` and ``{"index": 40}`` have the same words)
            probe = recur.probe(tool, args, norm or "", targets) or probe
        step = Observation(
            index,
            tool,
            key,
            args_id,
            effect,
            status,
            text,
            norm,
            error,
            args=args,
            units=units,
            probe=probe,
        )
        step._derive = derive
        step.vkey = vkey
        return step

    def _settled(self, applied: str) -> str | None:
        """The result with its volatile parts (timestamps, ids) set aside, as it compares
        with the previous one of the same call only (semantics §3): None when it has none."""
        try:
            settled = apply(applied, self.volatile)
        except Exception:
            settled = applied
        if settled == applied:
            return None
        settled = " ".join(settled.split())
        return settled if len(settled) < SHORT else "\x00" + sha(settled)[:32]
