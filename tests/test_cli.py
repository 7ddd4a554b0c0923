"""The ``headway`` command: the demo runs on the embedded default and exits 0."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import headway
from headway import demo
from headway.cli import main


def test_demo_runs_through_a_real_sqlite_governor(tmp_path: Path) -> None:
    out = io.StringIO()
    summary = demo.run(headway.open_store(f"sqlite:///{tmp_path}/demo.db"), out)
    text = out.getvalue()
    assert summary["orders_placed"] == 2  # the identical orders both went through
    assert summary["cards_charged"] == 1  # the timed-out charge was reconciled, not repeated
    assert "replayed" in text and "fallback" in text and "LoopDetected: cycle" in text
    assert summary["executions_saved"] >= 5 and summary["stops"] >= 2
    assert "cached" in text and "corrected" in text and "LoopDetected" in text
    assert "BudgetExceeded: total_tool_calls" in text
    poll_lines = [line for line in text.splitlines() if "get_operation_status" in line]
    assert len(poll_lines) == 7 and all("executed" in line for line in poll_lines)


def test_demo_command_exits_zero(capsys: object) -> None:
    assert main(["demo"]) == 0


def test_console_script_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "headway.cli", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and headway.__version__ in proc.stdout
