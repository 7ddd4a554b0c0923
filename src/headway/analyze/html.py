"""The ``--html`` report: one self-contained file (inline CSS, SVG and data; no network,
no script), laid out to fit the window width: the summary, repeats per tool, savings
captured against the oracle, and a timeline of each corrected, stopped or stale run."""

from __future__ import annotations

import html
import json
from typing import Any

COLOURS = {
    "executed": "#c9d3df",
    "served": "#2e9d57",
    "stale": "#d62728",
    "warned": "#f2b233",
    "corrected": "#e07b00",
    "stop": "#7b1fa2",
    "after_stop": "#eeeeee",
}
_CSS = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2430;background:#fafbfc}
main{max-width:980px;margin:0 auto;padding:16px}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin:1.4em 0 .4em}
.cards{display:flex;flex-wrap:wrap;gap:8px}
.card{background:#fff;border:1px solid #dde3ea;border-radius:6px;padding:8px 12px;min-width:110px}
.card b{display:block;font-size:1.35em}.card.bad b{color:#d62728}
table{width:100%;border-collapse:collapse;table-layout:fixed;font-size:.82em;background:#fff}
th,td{border:1px solid #dde3ea;padding:3px 4px;text-align:right;overflow-wrap:anywhere}
th{overflow-wrap:normal;font-size:.92em}td small{color:#5a6675;white-space:nowrap}
th:first-child,td:first-child{text-align:left;width:22%}
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
        ("executions saved", o["executions_saved"], False), ("tokens saved", o["tokens_saved"], False),
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
    out = ["<table><tr><th>source</th>", *(f"<th>{_e(h)}</th>" for h in heads), "</tr>"]
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
    out.append("</table>")
    return "".join(out)


def _bars(title: str, rows: list[tuple[str, list[tuple[str, int, str]]]], scale: int) -> str:
    """A horizontal bar chart: each row a label and stacked-from-zero bars (drawn in order,
    the longest first), scaled to ``scale``."""
    width, label_w, row_h = 900, 260, 22
    height = 10 + row_h * len(rows)
    out = [f'<svg viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}">']
    span = width - label_w - 70
    for i, (label, bars) in enumerate(rows):
        y = 6 + i * row_h
        out.append(f'<text x="4" y="{y + 14}" font-size="12">{_e(label[:38])}</text>')
        for name, value, colour in bars:
            w = span * value / max(scale, 1)
            out.append(
                f'<rect class="bar" x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row_h - 6}" '
                f'fill="{colour}"><title>{_e(label)}: {_e(name)} {value}</title></rect>'
            )
        total = bars[0][1] if bars else 0
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
        (name, [("repeats", t["repeats"], "#c9d3df"), ("same result (oracle)", t["oracle"], "#8fb3d9"),
                ("served correctly", t["served_ok"], COLOURS["served"]), ("stale", t["stale"], COLOURS["stale"])])
        for name, t in tools
    ]  # fmt: skip
    legend = _legend([("repeats", "#c9d3df"), ("same result (oracle)", "#8fb3d9"),
                      ("served correctly", COLOURS["served"]), ("stale", COLOURS["stale"])])  # fmt: skip
    return legend + _bars("repeats per tool", rows, max(t["repeats"] for _, t in tools))


def _captured_chart(result: dict[str, Any]) -> str:
    rows = [
        (name, [("oracle", f["oracle"], "#8fb3d9"), ("served correctly", f["served_ok"], COLOURS["served"]),
                ("stale", f["stale"], COLOURS["stale"])])
        for name, f in result["sources"].items()
    ]  # fmt: skip
    if not rows:
        return "<p>No runs.</p>"
    scale = max(max(f["oracle"], f["served"]) for f in result["sources"].values())
    legend = _legend([("oracle: repeats with the same result", "#8fb3d9"),
                      ("served correctly", COLOURS["served"]), ("stale", COLOURS["stale"])])  # fmt: skip
    return legend + _bars("savings captured against the oracle", rows, scale)


def _timeline(run: dict[str, Any]) -> str:
    steps = run["steps"]
    per_row, cell = 60, 15
    lines = (len(steps) + per_row - 1) // per_row
    out = [f'<svg class="timeline" viewBox="0 0 {per_row * cell + 4} {lines * cell + 4}">']
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
    return (
        f'<div class="run"><p><b>{_e(run["run_id"])}</b> ({_e(run["source"])}, '
        f"{len(steps)} calls, {verdict})</p>{''.join(out)}"
        f"<p>{'; '.join(events[:12])}{' ...' if len(events) > 12 else ''}</p></div>"
    )


def render(result: dict[str, Any], timelines: list[dict[str, Any]]) -> str:
    """The report as one HTML document."""
    data = json.dumps({k: v for k, v in result.items() if k != "runs"}, sort_keys=True)
    data = data.replace("</", "<\\/")  # nothing in the data can close the script element
    runs = "".join(_timeline(r) for r in timelines) or "<p>No run was corrected or stopped.</p>"
    legend = _legend([(name.replace("_", " "), c) for name, c in COLOURS.items()])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>headway analyze report</title><style>{_CSS}</style></head>
<body><main>
<h1>What headway would have done on these runs</h1>
<p>Recorded runs replayed through a Governor in shadow mode; the recorded results stand in
for the tools. Tokens by {_e(result.get("tokens_method", ""))}.</p>
<div class="cards" id="summary">{_cards(result["overall"])}</div>
<h2>Per source</h2>{_table(result)}
<p><small>Rates with their 95% interval (Wilson, in %). False kills: runs stopped although
they succeeded.</small></p>
<h2>Repeats per tool</h2><div id="repeats">{_repeats_chart(result)}</div>
<h2>Savings captured against the oracle</h2><div id="captured">{_captured_chart(result)}</div>
<h2>Runs headway would have corrected or stopped</h2>{legend}
<div id="timelines">{runs}</div>
<script type="application/json" id="headway-data">{data}</script>
</main></body></html>
"""
