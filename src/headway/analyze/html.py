"""The ``--html`` report: one self-contained file (inline CSS, SVG and data; no network,
no script), laid out to fit the window width: the summary, repeats per tool, savings
captured against the oracle, and a timeline of each corrected, stopped or stale run."""

from __future__ import annotations

import html
import json
from typing import Any

# the Okabe-Ito palette: told apart under the common colour-vision deficiencies (served
# blue and stale vermillion differ in hue and lightness; stale and stop squares also get
# a black outline)
COLOURS = {
    "executed": "#c9d3df",
    "served": "#0072b2",
    "stale": "#d55e00",
    "warned": "#f0e442",
    "corrected": "#e69f00",
    "stop": "#cc79a7",
    "after_stop": "#eeeeee",
}
ORACLE = "#56b4e9"
REPEATS = "#c9d3df"
_LABEL = 40  # characters on one line of a chart label (two lines at most)
_CSS = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2430;background:#fafbfc}
main{max-width:980px;margin:0 auto;padding:16px}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin:1.4em 0 .4em}
.cards{display:flex;flex-wrap:wrap;gap:8px}
.card{background:#fff;border:1px solid #dde3ea;border-radius:6px;padding:8px 12px;min-width:110px}
.card b{display:block;font-size:1.35em;white-space:nowrap}.card.bad b{color:#d55e00}
table{width:100%;border-collapse:collapse;font-size:.82em;background:#fff}
.scroll{overflow-x:auto;max-width:100%}
th,td{border:1px solid #dde3ea;padding:3px 4px;text-align:right;white-space:nowrap}
th{font-size:.92em}td small{color:#5a6675}
th:first-child,td:first-child{text-align:left;white-space:normal;overflow-wrap:anywhere;min-width:10em}
table.wide{table-layout:auto}
table.text th,table.text td{text-align:left;white-space:normal;overflow-wrap:break-word}
blockquote{margin:4px 0 10px;padding:6px 10px;background:#fff;border-left:4px solid #e69f00;font-size:.85em;white-space:pre-wrap;overflow-wrap:anywhere}
.warn{background:#fff6d6;border:1px solid #e6c200;padding:6px 10px;border-radius:6px}
td.bad{background:#fde2e2;font-weight:bold}
svg{width:100%;height:auto;display:block;background:#fff;border:1px solid #dde3ea;border-radius:6px}
.legend span{display:inline-block;margin-right:12px;font-size:.85em}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
.run{margin:10px 0}.run p{margin:2px 0;font-size:.85em;overflow-wrap:anywhere}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _cards(o: dict[str, Any]) -> str:
    items = [
        ("runs", o["runs"], False), ("calls", o["calls"], False),
        ("repeated-call rate", _pct(o["rcr"]), False),
        ("same-result repeats", _pct(o["same_result_rcr"]), False),
        ("served from cache", o["served"], False), ("stale answers", o["stale"], o["stale"] > 0),
        ("captured of oracle", _pct(o["captured"]), False),
        ("corrections", o["corrections"], False), ("runs stopped", o["stops"], False),
        ("stopped that succeeded", f"{o['stopped_succeeded']} / {o['succeeded']}", o["stopped_succeeded"] > 0),
        ("executions saved", o["executions_saved"], False),
        ("tokens saved", f"{o['tokens_saved']} of {o['result_tokens']}", False),
        ("corrected that succeeded", f"{o['corrected_succeeded']} / {o['runs_corrected']}", False),
    ]  # fmt: skip
    return "".join(
        f'<div class="card{" bad" if bad else ""}">{_e(label)}<b>{_e(v)}</b></div>'
        for label, v, bad in items
    )


def _table(result: dict[str, Any]) -> str:
    cols = ("runs", "calls", "rcr", "same_result_rcr", "served", "stale", "oracle", "captured",
            "corrections", "stops", "stopped_succeeded", "tokens_saved")  # fmt: skip
    heads = ("runs", "calls", "RCR", "same-result RCR", "served", "stale", "oracle",
             "captured", "corr.", "stops", "false kills", "tokens saved")  # fmt: skip
    rows = [*result["sources"].items(), ("overall", result["overall"])]
    out = ['<div class="scroll"><table class="wide"><tr><th>source</th>',
           *(f"<th>{_e(h)}</th>" for h in heads), "</tr>"]  # fmt: skip
    for name, f in rows:
        out.append(f"<tr><td>{_e(name)}</td>")
        for c in cols:
            v = f[c]
            cell = _pct(v) if isinstance(v, float) else str(v)
            if c in ("rcr", "same_result_rcr", "captured"):
                lo, hi = f[c + "_ci"]
                cell += f"<br><small>{lo * 100:.1f}-{hi * 100:.1f}</small>"
            bad = c == "stale" and v > 0
            out.append(f"<td{' class=bad' if bad else ''}>{cell}</td>")
        out.append("</tr>")
    out.append("</table></div>")
    return "".join(out)


def _label(label: str, x: int, y: int) -> str:
    """A chart label on one or two lines, never silently cut (the full text on hover)."""
    if len(label) <= _LABEL:
        return f'<text x="{x}" y="{y}" font-size="12">{_e(label)}</text>'
    cut = label.rfind(" ", 0, _LABEL + 1)  # between words when it can: "tool (source)"
    cut = cut if cut > 0 else _LABEL
    first, rest = label[:cut], label[cut:].lstrip()
    rest = rest if len(rest) <= _LABEL else rest[: _LABEL - 1] + "\u2026"
    return (
        f'<text x="{x}" y="{y - 6}" font-size="11"><title>{_e(label)}</title>{_e(first)}'
        f'<tspan x="{x}" dy="13">{_e(rest)}</tspan></text>'
    )


def _bars(title: str, rows: list[tuple[str, list[tuple[str, int, str]]]], scale: int) -> str:
    """A horizontal bar chart: each row a label and stacked-from-zero bars (drawn in order,
    the longest first), scaled to ``scale``."""
    width, label_w = 900, 290
    row_h = 30 if any(len(label) > _LABEL for label, _ in rows) else 22
    height = 10 + row_h * len(rows)
    out = [f'<svg viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}">']
    span = width - label_w - 70
    for i, (label, bars) in enumerate(rows):
        y = 6 + i * row_h
        out.append(_label(label, 4, y + 14))
        for name, value, colour in bars:
            w = span * value / max(scale, 1)
            out.append(
                f'<rect class="bar" x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row_h - 6}" '
                f'fill="{colour}"><title>{_e(label)}: {_e(name)} {value}</title></rect>'
            )
        total = max((value for _, value, _ in bars), default=0)
        if total:  # the longest bar's value at its end (a row of zeros has no number)
            out.append(
                f'<text x="{label_w + span * total / max(scale, 1) + 4:.1f}" y="{y + 14}" font-size="11">{total}</text>'
            )
    out.append("</svg>")
    return "".join(out)


def _legend(items: list[tuple[str, str]]) -> str:
    spans = "".join(f'<span><i style="background:{c}"></i>{_e(n)}</span>' for n, c in items)
    return f'<p class="legend">{spans}</p>'


def _repeats_chart(result: dict[str, Any]) -> str:
    tools = []
    for source, figs in result["sources"].items():
        for tool, t in figs["tools"].items():
            if t["repeats"]:
                tools.append((f"{tool} ({source})", t))
    tools.sort(key=lambda st: -st[1]["repeats"])
    tools = tools[:20]
    if not tools:
        return "<p>No call was repeated.</p>"
    rows = [
        (name, [("repeats", t["repeats"], REPEATS), ("same result, reads (oracle)", t["oracle"], ORACLE),
                ("served correctly", t["served_ok"], COLOURS["served"]), ("stale", t["stale"], COLOURS["stale"])])
        for name, t in tools
    ]  # fmt: skip
    legend = _legend([("repeats", REPEATS), ("same result, reads (oracle)", ORACLE),
                      ("served correctly", COLOURS["served"]), ("stale", COLOURS["stale"])])  # fmt: skip
    return legend + _bars("repeats per tool", rows, max(t["repeats"] for _, t in tools))


def _captured_chart(result: dict[str, Any]) -> str:
    rows = [
        (name, [("oracle", f["oracle"], ORACLE), ("served correctly", f["served_ok"], COLOURS["served"]),
                ("stale", f["stale"], COLOURS["stale"])])
        for name, f in result["sources"].items()
    ]  # fmt: skip
    if not rows:
        return "<p>No runs.</p>"
    scale = max(max(f["oracle"], f["served"]) for f in result["sources"].values())
    legend = _legend([("oracle: repeated reads with the same result", ORACLE),
                      ("served correctly", COLOURS["served"]), ("stale", COLOURS["stale"])])  # fmt: skip
    return legend + _bars("savings captured against the oracle", rows, scale)


def _timeline(run: dict[str, Any]) -> str:
    steps = run["steps"]
    per_row, cell = 60, 15
    lines = (len(steps) + per_row - 1) // per_row
    shown = {what for _, _, what, _ in steps}
    name = f"timeline of run {run['run_id']}: {len(steps)} calls, " + ", ".join(
        f"{sum(1 for s in steps if s[2] == w)} {w.replace('_', ' ')}" for w in COLOURS if w in shown
    )
    out = [
        f'<svg class="timeline" viewBox="0 0 {per_row * cell + 4} {lines * cell + 4}" '
        f'role="img" aria-label="{_e(name)}">'
    ]
    for i, (step, tool, what, signal) in enumerate(steps):
        x, y = 2 + (i % per_row) * cell, 2 + (i // per_row) * cell
        tip = f"step {step}: {tool}: {what}" + (f" ({signal})" if signal else "")
        stroke = ' stroke="#000" stroke-width="1.5"' if what in ("stale", "stop") else ""
        out.append(
            f'<rect class="call" x="{x}" y="{y}" width="{cell - 3}" height="{cell - 3}" '
            f'fill="{COLOURS[what]}"{stroke}><title>{_e(tip)}</title></rect>'
        )
    out.append("</svg>")
    events = [
        f"step {s}: {_e(what)} {_e(tool)}" + (f" ({_e(sig)})" if sig else "")
        for s, tool, what, sig in steps
        if what not in ("executed", "served", "after_stop")
    ]
    verdict = {True: "succeeded", False: "failed", None: "no outcome recorded"}[run["succeeded"]]
    said = "".join(
        f"<p><small>{label}</small></p><blockquote>{_e(text)}</blockquote>"
        for label, text in (("the first correction the model would have read", run.get("first_correction_text")),
                            ("the stop", run.get("stop_text")))
        if text
    )  # fmt: skip
    return (
        f'<div class="run"><p><b>{_e(run["run_id"])}</b> ({_e(run["source"])}, '
        f"{len(steps)} calls, {verdict})</p>{''.join(out)}"
        f"<p>{'; '.join(events[:12])}{' ...' if len(events) > 12 else ''}</p>{said}</div>"
    )


def _money(v: float | None) -> str:
    return "n/a" if v is None else f"${v:,.2f}" if v >= 0.01 else f"${v:.4f}"


def _cost(result: dict[str, Any]) -> str:
    o, m, p = result["overall"], result["overall"]["money"], result["prices"]
    rows = [
        ("tool-result tokens the model would not have read",
         f"{o['tokens_saved']:,} of {o['result_tokens']:,} ({_pct(o['tokens_saved_share'])})"),
        ("model turns (tool-calling responses)",
         f"{m['turns']:,}: {m['recorded_turns']:,} with recorded usage, {m['described_turns']:,} "
         f"estimated from the transcript, {m['turns'] - m['recorded_turns'] - m['described_turns']:,} "
         "from the tool calls only (a lower bound)"),
        ("turns a stop avoids", f"{m['turns_avoided']:,}"),
        ("input tokens avoided (stops and corrections)", f"{m['input_avoided']:,} of {m['input_tokens']:,}"),
        ("output tokens avoided", f"{m['output_avoided']:,} of {m['output_tokens']:,}"),
        (f"cost at ${p['input_per_million']}/M in, ${p['output_per_million']}/M out ({p['source']})",
         f"{_money(m['cost_before'])} before, {_money(m['cost_after'])} after"),
    ]  # fmt: skip
    if m["runs_with_recorded_cost"]:
        rows.append(("recorded cost (the export's own figure)",
                     f"{_money(m['recorded_cost'])} over {m['runs_with_recorded_cost']} runs"))  # fmt: skip
    for when in ("before", "after"):
        lo, hi = m[f"cost_per_success_{when}_ci"]
        value = m[f"cost_per_success_{when}"]
        interval = f" (95% interval {_money(lo)}-{_money(hi)})" if value is not None else ""
        rows.append((f"cost per successful task {when}",
                     f"{_money(value)}{interval}; {m[f'successes_{when}']} successes of "
                     f"{m['runs_with_outcome']} runs with an outcome"))  # fmt: skip
    body = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in rows)
    return f'<table class="text">{body}</table>'


def _assumptions(result: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{_e(a['tool'] or '(no name)')}</td><td>{_e(a['class'])}</td><td>{_e(a['why'])}</td>"
        f"<td>{a['runs']}</td></tr>"
        for a in result["assumptions"]
    )
    return (
        '<table class="text"><tr><th>tool</th><th>taken as</th><th>why</th><th>runs</th></tr>'
        f"{rows}</table>"
    )


def _policy(result: dict[str, Any]) -> str:
    c = result.get("command", {})
    if not c:
        return ""
    policy = (
        f"--config {c['config']} over the default policy" if c["config"] else "the default policy"
    )
    return f"headway {c['headway']}, {policy}; inputs: {', '.join(c['paths'])} ({c['format']})."


def _examples(result: dict[str, Any]) -> str:
    if not result["examples"]:
        return "<p>headway would have sent no correction and stopped no run.</p>"
    out = []
    for kind, texts in result["examples"].items():
        out.append(f"<h3>{_e(kind)}</h3>")
        for e in texts:
            out.append(
                f"<p><small>{_e(e['source'])} {_e(e['run_id'])}, step {e['step']} "
                f"({_e(e['tool'])})</small></p><blockquote>{_e(e['text'])}</blockquote>"
            )
    return "".join(out)


def render(result: dict[str, Any], timelines: list[dict[str, Any]]) -> str:
    """The report as one HTML document."""
    data = json.dumps({k: v for k, v in result.items() if k != "runs"}, sort_keys=True)
    data = data.replace("</", "<\\/")  # nothing in the data can close the script element
    runs = "".join(_timeline(r) for r in timelines) or "<p>No run was corrected or stopped.</p>"
    legend = _legend([(name.replace("_", " "), c) for name, c in COLOURS.items()])
    notes = result.get("command", {}).get("warnings", [])
    warnings = "".join(f'<p class="warn">warning: {_e(w)}</p>' for w in notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>headway analyze report</title><style>{_CSS}</style></head>
<body><main>
<h1>What headway would have done on these runs</h1>
<p>Recorded runs replayed through a Governor in shadow mode; the recorded results stand in
for the tools. Tokens by {_e(result.get("tokens_method", ""))}.</p>
{warnings}
<div class="cards" id="summary">{_cards(result["overall"])}</div>
<h2>Per source</h2>{_table(result)}
<p><small>Rates with their 95% interval (Wilson, in %). False kills: runs stopped although
they succeeded.</small></p>
<h2>Tokens and money</h2><div id="money">{_cost(result)}</div>
<p><small>Each model turn re-sends the whole context: its input tokens are the recorded usage
when the input has it, else an estimate. Prices are per million tokens.</small></p>
<h2>Repeats per tool</h2><div id="repeats">{_repeats_chart(result)}</div>
<h2>Savings captured against the oracle</h2><div id="captured">{_captured_chart(result)}</div>
<h2>How each tool was taken</h2><p>{_e(_policy(result))}</p>
<div id="assumptions">{_assumptions(result)}</div>
<h2>What the model would have read</h2><div id="examples">{_examples(result)}</div>
<h2>Runs headway would have corrected or stopped</h2>{legend}
<div id="timelines">{runs}</div>
<script type="application/json" id="headway-data">{data}</script>
</main></body></html>
"""
