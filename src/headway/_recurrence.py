"""Recurrence (semantics §3, §4.1): the same target reaching the same state again with
nothing new since the last time: a loop whatever the arguments look like.

Exact keys miss the loops of browser and exploring agents. A browser renumbers its
elements on every step, so clicking the same icon seven times is seven different calls;
opening and closing a dropdown alternates between two pages; a reworded search that finds
nothing echoes its own words back. What stays the same is what a loop is made of:

- the *target*: an element is what it is (its tag, label and text as the page the agent
  saw shows it), not the number the page gave it this step. A tool's target arguments
  (``ToolSpec.targets``, by default ``index``) are read as element numbers when the last
  page shows that number (``[123]<button ...``), and replaced by that element;
- the *state*: the result with the page's element numbers and the echo of the call's own
  arguments in its first line set aside (volatile parts are content between calls);
- *nothing new*: every step since the last time this (target, state) came up showed
  content the window had already seen, and no write with new arguments ran. A page's
  content is its elements, not the report above them: a look that reports something
  about a page that did not change (``find_elements``, ``evaluate``) is nothing new.

The third time a (target, state) comes up with nothing new since the second, the step
gets a correction (signal ``recurrence``). A long result (a page) is a state in its own
right: the same tool reaching the same page three times with nothing new between is a
recurrence whatever the arguments of the read (scrolling a page that no longer moves, reworded
searches on an unchanged page), unless the call acts on an element: then the element is
the target (five fields filled on one page are five targets). A short one ("Clicked", "[]") says little of the state: it counts
only with the same target. Exact repeats, cycles of period 2 and more (alternation) and
reworded queries are all recurrences. Only a correction: the mark stays as the progress
rules set it, so this never stops a run on its own.

State per session: one entry per window step (its tool and three 64-bit digests, packed in
one array: ~40 bytes a step, not the ~200 of a tuple of int objects) and a reference to
the last result that shows element numbers (a browser's page, up to 64 KiB: where the
next call's numbers are read) with its digest. A session record carries the entries, not
the page.
"""

from __future__ import annotations

import hashlib
import re
from array import array
from collections.abc import Sequence
from typing import Any

import orjson

from .similarity import SHORT, stable_hash

_REF = re.compile(r"\[\d+\]<")  # an element number on a browser page (a literal start: fast)
_TIMES = 3  # the third time a (target, state) comes up: as the read repeat and cycle rules
_PAGE_KEPT = 65_536  # characters of the last page kept to read element numbers from
_CONTEXT_LINES = 12  # lines after an element looked at for the text that names it
_CONTEXT_CHARS = 2048
_CONTEXT_TEXTS = 2  # texts that name an element: a row's sender and subject
_ECHO_MIN = 3
_BLANK_MAX = 256  # a body longer than this is not looked at for being only blanks  # text arguments shorter than this are not looked for in the result


_MASK = (1 << 64) - 1
_WIDTH = 4  # words an entry takes in Recurrence._words: target, state, body, new


