"""The ``headway analyze`` command: read, replay, print figures, write JSON and HTML."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from ..config import load_config
from ..errors import ConfigError
from ._model import Problem, Run
from .figures import Figures
from .formats import FORMATS, files, read
from .replay import replay

_COLUMNS = (
    ("runs", "runs"), ("calls", "calls"), ("rcr", "RCR"), ("same_result_rcr", "same-res"),
    ("served", "served"), ("stale", "stale"), ("oracle", "oracle"), ("captured", "captured"),
    ("corrections", "corr."), ("stops", "stops"), ("tokens_saved", "tok.saved"),
)  # fmt: skip


def add_parser(sub: Any) -> None:
    """The ``analyze`` subparser (``sub`` is the CLI's subparsers object)."""
    p = sub.add_parser(
        "analyze",
        help="what headway would have served, corrected and stopped on recorded runs",
        description="Replay recorded agent runs through a Governor in shadow mode.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files, or directories of files")
    p.add_argument("--config", type=Path, help="a headway TOML file (the policy to try)")
    p.add_argument("--format", choices=FORMATS, default="auto", dest="fmt")
    p.add_argument("--json", type=Path, dest="json_out", help="write the figures as JSON")
    p.add_argument("--html", type=Path, dest="html_out", help="write a self-contained report")


def _runs(
    paths: Sequence[str], fmt: str, problems: list[Problem], bar: IO[str] | None
) -> Iterator[Run]:
    count = 0
    for path, listed in files(paths):
        for item in read(path, fmt, listed=listed):
            if isinstance(item, Problem):
                if item.skipped:
                    print(f"headway analyze: skipped {item}", file=sys.stderr)
                    continue
                problems.append(item)
                print(f"headway analyze: {item}", file=sys.stderr)
                continue
            count += 1
            if bar is not None and count % 10 == 0:
                bar.write(f"\r{count} runs read ({path.name})\x1b[K")
                bar.flush()
            yield item
    if bar is not None:
        bar.write(f"\r{count} runs read\x1b[K\n")


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    """Run the command; 0 when every input was read, 1 when some could not be (the rest
    is still analysed), 2 for a bad ``--config``."""
    out = out or sys.stdout
    if args.config is not None:
        try:
            load_config(args.config)  # a bad file fails once, clearly, before any replay
        except ConfigError as exc:
            print(f"headway analyze: {exc}", file=sys.stderr)
            return 2
    problems: list[Problem] = []
    bar = sys.stderr if sys.stderr.isatty() else None
    figures = Figures()
    for r in _runs(args.paths, args.fmt, problems, bar):
        figures.add(replay(r, args.config))
    result = figures.result()
    result["command"] = {
        "paths": [str(p) for p in args.paths],
        "config": str(args.config) if args.config else None,
        "format": args.fmt,
        "problems": [str(p) for p in problems],
    }
    summary(result, out)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=1, sort_keys=True), encoding="utf-8")
    if args.html_out is not None:
        from .html import render

        args.html_out.write_text(render(result, figures.timelines), encoding="utf-8")
    return 1 if problems else 0


def summary(result: dict[str, Any], out: IO[str]) -> None:
    """The text table: one line per source and the overall line."""
    rows = [*result["sources"].items(), ("overall", result["overall"])]
    width = max([len(name) for name, _ in rows] + [6])
    out.write(f"{'source':<{width}} " + " ".join(f"{h:>9}" for _, h in _COLUMNS) + "\n")
    for name, figs in rows:
        cells = []
        for key, _ in _COLUMNS:
            v = figs[key]
            cells.append(f"{v:>9.1%}" if isinstance(v, float) else f"{v:>9}")
        out.write(f"{name:<{width}} " + " ".join(cells) + "\n")
    o = result["overall"]
    out.write(
        f"stale answers: {o['stale']} (must be 0); harness stubs: {o['harness_stubs']}; "
        f"runs stopped that succeeded: {o['stopped_succeeded']} of {o['succeeded']}; "
        f"tokens by {result['tokens_method']}\n"
    )
    if result["command"]["problems"]:
        out.write(f"{len(result['command']['problems'])} input problem(s): see stderr\n")
