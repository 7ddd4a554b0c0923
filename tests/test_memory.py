"""Memory stays flat whatever the argument sizes: audit records keep a bounded summary and
the digest, and no cache is keyed on the full argument text."""

from __future__ import annotations

import gc
import tracemalloc

import headway

MB = 1_000_000


def test_twenty_calls_with_10_mb_arguments_keep_memory_flat() -> None:
    gov = headway.Governor()  # the default in-memory audit keeps every record
    gov.register("upload", lambda data, api_key: {"ok": True}, effect="write")
    gov.register("read", lambda data, api_key: "seen", effect="read")
    s = gov.session("run-big")
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(20):
            blob = f"{i:02d}" + "x" * (10 * MB)
            s.call("upload" if i % 2 else "read", {"data": blob, "api_key": "k"})
            del blob
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    records = s.audit_records()
    assert len(records) == 20 and all(len(r["args"]) <= 1010 for r in records)
    assert len({r["args_digest"] for r in records}) == 20
    assert grown < 50 * MB, f"grew {grown / MB:.0f} MB"  # all 20 arguments would be 400 MB
