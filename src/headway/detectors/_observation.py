"""One step as the detectors see it (``Observation``), and the compact forms it keeps once
it joins the window: memory per session stays bounded whatever the results' size."""

from __future__ import annotations

import hashlib
import zlib
from array import array
from collections.abc import Collection
from typing import Any, Literal

from .._spec import ToolSpec
from ..outcome import ERROR, FALLBACK, REPLAYED, UNKNOWN, Status
from ..similarity import SHORT, Normalizer, normalize, shingles, sketch

Mark = Literal["progress", "no_progress", "waiting", "neutral"]
TEXT_KEPT = 1500  # characters of a stored step's text: what a correction quotes of it
DEFLATED = 1024  # characters of text from which a step in the window keeps it deflated
CAPPED = 4096  # a normalised result past this is kept as the 2 x 2048 characters shingles read
NO_UNITS: frozenset[int] = frozenset()
# steps that count neither as progress nor as no progress (an error may: a repeated one)
NEUTRAL = (ERROR, FALLBACK, UNKNOWN, REPLAYED)


class Observation:
    """One step as the detectors see it.

    Once judged (it joins the window) a step keeps only what the decisions read of an
    older step: the head of its text (what a correction quotes; a text short enough to be
    shingled whole is kept whole, and its normalised form is rebuilt from it when a later
    step is compared with it), its normalised result past 4 KiB as the head and tail that
    shingling reads, a digest to compare results by, its sketch and content units packed.
    A step that no decision reads again keeps its digest and units only (``_retire``:
    never while a plug-in reads the window).

    While it is judged, ``spec`` and ``value`` are the call's tool and its result (for a
    tool's own progress check); a step in the window keeps neither.
    """

    __slots__ = (
        "_arg_grams",
        "_body",
        "_derive",
        "_json",
        "_nargs",
        "_ngrams",
        "_nkey",
        "_norm",
        "_shingles",
        "_size",
        "_sketch",
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
        "spec",
        "status",
        "tool",
        "unchanged",
        "units",
        "value",
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
        units: frozenset[int] | array[int] = NO_UNITS,  # content units of a long result
        probe: int = 0,  # a short result: hash of (tool, query shape, result)
    ) -> None:
        self.index, self.tool, self.key, self.args_id = index, tool, key, args_id
        self.effect, self.status, self.error = effect, status, error
        self.mark, self.args, self.duplicate, self.unchanged = mark, args, duplicate, unchanged
        self.units, self.probe = units, probe
        self.spec: ToolSpec | None = None  # the call's tool, while the step is judged
        self.value: Any = None  # the call's result, while the step is judged
        # the result compared without its volatile parts, when they are there (else nkey)
        self.vkey: str | None = None
        # the text, deflated once the step is compacted (``_text`` inflates it); _size: the
        # text's length once only its head is read
        self._body: str | bytes | None = text
        self._size = -1
        self._norm, self.nlen = norm, -1 if norm is None else len(norm)
        self._derive: tuple[Normalizer, ...] | None = None  # norm = normalize(text, _derive)
        # similarity sets, built lazily: the 5-gram sets live only while the step is judged
        # (one set holds ~80 bytes per character of the result); a step in the window keeps
        # its sketch as bytes, 8 a hash (one object: an array is two, and 50 bytes more)
        self._shingles: frozenset[str] | None = None
        self._sketch: frozenset[int] | bytes | None = None
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
        if text is not None and self._size >= 0 and len(text) > TEXT_KEPT:
            return text[:TEXT_KEPT]
        return text

    @text.setter
    def text(self, value: str | None) -> None:
        self._norm = self.norm  # no longer rebuilt from the text
        self._text, self._size, self._derive = value, -1, None

    @property
    def _text(self) -> str | None:
        """The text kept (whole, or its head), inflated if it was deflated."""
        body = self._body
        if type(body) is bytes:
            return zlib.decompress(body).decode("utf-8", "surrogatepass")
        return body  # type: ignore[return-value]

    @_text.setter
    def _text(self, value: str | None) -> None:
        self._body = value

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
            key = norm if len(norm) < SHORT else "\x00" + sha(norm)[:32]
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

    def anchors(self, packed: bool = False) -> frozenset[int] | memoryview:
        """The sketch's 5-grams as hashes (``hash()``: never stored, so the per-process
        salt does not matter); ``packed`` for a step in the window."""
        found = self._sketch
        if found is None:
            found = self._sketch = frozenset(map(hash, sketch(self.norm or "")))
            if packed:
                found = self._sketch = _packed(found)
        if isinstance(found, bytes):
            return memoryview(found).cast("q")
        return found

    def arg_grams(self) -> frozenset[str]:
        if self._arg_grams is None:
            self._arg_grams = shingles(self.args)
            self._nargs = len(self._arg_grams)
        return self._arg_grams

    # -- the compact forms of a step in the window --------------------------------------

    def _settle(self) -> None:
        """Keep the compact forms once the step is judged (it joins the window): the
        decisions read nothing else of an older step."""
        self.spec = self.value = None
        self._shingles = self._arg_grams = None
        if type(self._sketch) is frozenset:
            self._sketch = _packed(self._sketch)
        if self.units:
            self.units = packed_array("Q", self.units)
        norm = self._norm
        if norm is not None and self.nlen >= SHORT:
            _ = self.nkey  # compared by digest from now on
            if self._derive is None and len(norm) > CAPPED:
                # shingles and sketch read only the head and tail: keep those
                self._norm = norm[: CAPPED // 2] + "\x00" + norm[-CAPPED // 2 :]
        else:
            self._derive = None  # a short one is kept: its own key
        text = self._text
        if text is not None and len(text) > TEXT_KEPT:
            self._size = len(text)
            if self._derive is None:  # the normalised result is kept: the head suffices
                self._text = text[:TEXT_KEPT]

    def _retire(self) -> None:
        """Keep only what an older step is counted by (``Window.retire``)."""
        _ = self.nkey
        self._text = self._norm = self._sketch = self._derive = None
        self._size = -1

    def _compact(self) -> None:
        """Drop a normalised result that the text rebuilds, and deflate a long text (done
        one step after ``_settle``: a session record stores the last step with it, and the
        last step is the one compared most)."""
        if self._derive is not None:
            self._norm = None
        body = self._body
        if type(body) is str and len(body) >= DEFLATED:
            # read again only when a later result is like this one: a third of the memory
            # for a few us (zlib's fastest level: the texts read again are few)
            self._body = zlib.compress(body.encode("utf-8", "surrogatepass"), 1)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _packed(hashes: frozenset[int]) -> bytes:
    """A sketch's hashes, 8 bytes each."""
    return array("q", hashes).tobytes()


def packed_array(code: str, values: Collection[int]) -> array[int]:
    """An array of exactly the values' size (one filled from a set grows as it goes: up to
    32 bytes more each, and a window keeps two per step)."""
    return array(code, list(values))
