"""Real third-party MCP servers for the proxy tests, installed from the registries by the
tests themselves and cached (``~/.cache/headway-tests``, or ``HEADWAY_TEST_CACHE``) under
their version, so a later run installs nothing: the reference file-system server from
npm, and the reference clock and git servers from PyPI (in a virtualenv of their own).

Each helper returns the server's command, or raises ``Unavailable`` with the reason (no
npm, no network, a failed install): tests skip with it, and fail with it in CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

FILESYSTEM = ("@modelcontextprotocol/server-filesystem", "2026.8.31")
PYTHON_SERVERS = (("mcp-server-time", "2026.10.19"), ("mcp-server-git", "2026.10.19"))
INSTALL_S = 600  # one install's bound


class Unavailable(Exception):
    """A server that cannot be installed here (the message says why)."""


def cache() -> Path:
    root = os.environ.get("HEADWAY_TEST_CACHE") or Path.home() / ".cache" / "headway-tests"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _install(target: Path, steps: list[list[str]], what: str) -> None:
    """Run ``steps`` in ``target`` (``{dir}`` in a step is its path), then mark it
    complete; a directory an interrupted install left without the mark is made again.
    In place, not moved after: a virtualenv's scripts name their own path."""
    if (target / ".complete").exists():
        return
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    try:
        for step in steps:
            command = [a.replace("{dir}", str(target)) for a in step]
            done = subprocess.run(
                command, cwd=target, capture_output=True, text=True, timeout=INSTALL_S, check=False
            )
            if done.returncode != 0:
                raise Unavailable(
                    f"cannot install {what}: {' '.join(step[:3])}: {done.stderr[-500:]}"
                )
    except subprocess.TimeoutExpired as exc:
        raise Unavailable(f"cannot install {what}: timed out ({exc})") from exc
    (target / ".complete").write_text("installed\n")


def filesystem_server() -> list[str]:
    """``mcp-server-filesystem`` (npm), to be given the directories it may serve."""
    name, version = FILESYSTEM
    target = cache() / f"npm-server-filesystem-{version}"
    binary = target / "node_modules" / ".bin" / "mcp-server-filesystem"
    if not (target / ".complete").exists():
        if shutil.which("npm") is None or shutil.which("node") is None:
            raise Unavailable("needs node and npm to install the reference file-system server")
        npm = ["npm", "install", "--no-audit", "--no-fund", "--prefix", "{dir}"]
        _install(target, [[*npm, f"{name}@{version}"]], f"{name}@{version}")
    return [str(binary)]


def python_servers() -> Path:
    """The bin directory of a virtualenv holding the clock and git servers (PyPI)."""
    key = "-".join(f"{n}-{v}" for n, v in PYTHON_SERVERS)
    target = cache() / f"py-{key}-py{sys.version_info[0]}{sys.version_info[1]}"
    bin_dir = target / ("Scripts" if os.name == "nt" else "bin")
    if not (target / ".complete").exists():
        pip = [str(Path("{dir}") / bin_dir.name / "python"), "-m", "pip", "install", "-q"]
        _install(
            target,
            [
                [sys.executable, "-m", "venv", "{dir}"],
                [*pip, *(f"{n}=={v}" for n, v in PYTHON_SERVERS)],
            ],
            ", ".join(n for n, _ in PYTHON_SERVERS),
        )
    return bin_dir
