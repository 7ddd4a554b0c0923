"""The ``headway`` command."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from . import __version__, _audit_view, _proxy_cli


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="headway", description="Govern the tool calls of LLM agents."
    )
    parser.add_argument("--version", action="version", version=f"headway {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="run a scripted agent through headway and show each decision"
    )
    demo.add_argument(
        "--store", help="store URL (default: a new SQLite file in a temporary folder)"
    )
    from .analyze.command import add_parser as add_analyze

    add_analyze(sub)
    _proxy_cli.add_parser(sub)
    _audit_view.add_parser(sub)
    args = parser.parse_args(argv)

    if args.command == "analyze":
        from .analyze.command import run as run_analyze

        return run_analyze(args)
    if args.command == "proxy":
        return _proxy_cli.run(args)
    if args.command == "audit":
        return _audit_view.run(args)

    if args.command == "demo":
        from . import demo as demo_module
        from .stores import open_store, shown

        with tempfile.TemporaryDirectory(prefix="headway-demo-") as tmp:
            url = args.store or f"sqlite:///{Path(tmp) / 'headway.db'}"
            store = open_store(url)
            print(f"headway {__version__} demo: a scripted agent, no LLM; store {shown(url)}")
            try:
                demo_module.run(store, sys.stdout)
            finally:
                store.close()
        return 0
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
