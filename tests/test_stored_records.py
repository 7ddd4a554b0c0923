"""Records written by the version before this one, as they are in a store, still decide."""

from __future__ import annotations

import time
from typing import Any

import pytest

import headway
from headway._canonical import canonical_json, digest
from headway.outcome import Status


def _earlier_completion(args: dict[str, Any], value: Any) -> dict[str, Any]:
    """A completion as the version before wrote it: a 32-digit owner token (gone once
    settled), times to the tenth of a microsecond, ``by: owner``."""
    now = time.time()
    return {
        "args": digest(canonical_json(args)),
        "beat": 3,
        "by": "owner",
        "created": now - 0.1234567,
        "done_at": now - 0.0123456,
        "expires": now + 86_400.0123456,
        "lease_s": 30.0,
        "owner": None,
        "result": {"v": value},
        "state": "completed",
        "tool": "pay",
    }


def test_a_completion_written_by_the_version_before_is_replayed_not_run_again(
    store: headway.Store,
) -> None:
    ran: list[Any] = []

    def pay(order: Any) -> dict[str, Any]:
        ran.append(order)
        return {"ok": order}

    gov = headway.Governor(store=store, audit=[])
    gov.register("pay", pay, effect="write")
    store.set(gov.idempotency_record_key("k"), _earlier_completion({"order": 1}, {"ok": 1}))
    out = gov.session("run").call("pay", {"order": 1}, idempotency_key="k")
    assert (out.status, out.value, ran) == (Status.REPLAYED, {"ok": 1}, [])
    with pytest.raises(headway.KeyReuseError):  # the record's arguments are read too
        gov.session("run").call("pay", {"order": 2}, idempotency_key="k")
    assert ran == []
