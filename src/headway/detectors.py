"""Signals and progress marks (semantics §3, §4.1, §4.2): detection collects, decisions
follow from progress, never from a repeat count alone.

``Monitor`` is one session's I/O-free state over a bounded window. The pipeline asks it
twice per call: ``before()`` (should this call be corrected instead of run?) and
``after()`` (mark the step, collect signals, escalate, stop). Both cost O(window) at
most, whatever the length of the run.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import sys
from array import array
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal, NamedTuple, Protocol

import orjson

from ._call import describe, result_text
from ._seen import Seen
from ._spec import ToolSpec
from .outcome import CACHED, CORRECTED, ERROR, EXECUTED, FALLBACK, REPLAYED, UNKNOWN, Status, render
from .similarity import (
    SHORT,
    SKETCH_FLOOR,
    SKETCH_MIN,
    UNITS,
    Normalizer,
    apply,
    content_units,
    could_be_similar,
    identifiers,
    is_volatile,
    jaccard,
    normalize,
    overlap,
    query_shape,
    shingles,
    sketch,
    stable_hash,
    volatile_tokens,
)

Mark = Literal["progress", "no_progress", "waiting", "neutral"]
_KEEP = 8192  # characters of a result kept per step
_MAX_POLLS_TRACKED = 256  # distinct polled calls whose waiting is counted
_CANDIDATES = 8  # earlier results of the same tool compared for near-duplicates
_ARGS_SIMILAR = 0.5  # 5-gram Jaccard of two calls' arguments: the same request reworded
_NEUTRAL = (ERROR, FALLBACK, UNKNOWN, REPLAYED)
_CAPPED = 4096  # a normalised result past this is kept as the 2 x 2048 characters shingles read
_TEXT_KEPT = 1500  # characters of a stored step's text: what a correction quotes of it
_NO_UNITS: frozenset[int] = frozenset()


class Observation:
    """One step as the detectors see it.

    Once judged (it joins the window) a step keeps only what the decisions read of an
    older step: the head of its text (what a correction quotes; a text short enough to be
    shingled whole is kept whole, and its normalised form is rebuilt from it when a later
    step is compared with it), its normalised result past 4 KiB as the head and tail that
    shingling reads, a digest to compare results by, its sketch and content units packed.
    A step that no decision reads again keeps its digest and units only (``Monitor._retire``:
    never while a plug-in reads the window).
    """

    __slots__ = (
        "_arg_grams",
        "_derive",
        "_json",
        "_nargs",
        "_ngrams",
        "_nkey",
        "_norm",
        "_shingles",
        "_size",
        "_sketch",
        "_text",
        "args",
        "args_id",
        "duplicate",
        "effect",
        "error",
        "index",
        "key",
        "mark",
        "nlen",
        "probe",
        "status",
        "tool",
        "unchanged",
        "units",
        "vkey",
    )

    def __init__(
        self,
        index: int,
        tool: str,
        key: str,  # tool + canonical arguments (ignore_fields removed; sha256 when long)
        args_id: str,  # the canonical arguments when short, else their sha256
        effect: str,
        status: Status,
        text: str | None = None,  # the result (or error) as text, for corrections
        norm: str | None = None,  # normalised result text
        error: str | None = None,  # error fingerprint
        mark: Mark = "neutral",
        args: str = "",  # the canonical arguments (cut), for correction texts
        duplicate: bool = False,  # the result repeats one already in the window
        unchanged: bool = False,  # the result equals that of the previous identical call
        units: frozenset[int] | array[int] = _NO_UNITS,  # content units of a long result
        probe: int = 0,  # a short result: hash of (tool, query shape, result)
    ) -> None:
        self.index, self.tool, self.key, self.args_id = index, tool, key, args_id
        self.effect, self.status, self.error = effect, status, error
        self.mark, self.args, self.duplicate, self.unchanged = mark, args, duplicate, unchanged
        self.units, self.probe = units, probe
        # the result compared without its volatile parts, when they are there (else nkey)
        self.vkey: str | None = None
        self._text, self._size = text, -1  # _size: the text's length once only its head is read
        self._norm, self.nlen = norm, -1 if norm is None else len(norm)
        self._derive: tuple[Normalizer, ...] | None = None  # norm = normalize(text, _derive)
        # similarity sets, built lazily: the 5-gram sets live only while the step is judged
        # (one set holds ~80 bytes per character of the result); a step in the window keeps
        # its sketch as an array of 8-byte hashes
        self._shingles: frozenset[str] | None = None
        self._sketch: frozenset[int] | array[int] | None = None
        self._arg_grams: frozenset[str] | None = None
        self._ngrams = self._nargs = -1  # the sizes of those sets, once built: kept
        self._json: str | None = None  # the step as stored in a session record (made once)
        self._nkey: str | None = None

    def __repr__(self) -> str:
        return (
            f"Observation(index={self.index!r}, tool={self.tool!r}, key={self.key!r}, "
            f"status={self.status!r}, mark={self.mark!r}, duplicate={self.duplicate!r})"
        )

    @property
    def text(self) -> str | None:
        """The result (or error) as text; for a step in the window its first 1,500
        characters (``_size`` is then the full length)."""
        text = self._text
        if text is not None and self._size >= 0 and len(text) > _TEXT_KEPT:
            return text[:_TEXT_KEPT]
        return text

    @text.setter
    def text(self, value: str | None) -> None:
        self._norm = self.norm  # no longer rebuilt from the text
        self._text, self._size, self._derive = value, -1, None

    @property
    def norm(self) -> str | None:
        """The normalised result text (rebuilt from the text for a step in the window)."""
        norm = self._norm
        if norm is None and self._derive is not None:
            norm = normalize(self._text or "", self._derive)
        return norm

    @norm.setter
    def norm(self, value: str | None) -> None:
        self._norm, self._derive, self._nkey = value, None, None
        self.nlen = -1 if value is None else len(value)

    @property
    def nkey(self) -> str:
        """What the normalised result is compared by: a short one itself, a longer one its
        digest (a step in the window need not keep its normalised text)."""
        key = self._nkey
        if key is None:
            norm = self.norm or ""
            key = norm if len(norm) < SHORT else "\x00" + _sha(norm)[:32]
            self._nkey = key
        return key

    @property
    def same_key(self) -> str:
        """What the result is compared by with the previous result of the same call:
        volatile parts (timestamps, ids) set aside."""
        return self.vkey if self.vkey is not None else self.nkey

    @property
    def args_digest(self) -> str:
        """The first 16 hex digits of the arguments' sha256."""
        if len(self.args_id) == 64 and not self.args_id.startswith("{"):
            return self.args_id[:16]
        return hashlib.sha256(self.args_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]

    def grams(self) -> frozenset[str]:
        if self._shingles is None:
            self._shingles = shingles(self.norm or "")
            self._ngrams = len(self._shingles)
        return self._shingles

    def anchors(self, packed: bool = False) -> frozenset[int] | array[int]:
        """The sketch's 5-grams as hashes (``hash()``: never stored, so the per-process
        salt does not matter); ``packed`` for a step in the window."""
        found = self._sketch
        if found is None:
            found = frozenset(map(hash, sketch(self.norm or "")))
            self._sketch = _packed("q", found) if packed else found
        return found

    def arg_grams(self) -> frozenset[str]:
        if self._arg_grams is None:
            self._arg_grams = shingles(self.args)
            self._nargs = len(self._arg_grams)
        return self._arg_grams

    def _settle(self) -> None:
        """Keep the compact forms once the step is judged (it joins the window): the
        decisions read nothing else of an older step."""
        self._shingles = self._arg_grams = None
        if self._sketch is not None and not isinstance(self._sketch, array):
            self._sketch = _packed("q", self._sketch)
        if self.units:
            self.units = _packed("Q", self.units)
        norm = self._norm
        if norm is not None and self.nlen >= SHORT:
            _ = self.nkey  # compared by digest from now on
            if self._derive is None and len(norm) > _CAPPED:
                # shingles and sketch read only the head and tail: keep those
                self._norm = norm[: _CAPPED // 2] + "\x00" + norm[-_CAPPED // 2 :]
        else:
            self._derive = None  # a short one is kept: its own key
        text = self._text
        if text is not None and len(text) > _TEXT_KEPT:
            self._size = len(text)
            if self._derive is None:  # the normalised result is kept: the head suffices
                self._text = text[:_TEXT_KEPT]

    def _retire(self) -> None:
        """Keep only what an older step is counted by (``Monitor._retire``)."""
        _ = self.nkey
        self._text = self._norm = self._sketch = self._derive = None
        self._size = -1

    def _compact(self) -> None:
        """Drop a normalised result that the text rebuilds (done one step after
        ``_settle``: a session record stores the last step with it)."""
        if self._derive is not None:
            self._norm = None


class Detector(Protocol):
    """A pluggable signal. Return a dict of signal values, or None; ``{"duplicate": True}``
    makes the step's result count as a repeat (an embedding similarity, say)."""

    name: str

    def observe(
        self, step: Observation, window: Sequence[Observation]
    ) -> Mapping[str, Any] | None: ...


class Verdict(NamedTuple):
    """What ``after()`` decided for a step."""

    mark: Mark
    signals: dict[str, Any]
    correction: str | None = None
    stop: dict[str, Any] | None = None
    stop_kind: Literal["loop", "budget"] | None = None


_verdict = tuple.__new__  # a Verdict from its full field tuple, without __new__'s frame


class Monitor:
    __slots__ = (
        "_cosmetic",
        "_errors",
        "_held",
        "_keys",
        "_last_of_key",
        "_last_value",
        "_memo",
        "_norms",
        "_page",
        "_polls",
        "_probes",
        "_units",
        "_volatile",
        "detectors",
        "last_progress_step",
        "limit",
        "no_progress_run",
        "normalizers",
        "pushed",
        "repeat",
        "repeat_key",
        "threshold",
        "versions",
        "window",
    )

    def __init__(
        self,
        *,
        limit: int,
        window: int,
        normalizers: Sequence[Normalizer],
        threshold: float = 0.75,
        detectors: Sequence[Detector] = (),
    ) -> None:
        self.limit = limit
        self.window: deque[Observation] = deque(maxlen=window)
        self.normalizers = tuple(normalizers)
        self._cosmetic = tuple(n for n in self.normalizers if not is_volatile(n))
        self._volatile = tuple(n for n in self.normalizers if is_volatile(n))
        self.threshold = threshold
        self.detectors = tuple(detectors)
        self.repeat_key = ""
        self.repeat = 0  # consecutive calls with repeat_key
        self.no_progress_run = 0
        self.last_progress_step: int | None = None
        self._last_of_key: dict[str, Observation] = {}
        self._keys: dict[str, int] = {}  # keys in the window -> count
        self._norms: dict[str, int] = {}  # normalised results in the window -> count
        self.pushed = 0  # steps ever pushed: the window's version
        self._memo: tuple[str, int, tuple[int, int] | None] | None = None
        self._last_value: dict[str, Any] = {}  # tool -> last successful result
        self._errors: dict[str, tuple[str, int]] = {}  # tool -> (fingerprint, run length)
        self._polls: dict[str, tuple[int, float]] = {}  # key -> (unchanged polls, since)
        self._units = Seen(window * UNITS)  # content units of the window's results
        self._probes: dict[int, int] = {}  # (tool, query shape, short result) in the window
        self._page: Observation | None = None  # the window's last long result
        self._held: list[Observation] = []  # window steps whose norm was rebuilt (_hold)
        self.versions: dict[str, str] = {}  # tool -> the version its steps were made under

    def user_turn(self) -> None:
        """A new user request: repeat and no-progress counters start again."""
        self.repeat_key = ""
        self.repeat = 0
        self.no_progress_run = 0
        self._errors.clear()
        self._polls.clear()
        self.window.clear()
        self._last_of_key.clear()
        self._keys.clear()
        self._norms.clear()
        self._units.clear()
        self._probes.clear()
        self._page = None
        self._held.clear()
        self.pushed += 1

    # -- versions: a tool's new version is a new epoch ------------------------------

    def adopt(self, tool: str, version: str) -> None:
        """The calls to come of ``tool`` are under ``version``: when it is not the version
        seen so far, what was counted of the tool under the other one is forgotten (its
        steps, repeats, errors, last results), so nothing of it corrects, counts or
        compares with a call under this one. Callers hold the session's lock and check
        ``versions.get(tool) != version`` first (a dict look-up per call)."""
        before = self.versions.get(tool)
        self.versions[tool] = version
        if before is None or before == version:
            return
        kept = [o for o in self.window if o.tool != tool]
        last = [o for o in self._last_of_key.values() if o.tool != tool]
        page = self._page if self._page is not None and self._page.tool != tool else None
        errors = {t: v for t, v in self._errors.items() if t != tool}
        polls = {k: v for k, v in self._polls.items() if not k.startswith(tool + ":")}
        values = {t: v for t, v in self._last_value.items() if t != tool}
        removed = len(kept) != len(self.window)
        repeat_key, repeat, run = self.repeat_key, self.repeat, self.no_progress_run
        self.user_turn()
        for step in kept:
            self.window.append(step)
            self._keys[step.key] = self._keys.get(step.key, 0) + 1
            if step.nlen >= 0:
                self._norms[step.nkey] = self._norms.get(step.nkey, 0) + 1
                if step.probe:
                    self._probes[step.probe] = self._probes.get(step.probe, 0) + 1
                self._units.add(step.units)
        self._units.fit(self.window)
        self._last_of_key = {o.key: o for o in last}
        self._page, self._errors, self._polls, self._last_value = page, errors, polls, values
        if not (kept and repeat_key == kept[-1].key and not removed):
            repeat_key, repeat = (kept[-1].key, 1) if kept else ("", 0)
        self.repeat_key, self.repeat = repeat_key, repeat
        if removed:  # the run of no-progress steps, without the tool's
            run = 0
            for o in reversed(kept):
                if o.mark == "progress":
                    break
                run += o.mark == "no_progress"
        self.no_progress_run = run

    # -- before a call -------------------------------------------------------------

    def may_correct(self, key: str) -> bool:
        """Whether ``before()`` could correct a call with this key: only a key that repeats
        the previous call's or that is in the window can. Needs no lock (a dict lookup and a
        comparison): most calls skip ``before()`` and the lock it takes."""
        return key == self.repeat_key or key in self._keys

    def before(
        self,
        spec: ToolSpec,
        key: str,
        effect: str,
        args: str = "",
        held: Mapping[str, Any] | None = None,
    ) -> str | None:
        """A correction text when this call should not run: a read repeat whose result
        headway holds as current (``held``, its cache entry), or a cycle. Without a current
        entry a repeated read runs: its result may have changed out of headway's sight
        (``after()`` then says whether it did)."""
        if spec.poll:
            return None
        if effect == "read" and held is not None:
            same = self._streak(key)  # earlier calls in a row with the same result
            if same >= 2:
                return (
                    f"headway: you called {spec.name} {same + 1} times with identical "
                    f"arguments {args[:300]} and the result did not change; do not call it "
                    "again with these arguments: use the result, change the arguments or the "
                    "tool, or finish.\nheadway holds that result as current, so this call was "
                    "not run again. Result: " + render(result_text(held.get("v")), 1500)
                )
        cycle = self._cycle(key)
        if cycle is not None:
            period, _start = cycle
            recent = list(self.window)[-(2 * period - 1) :]
            if all(o.mark != "progress" for o in recent):
                calls = ", ".join(f"{o.tool} {o.args[:120]}" for o in list(self.window)[-period:])
                return (
                    f"headway: you called the same {period} tools in a cycle 3 times ({calls}) and "
                    "they brought nothing new; going round again will not help: use the "
                    "results you have, try a different approach, or finish."
                    + _last(self._last_of_key.get(key), current=held is not None)
                )
        return None

    def _streak(self, key: str) -> int:
        """How many of the last calls, all with ``key``, returned the same result (each
        the same as the one before it): 0 when the last call had another key."""
        n = 0
        for o in reversed(self.window):
            if o.key != key or o.status in _NEUTRAL or o.status is ERROR:
                break
            n += 1
            if not o.unchanged:
                break  # the first of the run: its result differed from the call before it
        return n

    def _cycle(self, key: str) -> tuple[int, int] | None:
        """(period, start step) when ``key`` continues a cycle of 3+ full rounds."""
        if key not in self._keys:
            return None  # most calls: a key not in the window continues no cycle
        memo = self._memo
        if memo is not None and memo[0] == key and memo[1] == self.pushed:
            return memo[2]
        found = self._find_cycle(key)
        self._memo = (key, self.pushed, found)
        return found

    def _find_cycle(self, key: str) -> tuple[int, int] | None:
        w = self.window
        n = len(w) + 1  # the window plus this call
        for p in range(2, 6):
            if n < 3 * p:
                break
            if w[n - 1 - p].key != key:  # one comparison rejects almost every call
                continue
            keys = [o.key for o in w] + [key]
            if len(set(keys[-p:])) == 1 or any(keys[i] != keys[i - p] for i in range(n - 2 * p, n)):
                continue
            start = n - 3 * p
            while start > 0 and keys[start - 1] == keys[start - 1 + p]:
                start -= 1
            return p, w[start].index
        return None

    # -- after a call --------------------------------------------------------------

    def after(
        self,
        spec: ToolSpec,
        step: Observation,
        value: Any,
        now: float,
        session_limit: int,
    ) -> Verdict:
        """Mark the step, update the window and decide escalation or a stop."""
        signals: dict[str, Any] = {}
        # repeat and cycle signals
        if step.key == self.repeat_key:
            self.repeat += 1
        else:
            self.repeat_key, self.repeat = step.key, 1
        if self.repeat > 1:
            signals["repeat"] = self.repeat
        cycle = self._cycle(step.key)
        if cycle is not None:
            signals["cycle"] = {"period": cycle[0], "start": cycle[1]}
        status = step.status
        if status is CACHED or status is CORRECTED:
            # served again: a repeat by definition, no result to compare, no progress
            if self.detectors:
                self._plugins(step, signals)
            step.mark = "no_progress"
            step.duplicate = step.unchanged = True
            self.no_progress_run += 1
            self._push(step)
            return self._decide(spec, step, signals, None, None, None, session_limit)
        # result signals
        prev = self._last_of_key.get(step.key)
        if step.nlen >= 0:
            self._judge(step, prev, signals)
        if self.detectors:
            self._plugins(step, signals)
        # progress mark (§4.1)
        correction: str | None = None
        if status is ERROR:
            fp, run = self._errors.get(step.tool, ("", 0))
            run = run + 1 if fp == step.error else 1
            self._errors[step.tool] = (step.error or "", run)
            if run >= 2:
                step.mark = "no_progress"
                signals["repeated_error"] = run
            if run >= 3:
                correction = (
                    f"headway: {step.tool} failed {run} times in a row with the same error "
                    f"(last arguments {step.args[:300]}): {(step.text or '')[:500]!r}. The same "
                    "approach will fail again: change the arguments, use another tool, or report "
                    "the problem."
                )
        elif status in _NEUTRAL:
            step.mark = "neutral"
        else:
            self._errors.pop(step.tool, None)
            step.mark = self._progress_mark(spec, step, prev, value)
            if status is EXECUTED:
                self._last_value[step.tool] = value
        if step.mark == "progress" and (spec.progress is not None or spec.progress_fields):
            step.unchanged = False  # the tool's own progress check says it moved on
        if (
            correction is None
            and status is EXECUTED
            and step.effect == "read"
            and step.unchanged
            and not spec.poll
        ):
            correction = self._repeat_note(spec, step)
        # counters
        stop: dict[str, Any] | None = None
        stop_kind: Literal["loop", "budget"] | None = None
        if step.mark == "progress":
            self.no_progress_run = 0
            self.last_progress_step = step.index
            self._polls.pop(step.key, None)
        elif step.mark == "no_progress":
            self.no_progress_run += 1
        if spec.poll and status is EXECUTED:
            stop = self._poll_budget(spec, step, now)
            stop_kind = "budget" if stop else None
        self._push(step)
        return self._decide(spec, step, signals, correction, stop, stop_kind, session_limit)

    def _repeat_note(self, spec: ToolSpec, step: Observation) -> str | None:
        """The correction an executed read gets when it returned, for the 3rd time in a
        row or more, the same result as the identical calls before it (judged before the
        step joins the window)."""
        same = 1
        exact = True
        for o in reversed(self.window):
            if o.key != step.key or o.status in _NEUTRAL or o.status is ERROR:
                break
            same += 1
            if o.status is EXECUTED and o.nkey != step.nkey:  # o.nkey: the whole result
                exact = False  # equal only once volatile parts are set aside
            if not o.unchanged:
                break
        if same < 3:
            return None
        apart = "" if exact else " (apart from volatile parts: timestamps, ids)"
        return (
            f"headway: {spec.name} returned the same result {same} times for identical "
            f"arguments {step.args[:300]}{apart}; calling it again with these arguments will "
            "not tell you more: use the result, change the arguments or the tool, or finish."
        )

    def _judge(self, step: Observation, prev: Observation | None, signals: dict[str, Any]) -> None:
        """Whether the result is new information (the weak progress rule): the target (the
        call) and the content are judged separately."""
        # the same result as the identical call before (not merely alike; its volatile
        # parts set aside): what the read repeat rule's "returned the same result" means
        same_call = prev is not None and prev.nlen >= 0 and prev.same_key == step.same_key
        step.unchanged = same_call
        if step.nlen < SHORT:
            # a short answer ("No files found", "[]") to a new query is exploration: a
            # repeat only for the same query or a cosmetic variant of it (same words)
            if same_call or step.probe in self._probes:
                step.duplicate = True
                if not same_call:
                    signals["same_result"] = True
        elif step.nkey in self._norms:
            step.duplicate = True
            if not same_call:
                signals["same_result"] = True
        elif _grew(step, prev):
            pass  # the same call's result with every line it had and new ones: news
        elif same_call or (prev is not None and prev.nlen >= 0 and self._near(step, prev)):
            step.duplicate = True
            signals["near_duplicate"] = True
        elif prev is not None or self._similar_call(step):
            # a repeated target (the same call, or the same request in other words): a
            # result like a recent one of this tool is no news
            if self._near_any(step):
                step.duplicate = True
                signals["near_duplicate"] = True
        elif self._units.all_in(step.units, self.window) or (
            not self._edits_last(step) and self._near_any(step)
        ):
            # a new target whose result shows nothing the window has not seen, or that
            # brings back an earlier result (another link to a page already read). An
            # action that changes the page just seen, however little, moved the world:
            # a few new words on a big page are new (a form filled field by field)
            step.duplicate = True
            signals["near_duplicate"] = True

    def _edits_last(self, step: Observation) -> bool:
        """The result is the last page seen changed in place: a page (several lines) that
        is a near-duplicate of the window's last long result (short answers in between,
        such as "Clicked", do not count), with content the window has not seen (checked by
        the caller). A one-line result says nothing of where it changed: not an edit."""
        last = self._page
        return len(step.units) > 1 and last is not None and self._near(step, last)

    def _similar_call(self, step: Observation) -> bool:
        """Long arguments like those of a recent call of the same tool (an instruction
        re-issued in new words)."""
        if len(step.args) < SHORT:
            return False
        tried = 0
        for o in reversed(self.window):
            if o.tool != step.tool or len(o.args) < SHORT:
                continue
            mine = step.arg_grams()
            if o._nargs < 0 or could_be_similar(len(mine), o._nargs, _ARGS_SIMILAR):
                grams = o._arg_grams or shingles(o.args)
                o._nargs = len(grams)  # next time, sets too unlike in size are not built
                if jaccard(mine, grams) >= _ARGS_SIMILAR:
                    return True
            tried += 1
            if tried >= _CANDIDATES:
                break
        return False

    def _plugins(self, step: Observation, signals: dict[str, Any]) -> None:
        for det in self.detectors:
            try:
                extra = det.observe(step, self.window)
            except Exception as exc:  # a plug-in must never break a call
                signals[det.name] = {"error": describe(exc)[:200]}
                continue
            if extra:
                signals[det.name] = dict(extra)
                step.duplicate = step.duplicate or bool(extra.get("duplicate"))

    def _decide(
        self,
        spec: ToolSpec,
        step: Observation,
        signals: dict[str, Any],
        correction: str | None,
        stop: dict[str, Any] | None,
        stop_kind: Literal["loop", "budget"] | None,
        session_limit: int,
    ) -> Verdict:
        """Escalate (a correction at half the no-progress limit) or stop (at the limit)."""
        run = self.no_progress_run
        if step.mark == "no_progress" and stop is None:
            limit = spec.no_progress_limit or session_limit
            if run >= limit:
                stop, stop_kind = self._loop_diagnostic(limit, signals), "loop"
                stopping = (
                    f"headway: no progress in the last {run} steps (the last: {step.tool} "
                    f"{step.args[:200]}); this run is being stopped."
                )  # said even when the step has its own correction: the run ends here
                correction = stopping if correction is None else f"{correction}\n{stopping}"
            elif run >= (limit // 2 or 1) and correction is None and step.status is not CORRECTED:
                correction = (
                    f"headway: no progress in the last {run} steps: {step.tool} {step.args[:200]} "
                    f"{_why(spec, step, signals)}. Change your approach or finish; at "
                    f"{limit} steps without progress this run is stopped."
                )
        return _verdict(Verdict, (step.mark, signals, correction, stop, stop_kind))

    def _progress_mark(
        self, spec: ToolSpec, step: Observation, prev: Observation | None, value: Any
    ) -> Mark:
        if spec.poll:
            if prev is not None and prev.nlen >= 0 and (step.unchanged or self._near(step, prev)):
                return "waiting"
            return "progress"
        if spec.progress is not None and step.tool in self._last_value:
            try:
                return (
                    "progress"
                    if spec.progress(self._last_value[step.tool], value)
                    else "no_progress"
                )
            except Exception:
                return "neutral"
        if spec.progress_fields and step.tool in self._last_value:
            old = self._last_value[step.tool]
            if isinstance(old, Mapping) and isinstance(value, Mapping):
                changed = any(old.get(f) != value.get(f) for f in spec.progress_fields)
                return "progress" if changed else "no_progress"
        if step.effect == "write":
            # a write with new arguments moved the world, whatever it returned
            # (its volatile parts are content: a new commit hash, a new order id)
            if (
                prev is not None
                and prev.effect == "write"
                and prev.nlen >= 0
                and self._near(step, prev)
                and not self._names_new(step)
            ):
                return "no_progress"
            return "progress"
        return "no_progress" if step.duplicate else "progress"

    def _poll_budget(self, spec: ToolSpec, step: Observation, now: float) -> dict[str, Any] | None:
        polls, since = self._polls.pop(step.key, (0, now))
        polls += 1
        self._polls[step.key] = (polls, since)
        if len(self._polls) > _MAX_POLLS_TRACKED:  # bounded like everything in a session
            del self._polls[next(iter(self._polls))]
        for kind, limit, used in (
            ("max_polls", spec.max_polls, polls),
            ("max_wait_s", spec.max_wait_s, round(now - since, 3)),
        ):
            if limit is not None and used >= limit:
                return {
                    "terminated_by": "budget",
                    "budget_type": kind,
                    "limit": limit,
                    "consumed": used,
                    "last_progress_step": self.last_progress_step,
                    "hint": (
                        f"{spec.name} kept answering with the same or almost the same "
                        f"result; its {kind} budget is used up."
                    ),
                }
        return None

    def _near_any(self, step: Observation) -> bool:
        """Near-duplicate of one of the last few results of the same tool (bounded work)."""
        if step.nlen < SHORT:
            return False
        tried = 0
        for o in reversed(self.window):
            if o.tool != step.tool or o.nlen < 0:
                continue
            if self._near(step, o) and (o.key == step.key or not self._news(step, o)):
                return True
            tried += 1
            if tried >= _CANDIDATES:
                break
        return False

    def _news(self, step: Observation, o: Observation) -> bool:
        """The result of another call names a timestamp or an id that ``o``'s does not:
        between different calls volatile parts are content (a converted time, a new id)."""
        mine = volatile_tokens(step.norm or "")
        return bool(mine) and not mine <= volatile_tokens(self._hold(o))

    def _names_new(self, step: Observation) -> bool:
        """A write's result names an identifier the window has not seen (in a result or
        in arguments): a new commit, a new order."""
        found = identifiers(step.norm or "")
        if not found:
            return False
        seen = [self._hold(o) + " " + o.args for o in self.window if o.nlen >= 0]
        return any(not any(name in text for text in seen) for name in found)

    def _near(self, a: Observation, b: Observation) -> bool:
        if a.nkey == b.nkey:
            return True
        la, lb = a.nlen, b.nlen
        if la < SHORT or lb < SHORT:
            return False
        if not could_be_similar(la, lb, self.threshold):
            return False
        if b._sketch is None:
            self._hold(b)
        sa, sb = a.anchors(), b.anchors(packed=True)
        if len(sa) >= SKETCH_MIN and len(sb) >= SKETCH_MIN and overlap(sa, sb) < SKETCH_FLOOR:
            return False  # clearly different: no exact comparison needed
        grams = a.grams()
        if b._ngrams >= 0 and not could_be_similar(len(grams), b._ngrams, self.threshold):
            return False  # 5-gram sets this unlike in size cannot reach the threshold
        # b is in the window: its 5-grams are built again rather than kept (memory)
        other = b._shingles or shingles(self._hold(b))
        b._ngrams = len(other)
        return jaccard(grams, other) >= self.threshold

    def _hold(self, o: Observation) -> str:
        """A window step's normalised result, rebuilt from its text if need be and then
        kept until the step being judged joins the window (it may be compared again)."""
        norm = o._norm
        if norm is None:
            norm = o._norm = o.norm or ""
            self._held.append(o)
        return norm

    def _push(self, step: Observation) -> None:
        window, keys, norms, last = self.window, self._keys, self._norms, self._last_of_key
        units = self._units
        resized = False  # the window's units changed: the filter may need another size
        if len(window) == window.maxlen:  # the oldest step leaves: uncount it
            old = window[0]
            if last.get(old.key) is old:
                del last[old.key]
            left = keys[old.key] - 1
            if left:
                keys[old.key] = left
            else:
                del keys[old.key]
            if old.nlen >= 0:
                nkey = old.nkey
                left = norms[nkey] - 1
                if left:
                    norms[nkey] = left
                else:
                    del norms[nkey]
                if old.probe:  # what it counted: a short result a probe, a long one units
                    _uncount(self._probes, (old.probe,))
                if old.units:
                    units.remove(old.units)
                    resized = True
                if self._page is old:
                    self._page = None
        if window:
            window[-1]._compact()
        for o in self._held:
            o._compact()
        self._held.clear()
        step._settle()
        window.append(step)
        keys[step.key] = keys.get(step.key, 0) + 1
        self.pushed += 1
        if step.nlen >= 0:
            nkey = step.nkey
            norms[nkey] = norms.get(nkey, 0) + 1
            probes = self._probes
            if step.probe:
                probes[step.probe] = probes.get(step.probe, 0) + 1
            if step.units:
                units.add(step.units)
                self._page = step
                resized = True
        if resized:
            units.fit(window)
        if last.get(step.key) is None or (
            step.status is not CACHED and step.status is not CORRECTED
        ):
            last[step.key] = step  # the last result of the call (a served one repeats it)
        if step.nlen >= SHORT and not self.pushed & 1 and not self.detectors:
            self._retire()  # a walk of the window (~2 us): after every other long result

    def _retire(self) -> None:
        """Drop the texts and sketches of window steps that no decision reads again: an
        older result is compared only while it is among the last ``_CANDIDATES`` of its
        tool, the last of its call, or the window's last page, and none of these comes
        back once lost. Only when no plug-in reads the window."""
        seen: dict[str, int] = {}
        last, page = self._last_of_key, self._page
        for o in reversed(self.window):
            if o.nlen < 0:
                continue
            n = seen[o.tool] = seen.get(o.tool, 0) + 1
            if (
                n > _CANDIDATES
                and o._text is not None
                and o.nlen >= SHORT
                and last.get(o.key) is not o
                and o is not page
            ):
                o._retire()

    # -- a session record (a session shared by workers through the store) ---------------

    def snapshot(self) -> dict[str, Any]:
        """The window and counters as JSON, bounded: per step at most a shingling-sized
        excerpt of its result (compared by digest past that) and the head of its text."""
        window = list(self.window)
        at = {id(o): i for i, o in enumerate(window)}
        page = self._page
        return {
            # one JSON text: each step is encoded once, and the record's own encoding
            # then copies a string instead of walking every step again
            "w": orjson.Fragment("[" + ",".join([o._json or _dump_step(o) for o in window]) + "]"),
            "last": [at[id(o)] for o in self._last_of_key.values() if id(o) in at],  # by key
            "page": -1 if page is None else at.get(id(page), -1),
            "rk": self.repeat_key,
            "r": self.repeat,
            "np": self.no_progress_run,
            "lp": self.last_progress_step,
            "n": self.pushed,
            "ver": self.versions,
            "err": {t: list(v) for t, v in self._errors.items()},
            "polls": {k: list(v) for k, v in self._polls.items()},
            "lv": {
                t: v
                for t, v in ((t, _json_copy(v)) for t, v in self._last_value.items())
                if v is not _NOT_KEPT
            },
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        """Replace this monitor's state by a ``snapshot()`` (of any worker)."""
        self.user_turn()
        for item in data["w"]:
            step = _load_step(item)
            self.window.append(step)
            self._keys[step.key] = self._keys.get(step.key, 0) + 1
            if step.nlen >= 0:
                self._norms[step.nkey] = self._norms.get(step.nkey, 0) + 1
                if step.probe:
                    self._probes[step.probe] = self._probes.get(step.probe, 0) + 1
                self._units.add(step.units)
        self._units.fit(self.window)
        window = list(self.window)
        self._last_of_key = {window[i].key: window[i] for i in data["last"] if i < len(window)}
        page = data["page"]
        self._page = window[page] if 0 <= page < len(window) else None
        self.repeat_key, self.repeat = data["rk"], data["r"]
        self.no_progress_run, self.last_progress_step = data["np"], data["lp"]
        self.pushed, self._memo = data["n"], None
        self.versions = dict(data.get("ver", {}))  # not in a record written before them
        self._errors = {t: (v[0], v[1]) for t, v in data["err"].items()}
        self._polls = {k: (v[0], v[1]) for k, v in data["polls"].items()}
        self._last_value = dict(data["lv"])

    def _loop_diagnostic(self, limit: int, signals: Mapping[str, Any]) -> dict[str, Any]:
        recent = list(self.window)[-limit:]
        signal = next(
            (
                s
                for s in ("cycle", "repeat", "repeated_error", "same_result", "near_duplicate")
                if s in signals
            ),
            "no_progress",
        )
        return {
            "terminated_by": "no_progress",
            "signal": signal,
            "limit": limit,
            "consumed": self.no_progress_run,
            "last_progress_step": self.last_progress_step,
            "last_k_steps": [
                {"step": o.index, "tool": o.tool, "args_digest": o.args_digest, "mark": o.mark}
                for o in recent
            ],
            "suggestion": "Inspect the recent results and choose a different strategy.",
        }

    def observation(
        self,
        index: int,
        tool: str,
        key: str,
        args_id: str,
        effect: str,
        status: Status,
        text: str | None,
        error: str | None = None,
        args: str = "",
    ) -> Observation:
        """A step to pass to ``after()``; stored texts are capped so memory stays bounded."""
        prev = self._last_of_key.get(key)
        if prev is not None:  # a repeated call: the window keeps its texts once
            key = prev.key
            if args_id == prev.args_id:
                args_id = prev.args_id
            if args == prev.args:
                args = prev.args
        norm = None
        units = _NO_UNITS
        probe = 0
        derive = None
        vkey: str | None = None
        if text is not None and error is None and status not in (CACHED, CORRECTED):
            try:
                applied = apply(text, self._cosmetic)
                if len(text) <= _CAPPED:  # the window keeps the text whole: it rebuilds norm
                    # with the normalisers only if they changed it (most results)
                    derive = () if applied == text else self._cosmetic
            except Exception:  # a normaliser that fails: judge the text as it is
                applied = text
            norm = " ".join(applied.split())
            if norm == text:
                norm = text  # one string for both
            if self._volatile:
                # volatile parts (timestamps, ids) set aside: how the result compares with
                # the previous one of the same call only (semantics §3)
                try:
                    settled = apply(applied, self._volatile)
                except Exception:
                    settled = applied
                if settled != applied:
                    settled = " ".join(settled.split())
                    vkey = settled if len(settled) < SHORT else "\x00" + _sha(settled)[:32]
            if len(norm) < SHORT:
                probe = stable_hash(f"{tool}\x1f{query_shape(args)}\x1f{norm}") or 1
            else:
                units = content_units(applied)
            if len(norm) > _KEEP:
                # head and tail for similarity, a digest so that equality stays exact
                full = _sha(norm)
                norm = norm[: _KEEP // 2] + "\x00" + full + norm[-_KEEP // 2 :]
        if text is not None and len(text) > _KEEP:
            text = text[:_KEEP]
        if len(args) > 300:
            args = args[:300] + "..."
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
            "neutral",
            args,
            units=units,
            probe=probe,
        )
        step._derive = derive
        step.vkey = vkey
        return step


_VALUE_KEPT = 4096  # a last result kept for progress= and progress_fields up to this size
_STATUS = {s.value: s for s in (CACHED, CORRECTED, ERROR, EXECUTED, FALLBACK, REPLAYED, UNKNOWN)}


def _dump_step(o: Observation) -> str:
    norm = o.norm
    if norm is not None and len(norm) > _CAPPED:
        # shingles and sketch read only the head and tail: keep those, compare by digest
        norm = norm[: _CAPPED // 2] + "\x00" + norm[-_CAPPED // 2 :]
    text = o._text
    size = -1 if text is None else max(len(text), o._size)
    fields = [
        o.index,
        o.tool,
        o.key,
        None if o.key == f"{o.tool}:{o.args_id}" else o.args_id,  # most keys hold it
        o.effect,
        o.status.value,
        None if text is None else text[:_TEXT_KEPT],
        size,
        norm,
        # a shorter one is its own excerpt; a retired step keeps only its digest
        o.nkey if o.nlen > _CAPPED or (norm is None and o.nlen >= 0) else None,
        o.nlen,
        o.error,
        o.mark,
        o.args,
        o.duplicate,
        o.unchanged,
        base64.b64encode(struct.pack(f"<{len(o.units)}Q", *o.units)).decode(),  # 11 B a unit
        o.probe,
        o.vkey,
    ]
    try:
        o._json = orjson.dumps(fields).decode()
    except orjson.JSONEncodeError:  # a lone surrogate in a result: stored replaced
        o._json = orjson.dumps([_valid(f) for f in fields]).decode()
    return o._json


def _valid(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    return value


def _load_step(item: Sequence[Any]) -> Observation:
    (index, tool, key, args_id, effect, status, text, size, norm, nkey, nlen) = item[:11]
    error, mark, args, duplicate, unchanged, units, probe = item[11:18]
    if args_id is None:
        args_id = key[len(tool) + 1 :]
    step = Observation(
        index, tool, key, args_id, effect, _STATUS[status], text, norm, error, mark, args
    )
    if text is not None and size > len(text):
        step._size = size  # corrections say how much of the text they leave out
    step.duplicate, step.unchanged = duplicate, unchanged
    packed = base64.b64decode(units)
    units = array("Q", packed)
    if sys.byteorder == "big":  # _dump_step packs little-endian
        units.byteswap()
    step.units, step.probe = units, probe
    step.vkey = item[18] if len(item) > 18 else None  # a record written before it was kept
    if nkey is not None:
        step._nkey = nkey
    step.nlen = nlen
    return step


_NOT_KEPT = object()


def _json_copy(value: Any) -> Any:
    """A copy through JSON (the caller may change the value later), when it is small."""
    try:
        text = orjson.dumps(value)
    except Exception:  # not JSON: progress= and progress_fields restart on another worker
        return _NOT_KEPT
    return orjson.loads(text) if len(text) <= _VALUE_KEPT else _NOT_KEPT


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _packed(code: str, values: Collection[int]) -> array[int]:
    """An array of exactly the values' size (one filled from a set grows as it goes: up to
    32 bytes more each, and a window keeps two per step)."""
    return array(code, list(values))


def _uncount(counts: dict[int, int], items: Any) -> None:
    for item in items:
        left = counts[item] - 1
        if left:
            counts[item] = left
        else:
            del counts[item]


def _why(spec: ToolSpec, step: Observation, signals: Mapping[str, Any]) -> str:
    """Why a step was no progress, in words that claim only what headway observed."""
    if step.status is CACHED:
        return "was answered with the stored result of an identical earlier call"
    if step.status is ERROR:
        return "failed with the same error as before"
    if step.effect == "write" and not step.duplicate:
        return "returned almost the same result as the identical call before it"
    if "near_duplicate" in signals:
        return "returned almost the same result as one you already had"
    if step.duplicate:
        return "returned what you already had"
    if spec.progress is not None or spec.progress_fields:
        return "made no progress by the tool's own progress check"
    return "made no progress"


def _grew(step: Observation, prev: Observation | None) -> bool:
    """The identical call's result kept the lines it had and shows more new ones than it
    lost (a list or a log read again that gained entries; in JSON the entry before a new
    one gains a comma): new information, however alike the two are. Lines changed in
    place (a re-rendered page, a counter) are not growth."""
    if prev is None or not step.units or not prev.units:
        return False
    before, after = set(prev.units), set(step.units)
    lost = len(before - after)  # at most the line a new entry follows (a comma added)
    return lost <= 1 and len(after - before) > lost


def _last(prev: Observation | None, *, current: bool) -> str:
    """The result a cycle's correction quotes: held as current (a current cache entry), or
    what the call returned when it last ran, said as such (it may have changed since)."""
    if prev is None or prev.text is None:
        return ""
    label = (
        "Last result (held as current)"
        if current
        else "What this call returned when it last ran (not run again now, so it may have "
        "changed since)"
    )
    if prev._size > len(prev.text):  # the window kept the head: say how much is left out
        return f"\n{label}: {prev.text[:1500]}... [{prev._size - 1500} more characters]"
    return f"\n{label}: " + render(prev.text, 1500)
