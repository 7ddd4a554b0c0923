"""Processes for the lease tests: an owner that claims a key and is killed mid-tool, and
fresh callers (a CLI, a restarted proxy, a serverless worker) that make one call.

    python lease_workers.py owner  URL OPTIONS_JSON LEDGER KEY LEASE_S MARKER CHARGE
    python lease_workers.py caller URL OPTIONS_JSON LEDGER KEY LEASE_S SKEW_S WAIT_S

A caller prints one JSON line: the outcome's status, error code, flags and attempts.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import headway
from faults import Ledger


def owner(
    url: str,
    options: dict[str, Any],
    ledger_path: str,
    key: str,
    lease_s: float,
    marker: str,
    charge: bool,
) -> None:
    ledger = Ledger(ledger_path)
    gov = headway.Governor(store=headway.open_store(url, **options), lease_s=lease_s)

    def pay(order: str) -> dict[str, Any]:
        if charge:
            ledger.charge(order, 1)  # the effect happens: then the process dies
        Path(marker).write_text("started")
        time.sleep(600)  # killed here
        return {}

    gov.register("pay", pay, effect="write", timeout=None)
    gov.session("owner").call("pay", {"order": key}, idempotency_key=key)


def caller(
    url: str,
    options: dict[str, Any],
    ledger_path: str,
    key: str,
    lease_s: float,
    skew_s: float,
    wait_s: float,
) -> None:
    ledger = Ledger(ledger_path)
    gov = headway.Governor(
        store=headway.open_store(url, **options),
        lease_s=lease_s,
        in_progress_wait_s=wait_s,
        clock=lambda: time.time() + skew_s,
    )
    gov.register(
        "pay",
        lambda order: ledger.charge(order, 1),
        effect="write",
        reconcile=lambda k, args: ledger.lookup(args["order"]),
    )
    session = gov.session("caller")
    out = session.call("pay", {"order": key}, idempotency_key=key)
    flags = [f for r in session.audit_records() for f in r.get("flags", [])]
    print(
        json.dumps(
            {
                "status": out.status.value,
                "code": (out.error or {}).get("code"),
                "executed": out.executed,
                "flags": flags,
            }
        )
    )


if __name__ == "__main__":
    role, url, options, ledger_path, key, lease = sys.argv[1:7]
    rest = sys.argv[7:]
    if role == "owner":
        owner(url, json.loads(options), ledger_path, key, float(lease), rest[0], rest[1] == "1")
    else:
        caller(
            url, json.loads(options), ledger_path, key, float(lease), float(rest[0]), float(rest[1])
        )
