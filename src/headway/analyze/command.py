"""The ``headway analyze`` command: read, replay, print figures, write JSON and HTML."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from .. import __version__
from .._spec import make_spec
from ..config import Config, load_config
from ..errors import ConfigError
from ._model import Problem, Run
from .figures import Figures
from .formats import FORMATS, files, read
from .money import DEFAULT_PRICE_IN, DEFAULT_PRICE_OUT, Prices
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
    p.add_argument(
        "--price-in",
        type=_price,
        metavar="USD",
        default=None,
        help=f"price per million input tokens (default {DEFAULT_PRICE_IN}, an assumption)",
    )
    p.add_argument("--price-out", type=_price, metavar="USD", default=None,
                   help=f"price per million output tokens (default {DEFAULT_PRICE_OUT})")  # fmt: skip


def _price(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a price: {text!r} (USD per million tokens)"
        ) from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"a price is >= 0, not {text}")
    return value


def check_config(path: Path) -> Config:
    """The config, its tool tables checked as a registration would check them (an invalid
    value such as ``effect = "reed"`` is a ConfigError here, before any replay)."""
    config = load_config(path)
    for name, table in config.tools.items():
        # without an effect, the replay may declare the tool a read: check it as one
        make_spec(name, None, **{"effect": "read", **table})
    return config


def _runs(
    paths: Sequence[str], fmt: str, problems: list[Problem], bar: IO[str] | None
) -> Iterator[Run]:
    """The runs of every path; problems are printed to stderr as they come."""
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
    configured: dict[str, Any] = {}
    if args.config is not None:
        try:  # a bad file fails once, clearly, before any replay
            configured = check_config(args.config).tools
        except ConfigError as exc:
            print(f"headway analyze: {exc}", file=sys.stderr)
            return 2
    given = args.price_in is not None or args.price_out is not None
    prices = Prices(
        DEFAULT_PRICE_IN if args.price_in is None else args.price_in,
        DEFAULT_PRICE_OUT if args.price_out is None else args.price_out,
        given,
    )
    problems: list[Problem] = []
    bar = sys.stderr if sys.stderr.isatty() else None
    figures = Figures(prices=prices)
    try:
        for r in _runs(args.paths, args.fmt, problems, bar):
            figures.add(replay(r, args.config))
    except ConfigError as exc:  # a table valid alone, not with the tool's recorded use
        print(f"headway analyze: {exc}", file=sys.stderr)
        return 2
    result = figures.result()
    warnings = [
        f"--config declares [tools.{name}], a tool no run calls (misspelt? it changed nothing)"
        for name in sorted(set(configured) - set(figures.assumed))
    ]
    if result["overall"]["calls"] == 0:
        warnings.append("no tool calls found in any input: there is nothing to report")
    for w in warnings:
        print(f"headway analyze: warning: {w}", file=sys.stderr)
    result["command"] = {
        "headway": __version__,
        "paths": [str(p) for p in args.paths],
        "config": str(args.config) if args.config else None,
        "format": args.fmt,
        "problems": [str(p) for p in problems],
        "warnings": warnings,
    }
    summary(result, out)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=1, sort_keys=True), encoding="utf-8")
    if args.html_out is not None:
        from .html import render

        args.html_out.write_text(render(result, figures.timelines), encoding="utf-8")
    return 1 if problems or result["overall"]["calls"] == 0 else 0


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
    _details(result, out)
    if result["command"]["problems"]:
        out.write(f"{len(result['command']['problems'])} input problem(s): see stderr\n")
    for w in result["command"]["warnings"]:
        out.write(f"warning: {w}\n")


def _money(v: float | None) -> str:
    return "n/a" if v is None else f"${v:,.2f}" if v >= 0.01 else f"${v:.4f}"


def _details(result: dict[str, Any], out: IO[str]) -> None:
    """Denominators, money, the assumptions and what the model would have read."""
    o, m, p = result["overall"], result["overall"]["money"], result["prices"]
    out.write(
        f"tokens saved: {o['tokens_saved']} of {o['result_tokens']} tool-result tokens "
        f"({o['tokens_saved_share']:.1%}) in {o['calls']} calls of {o['runs']} runs\n"
        f"oracle (same-result repeats of reads): {o['oracle']}; same-result repeats of writes, "
        f"never a cache's to serve: {o['oracle_writes']}\n"
        f"corrected runs that still succeeded: {o['corrected_succeeded']} of "
        f"{o['runs_corrected']} corrected ({o['runs_with_outcome']} runs record an outcome)\n"
    )
    estimated = m["turns"] - m["recorded_turns"]
    out.write(
        f"model turns: {m['turns']} ({m['recorded_turns']} with recorded usage, {estimated} "
        f"estimated); avoided by stops: {m['turns_avoided']} turns, {m['input_avoided']} input "
        f"and {m['output_avoided']} output tokens of {m['input_tokens']} and {m['output_tokens']}\n"
        f"cost at ${p['input_per_million']}/M input, ${p['output_per_million']}/M output "
        f"({p['source']}): {_money(m['cost_before'])} before, {_money(m['cost_after'])} after\n"
    )
    if m["runs_with_recorded_cost"]:
        out.write(
            f"recorded cost (the export's own figure): {_money(m['recorded_cost'])} over "
            f"{m['runs_with_recorded_cost']} runs\n"
        )
    for when in ("before", "after"):
        lo, hi = m[f"cost_per_success_{when}_ci"]
        value = m[f"cost_per_success_{when}"]
        interval = f"95% interval {_money(lo)}-{_money(hi)}; " if value is not None else ""
        out.write(
            f"cost per successful task {when}: {_money(value)} ({interval}"
            f"{m[f'successes_{when}']} successes in {m['runs_with_outcome']} runs with an outcome)\n"
        )
    c = result["command"]
    policy = (
        f"--config {c['config']} over the default policy" if c["config"] else "the default policy"
    )
    out.write(
        f"assumptions: headway {c['headway']}, {policy}, inputs {', '.join(c['paths'])} "
        f"({c['format']} format); how each tool was taken, and why:\n"
    )
    for a in result["assumptions"]:
        out.write(f"  {a['tool'] or '(no name)'}: {a['class']} ({a['why']}; {a['runs']} runs)\n")
    if result["examples"]:
        out.write("what the model would have read (first examples of each kind)\n")
    for kind, texts in result["examples"].items():
        for e in texts[:1]:
            text = e["text"].replace("\n", " ")
            out.write(f"  {kind} [{e['source']} {e['run_id']} step {e['step']}]: {text[:300]}\n")
