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

from headway.cli import main

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
            {"id": f"c{i}", "type": "function", "function": {"name": "price" if stale else "search", "arguments": args}}]})  # fmt: skip
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


def test_chromium_draws_the_charts_without_errors(report: Path, tmp_path: Path) -> None:
    chromium = _chromium()
    shot = tmp_path / "shot.png"
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              "--enable-logging=stderr", "--v=0", "--window-size=1000,1600"]  # fmt: skip
    dom = subprocess.run(
        [*common, "--dump-dom", report.as_uri()],
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
    assert re.search(r'class="call"[^>]*fill="#d62728"', html)  # a stale answer, in red
    assert "CONSOLE" not in dom.stderr and "Uncaught" not in dom.stderr, dom.stderr[-2000:]
    run = subprocess.run(
        [*common, f"--screenshot={shot}", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert shot.stat().st_size > 10_000  # a drawn page, not a blank one
    # no sideways scrolling at a narrow width: a probe appended to a copy of the page
    probe = tmp_path / "probe.html"
    script = "<script>document.body.dataset.wide = document.documentElement.scrollWidth > window.innerWidth;</script>"
    probe.write_text(report.read_text().replace("</body>", script + "</body>"))
    narrow = [c for c in common if not c.startswith("--window-size")]
    seen = subprocess.run([*narrow, "--window-size=700,900", "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert 'data-wide="false"' in seen.stdout, seen.stderr[-2000:]
