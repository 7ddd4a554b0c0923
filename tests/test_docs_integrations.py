"""Every example in docs/integrations*.md runs as it is written (frameworks installed)."""

from __future__ import annotations

import os
import re
import runpy
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _blocks() -> list[tuple[str, str]]:
    found = []
    for path in sorted(DOCS.glob("integrations*.md")):
        for n, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S)):
            found.append((f"{path.name}#{n}", block))
    return found


@pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::ImportWarning"
)  # frameworks' own
@pytest.mark.parametrize(("where", "code"), _blocks(), ids=[w for w, _ in _blocks()])
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
