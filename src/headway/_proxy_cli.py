"""``headway proxy``: its arguments, its governor, and starting the server.

Everything that can be wrong in the operator's input (the config file, the store URL, the
upstream) is checked here before anything starts. FastMCP is imported only to serve.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from ._call import describe
from ._redact import scrub
from ._session import Governor
from ._spec import declares_read, make_spec
from .audit import AuditSink, JSONLSink, SQLiteAuditSink
from .config import load_config
from .errors import ConfigError
from .stores import open_store, shown

DEFAULT_STORE = "sqlite:///headway.db"

DESCRIPTION = """\
Put headway between an MCP client and an MCP server. The proxy serves the upstream's
tools, resources and prompts unchanged, and governs every tool call: reads are
deduplicated by their quadrant, writes with an idempotency key run once, repeated calls
without progress are corrected, and a stopped session answers each later call with its
diagnostic. Each tool's spec is the config's [tools.NAME] table if present, else the
upstream's MCP annotations (a read-only tool is a read that runs every time: only the
config's deterministic or ttl make a cache), else the safe default (an unkeyed write).

A client passes an idempotency key in the request's _meta as "headway/idempotency_key",
and may signal a new user request with "headway/user_turn": true; without it, a pause of
--idle-turn seconds with no call in flight is one. A new user request lifts a no-progress
stop (budgets stay spent)."""

EPILOG = """\
examples:
  headway proxy -- python my_server.py
  headway proxy --config headway.toml -- npx -y @modelcontextprotocol/server-filesystem .
  headway proxy --upstream http://127.0.0.1:8000/mcp --http 127.0.0.1:9000

sessions: over stdio the proxy process is one session (its id is printed on stderr);
over HTTP each MCP session id is one session. See what a session did with
"headway audit --store URL --session ID".

A stdio upstream gets the proxy's whole environment (the credentials a client's
configuration passes in "env" reach it); it is started on first use and again after it
exits."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "proxy",
        help="govern any MCP server: serve its tools through headway",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="headway TOML file ([governor] and [tools.NAME] tables; they win over annotations)",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        help=f"store URL (default: the config's [governor] store, else {DEFAULT_STORE})",
    )
    p.add_argument(
        "--audit",
        metavar="FILE",
        help="audit trail: a SQLite file or a .jsonl file (default: the SQLite store's own "
        "file; with a Redis or PostgreSQL store, headway.db in the working directory)",
    )
    p.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP on HOST:PORT (path /mcp; Prometheus metrics at /metrics) "
        "instead of stdio",
    )
    p.add_argument(
        "--no-metrics",
        action="store_true",
        help="with --http, do not serve Prometheus metrics at /metrics (served by default "
        "when prometheus-client is installed: pip install 'headway[prometheus]')",
    )
    p.add_argument(
        "--workspace",
        metavar="NAME",
        help="share write epochs with the other governors (proxies, workers) of this store "
        "and workspace: a write through any of them makes the others' cached reads stale "
        "(default: the config's [governor] workspace, else none)",
    )
    p.add_argument(
        "--idle-turn",
        metavar="SECONDS",
        type=float,
        help="an idle gap this long with no call in flight is a new user turn (the counters "
        "start again and a no-progress stop is lifted); 0: never (default: the config's "
        "[governor] idle_turn_s, else 120)",
    )
    p.add_argument(
        "--upstream",
        metavar="URL",
        help="a streamable-HTTP upstream server instead of a command",
    )
    p.add_argument(
        "upstream_command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND [ARGS...]",
        help="the upstream MCP server, started over stdio",
    )


def open_governor(
    config: str | None,
    store: str | None,
    audit: str | None,
    sinks: Sequence[AuditSink] = (),
    *,
    private_sessions: bool = False,
    workspace: str | None = None,
    idle_turn_s: float | None = None,
) -> Governor:
    """The governor the proxy runs with (``sinks``: more audit sinks, such as the
    Prometheus metrics); ConfigError names the file, table and key.

    ``private_sessions``: every session's id is known to this process only (over stdio,
    the proxy process is the client's session), so no other worker can continue it and
    keeping its state in the store would cost round trips for nothing: it stays in the
    process (cache entries and idempotency records are still in the store)."""
    options: dict[str, Any] = {}
    private: dict[str, Any] = {"share_sessions": False} if private_sessions else {}
    if workspace is not None:  # the command line wins over the config's [governor]
        private["workspace"] = workspace
    if idle_turn_s is not None:
        private["idle_turn_s"] = idle_turn_s
    if config is not None:
        cfg = load_config(config)
        for name, table in cfg.tools.items():  # a bad value fails now, not on the first call
            where = f"{config} [tools.{name}]"
            for key, value in table.items():
                _check_type(where, key, value)
            try:
                implied = {"effect": "read"} if declares_read(table) else {}
                make_spec(name, None, **implied, **table)
            except (ConfigError, TypeError, ValueError) as exc:
                raise ConfigError(f"{where}: {exc}") from None
        options = dict(cfg.governor)
    url = store or options.get("store") or DEFAULT_STORE
    failure: ConfigError | None = None
    try:
        backend = open_store(url)
    except ConfigError:
        raise
    except Exception as exc:
        failure = ConfigError(f"cannot open the store {shown(url)}: {scrub(describe(exc))}")
    if failure is not None:
        raise failure  # not chained: the store's error says what it may say
    trail = [_audit_sink(audit, url), *sinks]  # after the store: a bad URL leaves no file
    try:
        if config is None:
            return Governor(backend, audit=trail, **private)
        return Governor.from_config(config, store=backend, audit=trail, **private)
    except (ConfigError, TypeError, ValueError) as exc:
        backend.close()
        where = f"{config} [governor]" if config is not None else "headway proxy"
        raise ConfigError(f"{where}: {exc}") from None


