"""The ``--html`` report: one self-contained file, rendered in a real headless Chromium
(installed by .ci/run): charts drawn, nothing fetched, no console error, no sideways
scrolling."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from headway.analyze.html import COLOURS
from headway.cli import main

LONG_TOOL = "search_the_internal_knowledge_base_for_documents_v2"  # over one label line

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)


def _chromium() -> str:
    if CHROMIUM is None:
        if IN_CI:
            pytest.fail(
                "chromium is not installed; in CI .ci/run installs it (apt-get install chromium)"
            )
        pytest.skip("chromium is not installed (apt-get install chromium) to render the report")
    return CHROMIUM


def _run(n: int, *, stale: bool = False) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(n):
        args = (
            '{"symbol": "ACME"}'
            if stale
            else json.dumps({"q": "<b>same</b>" if i % 3 else "other"})
        )
        messages.append({"role": "assistant", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "price" if stale else LONG_TOOL, "arguments": args}}]})  # fmt: skip
        messages.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "content": f"{i if stale else 'same page'} </script>",
            }
        )
    return {"id": f"<b>run</b>-{n}-{stale}</script>", "messages": messages, "success": not stale}


@pytest.fixture
def report(tmp_path: Path) -> Path:
    chats = tmp_path / "agent.jsonl"
    chats.write_text(
        "\n".join(json.dumps(_run(n, stale=s)) for n, s in ((14, False), (3, True), (4, False)))
    )
    config = tmp_path / "policy.toml"  # a wrong policy: a changing price declared deterministic
    config.write_text('[tools.price]\neffect = "read"\ndeterministic = true\n')
    out = tmp_path / "report.html"
    assert main(["analyze", str(chats), "--config", str(config), "--html", str(out)]) == 0
    return out


def test_the_report_is_self_contained_and_escapes_recorded_text(report: Path) -> None:
    page = report.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched
    assert "<b>run</b>" not in page and "&lt;b&gt;run&lt;/b&gt;" in page
    data = re.search(
        r'<script type="application/json" id="headway-data">(.*?)</script>', page, re.S
    )
    assert data is not None and json.loads(data.group(1))["overall"]["stale"] > 0
    assert 'class="card bad"' in page  # stale answers highlighted in the summary
    for section in ("money", "assumptions", "examples"):
        assert f'id="{section}"' in page
    assert "config: [tools.price] deterministic, effect" in page  # why price was a read
    assert "headway: no progress in the last 3 steps" in page  # what the model would read


def _probe(report: Path, tmp_path: Path, script: str) -> Path:
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text().replace("</body>", f"<script>{script}</script></body>"))
    return probe


# a probe run in the page: sideways scrolling, numbers broken over two lines, and SVGs
# without an accessible name
PROBE = """
const b = document.body.dataset;
b.wide = document.documentElement.scrollWidth > window.innerWidth;
const numeric = [...document.querySelectorAll('td')].filter(
  td => /^[0-9][0-9,.%]*$/.test(td.textContent.trim()));
b.wrapped = [...document.querySelectorAll('table.wide td:not(:first-child)'), ...numeric].filter(td => {
  const r = document.createRange(); r.selectNodeContents(td.firstChild);
  return r.getClientRects().length > 1; }).length;
b.unnamed = [...document.querySelectorAll('svg')].filter(
  s => s.getAttribute('role') !== 'img' || !s.getAttribute('aria-label')).length;
