"""A write that may have acted and then lost its answer (semantics §5.2, issue 31 item 1):
a reset or closed connection, a broken pipe, an incomplete answer, a server that died
mid-call. It is UNKNOWN, keyed or not, never retried within the call, and reconciled at
the key's next use; only failures known to come before the request was sent (a refused
connection, a name that does not resolve, a classifier's BEFORE_EFFECT) are retried."""

from __future__ import annotations

import asyncio
import errno
import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import headway
from conftest import err, present
from headway import Status
from headway.retry import (
    BEFORE_EFFECT,
    NON_RETRYABLE,
    RETRYABLE,
    before_effect,
    connection_lost,
    default_classify,
)


class Ledger:
    """The remote system: one row per request that reached it; ``lookup`` reconciles."""

    def __init__(self) -> None:
        self.rows: list[str] = []
        self._lock = threading.Lock()

    def charge(self, order: str) -> dict[str, Any]:
        with self._lock:
            self.rows.append(order)
            return {"order": order, "charge": len(self.rows)}

    def lookup(self, order: str) -> dict[str, Any] | None:
        with self._lock:
            if order not in self.rows:
                return None
            return {"order": order, "charge": self.rows.index(order) + 1}

    def count(self, order: str) -> int:
        return self.rows.count(order)


def acting_then(ledger: Ledger, failures: list[BaseException | None]) -> Callable[..., Any]:
    """pay(order): charges, then raises the next scripted failure (None: answers)."""

    def pay(order: str) -> dict[str, Any]:
        result = ledger.charge(order)
        failure = failures.pop(0) if failures else None
        if failure is not None:
            raise failure
        return result

    return pay


class _Response:
    def __init__(self, status: int) -> None:
        self.status_code = status
        self.headers: dict[str, str] = {}


class _GatewayError(Exception):
    """An HTTP client's status error (httpx's HTTPStatusError, requests' HTTPError): the
    response rides on the exception."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.response = _Response(status)


LOST = [
    ConnectionError("connection lost"),
    ConnectionResetError(104, "Connection reset by peer"),
    ConnectionAbortedError("aborted"),
    BrokenPipeError(32, "Broken pipe"),
    EOFError("the stream ended"),
    http.client.IncompleteRead(b"{", 10),
    http.client.RemoteDisconnected("Remote end closed connection without response"),
    asyncio.IncompleteReadError(b"", 10),
    TimeoutError("read timed out"),
    OSError(errno.ENETRESET, "Network dropped connection on reset"),
    _GatewayError(504),  # a gateway timed out waiting for the service behind it
    _GatewayError(502),  # a gateway got a broken answer from the service behind it
]


@pytest.mark.parametrize("failure", LOST, ids=lambda e: type(e).__name__)
def test_a_keyed_write_that_acts_then_loses_its_answer_runs_once_and_is_reconciled(
    failure: BaseException,
) -> None:
    """Each lost-connection type: one attempt (never retried in the call), UNKNOWN, the
    model told not to repeat it; the key's next use reconciles instead of running."""
    ledger = Ledger()
    gov = headway.Governor(sleep=lambda s: None)
    gov.register(
        "pay",
        acting_then(ledger, [failure]),
        effect="write",
        retry=headway.Retry(attempts=5),
        reconcile=lambda key, args: ledger.lookup(args["order"]),
    )
    first = gov.session("a").call("pay", {"order": "o"}, idempotency_key="k")
    assert first.status is Status.UNKNOWN and first.attempts == 1, first
    assert ledger.count("o") == 1
    text = first.to_model()
    assert "Retrying may help" not in text and "Do not repeat" in text
    assert err(first)["retryable"] is False
    assert gov.audit_records("a")[-1]["idempotency_state"] == "unknown"
    record = gov.store.get(gov.idempotency_record_key("k"))
    assert record is not None and record["state"] == "unknown"
    again = gov.session("b").call("pay", {"order": "o"}, idempotency_key="k")
    assert again.status is Status.REPLAYED and again.value == {"order": "o", "charge": 1}
    assert ledger.count("o") == 1


