"""Which reader reads a file (``--format auto``), and reading many paths as one stream.

Detection looks at the first records of a JSON Lines file (up to ``_SCAN_LINES`` lines:
a Claude Code transcript may begin with summaries), else at the whole file as one JSON
document when it is at most ``MAX_DOCUMENT`` bytes. When it recognises nothing it says
why: an empty file, a document cut short, one too large to load for a look, or JSON of
no known shape (naming its keys). A file that is read but holds no tool call is a
problem too, never an all-zero report.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from . import agents_sdk, audit, chat, claude_code, inspect_log, langsmith, otel, responses, uniform
from ._lines import json_document, open_text
from ._model import Problem, Run

FORMATS = ("auto", "uniform", "openai", "anthropic", "tau-bench", "inspect", "claude-code",
           "openai-agents", "langsmith", "responses", "otel", "audit")  # fmt: skip
MAX_DOCUMENT = 200_000_000  # bytes: a larger JSON document is not loaded whole to detect it
_SCAN_LINES = 50
_COMPANION = ".runs.jsonl"  # the uniform format's outcomes, read with its calls file


def files(paths: Iterable[str | Path]) -> Iterator[tuple[Path, bool]]:
    """(path, listed): the files named, and every file in a named directory (sorted, not
    recursive; ``listed``); the uniform format's ``*.runs.jsonl`` are read with their
    calls, not on their own."""
    for name in map(str, paths):
        p = Path(name.removeprefix("sqlite:///")) if name.startswith("sqlite:///") else Path(name)
        if p.is_dir():
            for child in sorted(p.iterdir()):
                if child.is_file() and not child.name.endswith(_COMPANION):
                    yield child, True
        else:
            yield p, False


def _kind(obj: Any) -> str | None:
    """The format of one record or document, or None."""
    if isinstance(obj, Mapping):
        if "resourceSpans" in obj:
            return "otel"
        if "run_id" in obj and "tool" in obj:
            return "uniform"
        if "session" in obj and "tool" in obj and ("args_digest" in obj or "status" in obj):
            return "audit"
        if claude_code.is_line(obj):
            return "claude-code"
        if agents_sdk.is_record(obj):
            return "openai-agents"
        if langsmith.is_record(obj):
            return "langsmith"
        if responses.is_item(obj) or (obj.get("object") == "response" and responses.has_calls(obj)):
            return "responses"
        if isinstance(obj.get("traj"), list):
            return "tau-bench"
        if isinstance(obj.get("samples"), list) and "eval" in obj:
            return "inspect"
        if isinstance(obj.get("messages"), list):
            return _kind(obj["messages"])
        for key in ("conversations", "data", "runs", "spans"):
            if isinstance(obj.get(key), list):
                return _kind(obj[key][0] if obj[key] else None)
        if responses.has_calls(obj):
            return "responses"
    if isinstance(obj, list) and obj:
        if any(responses.is_item(i) for i in obj):
            return "responses"
        if all(isinstance(m, Mapping) and "role" in m for m in obj):
            return "anthropic" if chat.is_anthropic(obj) else "openai"
        return _kind(obj[0])
    return None


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _scan(path: Path) -> tuple[str | None, int, Any]:
    """(format, JSON lines parsed, the first parsed value) from the first lines."""
    parsed, first = 0, None
    with open_text(path) as fh:
        for n, line in enumerate(fh):
            if n >= _SCAN_LINES:
                break
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                break
            parsed += 1
            first = obj if parsed == 1 else first
            kind = _kind(obj)
            if kind is not None:
                return kind, parsed, first
    return None, parsed, first


def _shape(obj: Any) -> str:
    if isinstance(obj, Mapping):
        return "an object with keys " + ", ".join(sorted(map(str, obj))[:8])
    if isinstance(obj, list):
        return f"a list of {len(obj)}" + (f", the first {_shape(obj[0])}" if obj else "")
    return f"a JSON {type(obj).__name__}"


def _detect(path: Path) -> tuple[str, bool] | str:
    """(format, jsonl), or why the file is no format this reads."""
    if _is_sqlite(path):
        return "audit", False
    if inspect_log.is_eval(path):
        return "inspect", False
    try:
        if path.stat().st_size == 0:
            return "empty file"
        kind, parsed, first = _scan(path)
    except (OSError, EOFError, UnicodeError) as exc:
        return f"cannot be read ({exc})"
    if kind is not None:
        return kind, True
    size = path.stat().st_size
    if size > MAX_DOCUMENT and parsed == 0:
        return (
            f"not JSON Lines, and as one JSON document its {size / 1e6:.0f} MB are over the "
            f"{MAX_DOCUMENT // 1_000_000} MB that detection loads whole: name its format with "
            "--format (it is then read whole into memory), or convert it to JSON Lines, one "
            "run a line (streamed)"
        )
    doc = json_document(path) if parsed <= 1 else first
    if isinstance(doc, Problem):
        if doc.message.startswith(("empty", "truncated")):
            return doc.message
        return f"not JSON or JSON Lines ({doc.message} at line {doc.line})"
    kind = _kind(doc)
    if kind is not None:
        return kind, False
    return (
        f"JSON of no known trace shape ({_shape(doc)}); name one with --format "
        f"({', '.join(FORMATS[1:])})"
    )


def detect(path: Path) -> tuple[str, bool] | None:
    """(format, jsonl) of a file, or None when it is no format this reads. A SQLite file
    is headway's audit table: ("audit", False)."""
    found = _detect(path)
    return None if isinstance(found, str) else found