"""


def test_chromium_draws_the_charts_without_errors(report: Path, tmp_path: Path) -> None:
    chromium = _chromium()
    shot = tmp_path / "shot.png"
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              "--enable-logging=stderr", "--v=0"]  # fmt: skip
    dom = subprocess.run(
        [*common, "--window-size=1400,1600", "--dump-dom", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert html.count("<svg") >= 4  # repeats, captured, and a timeline per flagged run
    assert len(re.findall(r'<rect class="bar"', html)) >= 4
    assert len(re.findall(r'<rect class="call"', html)) >= 14
    assert re.search(rf'class="call"[^>]*fill="{COLOURS["stale"]}"', html)  # a stale answer
    assert "CONSOLE" not in dom.stderr and "Uncaught" not in dom.stderr, dom.stderr[-2000:]
    captured = re.search(r'<div id="captured">(.*?)</div>', html, re.S)
    assert captured is not None and re.search(r">2</text>", captured.group(1))
    assert not re.search(r">0</text>", captured.group(1))  # no "0" on the stale-only bar
    repeats = re.search(r'<div id="repeats">(.*?)</div>', html, re.S)
    assert repeats is not None
    label = re.sub(r"<title>.*?</title>|<[^>]+>", "", repeats.group(1))
    assert LONG_TOOL in label  # the whole name, over two lines
    # a no-progress correction names its signal on the timeline
    assert re.search(r"step \d+: corrected \S+ \(no_progress\)", html)
    run = subprocess.run(
        [*common, "--window-size=1400,1600", f"--screenshot={shot}", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert shot.stat().st_size > 10_000  # a drawn page, not a blank one
    probe = _probe(report, tmp_path, PROBE)
    for width in (1400, 700):
        seen = subprocess.run([*common, f"--window-size={width},900", "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        page = seen.stdout
        assert 'data-wide="false"' in page, (width, seen.stderr[-2000:])
        assert 'data-wrapped="0"' in page and 'data-unnamed="0"' in page, width


def test_large_figures_never_break_mid_number_at_700_pixels(report: Path, tmp_path: Path) -> None:
    """Real sources have 8-digit token counts and long names: at 700 px the table scrolls
    in its box, and no number is broken over two lines."""
    chromium = _chromium()
    from headway.analyze.html import render

    embedded = re.search(r'id="headway-data">(.*?)</script>', report.read_text(), re.S)
    assert embedded is not None
    result = json.loads(embedded.group(1).replace("<\\/", "</"))
    figs = result["sources"]["agent"]
    for key in ("runs", "calls", "served", "oracle", "corrections", "stops", "tokens_saved"):
        figs[key] = 98_765_432
    result["sources"]["a_source_with_a_rather_long_name_of_its_own"] = figs
    for taken in result["assumptions"]:
        taken["runs"], taken["why"] = 98_765_432, taken["why"] * 4
    big = tmp_path / "big.html"
    big.write_text(render(result, []))
    probe = _probe(big, tmp_path, PROBE)
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    seen = subprocess.run([*common, "--window-size=700,900", "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    page = seen.stdout
    assert 'data-wide="false"' in page and 'data-wrapped="0"' in page, seen.stderr[-1500:]


# Machado, Oliveira and Fernandes (2009): full deuteranopia and protanopia, linear RGB
_CVD = {
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881)),
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998)),
}  # fmt: skip


def _seen(colour: str, matrix: tuple[tuple[float, ...], ...]) -> list[float]:
    def linear(c: int) -> float:
        x = c / 255
        return x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4

    def encoded(v: float) -> float:
        v = min(1.0, max(0.0, v))
        return 255 * (12.92 * v if v <= 0.0031308 else 1.055 * v ** (1 / 2.4) - 0.055)

    rgb = [linear(int(colour[i : i + 2], 16)) for i in (1, 3, 5)]
    return [encoded(sum(m * x for m, x in zip(row, rgb, strict=True))) for row in matrix]


@pytest.mark.parametrize("deficiency", sorted(_CVD))
def test_served_and_stale_stay_apart_for_colour_blind_readers(deficiency: str) -> None:
    import math

    m = _CVD[deficiency]
    for a, b in (("served", "stale"), ("served", "executed"), ("stale", "executed")):
        assert math.dist(_seen(COLOURS[a], m), _seen(COLOURS[b], m)) > 100, (a, b)