def test_the_record_of_a_write_that_lost_its_answer_is_unknown_in_every_store(
    store: headway.Store,
) -> None:
    """SQLite, Redis, PostgreSQL alike: the key is left UNKNOWN (not released, not in
    progress), and a worker sharing the store reconciles it; the tool ran once."""
    ledger = Ledger()
    reconcile = lambda key, args: ledger.lookup(args["order"])  # noqa: E731
    a = headway.Governor(store=store, sleep=lambda s: None)
    a.register(
        "pay", acting_then(ledger, [ConnectionResetError("reset")]), effect="write",
        reconcile=reconcile,
    )  # fmt: skip
    b = headway.Governor(store=store, sleep=lambda s: None)
    b.register("pay", acting_then(ledger, []), effect="write", reconcile=reconcile)
    first = a.session("a").call("pay", {"order": "o"}, idempotency_key="k")
    assert first.status is Status.UNKNOWN and first.attempts == 1
    assert present(store.get(a.idempotency_record_key("k")))["state"] == "unknown"
    again = b.session("b").call("pay", {"order": "o"}, idempotency_key="k")
    assert again.status is Status.REPLAYED and ledger.count("o") == 1
    assert present(store.get(a.idempotency_record_key("k")))["state"] == "completed"


def test_without_a_reconcile_the_key_stays_unknown_and_nothing_runs_again() -> None:
    ledger = Ledger()
    gov = headway.Governor(sleep=lambda s: None)
    gov.register("pay", acting_then(ledger, [BrokenPipeError("pipe")]), effect="write")
    s = gov.session("r")
    outs = [s.call("pay", {"order": "o"}, idempotency_key="k") for _ in range(3)]
    assert [o.status for o in outs] == [Status.UNKNOWN] * 3 and ledger.count("o") == 1
    assert all("Retrying may help" not in o.to_model() for o in outs)


def test_an_unkeyed_write_that_loses_its_answer_is_unknown_and_its_repeat_reconciled() -> None:
    """Unkeyed: the model is never told "Retrying may help"; the identical call made
    again in the session is a retry of it and is reconciled first (§5.4)."""
    ledger = Ledger()
    gov = headway.Governor(sleep=lambda s: None)
    gov.register(
        "pay",
        acting_then(ledger, [ConnectionResetError("reset")]),
        effect="write",
        reconcile=lambda key, args: ledger.lookup(args["order"]),
    )
    s = gov.session("r")
    first = s.call("pay", {"order": "o"})
    assert first.status is Status.UNKNOWN and first.attempts == 1
    assert "Retrying may help" not in first.to_model()
    again = s.call("pay", {"order": "o"})
    assert again.status is Status.REPLAYED and ledger.count("o") == 1


def test_an_idempotent_write_is_not_retried_after_a_lost_connection_either() -> None:
    ledger = Ledger()
    gov = headway.Governor(sleep=lambda s: None)
    gov.register(
        "put", acting_then(ledger, [ConnectionResetError("reset")]), effect="write",
        idempotent=True, retry=headway.Retry(attempts=4),
    )  # fmt: skip
    out = gov.session("r").call("put", {"order": "o"})
    assert out.status is Status.UNKNOWN and out.attempts == 1 and ledger.count("o") == 1


BEFORE = [
    ConnectionRefusedError(111, "Connection refused"),
    socket.gaierror(-2, "Name or service not known"),
]


@pytest.mark.parametrize("failure", BEFORE, ids=lambda e: type(e).__name__)
def test_a_failure_before_the_request_was_sent_releases_the_claim_and_is_retried(
    failure: BaseException,
) -> None:
    ledger = Ledger()
    failures = [failure]

    def pay(order: str) -> dict[str, Any]:
        if failures:
            raise failures.pop()
        return ledger.charge(order)

    gov = headway.Governor(sleep=lambda s: None)
    gov.register("pay", pay, effect="write")
    out = gov.session("r").call("pay", {"order": "o"}, idempotency_key="k")
    assert out.status is Status.EXECUTED and out.attempts == 2 and ledger.count("o") == 1


def test_a_classifier_says_before_effect_for_a_failure_it_knows_came_first() -> None:
    """A transport error the tool raises before sending anything (its own pre-flight
    check, say): the classifier's BEFORE_EFFECT releases the key and allows the retry;
    without it the same failure is UNKNOWN."""

    class NotSent(ConnectionResetError):
        pass

    def tool(ledger: Ledger) -> Callable[..., Any]:
        failures = [NotSent("pool connection was stale; nothing sent")]

        def pay(order: str) -> dict[str, Any]:
            if failures:
                raise failures.pop()
            return ledger.charge(order)

        return pay

    def classify(exc: BaseException) -> Any:
        return BEFORE_EFFECT if isinstance(exc, NotSent) else default_classify(exc)

    ledger = Ledger()
    gov = headway.Governor(sleep=lambda s: None)
    gov.register("pay", tool(ledger), effect="write", classify=classify)
    gov.register("plain", tool(ledger), effect="write")
    out = gov.session("r").call("pay", {"order": "o"}, idempotency_key="k")
    assert out.status is Status.EXECUTED and out.attempts == 2 and ledger.count("o") == 1
    plain = gov.session("r").call("plain", {"order": "p"}, idempotency_key="k2")
    assert plain.status is Status.UNKNOWN and plain.attempts == 1 and ledger.count("p") == 0


