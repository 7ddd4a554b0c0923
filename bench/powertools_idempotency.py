"""headway's keyed write beside aws-lambda-powertools' idempotency, on the same local Redis.

    python bench/powertools_idempotency.py [--n 300] [--rounds 10]

Both run a trivial tool exactly once per new key: powertools' ``idempotent_function`` with
its Redis persistence layer (``CachePersistenceLayer``), headway's ``Session.call`` with an
``idempotency_key`` on a ``RedisStore``. headway runs with its defaults (in-memory audit
on, the default 30 s timeout: the tool runs in a worker thread) and, in a second row, with
``timeout=None`` (inline, as powertools runs it). The raw client doing the two operations
an exactly-once write needs is the reference. Paths take turns in short batches; each
keeps its best batch. Offline: only the local Redis is used (no AWS service; a stand-in
Lambda context gives powertools the remaining time it reads). Each row also gives the
bytes a write exchanges with Redis, counted at this process's sockets (``_probes``).
Targets (issue 36): headway's keyed write <= 1.0x powertools and <= 1.5x the raw client.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import headway
from _probes import SocketBytes

REDIS = "redis://127.0.0.1:6379/15"


class _LambdaContext:
    """What powertools reads from a Lambda context: the time left in the invocation."""

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def powertools_write() -> Callable[[int], Any]:
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
    from aws_lambda_powertools.utilities.idempotency.persistence.cache import (
        CachePersistenceLayer,
    )

    with warnings.catch_warnings():
        # 3.x warns on the non-deprecated name too (it subclasses the deprecated one)
        warnings.simplefilter("ignore", DeprecationWarning)
        persistence = CachePersistenceLayer(url=REDIS)
    config = IdempotencyConfig(expires_after_seconds=86_400)
    config.register_lambda_context(_LambdaContext())
    run = uuid.uuid4().hex

    @idempotent_function(
        data_keyword_argument="order", persistence_store=persistence, config=config
    )
    def pay(order: dict[str, Any]) -> dict[str, Any]:
        return {"ok": order["id"]}

    first = pay(order={"id": f"{run}-check"})
    assert pay(order={"id": f"{run}-check"}) == first  # replayed, not run again

    def call(i: int) -> Any:
        return pay(order={"id": f"{run}-{i}"})

    return call


def headway_write(timeout: float | None) -> Callable[[int], Any]:
    store = headway.open_store(REDIS, prefix=f"bench{uuid.uuid4().hex[:6]}:")
    gov = headway.Governor(store=store)  # defaults: the in-memory audit on
    options: dict[str, Any] = {} if timeout == 30.0 else {"timeout": timeout}
    gov.register("pay", lambda order: {"ok": order}, effect="write", **options)
    s = gov.session(uuid.uuid4().hex)
    run = uuid.uuid4().hex
    assert s.call("pay", {"order": "check"}, idempotency_key=f"{run}-check").executed
    assert s.call("pay", {"order": "check"}, idempotency_key=f"{run}-check").status is (
        headway.Status.REPLAYED
    )

    def call(i: int) -> Any:
        out = s.call("pay", {"order": i}, idempotency_key=f"{run}-{i}")
        assert out.status is headway.Status.EXECUTED, out
        return out

    return call


def raw_two_ops() -> Callable[[int], Any]:
    import redis

    r = redis.Redis.from_url(REDIS)
    swap = r.register_script(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) end"
    )
    run = uuid.uuid4().hex
    claim = json.dumps({"state": "in_progress", "owner": "x"})
    done = json.dumps({"state": "completed"})

    def two(i: int) -> Any:
        r.set(f"raw2:{run}:{i}", claim, nx=True, px=86_400_000)
        return swap(keys=[f"raw2:{run}:{i}"], args=[claim, done])

    return two


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300, help="writes per batch")
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    paths = {
        "raw redis-py, the 2 operations": raw_two_ops(),
        "aws-lambda-powertools idempotent_function": powertools_write(),
        "headway keyed write (defaults: audit, 30 s timeout)": headway_write(30.0),
        "headway keyed write (timeout=None)": headway_write(None),
    }
    print(f"settings: Redis {REDIS}, a new key per write, {a.rounds} rounds of {a.n} writes")
    print(f"load average {os.getloadavg()[0]:.2f}")
    best = dict.fromkeys(paths, float("inf"))
    traffic = dict.fromkeys(paths, 0.0)
    probe = SocketBytes(6379)
    start = 0
    for _ in range(a.rounds):
        for name, fn in paths.items():
            before = probe.read()
            t0 = time.perf_counter()
            for i in range(start, start + a.n):
                fn(i)
            best[name] = min(best[name], (time.perf_counter() - t0) / a.n * 1e6)
            after = probe.read()
            traffic[name] = (after[0] - before[0] + after[1] - before[1]) / a.n
        start += a.n
    peer = best["aws-lambda-powertools idempotent_function"]
    raw = best["raw redis-py, the 2 operations"]
    print(f"{'path':<54} {'us/write':>9} {'x powertools':>13} {'x raw':>6} {'bytes':>7}")
    for name, us in best.items():
        print(f"{name:<54} {us:>9.1f} {us / peer:>13.2f} {us / raw:>6.2f} {traffic[name]:>7,.0f}")
    print("targets: headway <= 1.00x powertools, <= 1.50x raw")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
