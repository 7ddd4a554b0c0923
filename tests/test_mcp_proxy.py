"""``headway proxy`` between a real MCP client and a real MCP server (a subprocess).

Each scenario runs twice: over stdio (the client starts ``headway proxy -- python
tests/mcp_upstream.py``; the proxy process is one session, shared by this module's tests,
each of which starts with a user turn) and over streamable HTTP (one proxy serves the
module; each test is its own MCP session). The two are the proxy's two forms: the stdio
relay, and FastMCP's proxy with headway's middleware. The upstream logs every execution to
a file, so the tests count what really ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import headway
from headway import cli

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
try:
    import pytest_asyncio
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport
except ImportError:
    if IN_CI:
        raise
    pytest.skip("needs fastmcp: pip install 'headway[mcp]'", allow_module_level=True)

pytestmark = pytest.mark.asyncio(loop_scope="module")

UPSTREAM = Path(__file__).with_name("mcp_upstream.py")
SRC = Path(__file__).resolve().parents[1] / "src"
CONFIG = """
[tools.lookup]
deterministic = true

[tools.ask]
deterministic = true

[tools.quote]
ttl = 1.0

[tools.job_status]
poll = true

[tools.queue_depth]
progress_fields = ["depth"]

[tools.save_note]
effect = "write"

[tools.hang]
timeout = 0.5
retry = { attempts = 1 }

[tools.stall]
timeout = 0.3
retry = { attempts = 1 }
breaker = { failures = 1, cooldown_s = 600 }
fallback = "stall is unavailable"
"""
BOUND_S = 60  # generous bounds: a hang fails the test instead of the suite


def child_env() -> dict[str, str]:
    """A proxy subprocess's environment: this checkout's sources first (an MCP stdio
    transport passes only a few variables on by default, and a relative PYTHONPATH would
    not survive another working directory)."""
    path = [str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "HEADWAY_TEST_SECRET": "s3"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise AssertionError(f"server not listening on {port}: {log.read_text(errors='replace')}")


@contextlib.contextmanager
def background(args: list[str], cwd: Path, port: int, name: str) -> Iterator[None]:
    log = cwd / f"{name}.stderr"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err, env=child_env()
        )
    try:
        wait_for_port(port, proc, log)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def proxy_command(work: Path, *upstream: str, http: int | None = None) -> list[str]:
    args = [sys.executable, "-m", "headway.cli", "proxy", "--config", str(work / "headway.toml")]
    args += ["--store", f"sqlite:///{work / 'headway.db'}"]
    if http is not None:
        args += ["--http", f"127.0.0.1:{http}"]
    return [*args, *upstream]


NOTES: list[str] = []  # the kinds of the server messages the tests' clients received


async def note_message(message: Any) -> None:
    NOTES.append(type(getattr(message, "root", message)).__name__)


def stdio_client(work: Path, *upstream: str, **options: Any) -> Client[Any]:
    command = proxy_command(work, *upstream)
    transport = StdioTransport(
        command=command[0],
        args=command[1:],
        cwd=str(work),
        env=child_env(),
        log_file=work / "proxy.stderr",
    )
    options.setdefault("message_handler", note_message)
    return Client(transport, timeout=BOUND_S, **options)


@dataclass
class Proxy:
    kind: str
    work: Path
    shared: Client[Any] | None = None  # stdio: the one client (and session) of the process
    url: str = ""

    @property
    def log(self) -> Path:
        return self.work / "upstream.log"

    @contextlib.asynccontextmanager
    async def connect(self) -> AsyncIterator[Client[Any]]:
        if self.shared is not None:
            yield self.shared
        else:  # a handshake-era client: the MCP session id is its headway session
            async with Client(
                self.url, mode="legacy", timeout=BOUND_S, message_handler=note_message
            ) as client:
                yield client


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["stdio", "http"])
async def proxy(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Proxy]:
    work = tmp_path_factory.mktemp(f"proxy-{request.param}")
    (work / "headway.toml").write_text(CONFIG)
    upstream = ["--", sys.executable, str(UPSTREAM), str(work / "upstream.log")]
    if request.param == "stdio":
        async with stdio_client(work, *upstream) as client:
            yield Proxy("stdio", work, shared=client)
    else:
        port = free_port()
        with background(proxy_command(work, *upstream, http=port), work, port, "proxy"):
            yield Proxy("http", work, url=f"http://127.0.0.1:{port}/mcp")


@dataclass
class Caller:
    """Calls tools through the proxy; the first call of a test is a new user turn."""

    client: Client[Any]
    log: Path
    turn: bool = True
    sessions: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=lambda: NOTES)

    async def __call__(self, tool: str, args: dict[str, Any], **meta: Any) -> Any:
        if self.turn:
            meta["headway/user_turn"], self.turn = True, False
        result = await self.client.call_tool(tool, args, raise_on_error=False, meta=meta)
        self.sessions.add(headway_meta(result).get("session", "?"))
        return result

    def executions(self, tool: str, **args: Any) -> int:
        entry = f"{tool}\t{json.dumps(args, sort_keys=True)}"
        return self.log.read_text(encoding="utf-8").splitlines().count(entry)


@pytest_asyncio.fixture(loop_scope="module")
async def mcp(proxy: Proxy) -> AsyncIterator[Caller]:
    async with proxy.connect() as client:
        yield Caller(client, proxy.log)


def headway_meta(result: Any) -> dict[str, Any]:
    meta: dict[str, Any] = (result.meta or {}).get("headway", {})
    return meta


def status(result: Any) -> str:
    return str(headway_meta(result).get("status"))


def text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def said(result: Any) -> str:
    """The upstream's own text: without headway's note on a stored result."""
    blocks = [getattr(c, "text", "") for c in result.content]
    return "\n".join(b for b in blocks if not b.startswith("[headway: "))


def note(result: Any) -> str:
    """headway's note on a stored result (CACHED, REPLAYED), in the content the model reads."""
    (block,) = [c.text for c in result.content if getattr(c, "text", "").startswith("[headway: ")]
    return str(block)


