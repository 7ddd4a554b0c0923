"""Which reader reads a file (``--format auto``), and reading many paths as one stream."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from . import audit, chat, otel, uniform
from ._lines import json_document, open_text
from ._model import Problem, Run

FORMATS = ("auto", "uniform", "openai", "anthropic", "otel", "audit")
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


def _first_json_line(path: Path) -> Any:
    with open_text(path) as fh:
        for line in fh:
            if line.strip():
                try:
                    return json.loads(line)
                except json.JSONDecodeError:
                    return None
    return None


def _kind(obj: Any) -> str | None:
    if isinstance(obj, Mapping):
        if "resourceSpans" in obj:
            return "otel"
        if "run_id" in obj and "tool" in obj:
            return "uniform"
        if "session" in obj and "tool" in obj and ("args_digest" in obj or "status" in obj):
            return "audit"
        if "messages" in obj:
            return _kind(obj["messages"])
        if "conversations" in obj:
            return _kind(obj["conversations"][0] if obj["conversations"] else None)
    if isinstance(obj, list) and obj:
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


def detect(path: Path) -> tuple[str, bool] | None:
    """(format, jsonl) of a file, or None when it is no format this reads. A SQLite file
    is headway's audit table: ("audit", False)."""
    if _is_sqlite(path):
        return "audit", False
    try:
        first = _first_json_line(path)
    except (OSError, EOFError, UnicodeError):
        return None
    kind = _kind(first)
    if kind is not None:
        return kind, True
    if path.stat().st_size > 200_000_000:
        return None  # not line-oriented and too large to look at as one document
    doc = json_document(path)
    kind = None if isinstance(doc, Problem) else _kind(doc)
    return (kind, False) if kind is not None else None


def read(path: Path, fmt: str = "auto", *, listed: bool = False) -> Iterator[Run | Problem]:
    """The runs in one file (and the Problems met on the way). A file found in a
    directory (``listed``) that is no trace (a README) is skipped with a note, unless it
    is named like line data (``.jsonl``, ``.gz``): then it is a damaged trace."""
    if not path.exists():
        yield Problem(str(path), 0, "no such file or directory")
        return
    found = detect(path)
    if fmt == "auto":
        if found is None:
            skip = listed and not path.name.endswith((".jsonl", ".gz"))
            yield Problem(str(path), 0, "not a recognised trace format (use --format)", skip)
            return
        fmt = found[0]
    jsonl = found[1] if found is not None else path.name.endswith((".jsonl", ".jsonl.gz"))
    if fmt == "uniform":
        yield from uniform.read(path)
    elif fmt == "audit":
        yield from audit.read(path, sqlite=_is_sqlite(path))
    elif fmt == "otel":
        yield from otel.read(path, jsonl=jsonl)
    elif fmt in ("openai", "anthropic"):
        yield from chat.read(path, anthropic=fmt == "anthropic", jsonl=jsonl)
    else:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def read_all(paths: Iterable[str | Path], fmt: str = "auto") -> Iterator[Run | Problem]:
    for path, listed in files(paths):
        yield from read(path, fmt, listed=listed)
