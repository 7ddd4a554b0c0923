"""The examples of docs/integrations.md's multi-agent section run as they are written
(frameworks installed). The LangChain, OpenAI Agents SDK and Pydantic AI sections are run
by their own integration tests, which also check what they print."""

from __future__ import annotations

import os
import re
import runpy
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _blocks() -> list[Any]:
    found = []
    for path in sorted(DOCS.glob("integrations*.md")):
        text = path.read_text(encoding="utf-8")
        section = text.split("## Multi-agent frameworks", 1)[-1]
        for n, block in enumerate(re.findall(r"```python\n(.*?)```", section, re.S)):
            marks = [pytest.mark.crewai] if "crewai" in block else []  # its own environment
            found.append(
                pytest.param(f"{path.name}#{n}", block, marks=marks, id=f"{path.name}#{n}")
            )
    return found


@pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::ImportWarning"
)  # frameworks' own
@pytest.mark.parametrize(("where", "code"), _blocks())
def test_the_example_runs(
    where: str, code: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "example.py"  # a real file: some frameworks read a tool's source
    script.write_text(code, encoding="utf-8")
    try:
        runpy.run_path(str(script), run_name="__doc_example__")
    except ImportError as exc:
        if IN_CI:
            raise
        pytest.skip(f"{where}: {exc}")
    assert capsys.readouterr().out.strip()  # every example prints what it shows
