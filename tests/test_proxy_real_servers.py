"""``headway proxy`` in front of real third-party MCP servers, driven by the official MCP
client (the ``mcp`` package), with the world changed outside the proxy between calls:
the reference file-system server (npm) and the reference clock and git servers (PyPI),
installed by the tests themselves (``real_servers``; skipped with the reason when they
cannot be installed, failed in CI).

What must hold on live tools: no stale content, listing, status or log (read-only,
closed-world tools are never cached on their annotations); nothing says "did not change"
about a result headway did not see; calls that each see something new are never stopped;
a cached answer (an exact cache the operator declared) says so in its text; a stop is
lifted by the next user turn, marked or by an idle gap, and ``headway audit`` shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from real_servers import Unavailable, filesystem_server, python_servers

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
try:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
except ImportError:
    if IN_CI:
        raise
    pytest.skip("needs the mcp package: pip install -e '.[mcp]'", allow_module_level=True)

SRC = Path(__file__).resolve().parents[1] / "src"
BOUND_S = 60


def server(get: Any) -> Any:
    try:
        return get()
    except Unavailable as exc:
        if IN_CI:
            raise
        pytest.skip(str(exc))


@contextlib.asynccontextmanager
async def proxied(
    work: Path, upstream: list[str], *options: str, config: str = ""
) -> AsyncIterator[ClientSession]:
    """The official MCP client, over stdio, to ``headway proxy -- upstream``."""
    args = ["-m", "headway.cli", "proxy", "--store", f"sqlite:///{work / 'headway.db'}"]
    if config:
        (work / "headway.toml").write_text(config)
        args += ["--config", str(work / "headway.toml")]
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    params = StdioServerParameters(
        command=sys.executable,
        args=[*args, *options, "--", *upstream],
        env={**os.environ, "PYTHONPATH": path},
        cwd=work,
    )
    with (work / "proxy.stderr").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            async with asyncio.timeout(BOUND_S):
                await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, args: dict[str, Any], **meta: Any) -> Any:
    async with asyncio.timeout(BOUND_S):
        return await session.call_tool(tool, args, meta=meta or None)  # type: ignore[arg-type]


def text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def hw(result: Any) -> dict[str, Any]:
    meta: dict[str, Any] = (result.meta or {}).get("headway", {})
    return meta


def truthful(*results: Any) -> None:
    """Nothing says a result "did not change", and nothing was refused or stopped."""
    for r in results:
        assert "did not change" not in text(r)
        assert hw(r)["status"] == "executed" and hw(r)["executed"] is True, text(r)


@pytest.fixture
def fs(tmp_path: Path) -> tuple[list[str], Path]:
    root = tmp_path / "files"
    root.mkdir()
    return [*server(filesystem_server), str(root)], root


async def test_files_edited_and_created_outside_the_proxy_are_read_as_they_are_now(
    tmp_path: Path, fs: tuple[list[str], Path]
) -> None:
    upstream, root = fs
    note = root / "note.txt"
    note.write_text("first version\n")
    async with proxied(tmp_path, upstream) as s:
        before = await call(s, "read_text_file", {"path": str(note)})
        note.write_text("second version\n")  # an editor changes it
        after = await call(s, "read_text_file", {"path": str(note)})
        listed = await call(s, "list_directory", {"path": str(root)})
        (root / "new.txt").write_text("x")  # a file created in a terminal
        relisted = await call(s, "list_directory", {"path": str(root)})
    assert text(before) == "first version\n" and text(after) == "second version\n"
    assert "new.txt" not in text(listed) and "new.txt" in text(relisted)
    truthful(before, after, listed, relisted)


# the 3rd identical read of an uncached tool runs, and a changed result is a fresh look:
# the truthful read repeat of issue 30 item 3 (helper core30's part of the work)


async def test_identical_listings_that_each_see_a_new_file_are_never_corrected_or_stopped(
    tmp_path: Path, fs: tuple[list[str], Path]
) -> None:
    upstream, root = fs
    async with proxied(tmp_path, upstream) as s:
        steps = []
        for i in range(8):
            (root / f"step{i}.txt").write_text(str(i))
            steps.append(await call(s, "list_directory", {"path": str(root)}))
    assert all(f"step{i}.txt" in text(r) for i, r in enumerate(steps))
    truthful(*steps)


async def test_a_read_the_operator_declares_deterministic_is_cached_and_says_so(
    tmp_path: Path, fs: tuple[list[str], Path]
) -> None:
    """The operator's TOML makes an exact cache: the repeat is served, its content says
    it is the stored result of an identical earlier call and when it was taken, and a
    write through the proxy makes it stale (the read after it runs)."""
    upstream, root = fs
    doc = root / "doc.txt"
    doc.write_text("v1\n")
    config = "[tools.read_text_file]\ndeterministic = true\n"
    async with proxied(tmp_path, upstream, config=config) as s:
        first = await call(s, "read_text_file", {"path": str(doc)})
        served = await call(s, "read_text_file", {"path": str(doc)})
        wrote = await call(s, "write_file", {"path": str(doc), "content": "v2\n"})
        again = await call(s, "read_text_file", {"path": str(doc)})
    assert [hw(r)["status"] for r in (first, served, wrote, again)] == [
        "executed",
        "cached",
        "executed",
        "executed",
    ]
    assert hw(served)["executed"] is False
    blocks = [c.text for c in served.content]
    assert blocks[0] == "v1\n"
    assert blocks[1].startswith("[headway: the stored result of an identical earlier call")
    assert "taken at " in blocks[1] and "did not run" in blocks[1]
    assert text(again) == "v2\n"


async def test_a_stop_is_lifted_by_a_marked_user_turn_and_by_an_idle_gap(
    tmp_path: Path, fs: tuple[list[str], Path]
) -> None:
    """A loop stops the session; the next user request (``headway/user_turn``) lifts the
    stop; a second loop stops it again, and an idle gap lifts it where the client marks
    no turns. ``headway audit`` shows the stop and the refused calls."""
    upstream, root = fs
    (root / "a.txt").write_text("a")
    same = {"path": str(root)}

    async def loop(s: ClientSession) -> list[Any]:
        answers = []
        for _ in range(12):
            answers.append(await call(s, "list_directory", same))
            if hw(answers[-1])["status"] == "stopped":
                break
        return answers

    async with proxied(tmp_path, upstream, "--idle-turn", "1") as s:
        looped = await loop(s)
        refused = await call(s, "get_file_info", {"path": str(root / "a.txt")})
        turn = await call(
            s, "get_file_info", {"path": str(root / "a.txt")}, **{"headway/user_turn": True}
        )
        looped_again = await loop(s)
        await asyncio.sleep(1.5)  # longer than --idle-turn, nothing in flight
        after_idle = await call(s, "get_file_info", {"path": str(root / "a.txt")})
    assert hw(looped[-1])["status"] == "stopped"
    assert "until the user makes a new request" in text(looped[-1])
    assert hw(refused)["status"] == "stopped" and hw(refused)["executed"] is False
    assert hw(turn)["status"] == "executed"
    assert hw(looped_again[-1])["status"] == "stopped"
    assert hw(after_idle)["status"] == "executed"
    session = hw(turn)["session"]
    audit = subprocess.run(
        [
            sys.executable,
            "-m",
            "headway.cli",
            "audit",
            "--store",
            f"sqlite:///{tmp_path / 'headway.db'}",
            "--session",
            session,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        check=True,
        timeout=BOUND_S,
    ).stdout.splitlines()
    calls = len(looped) + 2 + len(looped_again) + 1
    assert len(audit) == calls  # one record per call, refused and stopped ones included
    assert sum("STOP=no_progress" in line for line in audit) == 2
    assert sum(" stopped decision=stop" in line for line in audit) == 3


@pytest.fixture
def pyservers() -> Path:
    bin_dir: Path = server(python_servers)
    return bin_dir


async def test_the_clock_is_read_anew_on_each_call(tmp_path: Path, pyservers: Path) -> None:
    async with proxied(tmp_path, [str(pyservers / "mcp-server-time")]) as s:
        first = await call(s, "get_current_time", {"timezone": "UTC"})
        await asyncio.sleep(1.1)
        second = await call(s, "get_current_time", {"timezone": "UTC"})
    truthful(first, second)
    when = [json.loads(text(r))["datetime"] for r in (first, second)]
    assert when[0] != when[1]


def git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=env, capture_output=True)


async def test_git_status_and_log_see_edits_and_commits_made_in_a_terminal(
    tmp_path: Path, pyservers: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "f.txt").write_text("1\n")
    git(repo, "add", "f.txt")
    git(repo, "commit", "-q", "-m", "first")
    where = {"repo_path": str(repo)}
    async with proxied(tmp_path, [str(pyservers / "mcp-server-git")]) as s:
        clean = await call(s, "git_status", where)
        (repo / "f.txt").write_text("2\n")  # edited in an editor
        dirty = await call(s, "git_status", where)
        log1 = await call(s, "git_log", {**where, "max_count": 1})
        git(repo, "commit", "-q", "-am", "second")  # committed in a terminal
        log2 = await call(s, "git_log", {**where, "max_count": 1})
    assert "f.txt" not in text(clean) and "f.txt" in text(dirty)
    assert "first" in text(log1) and "second" in text(log2)
    truthful(clean, dirty, log1, log2)


async def test_commits_with_the_same_message_are_each_seen_and_never_stopped(
    tmp_path: Path, pyservers: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    where = {"repo_path": str(repo)}
    async with proxied(tmp_path, [str(pyservers / "mcp-server-git")]) as s:
        rounds = []
        for i in range(5):
            (repo / "f.txt").write_text(f"round {i}\n")
            git(repo, "add", "f.txt")
            git(repo, "commit", "-q", "-m", "same message")
            rounds.append(await call(s, "git_log", {**where, "max_count": 1}))
    truthful(*rounds)
    assert len({text(r) for r in rounds}) == 5


async def test_a_write_through_one_server_makes_the_other_servers_cached_reads_stale(
    tmp_path: Path, fs: tuple[list[str], Path]
) -> None:
    """Two servers of one desktop client, each behind its own proxy, on one store and one
    workspace: a file written through one makes the other's cached read run again."""
    upstream, root = fs
    doc = root / "doc.txt"
    doc.write_text("before\n")
    config = "[tools.read_text_file]\ndeterministic = true\n"
    store = ["--store", f"sqlite:///{tmp_path / 'shared.db'}", "--workspace", "desk"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with (
        proxied(tmp_path / "a", upstream, *store, config=config) as reader,
        proxied(tmp_path / "b", upstream, *store) as writer,
    ):
        first = await call(reader, "read_text_file", {"path": str(doc)})
        served = await call(reader, "read_text_file", {"path": str(doc)})
        await call(writer, "write_file", {"path": str(doc), "content": "after\n"})
        again = await call(reader, "read_text_file", {"path": str(doc)})
    assert [hw(r)["status"] for r in (first, served)] == ["executed", "cached"]
    assert hw(again)["status"] == "executed" and text(again) == "after\n"
