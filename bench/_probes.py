"""Byte counters for the benches: what a process sends to and receives from a store.

``SocketBytes(port)`` sums the TCP payload this process has exchanged with a server on
``port`` (Linux ``TCP_INFO``: ``bytes_acked`` sent, ``bytes_received``), over every open
socket to it; take ``.read()`` before and after and subtract. It counts only this
process, so other clients of the same server do not show, but a socket closed between two
reads takes its bytes with it (keep pools warm). ``redis_net(url)`` reads Redis's own
counters (``INFO stats``: ``total_net_input_bytes`` / ``total_net_output_bytes``; ``INFO
cpu``), which count every client of the server. ``pg_backend_cpu(dsn, name)`` sums the CPU
of the PostgreSQL backends serving connections whose ``application_name`` is ``name``
(a server on this machine: read from ``/proc``).
"""

from __future__ import annotations

import os
import socket
import struct

# struct tcp_info (linux/tcp.h): u64 tcpi_bytes_acked at 120, tcpi_bytes_received at 128
_ACKED, _RECEIVED, _SIZE = 120, 128, 136


class SocketBytes:
    """Bytes this process has sent to / received from servers on ``port``, at the socket."""

    def __init__(self, port: int) -> None:
        self.port = port

    def read(self) -> tuple[int, int]:
        """(sent, received) over the sockets open now; subtract two reads."""
        sent = received = 0
        for fd in _fds():
            try:
                dup = os.dup(fd)
            except OSError:  # closed meanwhile
                continue
            try:
                s = socket.socket(fileno=dup)
            except OSError:  # not a socket
                os.close(dup)
                continue
            try:
                if s.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                if s.getpeername()[1] != self.port:
                    continue
                info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _SIZE)
            except OSError:
                continue
            finally:
                s.close()
            if len(info) >= _SIZE:
                sent += struct.unpack_from("Q", info, _ACKED)[0]
                received += struct.unpack_from("Q", info, _RECEIVED)[0]
        return sent, received


def _fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # not Linux: nothing counted
        return []


def redis_net(url: str) -> tuple[int, int, float]:
    """(bytes the server received, bytes it sent, its CPU seconds) since it started: for
    every client."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        stats = client.info("stats")
        cpu = client.info("cpu")
    finally:
        client.close()
    return (
        int(stats["total_net_input_bytes"]),
        int(stats["total_net_output_bytes"]),
        float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
    )


def pg_backend_cpu(dsn: str, name: str) -> float:
    """CPU seconds of the local PostgreSQL backends of the connections named ``name``."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        pids = [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,)
            )
        ]
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:  # ended meanwhile
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")
