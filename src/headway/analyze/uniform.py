"""The uniform trace format: ``NAME.calls.jsonl.gz`` (one call a line, in run order) and,
beside it, ``NAME.runs.jsonl`` (one run a line: ``reward`` or ``outcome``)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._lines import json_lines
from ._model import Call, Problem, Run, digest

_HINTS = ("side_effect", "kind", "malformed")


def outcomes_path(path: Path) -> Path:
    name = path.name
    for suffix in (".calls.jsonl.gz", ".calls.jsonl"):
        if name.endswith(suffix):
            return path.with_name(name[: -len(suffix)] + ".runs.jsonl")
    return path.with_name(name + ".runs.jsonl")


def succeeded(row: Mapping[str, Any]) -> bool | None:
    """A run's recorded verdict: ``success`` / ``passed`` (at the top or in ``outcome``),
    ``outcome.is_resolved``, else ``reward >= 1``; None when the run records none."""
    outcome = row.get("outcome")
    for where in (row, outcome if isinstance(outcome, Mapping) else {}):
        for field in ("success", "passed", "is_resolved"):
            if isinstance(where.get(field), bool):
                return bool(where[field])
    reward = row.get("reward")
    if isinstance(reward, int | float) and not isinstance(reward, bool):
        return reward >= 1
    return None


def _outcomes(path: Path) -> dict[str, bool | None]:
    if not path.exists():
        return {}
    out: dict[str, bool | None] = {}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # the outcomes are extra information: a bad line loses only that
            if isinstance(row, Mapping) and "run_id" in row:
                out[str(row["run_id"])] = succeeded(row)
    return out


def not_a_call(rec: Mapping[str, Any]) -> bool:
    """Records no governor would see: a harness's answer to a badly formatted reply
    (mini-swe-agent's ``n_bash_blocks``), a delegation whose reply was not recorded."""
    args = rec.get("args")
    if isinstance(args, Mapping) and "n_bash_blocks" in args:
        return True
    return rec.get("kind") == "delegation" and not rec.get("obs_len")


def _call(rec: Mapping[str, Any]) -> Call:
    text = rec.get("observation")
    text = text if isinstance(text, str) else ""
    length = rec.get("obs_len")
    if isinstance(length, int) and length > len(text):
        # cut at 800 characters: the note keeps different full results distinct as text
        text += f"\n[... {length} characters in all, sha1 {str(rec.get('obs_sha1'))[:12]}]"
    return Call(
        tool=str(rec["tool"]),
        args=rec.get("args"),
        result=text,
        result_id=str(rec.get("obs_sha1") or digest(text)),
        agent=str(rec.get("agent") or ""),
        hints={k: rec[k] for k in _HINTS if k in rec},
        size=length if isinstance(length, int) else -1,
    )


def read(path: Path) -> Iterator[Run | Problem]:
    """Runs in file order (a run's records are consecutive); memory holds one run."""
    outcomes = _outcomes(outcomes_path(path))
    current: list[tuple[int, Call]] = []
    skipped = 0
    key: tuple[str, str] | None = None
    for item in json_lines(path):
        if isinstance(item, Problem):
            yield item
            continue
        number, rec = item
        if not isinstance(rec, Mapping) or "run_id" not in rec or "tool" not in rec:
            yield Problem(str(path), number, "not a uniform call record (needs run_id and tool)")
            continue
        rec_key = (str(rec.get("source") or path.name.split(".")[0]), str(rec["run_id"]))
        if key is not None and rec_key != key:
            yield _run(key, current, skipped, outcomes)
            current, skipped = [], 0
        key = rec_key
        if not_a_call(rec):
            skipped += 1
            continue
        step = rec.get("step")
        current.append((step if isinstance(step, int) else len(current), _call(rec)))
    if key is not None:
        yield _run(key, current, skipped, outcomes)


def _run(
    key: tuple[str, str],
    calls: list[tuple[int, Call]],
    skipped: int,
    outcomes: Mapping[str, bool | None],
) -> Run:
    source, run_id = key
    ordered = [c for _, c in sorted(calls, key=lambda sc: sc[0])]
    return Run(source, run_id, ordered, outcomes.get(run_id), skipped)