def _reader(path: Path, fmt: str, jsonl: bool) -> Iterator[Run | Problem]:
    if fmt == "uniform":
        return uniform.read(path)
    if fmt == "audit":
        return audit.read(path, sqlite=_is_sqlite(path))
    if fmt == "otel":
        return otel.read(path, jsonl=jsonl)
    if fmt == "claude-code":
        return claude_code.read(path)
    if fmt == "openai-agents":
        return agents_sdk.read(path, jsonl=jsonl)
    if fmt == "langsmith":
        return langsmith.read(path, jsonl=jsonl)
    if fmt == "responses":
        return responses.read(path, jsonl=jsonl)
    if fmt == "inspect" and inspect_log.is_eval(path):
        return inspect_log.read(path)
    if fmt in ("openai", "anthropic", "tau-bench", "inspect"):
        return chat.read(path, anthropic=fmt == "anthropic", jsonl=jsonl)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def read(path: Path, fmt: str = "auto", *, listed: bool = False) -> Iterator[Run | Problem]:
    """The runs in one file (and the Problems met on the way). A file found in a
    directory (``listed``) that is no trace (a README) is skipped with a note, unless it
    is named like line data (``.jsonl``, ``.gz``): then it is a damaged trace. A file
    read without one tool call in it is a Problem: never a silent empty report."""
    if not path.exists():
        yield Problem(str(path), 0, "no such file or directory")
        return
    found = _detect(path)
    if fmt == "auto":
        if isinstance(found, str):
            # in a directory, a file not named like data (a README, notes) is skipped with a
            # note; one named like data, or cut short, is a damaged trace: an error
            data = path.name.endswith((".jsonl", ".gz", ".eval")) or found.startswith("truncated")
            skip = listed and not data
            damaged = found.startswith(("empty", "truncated"))  # not a question of format
            message = found if damaged else f"not a recognised trace format: {found}"
            yield Problem(str(path), 0, message, skip)
            return
        fmt = found[0]
    jsonl = found[1] if isinstance(found, tuple) else path.name.endswith((".jsonl", ".jsonl.gz"))
    calls = runs = problems = 0
    for item in _reader(path, fmt, jsonl):
        if isinstance(item, Run):
            runs += 1
            calls += len(item.calls)
        else:
            problems += 1
        yield item
    if calls == 0 and not problems:
        yield Problem(
            str(path),
            0,
            f"read as {fmt}, but no tool calls found in it ({runs} runs); if it holds tool "
            f"calls in another layout, name the format with --format ({', '.join(FORMATS[1:])})",
        )


def read_all(paths: Iterable[str | Path], fmt: str = "auto") -> Iterator[Run | Problem]:
    for path, listed in files(paths):
        yield from read(path, fmt, listed=listed)