def test_a_read_that_loses_its_connection_is_still_retried() -> None:
    tool = headway.testing.ScriptedTool([ConnectionResetError("reset"), {"ok": 1}])
    gov = headway.Governor(sleep=lambda s: None)
    gov.register("get", tool, effect="read")
    out = gov.session("r").call("get", {"q": 1})
    assert out.status is Status.EXECUTED and out.attempts == 2


async def test_an_async_write_that_acts_then_loses_its_answer_runs_once() -> None:
    ledger = Ledger()

    async def pay(order: str) -> dict[str, Any]:
        ledger.charge(order)
        await asyncio.sleep(0)
        raise ConnectionResetError("reset")

    gov = headway.Governor()
    gov.register(
        "pay", pay, effect="write", reconcile=lambda key, args: ledger.lookup(args["order"])
    )
    first = await gov.session("r").acall("pay", {"order": "o"}, idempotency_key="k")
    assert first.status is Status.UNKNOWN and first.attempts == 1 and ledger.count("o") == 1
    again = await gov.session("r2").acall("pay", {"order": "o"}, idempotency_key="k")
    assert again.status is Status.REPLAYED and ledger.count("o") == 1


# -- the exceptions real HTTP clients raise, against a real server ------------------------


class Server:
    """A TCP server that records each request it reads (the side effect), then answers
    as ``mode`` says: "close" (no answer), "partial" (a cut answer) or "ok"."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.mode = "close"
        self.requests = 0
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.requests += 1
                if self.mode == "partial":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
                elif self.mode == "ok":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


def _refused_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def _post_urllib(url: str) -> Any:
    import urllib.request

    with urllib.request.urlopen(url, data=b"{}", timeout=5) as r:
        return r.read().decode()


def _post_requests(url: str) -> Any:
    requests = pytest.importorskip("requests")
    return requests.post(url, data="{}", timeout=5).text


def _post_httpx(url: str) -> Any:
    httpx = pytest.importorskip("httpx")
    return httpx.post(url, content="{}", timeout=5).text


CLIENTS = {"urllib": _post_urllib, "requests": _post_requests, "httpx": _post_httpx}


@pytest.mark.parametrize("mode", ["close", "partial"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_real_http_clients_losing_the_answer_make_the_write_unknown(
    server: Server, client: str, mode: str
) -> None:
    """A server that got the request and closed the connection (or cut its answer): the
    client's own exception (RemoteDisconnected, IncompleteRead, requests' ConnectionError
    and ChunkedEncodingError, httpx.RemoteProtocolError) makes the write UNKNOWN after one
    request, with the default classifier and retries."""
    post = CLIENTS[client]
    server.mode = mode
    gov = headway.Governor(sleep=lambda s: None)
    gov.register("send", lambda order: post(f"http://127.0.0.1:{server.port}/"), effect="write")
    out = gov.session("r").call("send", {"order": "o"}, idempotency_key="k")
    assert out.status is Status.UNKNOWN and out.attempts == 1, out
    assert server.requests == 1
    assert "Retrying may help" not in out.to_model()


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_real_http_clients_refused_a_connection_retry_the_write(client: str) -> None:
    """Nothing listens: the request was never sent, so the keyed write is retried (and
    ends as a retryable error, the key released)."""
    post = CLIENTS[client]
    port = _refused_port()
    gov = headway.Governor(sleep=lambda s: None)
    gov.register("send", lambda order: post(f"http://127.0.0.1:{port}/"), effect="write")
    out = gov.session("r").call("send", {"order": "o"}, idempotency_key="k")
    assert out.status is Status.ERROR and out.attempts == 3, out
    assert err(out)["retryable"] is True and gov.store.get(gov.idempotency_record_key("k")) is None


async def test_aiohttp_losing_the_answer_makes_an_async_write_unknown(server: Server) -> None:
    aiohttp = pytest.importorskip("aiohttp")

    async def send(order: str) -> Any:
        url = f"http://127.0.0.1:{server.port}/"
        async with aiohttp.ClientSession() as session, session.post(url, data="{}") as r:
            return await r.text()

    gov = headway.Governor()
    gov.register("send", send, effect="write")
    for mode in ("close", "partial"):
        server.mode = mode
        before = server.requests
        out = await gov.session(mode).acall("send", {"order": mode}, idempotency_key=mode)
        assert out.status is Status.UNKNOWN and out.attempts == 1, out
        assert server.requests == before + 1


def test_classification_by_type_names_of_common_clients() -> None:
    """The type names count, not the libraries: none is imported by headway."""
    httpx = pytest.importorskip("httpx")
    requests = pytest.importorskip("requests")
    urllib3 = pytest.importorskip("urllib3")
    lost = [
        httpx.RemoteProtocolError("closed"),
        httpx.ReadError("read"),
        httpx.ReadTimeout("slow"),
        httpx.WriteError("write"),
        requests.exceptions.ChunkedEncodingError("cut"),
        requests.exceptions.ReadTimeout("slow"),
        requests.exceptions.ConnectionError(
            urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError())
        ),
        urllib3.exceptions.ProtocolError("Connection aborted."),
    ]
    before = [
        httpx.ConnectError("refused"),
        httpx.ConnectTimeout("slow connect"),
        httpx.PoolTimeout("no connection"),
        requests.exceptions.ConnectTimeout("slow connect"),
        requests.exceptions.ConnectionError(
            urllib3.exceptions.MaxRetryError(
                None, "/", urllib3.exceptions.NewConnectionError(None, "refused")
            )
        ),
    ]
    for exc in lost:
        assert connection_lost(exc) and not before_effect(exc), exc
        assert default_classify(exc) is RETRYABLE  # a read is worth another try
    for exc in before:
        assert before_effect(exc) and not connection_lost(exc), exc
        assert default_classify(exc) is BEFORE_EFFECT
    for other in (ValueError("bad"), KeyError("k"), httpx.UnsupportedProtocol("ftp")):
        assert not connection_lost(other) and not before_effect(other)
        assert default_classify(other) is NON_RETRYABLE


# -- a server process killed mid-call ------------------------------------------------------

_SERVER = r"""
import http.server, os, signal, sys
effects, port_file = sys.argv[1], sys.argv[2]

