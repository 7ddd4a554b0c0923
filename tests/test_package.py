"""The package stands on its own: a license, `python -m headway`, no extra without code,
no coverage data committed, and no citation of a specification users do not have."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import headway

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

# every extra and the code that needs it (an extra exists only when its code does)
EXTRA_CODE = {
    "redis": "src/headway/stores/redis.py",
    "postgres": "src/headway/stores/postgres.py",
    "pydantic": "src/headway/_canonical.py",  # pydantic models as arguments
}


def test_python_dash_m_headway_runs_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "headway", "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == f"headway {headway.__version__}"


def test_the_license_file_matches_the_declared_license() -> None:
    assert PYPROJECT["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")


def test_every_extra_has_code_that_uses_it() -> None:
    extras = set(PYPROJECT["project"]["optional-dependencies"]) - {"dev"}
    assert extras == set(EXTRA_CODE)
    for extra, path in EXTRA_CODE.items():
        assert extra in (ROOT / path).read_text(encoding="utf-8"), (extra, path)


def test_coverage_data_is_not_committed() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    if tracked:  # a git checkout (a source tree without .git has nothing to check)
        assert not [name for name in tracked if name.startswith(".coverage")]
