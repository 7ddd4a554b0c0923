"""The package stands on its own: a license, `python -m headway`, no extra without code,
no coverage data committed, and no citation of a specification users do not have."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import headway

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

SOURCES = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "src").rglob("*.py"))


def test_python_dash_m_headway_runs_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "headway", "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == f"headway {headway.__version__}"


def test_the_license_file_matches_the_declared_license() -> None:
    assert PYPROJECT["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")


# distributions whose import name is not derived from their name
_IMPORTED_AS = {"openai-agents": {"agents"}}


def _module_names(requirement: str) -> set[str]:
    name = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()
    parts = name.split("-")  # llama-index-core is imported as llama_index
    return {"_".join(parts[:n]) for n in range(1, len(parts) + 1)} | _IMPORTED_AS.get(name, set())


def test_every_extra_has_code_that_uses_it() -> None:
    """An extra exists only when code imports one of its packages (by name, lazily)."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    for extra in set(extras) - {"dev", "all"}:
        modules = set().union(*(_module_names(r) for r in extras[extra]))
        imported = any(
            re.search(rf"(?:import |from |require\(\"){re.escape(m)}\b", SOURCES) for m in modules
        )
        used = extra == "pydantic" and "model_dump" in SOURCES  # canonical form of models
        assert imported or used, f"extra {extra!r} has no code ({sorted(modules)})"
    bundled = re.findall(r"headway\[([^\]]*)\]", " ".join(extras.get("all", [])))
    for extra in ",".join(bundled).split(","):
        assert not extra or extra in extras, extra


def test_coverage_data_is_not_committed() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    if tracked:  # a git checkout (a source tree without .git has nothing to check)
        assert not [name for name in tracked if name.startswith(".coverage")]


def test_the_docs_cite_the_behaviour_reference_not_section_numbers() -> None:
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        assert not re.search(r"§\s*\d", text), doc.name
    assert (ROOT / "docs" / "semantics.md").exists()
