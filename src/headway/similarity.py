"""Near-duplicate results (semantics §3): normalise, then 5-gram Jaccard."""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Collection, Sequence

Normalizer = Callable[[str], str]

_VOLATILE = re.compile(
    r"(?=[0-9a-fA-F])(?:"  # every alternative starts with a hex digit: other positions fail fast
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"  # timestamps
    r"|\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"  # clock times with seconds
    r"|\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"  # UUIDs
    r"|\b[0-9a-f]{16,}\b"  # long hex ids and hashes (see _volatile)
    r")"
)


def _volatile(m: re.Match[str]) -> str:
    token = m.group()
    if token.isdigit() or token.isalpha():  # a long number or word, not an id
        return token
    return "#"


_WRAPPERS = re.compile(r"</?(?:returncode|output|stdout|stderr|warning)>")


# ASCII hex digits (either case) as "x", ":" and "-" kept, every other byte a space: what
# each of _VOLATILE's patterns needs shows in the result as "xx-xx" (a timestamp, a UUID),
# "x:xx:xx" (a clock time) or a run of 16 x's (a long hex id)
_SHAPES = bytes(
    120 if chr(c) in "0123456789abcdefABCDEF" else c if chr(c) in ":-" else 32 for c in range(256)
)
_HEX_RUN = "x" * 16


_VOLATILE_KIND: set[Normalizer] = set()


def volatile(fn: Normalizer) -> Normalizer:
    """Mark a normaliser as stripping volatile parts (timestamps, ids, hashes): it is
    applied only when a result is compared with the previous result of the same read with
    the same arguments. Between other results those parts are content (a new commit hash,
    a converted time). Normalisers not marked (wrappers, an envelope) apply everywhere."""
    _VOLATILE_KIND.add(fn)
    return fn


def is_volatile(fn: Normalizer) -> bool:
    return fn in _VOLATILE_KIND


def volatile_tokens(text: str) -> set[str]:
    """The timestamps, clock times, UUIDs and long hex ids in a text."""
    return {t for t in _VOLATILE.findall(text) if not (t.isdigit() or t.isalpha())}


_ID_LIKE = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]*[0-9][0-9A-Za-z_-]*")
_MAX_IDS = 64


def identifiers(text: str) -> set[str]:
    """What in a text may name something: volatile tokens, and words of 3 digits or more
    or of 7 or more hex digits (an order number, a short commit hash); at most 64."""
    found = volatile_tokens(text)
    for token in _ID_LIKE.findall(text):
        if len(found) >= _MAX_IDS:
            break
        digits = sum(ch.isdigit() for ch in token)
        if digits >= 3 or (len(token) >= 7 and _HEXISH.fullmatch(token)):
            found.add(token)
    return found


_HEXISH = re.compile(r"[0-9a-f]+")


@volatile
def strip_volatile(text: str) -> str:
    """Replace timestamps, clock times, UUIDs and long hex ids by placeholders."""
    # a text that cannot hold a match is returned as it is: the regex tries each hex digit
    # in turn (about 1 us on a short result, the largest part of judging one; 90 us on
    # 3 KB). Outside ASCII, \d matches other digits too: the regex decides
    if text.isascii():
        shapes = text.encode().translate(_SHAPES).decode()  # str: its search is cheaper
        if "xx-xx" not in shapes and "x:xx:xx" not in shapes and _HEX_RUN not in shapes:
            return text
    return _VOLATILE.sub(_volatile, text)


def strip_wrappers(text: str) -> str:
    """Drop fixed wrappers such as ``<returncode>`` that make every output look alike."""
    return _WRAPPERS.sub("", text) if "<" in text else text


# element references in a browser's serialised page ("[123]<button", "*[123]<div" for an
# element new since the last step): renumbered from one step to the next, not content
_REFS = re.compile(r"\*?\[\d+\](?=<)")


def strip_element_refs(text: str) -> str:
    """Replace a browser page's element numbers (``[123]<div ...``) by ``[#]``."""
    return _REFS.sub("[#]", text) if "]<" in text else text


