"""Bytes a shared session sends to and reads from its store per call, counted at the socket.

    python bench/store_traffic.py [--steps 10000] [--calls 20] [--base SRC]

For Redis and PostgreSQL (a row is skipped when its server is not reachable), the store
is reached through a TCP relay in this process that counts the bytes each way. One
session shared by workers (the default on these stores) makes cached reads of entries the
worker holds, then keyed writes (a new key each call, a cached tool registered); the bytes
per call are the median over ``--calls`` of each, from step 10 and again from step
``--steps``. Target: at most 2 KB written + read per call at both.

``--base SRC`` (a ``src`` folder of another version, say main's) runs the same in a
subprocess with that version first, so both versions' figures print in one run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import threading
import uuid
from typing import Any

import headway

_TARGET = 2048
SERVERS = {
    "redis": ("127.0.0.1", 6379, "redis://127.0.0.1:{port}/15"),
    "postgres": ("127.0.0.1", 5432, "postgresql://postgres@127.0.0.1:{port}/test"),
}


class Relay:
    """Forwards local connections to ``(host, port)`` and counts the bytes each way."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.sent = self.received = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self._server.accept()
            server = socket.create_connection(self.upstream)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    if up:
                        self.sent += len(data)
                    else:
                        self.received += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def count(self) -> int:
        with self._lock:
            return self.sent + self.received


def make_store(kind: str, relay: Relay) -> Any:
    url = SERVERS[kind][2].format(port=relay.port)
    if kind == "redis":
        from headway.stores.redis import RedisStore

        return RedisStore(url, prefix=f"traffic-{uuid.uuid4().hex[:8]}:")
    from headway.stores.postgres import PostgresStore

    return PostgresStore(url, prefix=f"traffic-{uuid.uuid4().hex[:8]}:", max_size=1)


def per_call(relay: Relay, fn: Any, calls: int) -> int:
    sizes = []
    for i in range(calls):
        before = relay.count()
        fn(i)
        sizes.append(relay.count() - before)
    return int(statistics.median(sizes))


def measure(kind: str, steps: int, calls: int) -> list[tuple[str, int]]:
    host, port, _ = SERVERS[kind]
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return []
    relay = Relay(host, port)
    store = make_store(kind, relay)
    gov = headway.Governor(store=store, audit=[], no_progress_limit=10**9)
    gov.register("pay", lambda order: {"ok": order}, effect="write", timeout=None)
    gov.register("price", lambda sku: {"sku": sku, "eur": 3}, effect="read", deterministic=True)
    run = uuid.uuid4().hex
    s = gov.session(run)
    n = [0]

    def write(i: int) -> Any:
        n[0] += 1
        return s.call("pay", {"order": n[0]}, idempotency_key=f"{run}-{n[0]}")

    def read(i: int) -> Any:
        out = s.call("price", {"sku": i % 8})
        assert out.status is headway.Status.CACHED, out.status
        return out

    rows = []
    for at in (10, steps):
        while s.steps < at - 8:
            s.call("price", {"sku": s.steps % 8})
        for sku in range(8):  # the entries this worker holds (the writes made them stale)
            s.call("price", {"sku": sku})
        reads = per_call(relay, read, calls)  # before the writes, which make them stale
        rows += [(f"{at:,}", per_call(relay, write, calls)), ("", reads)]
    store.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--base", help="a src folder of another headway, run first")
    args = parser.parse_args()
    if args.base:
        env = dict(os.environ, PYTHONPATH=os.path.abspath(args.base))
        cmd = [sys.executable, __file__, "--steps", str(args.steps), "--calls", str(args.calls)]
        print(f"base ({args.base}):", flush=True)
        subprocess.run(cmd, env=env, check=True)
        print("this version:")
    print(
        f"| store | from step | keyed write, bytes | <= {_TARGET} | cached read, bytes | <= {_TARGET} |"
    )
    print("|---|---|---|---|---|---|")
    for kind in SERVERS:
        rows = measure(kind, args.steps, args.calls)
        for (at, w), (_, r) in zip(rows[::2], rows[1::2], strict=True):
            met = ["yes" if n <= _TARGET else "no" for n in (w, r)]
            print(f"| {kind} | {at} | {w:,} | {met[0]} | {r:,} | {met[1]} |", flush=True)


if __name__ == "__main__":
    main()
