"""Inspect AI eval logs in the binary ``.eval`` format: a zip archive holding one JSON
file per sample under ``samples/`` (read one at a time). The ``.json`` log format (one
document with ``samples``) is read as a chat transcript (``chat``)."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

from ._model import Problem, Run
from .chat import run_of


def is_eval(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return (
                any(n.startswith("samples/") for n in z.namelist()) or "header.json" in z.namelist()
            )
    except (zipfile.BadZipFile, OSError):
        return False


def read(path: Path) -> Iterator[Run | Problem]:
    source = path.name.split(".")[0]
    try:
        with zipfile.ZipFile(path) as z:
            names = sorted(
                n for n in z.namelist() if n.startswith("samples/") and n.endswith(".json")
            )
            for name in names:
                try:
                    sample = json.loads(z.read(name))
                    yield run_of(sample, source, name, anthropic=False)
                except (ValueError, TypeError, AttributeError) as exc:
                    yield Problem(str(path), 0, f"{name}: {exc}")
    except (zipfile.BadZipFile, OSError) as exc:
        yield Problem(str(path), 0, f"not a readable .eval archive ({exc})")
