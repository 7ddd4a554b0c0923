"""Replay the published agent runs in ../shared/traces/ through a Governor.

    python bench/replay_traces.py [--traces DIR] [--limit N] [--source NAME ...] [--steps FILE]
    python bench/replay_traces.py --labelled [--traces DIR]

Each recorded call goes through a real Governor in enforce mode; the recorded observation
stands in for the tool. Tools are declared by what they do: tau-bench's write tools (the
``side_effect`` flag) are writes and its lookups deterministic reads; browser, viewer and
delegation tools are uncached reads (they change only the agent's view; a delegation's
result is the sub-agent's reply); ``BashOutput``-style status tools are ``poll=True``;
shell commands are classified read or write by ``headway.shell`` and Claude Code's file
reads are cached reads invalidated by writes; code execution is a write. Error results
(tau-bench's ``Error: ...``) are recognised by the Governor's default predicate.

Per source it prints: calls executed and served from cache, stale cache hits (a served
result, or the result a correction quotes without running the call, whose recorded sha1
differs from what the real tool returned: must be 0), runs with
a correction, runs stopped by a loop rule, and among the runs that succeeded (reward 1, or
the source's own verdict) how many were corrected and how many stopped (must be 0), with
the id of each such stopped run. For Magentic-One it also compares with the
orchestrator's own "is in loop" self-report.

``--labelled`` replays the runs people labelled for loops (``DIR/labelled/``, with
``loops.json``) and scores headway against the labels: a run is flagged at its first
correction or stop; per source and per loop kind it prints TP/FP/FN, precision, recall
and F1, the stops on runs labelled "not a loop", and the naive "3 identical calls in a
row" rule beside it. BFCL's tools are declared by what they do: the record's
``side_effect`` flag (the BFCL tool changes its environment: ``cd``, ``mv``, ``echo``,
``post_tweet``...) marks a write, the others (``ls``, ``cat``, ``get_stock_info``...) are
deterministic reads of a state that any write invalidates; a new user turn of the
conversation (the record's ``turn``) is reported as ``session.user_turn()``, as an
integration does.

``--steps FILE`` also writes every call's verdict, one JSON line each (its audit record's
status, mark, signals, decision, digests and stop, and the correction text), so that two
versions' detectors can be compared call by call: run it with each version's ``src`` on
``PYTHONPATH`` and diff the files. About 15 s for every source.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import headway
from headway._spec import error_result
from headway.shell import command_effect, is_dynamic, shell_resources
from headway.similarity import DEFAULT_NORMALIZERS, strip_element_refs

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "traces"
SOURCES = [
    "tau_bench_airline_gpt4o",
    "agentrx_tau_retail",
    "miniswe_gemini3pro_swebv",
    "codetracer_kimi_tb2",
    "magentic_one",
    "whowhen_captain_agent",
    "wai_browseruse_gemini",
    "codetracer_claudecode_tb1",
]
LABELLED = ["wai_browseruse_gemini", "codetracer_claudecode_tb1", "bfcl_gptoss_multiturn"]
VIEW_TOOLS = {
    "click",
    "type",
    "page_down",
    "page_up",
    "history_back",
    "input_text",
    "click_control",
    "websurfer_other",
    "file_view",
    "scroll",
    "visit_url",
    "web_search",
    # browser-use actions (wai_browseruse_gemini): they change only the agent's view
    "input",
    "evaluate",
    "search_page",
    "find_elements",
    "send_keys",
    "select_dropdown",
    "navigate",
    "wait",
    "go_back",
    "find_text",
    "extract",
    "dropdown_options",
}
POLL_TOOLS = {"BashOutput", "TaskOutput"}  # status of a background shell: poll=True


FINE = "--all-writes-invalidate" not in sys.argv  # resources= on (the default) or off
NORMALIZERS = (
    (*DEFAULT_NORMALIZERS, strip_element_refs)
    if "--strip-element-refs" in sys.argv
    else DEFAULT_NORMALIZERS
)


def _file_path(args: Any) -> list[str] | None:
    path = args.get("file_path") or args.get("notebook_path")
    return [str(path).rstrip("/").rsplit("/", 1)[-1]] if path else None


_paths: dict[str, Any] = {"resources": _file_path} if FINE else {}
_shell: dict[str, Any] = {"resources": shell_resources} if FINE else {}


def spec_for(source: str, rec: dict[str, Any]) -> dict[str, Any]:
    """How an operator would declare this recorded tool (see the module docstring)."""
    tool = rec["tool"]
    if source.startswith("bfcl_"):  # the BFCL tool's own nature; unknown names: writes
        return (
            {"effect": "read", "deterministic": True}
            if rec.get("side_effect") is False
            else {"effect": "write"}
        )
    if source.startswith(("tau_", "agentrx")):
        return (
            {"effect": "write"}
            if rec.get("side_effect")
            else {"effect": "read", "deterministic": True}
        )
    if tool.startswith("delegate:") or tool in VIEW_TOOLS or rec.get("kind") == "delegation":
        return {"effect": "read"}  # uncached: a delegation's result is the sub-agent's reply
    if tool in POLL_TOOLS:
        return {"effect": "read", "poll": True}
    if tool == "Read":
        return {"effect": "read", "deterministic": True, **_paths}
    if tool in ("Glob", "Grep", "LS"):
        return {"effect": "read", "deterministic": True}
    if tool in ("Write", "Edit", "MultiEdit", "NotebookEdit"):
        return {"effect": "write", **_paths}
    if tool in ("WebSearch", "WebFetch"):
        return {"effect": "read"}
    if tool.lower() == "bash":
        return {"effect": shell_spec_effect, "deterministic": True, **_shell}
    return {"effect": "write"}


def skip(rec: dict[str, Any]) -> str | None:
    """Records that are not tool calls headway would see, or that carry nothing to judge."""
    if isinstance(rec["args"], dict) and "n_bash_blocks" in rec["args"]:
        return "format errors answered by the harness"  # mini-swe-agent: never reaches a tool
    if rec.get("kind") == "delegation" and not rec.get("obs_len"):
        return "delegations without a recorded reply"  # Magentic-One: no result to judge
    return None


def shell_spec_effect(args: Any) -> str:
    command = args.get("command") if isinstance(args, dict) else None
    if not isinstance(command, str):
        return "write"
    return command_effect(command)


def runs(path: Path, limit: int | None) -> Iterator[list[dict[str, Any]]]:
    current: list[dict[str, Any]] = []
    seen = 0
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if current and rec["run_id"] != current[0]["run_id"]:
                yield sorted(current, key=lambda r: r["step"])
                seen += 1
                if limit is not None and seen >= limit:
                    return
                current = []
            current.append(rec)
    if current:
        yield sorted(current, key=lambda r: r["step"])


def observation(rec: dict[str, Any]) -> str:
    text = rec.get("observation") or ""
    if rec.get("obs_len", 0) > len(text):  # cut at 800 characters: keep full results distinct
        text += f"\n[... {rec['obs_len']} characters in all, sha1 {rec['obs_sha1'][:12]}]"
    return text


_VERDICT = ("tool", "status", "mark", "signals", "decision", "args_digest", "result_digest")
_VERDICT += ("cache", "stop", "correction", "error")


class _Verdicts:
    """An audit sink keeping what the detectors and the pipeline decided of each call."""

    def __init__(self) -> None:
        self.kept: list[dict[str, Any]] = []

    def write(self, record: Any) -> None:
        self.kept.append({k: record[k] for k in _VERDICT})


def replay_run(
    source: str, calls: list[dict[str, Any]], steps: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    verdicts = _Verdicts()
    current: dict[str, Any] = {}

    def is_error(value: Any) -> bool:
        # the framework's own error status (Claude Code's is_error), else the default
        return bool(current.get("is_error")) or error_result(value)

    gov = headway.Governor(
        audit=[] if steps is None else [verdicts], normalizers=NORMALIZERS, is_error=is_error
    )

    def tool(**_: Any) -> str:
        current["executed"] = True
        return str(current["value"])

    origin: dict[str, str] = {}  # served value -> sha1 of the call that produced it
    held: dict[str, str] = {}  # call -> the value it last executed or was served
    out = collections.Counter[str]()
    s = gov.session(calls[0]["run_id"])
    turn = calls[0].get("turn")
    for rec in calls:
        if rec.get("turn", turn) != turn:  # a new user request of a multi-turn conversation
            turn = rec.get("turn")
            s.user_turn()
        name = rec["tool"]
        reason = skip(rec)
        if reason is not None:
            out["skipped: " + reason] += 1
            continue
        if gov.spec(name) is None:
            options = spec_for(source, rec)
            if options.get("effect") is shell_spec_effect:
                options["deterministic"] = True
            gov.register(name, tool, **options)
        args = rec["args"] if isinstance(rec["args"], dict) else {"code": rec["args"]}
        if (
            name.lower() == "bash"
            and isinstance(args.get("command"), str)
            and is_dynamic(args["command"])
        ):
            args = {**args}  # a dynamic read: executed each time (declared below)
        current.update(value=observation(rec), executed=False, is_error=rec.get("is_error"))
        out["calls"] += 1
        try:
            o = s.call(name, args)
            if steps is not None:  # the call's record, written as it settled
                steps.append({"run": rec["run_id"], **verdicts.kept[-1], "text": o.correction})
        except headway.LoopDetected as stop:
            out["stopped"] = 1
            out["stop_step"] = rec["step"]
            out.setdefault("flag_step", rec["step"])
            out["stop_signal_" + stop.diagnostic["signal"]] = 1
            break
        except headway.ArgumentError:
            out["malformed"] += 1
            continue
        call = name + json.dumps(args, sort_keys=True, default=str)
        if o.status is headway.Status.EXECUTED:
            out["executed"] += 1
            origin[str(o.value)] = rec["obs_sha1"]
            held[call] = str(o.value)
        elif o.status is headway.Status.CORRECTED and "holds that result as current" not in str(
            o.correction
        ):
            out["corrected"] += 1  # a cycle: it quotes the last result, as the last one
        elif o.status in (headway.Status.CACHED, headway.Status.CORRECTED):
            # a repeat corrected without running quotes the result headway holds as
            # current: judged as served
            served = str(o.value) if o.status is headway.Status.CACHED else held.get(call)
            held[call] = served or ""
            out["cached" if o.status is headway.Status.CACHED else "corrected"] += 1
            if origin.get(str(served)) != rec["obs_sha1"]:
                recorded = rec.get("observation") or ""
                # Claude Code answers a repeated Read of an unchanged file with a stub (or
                # the record is empty): our served content is the real, unchanged file
                stub = not recorded or recorded.startswith("File unchanged since last read")
                out["harness_stub" if stub else "stale"] += 1
        if o.correction is not None:
            out["with_correction"] += 1
        if o.correction is not None or o.status is headway.Status.CORRECTED:
            out.setdefault("flag_step", rec["step"])  # the run's first correction
    out["corrected_run"] = int(out["corrected"] + out["with_correction"] > 0)
    return dict(out)


def peer_rules(source: str, calls: list[dict[str, Any]]) -> dict[str, bool]:
    """The counting rules peers use, on the same replayed calls: 3 or 5 identical calls in a
    row, or the same (call, result) pair seen 3 times."""
    fired = {"3_in_a_row": False, "5_in_a_row": False, "same_pair_3x": False}
    last, run = None, 0
    pairs: collections.Counter[tuple[str, str]] = collections.Counter()
    for rec in calls:
        if skip(rec) is not None:
            continue
        key = rec["tool"] + json.dumps(rec["args"], sort_keys=True)
        run = run + 1 if key == last else 1
        last = key
        pairs[(key, rec["obs_sha1"])] += 1
        fired["3_in_a_row"] |= run >= 3
        fired["5_in_a_row"] |= run >= 5
        fired["same_pair_3x"] |= pairs[(key, rec["obs_sha1"])] >= 3
    return fired


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a proportion."""
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def succeeded(traces: Path, source: str) -> dict[str, bool | None]:
    """run_id -> whether the run succeeded (reward 1, or the source's own verdict), None
    when the source says nothing."""
    path = traces / f"{source}.runs.jsonl"
    if not path.exists():
        return {}
    out: dict[str, bool | None] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        verdict = r.get("outcome") if isinstance(r.get("outcome"), dict) else {}
        flag = verdict.get("passed", verdict.get("is_resolved"))
        reward = r.get("reward")
        out[r["run_id"]] = (reward >= 1) if reward is not None else flag
    return out