class Recurrence:
    """One session's recurrence window (I/O-free)."""

    __slots__ = ("_page", "_size", "_texts", "_tools", "_view", "_words")

    def __init__(self, window: int) -> None:
        self._size = window  # entries kept: the window's steps
        # an entry: its tool here, and in _words the hash of the tool's arguments with
        # element numbers read as elements, the digest of the result as a state (0 when
        # there is none to compare), the digest of what the result shows past the tool's
        # report of what it did, and whether the step brought something new (1 or 0)
        self._tools: list[str] = []
        self._words = array("Q")
        self._page: str | None = None
        self._view = 0  # the state digest of that page
        # each entry's JSON text once ``texts()`` was asked (a session shared by workers
        # writes its window at every step): None where not yet encoded
        self._texts: list[str | None] | None = None

    def clear(self) -> None:
        """A new user turn: nothing counted before it counts after."""
        self._tools.clear()
        del self._words[:]
        self._texts = None
        self._page = None
        self._view = 0

    def observe(
        self,
        tool: str,
        args: str,
        args_id: str,
        text: str | None,
        *,
        targets: Sequence[str],
        read: bool,
        fresh_write: bool,
    ) -> int:
        """Record a step; return how many times its (target, state) has come up, counted
        back to the last step that brought something new (0 below three).

        ``args`` is the call's canonical JSON as the audit shows it (cut past 300
        characters), ``args_id`` a digest of the whole of it; ``text`` its result, None
        when there is no result to compare (an error, a served result); ``read`` whether
        the call is a read (a write's result is its acknowledgement, not a state: only the
        same write counts); ``fresh_write`` a write with arguments not seen before
        (progress by §4.1)."""
        parsed = _parse(args)
        resolved, element = self._target(parsed, args, targets)
        # the whole arguments' digest (``args`` is cut for the audit) unless an element
        # stands for its number
        target = stable_hash(resolved if element else tool + "\x1f" + args_id)
        if text is None:
            self._push(tool, target, 0, 0, fresh_write)
            return 0
        state, body = _state(text, parsed)
        # a read's page is a state in its own right, unless an element is acted on
        page = read and len(text) >= SHORT and not element
        times = 1
        tools, words = self._tools, self._words
        states = words[1::_WIDTH]
        if state in states:  # else none of the steps comes up again (a scan in C)
            # as lists: reading an array's item makes an int object, a list's does not
            states_, targets_, news = states.tolist(), words[::_WIDTH].tolist(), words[3::_WIDTH]
            for i in range(len(tools) - 1, -1, -1):
                if states_[i] == state and tools[i] == tool and (page or targets_[i] == target):
                    times += 1
                elif news[i]:  # 0 or 1: no int object made
                    break
        # new: what the result shows (a page past the line reporting the action: a page
        # navigated to again is not new) was not in the window
        new = fresh_write or body not in words[2::_WIDTH]
        self._push(tool, target, state, body, new)
        if "]<" in text:  # a page with element numbers: the next call's numbers refer to it
            self._page, self._view = text[:_PAGE_KEPT], state
        return times if times >= _TIMES else 0

    def probe(self, tool: str, args: str, norm: str, targets: Sequence[str]) -> int:
        """A short answer's probe (``Window.probes``: a tool, the words of its query and
        the answer) for a call that acts on an element: the element, not the words of its
        arguments (``{"index": 12}`` and ``{"index": 40}`` have the same words), on the
        page it was read from: the same element on a page that changed since is a new
        target (a row unticked again by a reload). A number the last page does not show
        (or before any page) still names one element: it is kept as it is, digits and
        all. 0 when the call has no target argument."""
        target, element = self._target(_parse(args), args, targets)
        if not element:
            return 0
        return stable_hash(f"{tool}\x1f{target}\x1f{self._view}\x1f{norm}") or 1

    def dump(self) -> list[list[Any]]:
        """The window's entries as JSON (a session record); the last page is not kept."""
        return [self._entry(i) for i in range(len(self._tools))]

    def texts(self) -> list[str]:
        """``dump()``'s entries as JSON texts, each encoded once."""
        texts = self._texts
        if texts is None:
            texts = self._texts = [None] * len(self._tools)
        for i, text in enumerate(texts):
            if text is None:
                texts[i] = orjson.dumps(self._entry(i)).decode()
        return list(texts)  # type: ignore[arg-type]  # a copy, every item encoded above

    def _entry(self, i: int) -> list[Any]:
        """The ``i``-th entry as JSON: its tool, three digests and whether it was new."""
        at = i * _WIDTH
        words = self._words
        return [self._tools[i], *words[at : at + _WIDTH - 1], bool(words[at + _WIDTH - 1])]

    def load(self, entries: Sequence[Sequence[Any]]) -> None:
        """Replace the window by ``dump()``'s entries (of any worker)."""
        self.clear()
        for e in entries:  # the digests are 64-bit: a record holds no other
            self._push(
                str(e[0]), int(e[1]) & _MASK, int(e[2]) & _MASK, int(e[3]) & _MASK, bool(e[4])
            )

    def _push(self, tool: str, target: int, state: int, body: int, new: bool) -> None:
        """Append an entry, dropping the oldest past the window's size."""
        self._tools.append(tool)
        self._words.extend((target, state, body, new))
        texts = self._texts
        if texts is not None:
            texts.append(None)
        if len(self._tools) > self._size:
            del self._tools[0]
            del self._words[:_WIDTH]
            if texts is not None:
                del texts[0]

    def _target(self, parsed: object, args: str, targets: Sequence[str]) -> tuple[str, bool]:
        """The call's arguments with each target argument that names an element of the
        last page replaced by that element (its tag, attributes and text), and whether
        one did."""
        if not targets or not isinstance(parsed, dict):
            return args, False
        named = {t: parsed[t] for t in targets if t in parsed}
        if not named:
            return args, False
        page = self._page
        resolved = dict(parsed)
        for name, value in named.items():
            element = None if page is None else _element(page, value)
            resolved[name] = element if element is not None else value
        return orjson.dumps(resolved, option=orjson.OPT_SORT_KEYS).decode(), True


