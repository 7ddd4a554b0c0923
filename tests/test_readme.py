"""The README's examples run as written (in a temporary folder: they create headway.db)."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, str(README), "exec"), namespace)
    text = out.getvalue()
    assert "replayed 1" in text  # the card was charged once
    assert "corrected" in text and "'terminated_by': 'no_progress'" in text
    assert os.path.exists(tmp_path / "headway.db")
