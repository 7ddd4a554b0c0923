"""``headway proxy --http`` serves Prometheus metrics at ``/metrics``: a real proxy process,
a real upstream, a real MCP client, and a scrape over HTTP."""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
try:
    import pytest_asyncio  # noqa: F401
    from fastmcp import Client
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    if IN_CI:
        raise
    pytest.skip(
        "needs fastmcp and prometheus-client: pip install 'headway[mcp,prometheus]'",
        allow_module_level=True,
    )

# after the check above: without fastmcp this module skips with the extra to install
from test_mcp_proxy import BOUND_S, UPSTREAM, background, free_port, status  # noqa: E402


def scrape(port: int) -> tuple[str, dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    """The content type and every sample of ``/metrics``, keyed by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=BOUND_S) as resp:
        kind, body = resp.headers["Content-Type"], resp.read().decode()
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    return kind, samples


def proxy_args(tmp_path: Path, port: int, *extra: str) -> list[str]:
    args = [sys.executable, "-m", "headway.cli", "proxy", "--http", f"127.0.0.1:{port}"]
    args += ["--store", f"sqlite:///{tmp_path / 'h.db'}", *extra]
    return [*args, "--", sys.executable, str(UPSTREAM), str(tmp_path / "upstream.log")]


async def test_metrics_count_the_proxys_calls_by_tool_and_status_with_low_cardinality_labels(
    tmp_path: Path,
) -> None:
    port = free_port()
    (tmp_path / "headway.toml").write_text("[tools.lookup]\ndeterministic = true\n")
    args = proxy_args(tmp_path, port, "--config", str(tmp_path / "headway.toml"))
    with background(args, tmp_path, port, "proxy"):
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy", timeout=BOUND_S) as c:
            reads: list[Any] = [
                await c.call_tool("lookup", {"key": "m"}, raise_on_error=False) for _ in range(3)
            ]
            await c.call_tool("delete_record", {"record": "r"})
        kind, samples = scrape(port)
    assert [status(r) for r in reads] == ["executed", "cached", "corrected"]
    assert kind.startswith("text/plain") and "version=" in kind  # the text exposition format

    def value(name: str, **labels: str) -> float:
        return samples[(name, frozenset(labels.items()))]

    assert value("headway_calls_total", tool="lookup", status="executed") == 1
    assert value("headway_calls_total", tool="lookup", status="cached") == 1
    assert value("headway_calls_total", tool="lookup", status="corrected") == 1
    assert value("headway_calls_total", tool="delete_record", status="executed") == 1
    assert value("headway_cache_hits_total", tool="lookup") == 1
    assert value("headway_corrections_total", signal="repeat") == 1
    assert value("headway_call_seconds_count", tool="lookup") == 3
    assert value("headway_unknown_outstanding") == 0
    # only headway's metrics (the proxy's own registry) and never an argument or a session
    labels = {k for (_, pairs) in samples for k, _ in pairs}
    assert labels <= {"tool", "status", "signal", "le"}
    assert all(name.startswith("headway_") for name, _ in samples)


async def test_no_metrics_turns_the_endpoint_off(tmp_path: Path) -> None:
    port = free_port()
    with background(proxy_args(tmp_path, port, "--no-metrics"), tmp_path, port, "proxy"):
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy", timeout=BOUND_S) as c:
            await c.call_tool("lookup", {"key": "m"})
        with pytest.raises(urllib.error.HTTPError) as err:
            scrape(port)
        err.value.close()  # the error holds the response open
    assert err.value.code == 404
