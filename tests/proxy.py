"""A loopback TCP proxy that can drop or stall connections (fault injection on real servers).

``FaultProxy(("127.0.0.1", 6379))`` listens on a free loopback port and forwards to the
target. ``drop()`` closes every open connection and refuses new ones (accepted, then closed
at once: the client sees a reset); ``stall()`` keeps connections open but forwards nothing
(the client times out); ``heal()`` forwards again. Bounded: at most ``max_connections``
connections, daemon threads, everything closed by ``close()``.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class FaultProxy:
    def __init__(self, target: tuple[str, int], *, max_connections: int = 32) -> None:
        self.target = target
        self.mode = "pass"
        self.max_connections = max_connections
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket | None]] = []
        self._closed = threading.Event()
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def drop(self) -> None:
        self.mode = "drop"
        self._close_all()

    def stall(self) -> None:
        self.mode = "stall"

    def heal(self) -> None:
        self.mode = "pass"

    def close(self) -> None:
        self._closed.set()
        self._acceptor.join(5)
        self._server.close()
        self._close_all()

    def _close_all(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for client, upstream in pairs:
            for sock in (client, upstream):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                    sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                full = len(self._pairs) >= self.max_connections
            if self.mode == "drop" or full:
                client.close()
                continue
            upstream = None
            if self.mode == "pass":
                try:
                    upstream = socket.create_connection(self.target, timeout=5)
                except OSError:
                    client.close()
                    continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket | None) -> None:
        """Forward both ways while the mode is "pass"; hold the bytes while stalled."""
        while not self._closed.is_set():
            if upstream is None:  # accepted while stalled: never forwarded
                if self.mode == "drop" or not _alive(client):
                    break
                self._closed.wait(0.1)
                continue
            try:
                ready, _, _ = select.select([client, upstream], [], [], 0.1)
            except (OSError, ValueError):
                break
            if self.mode == "stall":
                continue
            try:
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        raise OSError("closed")
                    (upstream if sock is client else client).sendall(data)
            except OSError:
                break
        for end in (client, upstream):
            if end is not None:
                with contextlib.suppress(OSError):
                    end.close()


def _alive(sock: socket.socket) -> bool:
    try:
        ready, _, _ = select.select([sock], [], [], 0)
        return not ready or bool(sock.recv(1, socket.MSG_PEEK))
    except (OSError, ValueError):
        return False