async def test_a_read_only_closed_world_tool_is_never_cached_on_its_annotations(
    mcp: Caller,
) -> None:
    """A closed world still changes under other writers: the annotations make a read that
    runs every time; only the operator's TOML makes an exact cache (lookup's table)."""
    answers = [await mcp("tally", {"name": "t-closed"}) for _ in range(2)]
    assert mcp.executions("tally", name="t-closed") == 2
    assert [status(a) for a in answers] == ["executed", "executed"]
    assert [text(a) for a in answers] == ["t-closed is at #1", "t-closed is at #2"]
    assert [headway_meta(a).get("executed") for a in answers] == [True, True]


async def test_a_read_declared_deterministic_runs_once_and_its_third_repeat_is_a_correction(
    mcp: Caller,
) -> None:
    answers = [await mcp("lookup", {"key": "k-closed"}) for _ in range(3)]
    assert mcp.executions("lookup", key="k-closed") == 1
    assert [status(a) for a in answers] == ["executed", "cached", "corrected"]
    assert said(answers[1]) == text(answers[0]) == "value of k-closed"
    # the model reads that it is a stored result, and when it was taken; executed is false
    assert "stored result of an identical earlier call of lookup, taken at " in note(answers[1])
    assert [headway_meta(a)["executed"] for a in answers] == [True, False, False]
    assert not answers[1].is_error and answers[2].is_error
    assert "3 times with identical arguments" in text(answers[2])


async def test_short_answers_to_new_queries_are_exploration_not_a_loop(mcp: Caller) -> None:
    # judged with their MCP envelope, these lookups' answers were near-duplicates of one
    # another and the 7th stopped the session (test_mcp_results.py says what is judged)
    answers = [await mcp("lookup", {"key": f"k-new-{i}"}) for i in range(8)]
    assert [status(a) for a in answers] == ["executed"] * 8
    assert not any(a.is_error or headway_meta(a).get("correction") for a in answers)


async def test_an_open_world_read_is_cached_inside_its_configured_ttl_and_run_again_after(
    mcp: Caller,
) -> None:
    first = await mcp("quote", {"symbol": "ACME"})
    inside = await mcp("quote", {"symbol": "ACME"})
    await mcp("lookup", {"key": "k-between"})  # not three identical calls in a row
    await asyncio.sleep(1.3)  # the config's ttl is 1 s
    after = await mcp("quote", {"symbol": "ACME"})
    assert [status(first), status(inside), status(after)] == ["executed", "cached", "executed"]
    assert said(inside) == text(first) == "ACME price #1"
    assert "stored result of an identical earlier call of quote" in note(inside)
    assert text(after) == "ACME price #2"
    assert mcp.executions("quote", symbol="ACME") == 2


