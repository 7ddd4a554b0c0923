"""A dead owner's claim is taken over by the store's view of its lease (issue 31, item 9).

Real processes: an owner claims a key and is SIGKILLed in the middle of its tool (after
its effect, or before it); fresh processes, each making one call (as a CLI, a restarted
stdio proxy or a serverless worker does), find the claim. While the owner's lease is in
the store, they get ``in_progress`` whatever their own clocks say; once the store has let
it lapse, the first of them turns the claim UNKNOWN and reconciles it in the same call:
never ``in_progress`` for ever, never a second execution without reconcile.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import headway
from faults import Ledger
from headway._leases import lease_key
from test_idempotency import SHARED, shared_store

HERE = Path(__file__).parent


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path}


def _owner(
    url: str,
    options: dict[str, Any],
    ledger: Ledger,
    key: str,
    lease_s: float,
    tmp: Path,
    charge: bool,
) -> subprocess.Popen[bytes]:
    marker = tmp / f"started-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "lease_workers.py"),
            "owner",
            url,
            json.dumps(options),
            ledger.path,
            key,
            str(lease_s),
            str(marker),
            "1" if charge else "0",
        ],
        env=_env(),
    )
    for _ in range(3000):  # the tool has started: the claim and its lease are in the store
        if marker.exists():
            return proc
        assert proc.poll() is None, "the owner process ended before its tool started"
        time.sleep(0.01)
    proc.kill()
    raise AssertionError("the owner's tool never started")


def _fresh_call(
    url: str,
    options: dict[str, Any],
    ledger: Ledger,
    key: str,
    lease_s: float,
    skew_s: float = 0.0,
    wait_s: float = 0.0,
) -> dict[str, Any]:
    """One call by a fresh process whose clock is ``skew_s`` off."""
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "lease_workers.py"),
            "caller",
            url,
            json.dumps(options),
            ledger.path,
            key,
            str(lease_s),
            str(skew_s),
            str(wait_s),
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _lease_of(store: headway.Store, key: str) -> str:
    rkey = headway.Governor(store=store).idempotency_record_key(key)
    record = store.get(rkey)
    assert record is not None and record["state"] == "in_progress", record
    return lease_key(rkey, record["owner"])


def _until_lapsed(store: headway.Store, lease: str) -> None:
    """Until the store itself has let the lease go (its TTL, on its clock)."""
    for _ in range(6000):
        if store.get(lease) is None:
            return
        time.sleep(0.01)
    raise AssertionError("the dead owner's lease never lapsed")


@pytest.mark.parametrize("kind", SHARED)
@pytest.mark.parametrize(("charged", "skew_s"), [(True, 0.0), (False, 3600.0), (True, -3600.0)])
def test_a_fresh_process_takes_over_a_killed_owner_s_claim_once_the_store_lets_its_lease_lapse(
    kind: str, charged: bool, skew_s: float, tmp_path: Path
) -> None:
    """The owner is SIGKILLed mid-tool (after charging, or before). A fresh process whose
    clock is right, an hour ahead or an hour behind makes one call with no wait at all:
    it reconciles (found: REPLAYED; absent: one execution), the charge happens once."""
    url, options = shared_store(kind, tmp_path)
    ledger = Ledger(tmp_path / "ledger.db")
    key = f"order-{uuid.uuid4().hex[:8]}"
    store = headway.open_store(url, **options)
    try:
        owner = _owner(url, options, ledger, key, 1.0, tmp_path, charged)
        lease = _lease_of(store, key)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(30)
        _until_lapsed(store, lease)
        out = _fresh_call(url, options, ledger, key, 1.0, skew_s=skew_s)
        assert "lease_expired" in out["flags"], out
        if charged:
            assert out["status"] == "replayed" and not out["executed"], out
        else:
            assert out["status"] == "executed" and "reconciled_absent" in out["flags"], out
        assert ledger.counts() == {key: 1}
        again = _fresh_call(url, options, ledger, key, 1.0, skew_s=-skew_s)
        assert again["status"] == "replayed" and ledger.counts() == {key: 1}, again
    finally:
        store.close()


@pytest.mark.parametrize("kind", SHARED)
def test_a_caller_waiting_on_a_killed_owner_takes_over_within_its_call(
    kind: str, tmp_path: Path
) -> None:
    """A fresh caller that starts while the dead owner's lease is still in the store, and
    may wait longer than the lease, gets the reconciled result from that one call."""
    url, options = shared_store(kind, tmp_path)
    ledger = Ledger(tmp_path / "ledger.db")
    key = f"order-{uuid.uuid4().hex[:8]}"
    owner = _owner(url, options, ledger, key, 1.0, tmp_path, True)
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(30)
    out = _fresh_call(url, options, ledger, key, 1.0, wait_s=60.0)
    assert out["status"] == "replayed" and "lease_expired" in out["flags"], out
    assert ledger.counts() == {key: 1}


@pytest.mark.parametrize("kind", SHARED)
def test_callers_with_skewed_clocks_never_take_over_a_live_owner_s_claim(
    kind: str, tmp_path: Path
) -> None:
    """A live owner renews its lease in the store: fresh processes an hour ahead or behind
    get in_progress for longer than the lease, and nothing runs twice."""
    url, options = shared_store(kind, tmp_path)
    ledger = Ledger(tmp_path / "ledger.db")
    key = f"order-{uuid.uuid4().hex[:8]}"
    lease_s = 3.0
    owner = _owner(url, options, ledger, key, lease_s, tmp_path, True)
    try:
        seen = []
        started = time.monotonic()
        while time.monotonic() - started < lease_s * 1.5:
            for skew in (3600.0, -3600.0):
                seen.append(_fresh_call(url, options, ledger, key, lease_s, skew_s=skew))
        assert {(o["status"], o["code"]) for o in seen} == {("error", "in_progress")}, seen
        assert ledger.counts() == {key: 1}
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(30)