DEFAULT_NORMALIZERS: tuple[Normalizer, ...] = (strip_wrappers, strip_volatile)
SHORT = 64  # results shorter than this (after normalisation) compare exactly
_CAP = 2048  # head and tail kept for shingling: similarity cost is bounded per result


def apply(text: str, normalizers: Sequence[Normalizer]) -> str:
    """The normalisers applied in order (line breaks kept)."""
    for fn in normalizers:
        text = fn(text)
    return text


def normalize(text: str, normalizers: Sequence[Normalizer]) -> str:
    return " ".join(apply(text, normalizers).split())


UNITS = 256  # content units kept per result: memory and cost per step stay bounded


def stable_hash(text: str) -> int:
    """A 64-bit hash that is the same in every process (``hash()`` of a str is salted per
    process): content units and probes travel with a session's state to other workers."""
    data = text.encode("utf-8", "surrogatepass")
    return zlib.crc32(data) | (zlib.adler32(data) << 32)


def content_units(text: str) -> frozenset[int]:
    """The content of a (normalised) result as hashes of its lines, whitespace collapsed;
    a long result's lines are grouped into at most ``UNITS`` runs. A unit the window has
    not seen is new content: one changed line of a large page is new."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    lines = [line for line in lines if line]
    if len(lines) > UNITS:
        size = -(-len(lines) // UNITS)
        lines = ["\n".join(lines[i : i + size]) for i in range(0, len(lines), size)]
    return frozenset(map(stable_hash, lines))


_WORDS = re.compile(r"[^\W\d_]+")


# ASCII letters lower-cased, every other byte a space: for ASCII text the words that
# _WORDS finds are the runs of letters this leaves (a translate and a split in C, about a
# fifth of the regex's time on a call's arguments)
_ASCII_LETTERS = bytes(
    c | 0x20 if chr(c).isascii() and chr(c).isalpha() else 32 for c in range(256)
)


def query_shape(args: str) -> str:
    """The words of a call's arguments, lowercased, without digits and punctuation.
    Cosmetic variants of one query share it (``launchcode*``, ``*launchcode*``,
    ``.launchcode*``; the same read at another offset); different queries do not."""
    if args.isascii():
        return b" ".join(args.encode().translate(_ASCII_LETTERS).split()).decode()
    return " ".join(_WORDS.findall(args.lower()))


def shingles(text: str) -> frozenset[str]:
    """Character 5-grams of the (capped) text."""
    if len(text) > 2 * _CAP:
        text = text[:_CAP] + "\x00" + text[-_CAP:]
    return frozenset([text[i : i + 5] for i in range(max(1, len(text) - 4))])


_ANCHORED = re.compile(r"(?=\b(\w.{4}))", re.DOTALL)
SKETCH_MIN = 16  # fewer anchors than this: the sketch says nothing, compare exactly
SKETCH_FLOOR = 0.5  # sketch similarity below this: certainly not a near-duplicate


def sketch(text: str) -> frozenset[str]:
    """The 5-grams that start at a word boundary: a small, position-independent sample of
    the shingles (one regex pass in C). Its Jaccard tracks the full one closely enough to
    reject clearly different results before the exact comparison."""
    if len(text) > 2 * _CAP:
        text = text[:_CAP] + "\x00" + text[-_CAP:]
    return frozenset(_ANCHORED.findall(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def overlap(a: Collection[int], b: Collection[int]) -> float:
    """The Jaccard of two sketches of distinct hashes, either a set or a packed sequence
    (a window step keeps its sketch as bytes: 8 a hash, not a set's ~70)."""
    if not a and not b:
        return 1.0
    if not isinstance(a, (set, frozenset)):
        a, b = b, a
    if not isinstance(a, (set, frozenset)):
        a = frozenset(a)
    inter = len(a.intersection(b))
    return inter / (len(a) + len(b) - inter)


def could_be_similar(len_a: int, len_b: int, threshold: float) -> bool:
    """Cheap pre-filter: shingle sets of very different sizes cannot reach the threshold."""
    small, large = sorted((len_a, len_b))
    return large == 0 or small / large >= threshold