async def test_a_destructive_tool_runs_every_time_unless_the_client_gives_an_idempotency_key(
    mcp: Caller,
) -> None:
    plain = [await mcp("delete_record", {"record": "r-plain"}) for _ in range(2)]
    assert mcp.executions("delete_record", record="r-plain") == 2
    assert [status(a) for a in plain] == ["executed", "executed"]
    key = {"headway/idempotency_key": f"delete-r-keyed-{id(mcp)}"}
    keyed = [await mcp("delete_record", {"record": "r-keyed"}, **key) for _ in range(2)]
    assert mcp.executions("delete_record", record="r-keyed") == 1
    assert [status(a) for a in keyed] == ["executed", "replayed"]
    assert said(keyed[1]) == text(keyed[0]) == "deleted r-keyed (deletion #1)"
    assert "already completed, taken at" in note(keyed[1])
    assert "not performed again" in note(keyed[1])
    assert not keyed[1].is_error
    reused = await mcp("delete_record", {"record": "r-other"}, **key)  # same key, new args
    assert reused.is_error and status(reused) == "refused"
    assert mcp.executions("delete_record", record="r-other") == 0


async def test_a_polling_tool_whose_status_repeats_is_never_corrected_or_stopped(
    mcp: Caller,
) -> None:
    answers = [await mcp("job_status", {"job": "j1"}) for _ in range(9)]
    assert {status(a) for a in answers} == {"executed"}
    assert not any(a.is_error for a in answers)
    assert mcp.executions("job_status", job="j1") == 9
    assert answers[-1].structured_content == {"job": "j1", "status": "DONE"}


async def test_progress_fields_name_fields_of_the_structured_result_so_a_change_is_progress(
    mcp: Caller,
) -> None:
    # the answers for q0..q7 are near-duplicates (no progress by their text, a stop at the
    # 6th), but the configured field, depth, changes on every call: progress, no stop
    answers = [await mcp("queue_depth", {"queue": f"q{i}"}) for i in range(8)]
    assert [status(a) for a in answers] == ["executed"] * 8
    assert answers[-1].structured_content == {"queue": "q7", "depth": 92, "unit": "messages"}


async def test_the_operators_config_wins_over_an_annotation_that_claims_read_only(
    mcp: Caller,
) -> None:
    # save_note says readOnlyHint and openWorldHint false (an exact cache); the config
    # says it writes: it runs every time
    answers = [await mcp("save_note", {"text": "n1"}) for _ in range(2)]
    assert mcp.executions("save_note", text="n1") == 2
    assert [status(a) for a in answers] == ["executed", "executed"]
    assert [text(a) for a in answers] == ["saved note #1", "saved note #2"]


async def test_resources_templates_and_prompts_pass_through_unchanged(mcp: Caller) -> None:
    client = mcp.client
    resources = await client.list_resources()
    assert [str(r.uri) for r in resources] == ["info://about"]
    (about,) = await client.read_resource("info://about")
    assert getattr(about, "text", None) == "the upstream test server"
    templates = await client.list_resource_templates()
    assert [t.uri_template for t in templates] == ["notes://{name}"]
    (note,) = await client.read_resource("notes://x1")
    assert getattr(note, "text", None) == "note x1"
    (prompt,) = await client.list_prompts()
    assert prompt.name == "greet" and prompt.description == "Greets someone."
    got = await client.get_prompt("greet", {"name": "Ada"})
    assert [getattr(m.content, "text", None) for m in got.messages] == ["Say hello to Ada."]
    tools = {t.name: t for t in await client.list_tools()}
    assert tools["lookup"].annotations is not None
    assert tools["lookup"].annotations.read_only_hint is True  # annotations reach the client


async def test_progress_notifications_of_a_governed_call_reach_the_client(mcp: Caller) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    result = await mcp.client.call_tool("count", {"n": 3}, progress_handler=progress)
    assert text(result) == "counted to 3" and status(result) == "executed"
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_a_tool_list_change_reaches_the_client_and_the_new_tools_annotations_govern(
    mcp: Caller,
) -> None:
    before = {t.name for t in await mcp.client.list_tools()}
    await mcp("unlock", {})
    async with asyncio.timeout(BOUND_S):
        while "ToolListChangedNotification" not in mcp.notes:
            await asyncio.sleep(0.01)
    after = {t.name for t in await mcp.client.list_tools()}
    assert "hidden_lookup" not in before and "hidden_lookup" in after
    # its annotations say read-only: a read, so a client's idempotency key is ignored and
    # both calls run (a tool declared by the safe default, a write, would replay the second)
    key = {"headway/idempotency_key": f"hidden-{id(mcp)}"}
    answers = [await mcp("hidden_lookup", {"key": "h1"}, **key) for _ in range(2)]
    assert [status(a) for a in answers] == ["executed", "executed"]
    assert mcp.executions("hidden_lookup", key="h1") == 2


