"""The README's examples run as written, and print the same on every run."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _run_readme() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 2
    namespace: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, str(README), "exec"), namespace)
    return out.getvalue()


def test_the_readme_examples_run_and_a_second_run_prints_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    text = _run_readme()
    assert "replayed 1" in text  # the card was charged once
    assert "corrected" in text and "'terminated_by': 'no_progress'" in text
    assert _run_readme() == text  # reproducible: nothing left behind changes the next run
    assert os.listdir(tmp_path) == []