def _parse(args: str) -> object:
    try:
        return orjson.loads(args)
    except orjson.JSONDecodeError:  # cut for the audit, or not JSON: compared as text
        return None


def _element(page: str, value: object) -> str | None:
    """What the element numbered ``value`` is on ``page``: its line without the number,
    and the first texts under it or after it in its parent (a row's check box is told from
    the next row's by the row's text); None when the page has no such element."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit():
        return None
    at = page.find(f"[{value}]<")
    if at < 0:
        return None
    start = page.rfind("\n", 0, at) + 1
    lines = page[start : start + _CONTEXT_CHARS].split("\n", _CONTEXT_LINES + 1)
    own = lines[0]
    depth = len(own) - len(own.lstrip())
    texts: list[str] = []
    for line in lines[1 : _CONTEXT_LINES + 1]:
        stripped = line.strip()
        if not stripped:
            continue
        if len(line) - len(line.lstrip()) < depth:
            break  # out of the element's parent
        if "]<" not in stripped:
            texts.append(stripped)
            if len(texts) == _CONTEXT_TEXTS:
                break
    return " ".join(_REF.sub("<", own).replace("*<", "<").split()) + " | " + " | ".join(texts)


def _state(text: str, parsed: object) -> tuple[int, int]:
    """Digests of the result as a state, and of what it shows past its first line (the
    tool's report of what it did) when it shows more. Element numbers (and the mark of an
    element new since the last step) and the echo of the call's own arguments in the
    report ('No matches for "X"') are set aside. Volatile parts are not: between calls
    with other arguments they are content (semantics §3)."""
    page = "]<" in text
    if page:
        text = _REF.sub("[#]<", text)
        if "*[#]<" in text:
            text = text.replace("*[#]<", "[#]<")
    data = text.encode("utf-8", "surrogatepass")  # one copy: the body is hashed in place
    cut = data.find(b"\n")
    first = text if cut < 0 else text[: text.find("\n")]
    if cut >= 0 and isinstance(parsed, dict):  # a one-line result is all answer, no report
        for value in parsed.values():
            if isinstance(value, str) and len(value) >= _ECHO_MIN and value in first:
                first = first.replace(value, "\x00")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                first = re.sub(rf"(?<![\d.]){re.escape(str(value))}(?![\d.])", "\x00", first)
    body = view = 0
    if cut >= 0 and (len(data) - cut > _BLANK_MAX or data[cut + 1 :].strip()):
        at = data.find(b"[#]<", cut) if page else -1
        if at >= 0:  # a page: what it shows is its elements, whatever the report above them
            at = data.rfind(b"\n", 0, at) + 1
            view = _hash(memoryview(data)[at:])  # each byte hashed once: the page is long
            body = _hash(f"{_hash(memoryview(data)[cut + 1 : at])}:{view}".encode())
        else:
            body = _hash(memoryview(data)[cut + 1 :])
    head = _hash(first.strip().encode("utf-8", "surrogatepass"))
    return _hash(f"{head}:{body}".encode()), view or body or head


def _hash(data: bytes | memoryview) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") or 1