async def test_an_open_breaker_answers_with_the_configured_fallback(mcp: Caller) -> None:
    timed_out = await mcp("stall", {"seconds": 3})  # the one failure that opens it
    fallback = await mcp("stall", {"seconds": 3})
    assert timed_out.is_error and status(timed_out) == "error"
    assert status(fallback) == "fallback" and not fallback.is_error
    assert "stall is unavailable" in text(fallback)
    assert mcp.executions("stall", seconds=3.0) == 1  # the second never reached it


async def test_a_stdio_upstream_gets_the_proxys_environment(mcp: Caller) -> None:
    # a client's configuration passes the server's credentials to the proxy as "env"
    result = await mcp("getenv", {"name": "HEADWAY_TEST_SECRET"})
    assert text(result) == "s3"


async def test_a_round_that_asks_the_client_for_input_is_never_served_from_the_cache(
    proxy: Proxy,
) -> None:
    asked: list[str] = []

    async def elicitation(message: str, response_type: Any, params: Any, context: Any) -> Any:
        asked.append(message)
        return {"ok": True}

    if proxy.kind == "stdio":  # a 2026-07-28 client: the ask is a result, the answer a round
        upstream = ["--", sys.executable, str(UPSTREAM), str(proxy.log)]
        client = stdio_client(proxy.work, *upstream, elicitation_handler=elicitation)
    else:
        client = Client(proxy.url, timeout=BOUND_S, elicitation_handler=elicitation)
    async with client:
        first = await client.call_tool("ask", {"topic": f"t-{proxy.kind}"})
        again = await client.call_tool("ask", {"topic": f"t-{proxy.kind}"})
    assert text(first) == f"t-{proxy.kind}: accept" and status(first) == "executed"
    assert said(again) == text(first) and status(again) == "cached"
    assert asked == [f"More about t-{proxy.kind}?"]


async def test_an_upstream_error_result_reaches_the_client_as_it_was_and_is_never_cached(
    mcp: Caller,
) -> None:
    answers = [await mcp("fail", {"reason": "r1"}) for _ in range(3)]
    assert mcp.executions("fail", reason="r1") == 3  # never served from a cache
    assert all(a.is_error for a in answers)
    assert all("cannot do it: r1" in text(a) for a in answers)  # the upstream's own text
    assert {status(a) for a in answers} == {"error"}
    # the third identical failure in a row carries the repeated-error correction
    assert "correction" not in headway_meta(answers[0])
    assert "correction" in headway_meta(answers[2])


async def test_a_hanging_upstream_call_ends_as_a_tool_error_at_its_timeout(mcp: Caller) -> None:
    result = await mcp("hang", {"seconds": 5})
    assert result.is_error and status(result) == "error"
    assert "[timeout]" in text(result) and "no answer within 0.5 s" in text(result)
    after = await mcp("lookup", {"key": "k-after-hang"})  # the proxy still serves
    assert text(after) == "value of k-after-hang"


async def test_the_audit_lists_each_call_of_the_session_with_secrets_redacted(
    mcp: Caller, proxy: Proxy, capsys: pytest.CaptureFixture[str]
) -> None:
    await mcp("save_note", {"text": "n-audit", "api_key": "sk-very-secret"})
    for _ in range(2):
        await mcp("lookup", {"key": "k-audit"})
    (session,) = mcp.sessions
    store = f"sqlite:///{proxy.work / 'headway.db'}"
    # the trail is written by a thread of its own just after each answer: on a loaded
    # machine the last record may reach the file a moment after the client has its answer
    async with asyncio.timeout(BOUND_S):
        while True:
            assert cli.main(["audit", "--store", store, "--session", session]) == 0
            lines = capsys.readouterr().out.splitlines()
            mine = [line for line in lines if "audit" in line]
            if len(mine) >= 3:
                break
            await asyncio.sleep(0.05)
    assert len(mine) == 3 and all(f" {session} " in line for line in mine)
    assert " save_note executed decision=execute" in mine[0]
    assert " lookup cached decision=cache" in mine[2]
    assert "sk-very-secret" not in "\n".join(lines)
    assert cli.main(["audit", "--store", store, "--session", session, "--json"]) == 0
    records = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert {r["session"] for r in records} == {session}


