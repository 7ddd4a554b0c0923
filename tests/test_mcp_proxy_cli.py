"""``headway proxy`` and ``headway audit`` as commands: bad input before anything starts,
an HTTP upstream (``--upstream URL``) and its crash, and the audit's sources."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from headway import cli

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def start_marker(tmp_path: Path) -> list[str]:
    """An upstream command that leaves a file behind if it is ever started."""
    return ["--", sys.executable, "-c", f"open({str(tmp_path / 'started')!r}, 'w')"]


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ("[tools.quote]\nttl = -1\n", ["[tools.quote]", "ttl"]),
        ("[tools.quote]\ntll = 5\n", ["[tools.quote]", "tll"]),
        ('[tools.quote]\neffect = "rw"\n', ["[tools.quote]", "effect"]),
        ('[tools.quote]\nttl = "soon"\n', ["[tools.quote]", "ttl"]),
        ("[governor]\nno_progress_limit = 0\n", ["[governor]", "no_progress_limit"]),
        ("[governor]\nwindow = true\nno_such = 1\n", ["[governor]", "no_such"]),
        ("[tools.quote\n", ["not valid TOML"]),
        ("[governor]\nidle_turn_s = -1\n", ["[governor]", "idle_turn_s"]),
        ('[governor]\nworkspace = ""\n', ["[governor]", "workspace"]),
    ],
)
def test_a_bad_config_is_a_clear_error_naming_file_table_and_key_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, named: list[str]
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(toml)
    store = f"sqlite:///{tmp_path / 'h.db'}"
    argv = ["proxy", "--config", str(config), "--store", store, *start_marker(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert str(config) in err
    for part in named:
        assert part in err
    assert not (tmp_path / "started").exists()  # the upstream was never started


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--http", "nowhere"], "--http wants HOST:PORT"),
        (["--upstream", "http://127.0.0.1:9/mcp"], "give the upstream as"),
        (["--store", "ftp://x"], "unknown store URL scheme"),
        (["--idle-turn", "-1"], "--idle-turn wants seconds >= 0"),
        (["--workspace", ""], "--workspace wants a name"),
    ],
)
def test_bad_arguments_are_a_clear_error_before_the_upstream_starts_or_a_file_is_written(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)  # where the default audit file would go
    assert cli.main(["proxy", *argv, *start_marker(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "started").exists()
    assert not (tmp_path / "headway.db").exists()


def test_workspace_and_idle_turn_come_from_the_config_and_the_command_line_wins(
    tmp_path: Path,
) -> None:
    from headway._proxy_cli import open_governor

    config = tmp_path / "headway.toml"
    config.write_text('[governor]\nworkspace = "desk"\nidle_turn_s = 30\n')
    store = f"sqlite:///{tmp_path / 'h.db'}"
    given: list[tuple[str | None, float | None, tuple[str, float]]] = [
        (None, None, ("desk", 30.0)),
        ("other", 0.0, ("other", 0.0)),
    ]
    for workspace, idle, expected in given:
        gov = open_governor(str(config), store, None, workspace=workspace, idle_turn_s=idle)
        try:
            assert (gov.workspace, gov.idle_turn_s) == expected
        finally:
            gov.close()
    plain = open_governor(None, store, None)
    try:
        assert (plain.workspace, plain.idle_turn_s) == (None, 120.0)
    finally:
        plain.close()


def test_a_proxy_needs_an_upstream(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["proxy"]) == 2
    assert "give the upstream as -- COMMAND [ARGS...] or as --upstream URL" in (
        capsys.readouterr().err
    )


def test_audit_reads_sqlite_and_jsonl_trails_and_refuses_other_stores_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import headway

    jsonl = tmp_path / "audit.jsonl"
    gov = headway.Governor(audit=[headway.JSONLSink(jsonl)])
    gov.register("lookup", lambda **a: f"v {a['q']}", effect="read", deterministic=True)
    with gov.session("s-1") as s:
        s.call("lookup", {"q": "a", "password": "hunter2"})
        s.call("lookup", {"q": "a", "password": "hunter2"})
    with gov.session("s-2") as s:
        s.call("lookup", {"q": "b"})
    assert cli.main(["audit", "--store", str(jsonl), "--session", "s-1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "hunter2" not in "\n".join(lines)
    assert " s-1 #0 lookup executed decision=execute" in lines[0]
    assert " s-1 #1 lookup cached decision=cache" in lines[1]
    assert cli.main(["audit", "--store", str(jsonl)]) == 0  # every session
    assert len(capsys.readouterr().out.splitlines()) == 3

    assert cli.main(["audit", "--store", "redis://127.0.0.1:6379/15"]) == 2
    assert "reads SQLite and JSONL audit files" in capsys.readouterr().err
    assert cli.main(["audit", "--store", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    assert "no audit file at" in capsys.readouterr().err


try:
    import pytest_asyncio  # noqa: F401
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport
except ImportError:
    if IN_CI:
        raise
    Client = None  # type: ignore[assignment, misc]


@pytest.mark.skipif(Client is None, reason="needs fastmcp: pip install 'headway[mcp]'")
async def test_an_http_upstream_is_governed_and_its_death_is_a_clear_tool_error(
    tmp_path: Path,
) -> None:
    import asyncio

    from test_mcp_proxy import BOUND_S, UPSTREAM, background, child_env, free_port, status, text

    port = free_port()
    log = tmp_path / "upstream.log"
    upstream = [sys.executable, str(UPSTREAM), str(log), "--http", str(port)]
    (tmp_path / "headway.toml").write_text("[tools.lookup]\ndeterministic = true\n")
    args = ["-m", "headway.cli", "proxy", "--store", f"sqlite:///{tmp_path / 'h.db'}"]
    args += ["--config", "headway.toml", "--upstream", f"http://127.0.0.1:{port}/mcp"]
    transport = StdioTransport(
        command=sys.executable, args=args, cwd=str(tmp_path), env=child_env()
    )
    results: list[Any] = []
    async with Client(transport, timeout=BOUND_S) as client:
        with background(upstream, tmp_path, port, "upstream"):
            for _ in range(2):
                results.append(await client.call_tool("lookup", {"key": "h"}))
        async with asyncio.timeout(BOUND_S):  # the upstream is gone: an error, not a hang
            dead = await client.call_tool("lookup", {"key": "h2"}, raise_on_error=False)
    assert [status(r) for r in results] == ["executed", "cached"]
    assert log.read_text().splitlines().count('lookup\t{"key": "h"}') == 1
    assert dead.is_error and status(dead) == "error"
    assert "upstream MCP server crashed, closed the connection or cannot be reached" in text(dead)


def test_the_readme_proxy_config_and_client_snippet_are_valid(tmp_path: Path) -> None:
    import json
    import re

    from headway._proxy_cli import open_governor

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    (toml,) = re.findall(r"```toml\n(.*?)```", readme, re.DOTALL)
    (snippet,) = re.findall(r"```json\n(.*?)```", readme, re.DOTALL)
    config = tmp_path / "headway.toml"
    config.write_text(toml)
    gov = open_governor(str(config), f"sqlite:///{tmp_path / 'h.db'}", None)
    try:
        spec = gov.register("get_job_status", None, annotations={"readOnlyHint": True})
        assert spec.poll and spec.effect == "read"
        closed = {"readOnlyHint": True, "openWorldHint": False}
        assert gov.register("get_library_docs", None, annotations=closed).deterministic
        assert not gov.register("git_status", None, annotations=closed).cacheable()
        read = gov.register("read_text_file", None, annotations={"readOnlyHint": True})
        assert read.cacheable() and read.fingerprint is not None  # while the file is unchanged
        assert gov.idle_turn_s == 120
    finally:
        gov.close()
    servers = json.loads(snippet)["mcpServers"]
    assert len(servers) == 2
    for server in servers.values():  # one store and one workspace for both
        args = server["args"]
        assert server["command"] == "headway" and args[0] == "proxy" and "--" in args
        assert args[args.index("--workspace") + 1] == "desktop"
        assert args[args.index("--store") + 1] == "sqlite:////home/me/.headway/desktop.db"


@pytest.mark.skipif(Client is None, reason="needs fastmcp: pip install 'headway[mcp]'")
async def test_the_proxy_server_in_process_answers_each_decision_as_documented(
    tmp_path: Path,
) -> None:
    """The same proxy, built in this process (the upstream is still a real subprocess):
    every decision's MCP answer, and _meta.headway describing it."""
    import headway
    from headway import mcp_proxy
    from test_mcp_proxy import UPSTREAM, headway_meta, status, text

    gov = headway.Governor(headway.SQLiteStore(str(tmp_path / "h.db")))
    gov.tool_config = {
        "queue_depth": {"progress_fields": ["depth"]},
        "lookup": {"deterministic": True},  # an exact cache only by the operator's word
    }
    server = mcp_proxy.build(
        gov, [sys.executable, str(UPSTREAM), str(tmp_path / "log")], session_id="in-process"
    )
    key = {"headway/idempotency_key": "k-1"}
    async with Client(server) as client:
        call = client.call_tool
        reads = [await call("lookup", {"key": "a"}, raise_on_error=False) for _ in range(3)]
        writes = [await call("delete_record", {"record": "r"}, meta=key) for _ in range(2)]
        failed = await call("fail", {"reason": "x"}, raise_on_error=False)
        depths = [await call("queue_depth", {"queue": f"q{i}"}) for i in range(7)]
    assert [status(r) for r in reads] == ["executed", "cached", "corrected"]
    assert reads[2].is_error and "identical arguments" in text(reads[2])
    assert [status(w) for w in writes] == ["executed", "replayed"]
    assert headway_meta(writes[1]) == {
        "status": "replayed",
        "session": "in-process",
        "step": 4,
        "executed": False,
        "reconcile_key": "k-1",
    }
    assert text(writes[1]).startswith(text(writes[0]))
    assert "[headway: this operation already completed, taken at" in text(writes[1])
    assert failed.is_error and "cannot do it: x" in text(failed)
    assert {status(d) for d in depths} == {"executed"}
    assert [r["status"] for r in gov.audit_records("in-process")][:3] == [
        "executed",
        "cached",
        "corrected",
    ]
    gov.close()
