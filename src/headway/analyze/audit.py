"""headway's own audit trail: ``JSONLSink`` lines, or the ``headway_audit`` table of a
``SQLiteAuditSink`` file (a path, or a ``sqlite:///`` URL). One record per call.

The audit keeps argument text (redacted, cut at 1,000 characters) and a digest of each
result, not the result: the digest stands in for it, so results compare exactly.
Records of concurrent sessions interleave, so a file's sessions are grouped before
replay (the records' few fields only).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ._lines import json_lines
from ._model import Call, Problem, Run


def _args(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # cut at 1,000 characters: the text still identifies the call


def _table(path: Path) -> Iterator[tuple[int, Any] | Problem]:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT id, record FROM headway_audit ORDER BY id")
            for rowid, text in rows:
                try:
                    yield rowid, json.loads(text)
                except json.JSONDecodeError as exc:
                    yield Problem(str(path), rowid, f"audit row is not valid JSON ({exc.msg})")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        yield Problem(str(path), 0, f"cannot read the headway_audit table ({exc})")


def read(path: Path, *, sqlite: bool = False) -> Iterator[Run | Problem]:
    """The sessions of an audit file (``sqlite``: a SQLite file; a Problem's line is then
    the row id)."""
    source = path.name.split(".")[0]
    sessions: dict[str, list[tuple[int, Call]]] = {}
    records: Iterable[tuple[int, Any] | Problem] = _table(path) if sqlite else json_lines(path)
    for item in records:
        if isinstance(item, Problem):
            yield item
            continue
        number, rec = item
        if not isinstance(rec, Mapping) or "session" not in rec or "tool" not in rec:
            yield Problem(str(path), number, "not a headway audit record (needs session and tool)")
            continue
        if rec.get("coalesced"):
            continue  # a follower of a parallel batch: one call, recorded once per caller
        status = str(rec.get("status") or "")
        result = str(rec.get("result_digest") or rec.get("error") or "")
        calls = sessions.setdefault(str(rec["session"]), [])
        step = rec.get("step")
        call = Call(
            str(rec["tool"]),
            _args(rec.get("args")),
            result,
            result,
            str(rec.get("agent") or ""),
            rec.get("time") if isinstance(rec.get("time"), int | float) else None,
            status == "error",
        )
        calls.append((step if isinstance(step, int) else len(calls), call))
    for session, calls in sessions.items():
        yield Run(source, session, [c for _, c in sorted(calls, key=lambda sc: sc[0])])