def self_reported_loops(traces: Path) -> dict[str, bool]:
    path = traces / "magentic_one.runs.jsonl"
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        report = ((r.get("labels") or {}).get("orchestrator_self_report")) or {}
        out[r["run_id"]] = bool(report.get("n_in_loop_true"))
    return out


def _score(tp: int, fp: int, fn: int) -> str:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return f"TP {tp:>3} FP {fp:>3} FN {fn:>3}  P {p:.2f} R {r:.2f} F1 {f1:.2f}"


def labelled(traces: Path, verbose: bool) -> None:
    """Score the first correction or stop of each labelled run against people's labels."""
    folder = traces / "labelled"
    labels = {
        (x["source"], x["run_id"]): x for x in json.loads((folder / "loops.json").read_text())
    }
    rows: list[tuple[str, str, bool, bool, bool, bool]] = []  # source, kind, loop, flagged...
    for source in LABELLED:
        path = folder / f"{source}.calls.jsonl.gz"
        if not path.exists():
            continue
        won = succeeded(folder, source)
        for calls in runs(path, None):
            rid = calls[0]["run_id"]
            label = labels.get((source, rid))
            if label is None:
                continue
            r = replay_run(source, calls)
            flagged = "flag_step" in r
            naive = peer_rules(source, calls)["3_in_a_row"]
            kind = label.get("kind") or "not_a_loop"
            rows.append((source, kind, bool(label["loop"]), flagged, bool(r.get("stopped")), naive))
            if verbose and flagged != bool(label["loop"]):
                what = "FN" if label["loop"] else "FP"
                print(
                    f"{what} {source[:10]} {kind:<26} flag@{r.get('flag_step')} "
                    f"label@{label.get('first_step')} {rid}"
                )
            if r.get("stopped") and won.get(rid):
                print(f"  stopped although it succeeded: {source} {rid}")

    def line(name: str, sel: list[tuple[str, str, bool, bool, bool, bool]]) -> None:
        tp = sum(1 for x in sel if x[2] and x[3])
        fp = sum(1 for x in sel if not x[2] and x[3])
        fn = sum(1 for x in sel if x[2] and not x[3])
        ntp = sum(1 for x in sel if x[2] and x[5])
        nfp = sum(1 for x in sel if not x[2] and x[5])
        nfn = sum(1 for x in sel if x[2] and not x[5])
        stops = sum(1 for x in sel if not x[2] and x[4])
        print(
            f"{name:<28} {len(sel):>4}  headway {_score(tp, fp, fn)}  stops on not-a-loop "
            f"{stops}   naive 3-in-a-row {_score(ntp, nfp, nfn)}"
        )

    print(f"{'labelled runs':<28} {'runs':>4}")
    line("all", rows)
    for source in LABELLED:
        line(source, [x for x in rows if x[0] == source])
    not_loops = [x for x in rows if not x[2]]
    for kind in sorted({x[1] for x in rows if x[2]}):
        # per kind: the runs of that kind (recall), and every not-a-loop run (false alarms)
        line(f"kind {kind}", [x for x in rows if x[1] == kind] + not_loops)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=Path, default=DEFAULT)
    ap.add_argument("--limit", type=int, default=None, help="runs per source (default: all)")
    ap.add_argument(
        "--all-writes-invalidate",
        action="store_true",
        help="ignore resources=: every write invalidates all cached reads",
    )
    ap.add_argument(
        "--source", action="append", choices=SOURCES, help="replay only this source (repeatable)"
    )
    ap.add_argument(
        "--strip-element-refs",
        action="store_true",
        help="add the opt-in normaliser of browser element numbers",
    )
    ap.add_argument("--steps", type=Path, help="write every call's verdict here (JSON lines)")
    ap.add_argument(
        "--labelled", action="store_true", help="score loop judgment on the labelled runs"
    )
    ap.add_argument("--misses", action="store_true", help="with --labelled: list FP and FN runs")
    a = ap.parse_args()
    if a.labelled:
        labelled(a.traces, a.misses)
        return
    steps: list[dict[str, Any]] | None = None if a.steps is None else []
    if not a.traces.exists():
        print(f"no traces at {a.traces}: nothing to replay")
        return
    print(
        f"{'source':<26} {'runs':>5} {'calls':>6} {'exec':>6} {'cached':>6} {'stale':>5} "
        f"{'corr.calls':>10} {'runs corr.':>10} {'runs stopped':>18}"
    )
    for source in a.source or SOURCES:
        path = a.traces / f"{source}.calls.jsonl.gz"
        if not path.exists():
            continue
        results: dict[str, dict[str, Any]] = {}
        peers: dict[str, dict[str, bool]] = {}
        for calls in runs(path, a.limit):
            results[calls[0]["run_id"]] = replay_run(source, calls, steps)
            peers[calls[0]["run_id"]] = peer_rules(source, calls)
        tot = collections.Counter[str]()
        for r in results.values():
            tot.update(r)
        n = len(results)
        lo, hi = wilson(tot["stopped"], n)
        print(
            f"{source:<26} {n:>5} {tot['calls']:>6} {tot['executed']:>6} {tot['cached']:>6} "
            f"{tot['stale']:>5} {tot['corrected']:>10} {tot['corrected_run']:>10} "
            f"{tot['stopped']:>4} ({tot['stopped'] / max(n, 1):5.1%}, CI {lo:.1%}-{hi:.1%})"
        )
        won = succeeded(a.traces, source)
        wins = [rid for rid in results if won.get(rid)]
        false_kills = [rid for rid in wins if results[rid].get("stopped")]
        if any(v is not None for v in won.values()):
            print(
                f"{'':<26} runs that succeeded: {len(wins)}; stopped among them: "
                f"{len(false_kills)}; corrected among them: "
                f"{sum(1 for rid in wins if results[rid].get('corrected_run'))}; served results "
                f"unlike the recorded ones: {tot['stale']} stale, {tot['harness_stub']} harness stubs"
            )
            for rid in false_kills:
                print(
                    f"{'':<28} stopped although it succeeded: {rid} (step {results[rid]['stop_step']})"
                )
        skipped = {k[9:]: v for k, v in tot.items() if k.startswith("skipped: ")}
        if skipped:
            print(f"{'':<26} not replayed: {skipped}")
        for rule in ("3_in_a_row", "5_in_a_row", "same_pair_3x"):
            hit = [rid for rid, p in peers.items() if p[rule]]
            kills = [rid for rid in hit if won.get(rid)]
            line = f"{'':<26} peer rule {rule:<13} would stop {len(hit):>4} runs"
            if any(v is not None for v in won.values()):
                line += f", {len(kills)} of which succeeded"
            if source == "magentic_one":
                report = self_reported_loops(a.traces)
                line += f", {sum(1 for rid in hit if report.get(rid))} of them self-reported loops"
            print(line)
        signals = {k[12:]: v for k, v in tot.items() if k.startswith("stop_signal_")}
        if signals:
            print(f"{'':<26} stop signals: {signals}")
        if source == "magentic_one":
            report = self_reported_loops(a.traces)
            looped = [rid for rid, v in report.items() if v and rid in results]
            caught = [
                rid
                for rid in looped
                if results[rid].get("stopped") or results[rid].get("corrected_run")
            ]
            flagged = [
                rid for rid, r in results.items() if r.get("stopped") or r.get("corrected_run")
            ]
            agree = [rid for rid in flagged if report.get(rid)]
            print(
                f"{'':<26} orchestrator says 'in loop' in {len(looped)} runs; headway corrected or "
                f"stopped {len(caught)} of them; of the {len(flagged)} runs headway flagged, "
                f"{len(agree)} are self-reported loops"
            )
    if a.steps is not None and steps is not None:
        a.steps.write_text("".join(json.dumps(v, sort_keys=True) + "\n" for v in steps))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
