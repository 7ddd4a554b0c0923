"""The window as stored in a session record (a session shared by workers through the
store): ``snapshot()`` and ``restore()``.

The format is fixed: stores hold records written by earlier versions, and any worker
reads any other's. A record is a JSON object::

    {"w": [step, ...],        # the window's steps, oldest first (one list each, below)
     "last": [i, ...],        # the last result of each call, as indexes into "w"
     "page": i,               # the window's last long result (-1: none)
     "rk": key, "r": n,       # the repeat: the key and how many calls in a row had it
     "np": n, "lp": index,    # the no-progress run, the last step marked progress
     "n": n,                  # steps ever pushed (the window's version)
     "ver": {tool: version},  # absent in a record written before versions were kept
     "err": {tool: [fingerprint, run]}, "polls": {key: [polls, since]},
     "lv": {tool: value},     # each tool's last result, when small and JSON
     "rc": [[tool, target, state, body, new], ...]}  # the recurrence's entries (absent
                              # in older records; its last page is not kept)

A step is ``[index, tool, key, args_id (null when the key holds it), effect, status,
text head, text length, norm (head and tail past 4 KiB), nkey (null when norm is its own
key), nlen, error, mark, args, duplicate, unchanged, units (base64 of little-endian
uint64), probe, vkey (absent in older records)]``.
"""

from __future__ import annotations

import base64
import struct
import sys
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ..outcome import CACHED, CORRECTED, ERROR, EXECUTED, FALLBACK, REPLAYED, UNKNOWN
from ._observation import CAPPED, TEXT_KEPT, Observation
from ._window import Window

_VALUE_KEPT = 4096  # a last result kept for progress= and progress_fields up to this size
_STATUS = {s.value: s for s in (CACHED, CORRECTED, ERROR, EXECUTED, FALLBACK, REPLAYED, UNKNOWN)}
_NOT_KEPT = object()


def snapshot(window: Window, lists: bool = True) -> dict[str, Any]:
    """The window and counters as JSON, bounded: per step at most a shingling-sized
    excerpt of its result (compared by digest past that) and the head of its text.
    ``lists=False``: the steps ("w") and the recurrence's entries ("rc") left empty."""
    steps = list(window)
    at = {id(o): i for i, o in enumerate(steps)}
    page = window.page
    w: Any = []
    rc: Any = []
    if lists:
        # one JSON text: each step is encoded once (and kept), and the record's own
        # encoding then copies a string instead of walking every step again
        steps_json, entries = texts(window)
        w = orjson.Fragment("[" + ",".join(steps_json) + "]")
        rc = orjson.Fragment("[" + ",".join(entries) + "]")
    return {
        "w": w,
        "last": [at[id(o)] for o in window.last_of_key.values() if id(o) in at],  # by key
        "page": -1 if page is None else at.get(id(page), -1),
        "rk": window.repeat_key,
        "r": window.repeat,
        "np": window.no_progress_run,
        "lp": window.last_progress_step,
        "n": window.pushed,
        "ver": window.versions,
        "err": {t: list(v) for t, v in window.errors.items()},
        "polls": {k: list(v) for k, v in window.polls.items()},
        "lv": {
            t: v
            for t, v in ((t, _json_copy(v)) for t, v in window.last_value.items())
            if v is not _NOT_KEPT
        },
        "rc": rc,
    }


def texts(window: Window) -> tuple[list[str], list[str]]:
    """The window's steps and its recurrence's entries as JSON texts, each encoded once."""
    return [o._json or _dump_step(o) for o in window], window.recur.texts()


def restore(window: Window, data: Mapping[str, Any]) -> None:
    """Replace the window's state by a ``snapshot()`` (of any worker)."""
    window.user_turn()
    window.load([_load_step(item) for item in data["w"]])
    steps = list(window)
    window.last_of_key = {steps[i].key: steps[i] for i in data["last"] if i < len(steps)}
    page = data["page"]
    window.page = steps[page] if 0 <= page < len(steps) else None
    window.repeat_key, window.repeat = data["rk"], data["r"]
    window.no_progress_run, window.last_progress_step = data["np"], data["lp"]
    window.pushed = data["n"]
    window.versions.clear()
    window.versions.update(data.get("ver", {}))  # not in a record written before them
    window.errors = {t: (v[0], v[1]) for t, v in data["err"].items()}
    window.polls = {k: (v[0], v[1]) for k, v in data["polls"].items()}
    window.last_value = dict(data["lv"])
    window.recur.load(data.get("rc", ()))  # not in a record written before it


def _dump_step(o: Observation) -> str:
    norm = o.norm
    if norm is not None and len(norm) > CAPPED:
        # shingles and sketch read only the head and tail: keep those, compare by digest
        norm = norm[: CAPPED // 2] + "\x00" + norm[-CAPPED // 2 :]
    text = o._text
    size = -1 if text is None else max(len(text), o._size)
    fields = [
        o.index,
        o.tool,
        o.key,
        None if o.key == f"{o.tool}:{o.args_id}" else o.args_id,  # most keys hold it
        o.effect,
        o.status.value,
        None if text is None else text[:TEXT_KEPT],
        size,
        norm,
        # a shorter one is its own excerpt; a retired step keeps only its digest
        o.nkey if o.nlen > CAPPED or (norm is None and o.nlen >= 0) else None,
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
    packed = array("Q", base64.b64decode(units))
    if sys.byteorder == "big":  # _dump_step packs little-endian
        packed.byteswap()
    step.units, step.probe = packed, probe
    step.vkey = item[18] if len(item) > 18 else None  # a record written before it was kept
    if nkey is not None:
        step._nkey = nkey
    step.nlen = nlen
    return step


def _json_copy(value: Any) -> Any:
    """A copy through JSON (the caller may change the value later), when it is small."""
    try:
        text = orjson.dumps(value)
    except Exception:  # not JSON: progress= and progress_fields restart on another worker
        return _NOT_KEPT
    return orjson.loads(text) if len(text) <= _VALUE_KEPT else _NOT_KEPT


__all__ = ["restore", "snapshot"]