async def test_a_stdio_session_stays_in_the_proxy_process_and_an_http_session_is_in_the_store(
    mcp: Caller, proxy: Proxy
) -> None:
    """Over stdio the session id is the proxy process's own (no other worker can continue
    it): its state is not written to the store. Over HTTP replicas may share a session,
    so its record is in the store."""
    await mcp("lookup", {"key": "k-where-state-lives"})
    session = next(iter(mcp.sessions))
    store = headway.open_store(f"sqlite:///{proxy.work / 'headway.db'}")
    try:
        record = store.get(f"default:sess:{{{session}}}")
    finally:
        store.close()
    assert (record is None) == (proxy.kind == "stdio")


async def test_two_client_sessions_do_not_share_session_scoped_cache_entries(
    mcp: Caller, proxy: Proxy
) -> None:
    first = await mcp("lookup", {"key": "k-two-sessions"})
    if proxy.kind == "stdio":  # another client is another proxy process, same store
        other_client = stdio_client(proxy.work, "--", sys.executable, str(UPSTREAM), str(proxy.log))
    else:
        other_client = Client(proxy.url, mode="legacy", timeout=BOUND_S)
    async with other_client as client:
        other = Caller(client, proxy.log)
        second = await other("lookup", {"key": "k-two-sessions"})
        again = await other("lookup", {"key": "k-two-sessions"})
    assert mcp.sessions.isdisjoint(other.sessions)
    assert [status(first), status(second), status(again)] == ["executed", "executed", "cached"]
    assert mcp.executions("lookup", key="k-two-sessions") == 2


async def test_a_client_without_mcp_sessions_names_its_session_in_meta_over_http(
    mcp: Caller, proxy: Proxy
) -> None:
    named = {"headway/session": f"run-{proxy.kind}-a"}
    if proxy.kind == "stdio":  # the process is the session, whatever the client says
        result = await mcp("lookup", {"key": "k-named"}, **named)
        assert headway_meta(result)["session"] in mcp.sessions and len(mcp.sessions) == 1
        return
    async with Client(proxy.url, timeout=BOUND_S) as modern:  # 2026-07-28: no MCP session
        caller = Caller(modern, proxy.log)
        a1 = await caller("lookup", {"key": "k-named"}, **named)
        a2 = await caller("lookup", {"key": "k-named"}, **named)
        b1 = await caller("lookup", {"key": "k-named"}, **{"headway/session": "run-http-b"})
    assert [status(a1), status(a2), status(b1)] == ["executed", "cached", "executed"]
    assert caller.sessions == {"http-run-http-a", "http-run-http-b"}
    assert caller.executions("lookup", key="k-named") == 2


async def test_an_upstream_crash_is_a_clear_tool_error_and_the_proxy_keeps_serving(
    mcp: Caller,
) -> None:
    async with asyncio.timeout(BOUND_S):
        crashed = await mcp("crash", {})
    # the write may have acted before its upstream died: UNKNOWN, never run again
    assert crashed.is_error and status(crashed) == "unknown"
    assert "is unknown" in text(crashed) and "Do not repeat" in text(crashed)
    assert mcp.executions("crash") == 1
    async with asyncio.timeout(BOUND_S):  # a stdio upstream is started again
        after = await mcp("lookup", {"key": "k-after-crash"})
    assert text(after) == "value of k-after-crash"


async def test_a_stopped_session_answers_every_later_call_with_its_diagnostic(
    mcp: Caller,
) -> None:
    # the last test of the module: it stops the session (over stdio, the process's)
    answers = [await mcp("lookup", {"key": "k-loop"}) for _ in range(9)]
    stopped = [a for a in answers if status(a) == "stopped"]
    assert stopped and all(a.is_error for a in stopped)
    assert '"terminated_by": "no_progress"' in text(stopped[0])
    later = await mcp("quote", {"symbol": "OTHER"})
    assert status(later) == "stopped" and later.is_error
    assert mcp.executions("quote", symbol="OTHER") == 0