_NUMBER = (int, float)
_TOML_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("effect", "version", "scope"), (str,)),
    **dict.fromkeys(("idempotent", "deterministic", "poll", "failed_final"), (bool,)),
    **dict.fromkeys(("ttl", "max_wait_s", "timeout"), _NUMBER),
    **dict.fromkeys(("max_polls", "no_progress_limit"), (int,)),
    **dict.fromkeys(
        ("invalidates", "resources", "progress_fields", "ignore_fields", "redact"), (list, str)
    ),
}


def _check_type(where: str, key: str, value: Any) -> None:
    expected = _TOML_TYPES.get(key)
    if expected is not None and (
        not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected)
    ):
        want = {
            (str,): "a string",
            (bool,): "true or false",
            _NUMBER: "a number",
            (int,): "an integer",
            (list, str): "a list of strings",
        }[expected]
        raise ConfigError(f"{where}: {key} must be {want}, not {value!r}")


def sqlite_path(url: str) -> str | None:
    """The file of a ``sqlite:///`` URL (None for other stores)."""
    return url[len("sqlite:///") :] if url.startswith("sqlite:///") else None


def _audit_sink(audit: str | None, store_url: str) -> AuditSink:
    if audit is not None and audit.endswith(".jsonl"):
        return JSONLSink(audit)
    path = audit or sqlite_path(store_url) or "headway.db"
    # written by a thread of its own: a call's answer does not wait for SQLite's commit
    return SQLiteAuditSink(sqlite_path(path) or path, background=True)


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--http wants HOST:PORT (such as 127.0.0.1:8765), not {value!r}")
    return host, int(port)


def _metrics() -> tuple[Any, list[AuditSink]]:
    """A registry of the proxy's own (only headway's metrics at /metrics, not the
    process's default collectors) and the sink that feeds it; none without the extra."""
    try:
        from prometheus_client import CollectorRegistry
    except ImportError:
        print(
            "headway proxy: no metrics at /metrics: pip install 'headway[prometheus]'",
            file=sys.stderr,
        )
        return None, []
    from .telemetry import PrometheusSink

    registry = CollectorRegistry()
    return registry, [PrometheusSink(registry=registry)]


def run(args: argparse.Namespace) -> int:
    command = list(args.upstream_command)
    if command[:1] == ["--"]:
        command = command[1:]
    try:
        if bool(command) == bool(args.upstream):
            raise ConfigError("give the upstream as -- COMMAND [ARGS...] or as --upstream URL")
        if args.idle_turn is not None and not args.idle_turn >= 0:  # NaN too
            raise ConfigError(f"--idle-turn wants seconds >= 0, not {args.idle_turn!r}")
        if args.workspace is not None and not args.workspace:
            raise ConfigError("--workspace wants a name")
        http = _host_port(args.http) if args.http else None
        registry, sinks = _metrics() if http and not args.no_metrics else (None, [])
        gov = open_governor(
            args.config,
            args.store,
            args.audit,
            sinks,
            private_sessions=not http,
            workspace=args.workspace,
            idle_turn_s=args.idle_turn,
        )
    except ConfigError as exc:
        print(f"headway proxy: {exc}", file=sys.stderr)
        return 2
    from ._mcp_calls import new_stdio_session, note

    session = None if http else new_stdio_session()
    # stdio to stdio: the light relay (one persistent upstream, lines passed on), which
    # loads no MCP library; not on Windows, whose event loop cannot read a pipe on stdin
    relay = http is None and bool(command) and sys.platform != "win32"
    if not relay:
        from .integrations._common import require

        require("fastmcp", "mcp")
    where = f"http://{http[0]}:{http[1]}/mcp" if http else f"stdio, session {session}"
    if http and registry is not None:
        where += f", metrics at http://{http[0]}:{http[1]}/metrics"
    note(f"serving {where}; upstream {' '.join(command) or args.upstream}")
    try:
        if relay and session is not None:
            from ._mcp_relay import serve

            asyncio.run(serve(gov, command, session))
            return 0
        from . import mcp_proxy

        server = mcp_proxy.build(
            gov, command or args.upstream, session_id=session, metrics=registry
        )
        if http is None:
            asyncio.run(server.run_async("stdio", show_banner=False, log_level="WARNING"))
        else:
            asyncio.run(
                server.run_async(
                    "http", show_banner=False, host=http[0], port=http[1], log_level="WARNING"
                )
            )
    except KeyboardInterrupt:
        pass
    finally:
        gov.close()
        for sink in gov.sinks:  # the audit trail's last records are written now
            close = getattr(sink, "close", None)
            if close is not None:
                close()
    return 0
