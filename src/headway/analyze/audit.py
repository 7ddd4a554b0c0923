"""headway's own audit trail (``JSONLSink`` lines): one record per call.

The audit keeps argument text (redacted, cut at 1,000 characters) and a digest of each
result, not the result: the digest stands in for it, so results compare exactly.
Records of concurrent sessions interleave, so a file's sessions are grouped before
replay (the records' few fields only).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
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


def read(path: Path) -> Iterator[Run | Problem]:
    source = path.name.split(".")[0]
    sessions: dict[str, list[tuple[int, Call]]] = {}
    for item in json_lines(path):
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