class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open(effects, "a") as f:
            f.write(body.decode() + "\n")
            f.flush()
            os.fsync(f.fileno())
        if os.environ.get("DIE_AFTER_ACTING") == "1":
            os.kill(os.getpid(), signal.SIGKILL)  # acted, then died before answering
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a):
        pass

srv = http.server.HTTPServer(("127.0.0.1", 0), H)
with open(port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.replace(port_file + ".tmp", port_file)
srv.serve_forever()
"""


def _start(tmp: Path, die: bool) -> tuple[subprocess.Popen[bytes], int]:
    port_file = tmp / f"port-{time.monotonic_ns()}"
    env = {**os.environ, "DIE_AFTER_ACTING": "1" if die else "0"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(tmp / "effects.txt"), str(port_file)], env=env
    )
    for _ in range(500):
        if port_file.exists():
            return proc, int(port_file.read_text())
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("the server did not start")


def test_a_server_killed_after_acting_leaves_the_write_unknown_until_reconciled(
    tmp_path: Path,
) -> None:
    """A real server process records the payment, then is SIGKILLed before it answers.
    The keyed write is UNKNOWN after one request (not run again on the restarted
    server); the key's next use reconciles against the server's records and replays."""
    import urllib.request

    effects = tmp_path / "effects.txt"

    def lines() -> list[str]:
        return effects.read_text().splitlines() if effects.exists() else []

    port = [0]

    def pay(order: str) -> str:
        req = urllib.request.Request(f"http://127.0.0.1:{port[0]}/", data=order.encode())
        with urllib.request.urlopen(req, timeout=10) as r:
            return str(r.read().decode())

    gov = headway.Governor(sleep=lambda s: None)
    gov.register(
        "pay",
        pay,
        effect="write",
        retry=headway.Retry(attempts=4),
        reconcile=lambda key, args: "ok" if args["order"] in lines() else None,
    )
    dying, port[0] = _start(tmp_path, die=True)
    try:
        first = gov.session("r").call("pay", {"order": "o-1"}, idempotency_key="k")
        assert dying.wait(10) == -signal.SIGKILL
    finally:
        dying.kill()
    assert first.status is Status.UNKNOWN and first.attempts == 1, first
    assert lines() == ["o-1"]
    healthy, port[0] = _start(tmp_path, die=False)
    try:
        again = gov.session("r2").call("pay", {"order": "o-1"}, idempotency_key="k")
        fresh = gov.session("r2").call("pay", {"order": "o-2"}, idempotency_key="k2")
    finally:
        healthy.kill()
        healthy.wait(10)
    assert again.status is Status.REPLAYED and again.value == "ok"
    assert fresh.status is Status.EXECUTED
    assert lines() == ["o-1", "o-2"]
