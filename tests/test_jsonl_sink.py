"""The JSONL audit sink keeps its file open: whole lines, nothing lost, rotation followed."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import headway
from headway.testing import ScriptedTool


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _open_fds() -> set[str]:
    """The files this process holds open (Linux)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the descriptor listdir itself used
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
    return found


def test_records_from_concurrent_threads_are_whole_lines(tmp_path: Path) -> None:
    """Eight threads writing large records at once: every line is one whole record."""
    path = tmp_path / "audit.jsonl"
    sink = headway.JSONLSink(path)
    big = "x" * 20_000  # larger than any buffer a line could be split at

    def write(t: int) -> None:
        for n in range(100):
            sink.write({"session": f"t{t}", "n": n, "pad": big})

    threads = [threading.Thread(target=write, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    sink.close()
    rows = _lines(path)
    assert len(rows) == 800 and all(r["pad"] == big for r in rows)
    assert sorted((r["session"], r["n"]) for r in rows) == sorted(
        (f"t{t}", n) for t in range(8) for n in range(100)
    )


def test_a_record_written_survives_a_crash_of_the_process(tmp_path: Path) -> None:
    """A process that dies right after write() returns (no exit handlers, no flush) leaves
    the record in the file."""
    path = tmp_path / "audit.jsonl"
    code = (
        "import os, sys, headway\n"
        "sink = headway.JSONLSink(sys.argv[1])\n"
        "sink.write({'session': 's', 'step': 0})\n"
        "sink.write({'session': 's', 'step': 1})\n"
        "os._exit(3)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [sys.executable, "-c", code, str(path)]
    done = subprocess.run(args, env=env, timeout=60, check=False)
    assert done.returncode == 3
    assert [r["step"] for r in _lines(path)] == [0, 1]


def test_a_rotated_or_removed_file_is_reopened_at_the_path(tmp_path: Path) -> None:
    """After the file is renamed and a new one created in its place (logrotate's
    ``create``), the next record goes to the new file; after it is removed, the file is
    created again."""
    path = tmp_path / "audit.jsonl"
    sink = headway.JSONLSink(path)
    sink.write({"session": "s", "step": 0})
    path.rename(tmp_path / "audit.jsonl.1")
    path.touch()
    sink.write({"session": "s", "step": 1})
    assert [r["step"] for r in _lines(tmp_path / "audit.jsonl.1")] == [0]
    assert [r["step"] for r in _lines(path)] == [1]
    path.unlink()
    sink.write({"session": "s", "step": 2})
    assert [r["step"] for r in _lines(path)] == [2]
    sink.close()


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc")


@needs_proc
def test_close_releases_the_file_and_a_later_record_opens_it_again(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = headway.JSONLSink(path)
    sink.write({"session": "s", "step": 0})
    assert str(path) in _open_fds()
    sink.close()
    assert str(path) not in _open_fds()
    sink.write({"session": "s", "step": 1})
    sink.close()
    assert [r["step"] for r in sink.records("s")] == [0, 1]


@needs_proc
def test_a_sink_dropped_without_close_releases_its_file(tmp_path: Path) -> None:
    """No descriptor is leaked, and no ResourceWarning (an error in this suite) is raised."""
    path = tmp_path / "audit.jsonl"
    gov = headway.Governor(audit=[headway.JSONLSink(path)])
    gov.register("r", ScriptedTool(["x"]), effect="read")
    gov.session("s").call("r", {})
    assert str(path) in _open_fds()
    gov.close()
    del gov
    gc.collect()
    assert str(path) not in _open_fds()
    assert len(_lines(path)) == 1
