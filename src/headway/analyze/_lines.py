"""Reading input files line by line (gzip transparently), with line numbers for errors."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ._model import Problem


def open_text(path: Path) -> IO[str]:
    """The file as text; gzip (by its magic bytes, whatever the name) is read transparently."""
    with path.open("rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    if gz:
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return path.open(encoding="utf-8", errors="replace")


def json_lines(path: Path) -> Iterator[tuple[int, Any] | Problem]:
    """Each non-blank line parsed as JSON, with its number; a bad line is a Problem and the
    reading goes on; a file cut short (truncated gzip) ends with a Problem."""
    number = 0
    try:
        with open_text(path) as fh:
            for number, line in enumerate(fh, 1):  # the number is reported below
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as exc:
                    yield Problem(str(path), number, _bad_line(line, number, exc))
    except (EOFError, OSError, zlib.error) as exc:
        yield Problem(str(path), number + 1, f"file ends early or is corrupt ({exc})")


def _bad_line(line: str, number: int, exc: json.JSONDecodeError) -> str:
    if not line.endswith("\n"):
        # only the last line of a file can lack its newline: the file was cut there
        return f"truncated at line {number}: the file ends inside this line's JSON ({exc.msg})"
    return f"not valid JSON ({exc.msg}, column {exc.colno})"


def json_document(path: Path) -> Any | Problem:
    """The whole file as one JSON document (formats that are not line-oriented)."""
    try:
        with open_text(path) as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        if not exc.doc.strip():
            return Problem(str(path), 0, "empty file: no JSON in it")
        if exc.pos >= len(exc.doc.rstrip()):
            return Problem(
                str(path),
                exc.lineno,
                f"truncated at line {exc.lineno}: the JSON document ends before it is complete",
            )
        return Problem(str(path), exc.lineno, f"not valid JSON ({exc.msg}, column {exc.colno})")
    except (EOFError, OSError, zlib.error) as exc:
        return Problem(str(path), 0, f"file ends early or is corrupt ({exc})")


def items(path: Path, jsonl: bool) -> Iterator[tuple[int, Any] | Problem]:
    """(line number, value) of each line of a JSONL file, or (0, the document) of a JSON
    file; a Problem where one cannot be read."""
    if jsonl:
        yield from json_lines(path)
        return
    doc = json_document(path)
    yield doc if isinstance(doc, Problem) else (0, doc)


def records(
    path: Path, jsonl: bool, wrappers: tuple[str, ...]
) -> Iterator[tuple[int, Any] | Problem]:
    """The records of a file of records: JSONL (a record, or a list of them, a line) or one
    JSON document (a list, or an object holding the list under one of ``wrappers``)."""
    for item in items(path, jsonl):
        if isinstance(item, Problem):
            yield item
            continue
        number, obj = item
        if isinstance(obj, dict):
            inner = next((obj[k] for k in wrappers if isinstance(obj.get(k), list)), None)
            obj = inner if inner is not None else obj
        for rec in obj if isinstance(obj, list) else [obj]:
            yield number, rec
