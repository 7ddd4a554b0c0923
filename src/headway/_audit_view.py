"""``headway audit``: what a session did, one line per call, read from the audit trail.

The trail is the ``headway_audit`` table of a SQLite file (``SQLiteAuditSink``, which the
proxy writes next to a SQLite store) or a JSONL file (``JSONLSink``). Arguments were
redacted when the records were written.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .stores import shown


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "audit",
        help="list what a session did: one line per call (time, tool, decision, signals)",
        description="List the audit trail of governed calls, oldest first: time, session, "
        "step, tool, status, decision, signals and the (redacted) arguments. Reads a SQLite "
        "store's file (where `headway proxy` writes its audit) or a JSONL audit file.",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        default="sqlite:///headway.db",
        help="sqlite:///FILE, a SQLite file or a .jsonl file (default: sqlite:///headway.db)",
    )
    p.add_argument("--session", metavar="ID", help="only this session's calls")
    p.add_argument("--json", action="store_true", help="one JSON record per line")


def records(source: str, session: str | None = None) -> Iterator[dict[str, Any]]:
    """The audit records in ``source`` (a SQLite URL or file, or a JSONL file), oldest first."""
    if source.startswith(("redis", "postgres", "unix:", "memory:")):
        raise ConfigError(
            f"headway audit reads SQLite and JSONL audit files, not {shown(source)}: a proxy "
            "with a Redis or PostgreSQL store writes its audit to headway.db in its working "
            "directory (or to its --audit file)"
        )
    path = Path(source[len("sqlite:///") :] if source.startswith("sqlite:///") else source)
    if not path.is_file():
        raise ConfigError(f"no audit file at {path}")
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    record = json.loads(line)
                    if session is None or record.get("session") == session:
                        yield record
        return
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        where, params = ("WHERE session = ?", (session,)) if session is not None else ("", ())
        try:
            rows = conn.execute(f"SELECT record FROM headway_audit {where} ORDER BY id", params)
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"{path} holds no headway audit trail ({exc})") from None
        for (text,) in rows:
            yield json.loads(text)
    finally:
        conn.close()


def line(record: Mapping[str, Any]) -> str:
    """One call as one line: time, session, step, tool, status, decision, signals, args."""
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(float(record.get("time") or 0)))
    signals = record.get("signals") or {}
    shown = " ".join(f"{k}={v}" for k, v in sorted(signals.items()) if v) or "-"
    extra = f" error={record['error']}" if record.get("error") else ""
    extra += " correction" if record.get("correction") else ""
    stop = record.get("stop")
    if isinstance(stop, Mapping):  # the call that reached a limit: the session stops here
        why = stop.get("budget_type") or stop.get("signal") or ""
        extra += f" STOP={stop.get('terminated_by')}" + (f"({why})" if why else "")
        extra += f" {stop.get('consumed')}/{stop.get('limit')}"
    step = record.get("step")
    return (
        f"{when}Z {record.get('session')} #{'-' if step is None else step} {record.get('tool')} "
        f"{record.get('status')} decision={record.get('decision')}{extra} "
        f"signals: {shown} args: {record.get('args')}"
    )


def run(args: argparse.Namespace) -> int:
    try:
        count = 0
        for record in records(args.store, args.session):
            print(json.dumps(record, sort_keys=True) if args.json else line(record))
            count += 1
    except ConfigError as exc:
        print(f"headway audit: {exc}", file=sys.stderr)
        return 2
    if count == 0 and not args.json:
        print("no calls recorded" + (f" for session {args.session}" if args.session else ""))
    return 0
