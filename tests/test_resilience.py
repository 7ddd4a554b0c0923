"""Failing tools (semantics §7, §8): timeouts, retry eligibility, breakers, fallbacks."""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Literal

import pytest

import headway
from conftest import POSTGRES_URL, REDIS_URL, err, make_store
from headway import Status, breaker
from headway.retry import default_classify
from headway.testing import FakeClock, ScriptedTool


def flaky(n_fail: int, exc: BaseException, result: Any = "ok") -> ScriptedTool:
    return ScriptedTool([exc] * n_fail + [result])


def test_non_retryable_error_stops_after_one_attempt(gov: headway.Governor) -> None:
    tool = ScriptedTool([ValueError("bad ticker")])
    gov.register("q", tool, effect="read", retry=headway.Retry(attempts=100))
    out = gov.session("r").call("q", {})
    assert tool.count == 1 and out.attempts == 1 and err(out)["retryable"] is False


def test_retryable_error_is_retried_with_backoff(clock: FakeClock) -> None:
    seen: list[dict[str, Any]] = []
    gov = headway.Governor(clock=clock, sleep=clock.sleep, rng=lambda: 0.5, on_retry=seen.append)
    tool = flaky(2, ConnectionError("reset"))
    gov.register("q", tool, effect="read", retry=headway.Retry(attempts=5, initial_s=1, max_s=10))
    out = gov.session("r").call("q", {})
    assert out.status is Status.EXECUTED and out.attempts == 3 and tool.count == 3
    assert clock.sleeps == [0.5, 1.0]  # full jitter: rng * min(max, initial * 2**n)
    assert [r["attempt"] for r in seen] == [1, 2]


def test_retry_after_beyond_the_deadline_is_not_retried(clock: FakeClock) -> None:
    gov = headway.Governor(clock=clock, sleep=clock.sleep)
    tool = ScriptedTool([RuntimeError("429")])
    gov.register(
        "q",
        tool,
        effect="read",
        classify=lambda exc: headway.RetryAfter(2),
        retry=headway.Retry(attempts=10, deadline_s=1.0),
    )
    out = gov.session("r").call("q", {})
    assert tool.count == 1 and clock.sleeps == []
    assert err(out)["retryable"] is True


def test_retry_after_within_the_deadline_waits_at_least_that_long(clock: FakeClock) -> None:
    gov = headway.Governor(clock=clock, sleep=clock.sleep, rng=lambda: 0.0)
    gov.register(
        "q",
        flaky(1, RuntimeError("busy")),
        effect="read",
        classify=lambda exc: headway.RetryAfter(2),
        retry=headway.Retry(attempts=3, deadline_s=10),
    )
    assert gov.session("r").call("q", {}).status is Status.EXECUTED
    assert clock.sleeps == [2]


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), asyncio.CancelledError()])
def test_cancellation_and_interrupts_are_never_retried(
    gov: headway.Governor, exc: BaseException
) -> None:
    tool = ScriptedTool([exc, "ok"])
    gov.register(
        "q",
        tool,
        effect="read",
        retry=headway.Retry(attempts=5),
        classify=lambda e: headway.RETRYABLE,
    )
    with pytest.raises(type(exc)):
        gov.session("r").call("q", {})
    assert tool.count == 1


async def test_a_cancelled_task_is_not_retried() -> None:
    gov = headway.Governor()
    started = asyncio.Event()
    calls: list[int] = []

    async def slow() -> str:
        calls.append(1)
        started.set()
        await asyncio.sleep(10)
        return "late"

    gov.register("q", slow, effect="read", retry=headway.Retry(attempts=5))
    task = asyncio.create_task(gov.session("r").acall("q", {}))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls == [1]


def test_jittered_delays_have_the_expected_mean() -> None:
    policy = headway.Retry(initial_s=1.0, max_s=8.0, jitter=True)
    rng = random.Random(12345).random
    for attempt, ceiling in [(1, 1.0), (3, 4.0), (10, 8.0)]:
        draws = [policy.backoff(attempt, rng) for _ in range(4000)]
        mean = sum(draws) / len(draws)
        sigma = ceiling / math.sqrt(12 * len(draws))  # uniform(0, ceiling)
        assert abs(mean - ceiling / 2) < 4 * sigma
        assert min(draws) >= 0 and max(draws) <= ceiling


def test_backoff_never_overflows() -> None:
    policy = headway.Retry(initial_s=1.0, max_s=30.0, jitter=False)
    assert policy.backoff(10_000, random.random) == 30.0


def test_a_per_attempt_timeout_fires_inside_the_overall_deadline() -> None:
    gov = headway.Governor()
    release = threading.Event()
    gov.register(
        "slow",
        lambda: release.wait(5) and "late",
        effect="read",
        timeout=5.0,
        retry=headway.Retry(attempts=3, deadline_s=0.3, initial_s=0.01),
    )
    started = time.monotonic()
    out = gov.session("r").call("slow", {})
    elapsed = time.monotonic() - started
    release.set()
    assert out.status is Status.ERROR and err(out)["code"] == "timeout"
    assert elapsed < 2.0  # the 5 s attempt timeout was cut to the 0.3 s deadline


def test_a_read_timing_out_is_retried() -> None:
    gov = headway.Governor()
    calls: list[int] = []

    def sometimes_slow(q: str) -> str:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.5)
        return "fresh"

    gov.register(
        "q",
        sometimes_slow,
        effect="read",
        timeout=0.1,
        retry=headway.Retry(attempts=3, initial_s=0.0),
    )
    out = gov.session("r").call("q", {"q": "x"})
    assert out.status is Status.EXECUTED and out.attempts == 2


def test_an_unkeyed_write_timing_out_is_not_retried_and_unknown() -> None:
    gov = headway.Governor()
    calls: list[int] = []

    def send(to: str) -> str:
        calls.append(1)
        time.sleep(0.3)
        return "sent"

    gov.register("send", send, effect="write", timeout=0.05, retry=headway.Retry(attempts=5))
    out = gov.session("r").call("send", {"to": "a"})
    assert out.status is Status.UNKNOWN and len(calls) == 1 and out.reconcile_key


def test_idempotent_write_is_retried_on_transient_errors(gov: headway.Governor) -> None:
    """A failure known to come before the write acted (a refused connection) is retried
    for an idempotent write, not for a plain one; a lost connection is never retried."""
    tool = flaky(1, ConnectionRefusedError("refused"))
    gov.register("put", tool, effect="write", idempotent=True)
    assert gov.session("r").call("put", {"k": 1}).status is Status.EXECUTED and tool.count == 2
    other = flaky(1, ConnectionRefusedError("refused"))
    gov.register("post", other, effect="write")
    assert gov.session("r2").call("post", {"k": 1}).status is Status.ERROR and other.count == 1
    lost = flaky(1, ConnectionResetError("reset"))
    gov.register("put2", lost, effect="write", idempotent=True)
    assert gov.session("r3").call("put2", {"k": 1}).status is Status.UNKNOWN and lost.count == 1


def test_default_classifier() -> None:
    class Resp:
        def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
            self.status_code, self.headers = status, headers or {}

    class HTTPError(Exception):
        def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
            super().__init__(status)
            self.response = Resp(status, headers)

    assert default_classify(ConnectionResetError()) is headway.RETRYABLE
    assert default_classify(TimeoutError()) is headway.RETRYABLE
    assert default_classify(HTTPError(503)) is headway.RETRYABLE
    assert default_classify(HTTPError(429, {"Retry-After": "7"})) == headway.RetryAfter(7.0)
    assert default_classify(HTTPError(404)) is headway.NON_RETRYABLE
    assert default_classify(ValueError("x")) is headway.NON_RETRYABLE
    assert default_classify(KeyboardInterrupt()) is headway.NON_RETRYABLE


def test_testing_mode_caps_attempts_without_sleeping(clock: FakeClock) -> None:
    gov = headway.Governor(clock=clock, sleep=clock.sleep)
    tool = ScriptedTool([ConnectionError("x")])
    gov.register(
        "q", tool, effect="read", retry=headway.Retry(attempts=50, initial_s=5), breaker=False
    )
    headway.set_testing(True, attempts=2)
    try:
        gov.session("r").call("q", {})
    finally:
        headway.set_testing(False)
    assert tool.count == 2 and clock.sleeps == []


# -- circuit breaker -----------------------------------------------------------------


def down() -> ScriptedTool:
    return ScriptedTool([ConnectionError("connection refused")])


def test_exact_trip_threshold(gov: headway.Governor) -> None:
    tool = down()
    gov.register(
        "q",
        tool,
        effect="read",
        retry=headway.Retry(attempts=1),
        breaker=headway.Breaker(failures=3, cooldown_s=30),
    )
    s = gov.session("r")
    for i in range(2):
        s.call("q", {"i": i})
    assert gov.breaker_state("q") == "closed"
    s.call("q", {"i": 2})
    assert gov.breaker_state("q") == "open"
    out = s.call("q", {"i": 3})
    assert err(out)["code"] == "circuit_open" and err(out)["retry_after"] > 0 and tool.count == 3
    assert err(out)["retryable"] is True and not out.executed


def test_ignored_errors_neither_count_nor_reset(gov: headway.Governor) -> None:
    outcomes = iter(
        [
            ConnectionError(),
            ConnectionError(),
            ValueError("bad input"),
            KeyError("x"),
            ConnectionError(),
        ]
    )

    def tool(i: int) -> str:
        raise next(outcomes)

    gov.register(
        "q",
        tool,
        effect="read",
        retry=headway.Retry(attempts=1),
        breaker=headway.Breaker(failures=3, ignore=(KeyError,)),
    )
    s = gov.session("r")
    for i in range(4):
        s.call("q", {"i": i})
        assert gov.breaker_state("q") == "closed"
    assert gov.breaker_stats("q")["fails"] == 2
    s.call("q", {"i": 4})
    assert gov.breaker_state("q") == "open"


def test_ratio_mode_respects_the_minimum_number_of_calls(gov: headway.Governor) -> None:
    results = iter([ConnectionError()] * 4 + ["ok"] * 1 + [ConnectionError()] * 10)

    def tool(i: int) -> str:
        r = next(results)
        if isinstance(r, Exception):
            raise r
        return r

    gov.register(
        "q",
        tool,
        effect="read",
        retry=headway.Retry(attempts=1),
        breaker=headway.Breaker(ratio=0.5, window=10, min_calls=6, failures=1),
    )
    s = gov.session("r")
    for i in range(5):  # 4 failures of 5 calls: 80% but under the minimum
        s.call("q", {"i": i})
    assert gov.breaker_state("q") == "closed"
    s.call("q", {"i": 5})
    assert gov.breaker_state("q") == "open"


def test_half_open_admits_exactly_k_probes_among_50_callers() -> None:
    clock = FakeClock()
    gov = headway.Governor(clock=clock)
    proceed = threading.Event()
    calls: list[int] = []

    def tool(i: int) -> str:
        calls.append(i)
        if len(calls) <= 2:
            raise ConnectionError("down")
        proceed.wait(30)
        return "up"

    gov.register(
        "q",
        tool,
        effect="read",
        retry=headway.Retry(attempts=1),
        timeout=None,
        breaker=headway.Breaker(failures=2, cooldown_s=10, probes=2),
    )
    s = gov.session("r")
    s.call("q", {"i": -1}), s.call("q", {"i": -2})
    assert gov.breaker_state("q") == "open"
    clock.advance(10)
    outs: list[headway.Outcome] = []
    barrier = threading.Barrier(50)

    def caller(i: int) -> None:
        barrier.wait()
        outs.append(gov.session(f"c{i}").call("q", {"i": i}))

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    # the probes stay in flight until every other caller has been answered (no timing)
    deadline = time.monotonic() + 30
    while len(outs) < 48 and time.monotonic() < deadline:
        time.sleep(0.01)
    proceed.set()
    for t in threads:
        t.join()
    assert len(calls) == 2 + 2  # exactly k = 2 probes ran
    rejected = [o for o in outs if o.error and err(o)["code"] == "circuit_open"]
    assert len(rejected) == 48 and all(err(o)["retry_after"] >= 0 for o in rejected)
    assert gov.breaker_state("q") == "closed"


def test_a_hung_probe_reopens_and_the_cooldown_grows_without_overflow() -> None:
    b = headway.Breaker(failures=1, cooldown_s=10, max_cooldown_s=1000)
    st = breaker.record(b, dict(breaker.CLOSED), ok=False, probe=False, now=0)
    assert st["state"] == "open" and st["opens"] == 1
    st, (decision, _) = breaker.admit(b, st, now=10, lease_s=5)
    assert decision == "probe" and st["state"] == "half_open"
    st, (decision, retry_after) = breaker.admit(b, st, now=15, lease_s=5)  # the probe hung
    assert decision == "reject" and st["state"] == "open" and st["opens"] == 2 and retry_after == 20
    cooldowns = []
    now = 15.0
    for _ in range(200):
        now += b.cooldown(st["opens"])
        st, (decision, _) = breaker.admit(b, st, now=now, lease_s=5)
        assert decision == "probe"
        st = breaker.record(b, st, ok=False, probe=True, now=now)
        cooldowns.append(b.cooldown(st["opens"]))
    assert (
        cooldowns[:3] == [40, 80, 160]
        and max(cooldowns) == 1000
        and all(math.isfinite(c) for c in cooldowns)
    )
    st, (decision, _) = breaker.admit(b, st, now=now + 1000, lease_s=5)
    st = breaker.record(b, st, ok=True, probe=True, now=now + 1000)
    assert st == breaker.CLOSED


def test_open_breaker_with_fallback_returns_it_without_calling(gov: headway.Governor) -> None:
    tool = down()
    gov.register(
        "quote",
        tool,
        effect="read",
        retry=headway.Retry(attempts=1),
        breaker=headway.Breaker(failures=1),
        fallback={"quote": None, "degraded": True},
    )
    s = gov.session("r")
    s.call("quote", {"t": "A"})
    out = s.call("quote", {"t": "B"})
    assert out.status is Status.FALLBACK and out.value == {"quote": None, "degraded": True}
    assert tool.count == 1 and "degraded" in out.to_model()
    gov.register(
        "quote2",
        down(),
        effect="read",
        retry=headway.Retry(attempts=1),
        breaker=headway.Breaker(failures=1),
        fallback=lambda args: {"t": args["t"], "stale": True},
    )
    s.call("quote2", {"t": "A"})
    assert s.call("quote2", {"t": "C"}).value == {"t": "C", "stale": True}


def test_counter_updates_are_atomic_across_threads(gov: headway.Governor) -> None:
    gov.register(
        "q",
        down(),
        effect="read",
        retry=headway.Retry(attempts=1),
        timeout=None,
        breaker=headway.Breaker(failures=10**6),
    )

    def fail_many(t: int) -> None:
        s = gov.session(f"t{t}", no_progress_limit=10**6)
        for i in range(500):
            s.call("q", {"i": i})

    threads = [threading.Thread(target=fail_many, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert gov.breaker_stats("q")["fails"] == 1500


def test_slow_calls_through_one_breaker_overlap(gov: headway.Governor) -> None:
    # two calls can pass a 2-party barrier only if both are inside the tool at once:
    # a lock held while the tool runs would make this time out
    meet = threading.Barrier(2, timeout=20)

    def slow(i: int) -> str:
        meet.wait()
        return "ok"

    gov.register("slow", slow, effect="read", timeout=None)
    outs: list[headway.Outcome] = []
    threads = [
        threading.Thread(
            target=lambda i=i: outs.append(gov.session(f"s{i}").call("slow", {"i": i}))
        )
        for i in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [o.status for o in outs] == [Status.EXECUTED, Status.EXECUTED]


def test_creating_a_breaker_never_resets_shared_state(tmp_path: Path) -> None:
    store = headway.SQLiteStore(str(tmp_path / "b.db"))
    a = headway.Governor(store=store)
    a.register(
        "q",
        down(),
        effect="read",
        retry=headway.Retry(attempts=1),
        breaker=headway.Breaker(failures=2, shared=True),
    )
    a.session("x").call("q", {"i": 1}), a.session("x").call("q", {"i": 2})
    b = headway.Governor(store=store)
    b.register("q", down(), effect="read", breaker=headway.Breaker(failures=2, shared=True))
    assert b.breaker_state("q") == "open"
    assert err(b.session("y").call("q", {}))["code"] == "circuit_open"


class _Unreachable(headway.MemoryStore):
    blocking = False

    def get(self, key: str) -> Any:
        raise headway.StoreError("down")


@pytest.mark.parametrize(("mode", "expected"), [("closed", "tool_error"), ("open", "circuit_open")])
def test_shared_breaker_with_the_store_unreachable_uses_the_configured_state(
    mode: Literal["closed", "open"], expected: str
) -> None:
    gov = headway.Governor(store=_Unreachable())
    gov.register(
        "q",
        ScriptedTool([ConnectionError("x")]),
        effect="read",
        retry=headway.Retry(attempts=1),
        breaker=headway.Breaker(shared=True, on_store_error=mode),
    )
    assert err(gov.session("r").call("q", {}))["code"] == expected


def _shared_failer(url: str, options: dict[str, Any], n: int, out: Any) -> None:
    gov = headway.Governor(store=headway.open_store(url, **options))
    gov.register(
        "q",
        ScriptedTool([ConnectionError("down")]),
        effect="read",
        retry=headway.Retry(attempts=1),
        timeout=None,
        breaker=headway.Breaker(failures=10**6, shared=True),
    )
    s = gov.session(uuid.uuid4().hex, no_progress_limit=10**6)
    for i in range(n):
        s.call("q", {"i": i})
    out.put(gov.breaker_stats("q")["fails"])


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ],
)
def test_two_processes_sharing_a_breaker_stay_consistent(kind: str, tmp_path: Path) -> None:
    make_store(kind, tmp_path).close()
    url = REDIS_URL if kind == "redis" else POSTGRES_URL
    options = {"prefix": f"t{uuid.uuid4().hex[:8]}:"}
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_shared_failer, args=(url, options, 150, out)) for _ in range(2)]
    for p in procs:
        p.start()
    [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    with headway.Governor(store=headway.open_store(url, **options)) as gov:
        gov.register(
            "q",
            ScriptedTool(["x"]),
            effect="read",
            breaker=headway.Breaker(failures=10**6, shared=True),
        )
        assert gov.breaker_stats("q")["fails"] == 300


def test_toml_configures_retry_breaker_and_fallback(tmp_path: Path) -> None:
    path = tmp_path / "headway.toml"
    path.write_text(
        """
[governor]
store = "sqlite:///TMP/h.db"
no_progress_limit = 9
budgets = { tool_calls = 40 }

[tools.fetch_quote]
effect = "read"
timeout = 2.0
fallback = { quote = "unavailable", degraded = true }

[tools.fetch_quote.retry]
attempts = 4
initial_s = 0.05
max_s = 1.0
deadline_s = 10.0

[tools.fetch_quote.breaker]
failures = 3
cooldown_s = 30.0
probes = 1
""".replace("TMP", str(tmp_path))
    )
    gov = headway.Governor.from_config(path)
    assert isinstance(gov.store, headway.SQLiteStore) and gov.no_progress_limit == 9
    spec = gov.register("fetch_quote", down(), effect="write")  # the operator's file wins
    assert spec.effect == "read" and spec.timeout == 2.0
    assert spec.retry == headway.Retry(attempts=4, initial_s=0.05, max_s=1.0, deadline_s=10.0)
    assert spec.breaker == headway.Breaker(failures=3, cooldown_s=30.0, probes=1)
    headway.set_testing(True, attempts=4)
    try:
        s = gov.session("r")
        for i in range(3):
            s.call("fetch_quote", {"t": i})
        assert s.call("fetch_quote", {"t": 9}).status is Status.FALLBACK
    finally:
        headway.set_testing(False)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[tools.x]\nefect = 'read'\n", "unknown key"),
        ("[tools.x.retry]\ntries = 3\n", "known: attempts"),
        ("[nope]\n", "unknown table"),
        ("[tools.x\n", "not valid TOML"),
    ],
)
def test_config_errors_name_the_problem(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(headway.ConfigError, match=match):
        headway.Governor.from_config(path)


def test_a_failing_on_retry_hook_never_breaks_the_call(clock: FakeClock) -> None:
    def hook(info: dict[str, Any]) -> None:
        raise RuntimeError("metrics backend down")

    gov = headway.Governor(clock=clock, sleep=clock.sleep, on_retry=hook)
    gov.register("q", flaky(1, ConnectionError("x")), effect="read")
    out = gov.session("r").call("q", {})
    assert out.status is Status.EXECUTED
    assert any(f.startswith("on_retry_failed") for f in gov.audit_records("r")[0]["flags"])


# -- issue 9: durations in this process do not follow the wall clock -------------------


class SteppedWallClock:
    """time.time() offset by ``step`` seconds (the machine's clock was set back or ahead)."""

    def __init__(self) -> None:
        self.step = 0.0
        self.real = time.time

    def __call__(self) -> float:
        return self.real() + self.step


def test_a_breaker_cooldown_is_never_longer_than_configured_when_the_clock_steps_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wall = SteppedWallClock()
    monkeypatch.setattr(time, "time", wall)
    gov = headway.Governor(breaker=headway.Breaker(failures=1, cooldown_s=1.0))
    gov.register(
        "flaky",
        ScriptedTool([ConnectionError("down")]),
        effect="read",
        retry=headway.Retry(attempts=1),
    )
    s = gov.session("s")
    assert err(s.call("flaky", {}))["code"] == "tool_error"
    wall.step = -3600.0  # the wall clock is set back an hour
    out = s.call("flaky", {"n": 1})
    assert err(out)["code"] == "circuit_open" and err(out)["retry_after"] <= 1.0, out.error


def test_a_ttl_read_held_in_process_follows_elapsed_time_not_the_wall_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wall = SteppedWallClock()
    monkeypatch.setattr(time, "time", wall)
    gov = headway.Governor()
    price = ScriptedTool([lambda **_: {"price": 1}])
    gov.register("price", price, effect="read", ttl=60)
    s = gov.session("s")
    s.call("price", {})
    wall.step = 3600.0  # set forward an hour: a second has not passed
    assert s.call("price", {}).status is Status.CACHED and price.count == 1


def test_the_whole_call_is_bounded_by_the_governors_deadline(clock: FakeClock) -> None:
    """Per-attempt timeouts times attempts do not add up past ``deadline_s``."""

    def slow_failure() -> None:
        clock.advance(1.0)  # each attempt takes a second, then fails transiently
        raise ConnectionError("reset")

    gov = headway.Governor(clock=clock, sleep=clock.sleep, deadline_s=2.5, breaker=None)
    gov.register(
        "fetch",
        slow_failure,
        effect="read",
        timeout=1.0,
        breaker=False,
        retry=headway.Retry(attempts=10, initial_s=0.0, jitter=False),
    )
    out = gov.session("s").call("fetch", {})
    assert out.status is Status.ERROR and out.attempts == 3, out
    assert "deadline_reached" in gov.audit_records("s")[0]["flags"]


async def test_hung_sync_tools_do_not_starve_healthy_ones() -> None:
    """300 hung sync tools (more than any fixed pool) leave room for a healthy one."""
    hang = threading.Event()
    gov = headway.Governor(breaker=None)
    gov.register(
        "hung",
        lambda i: hang.wait(10),
        effect="read",
        timeout=0.2,
        breaker=False,
        retry=headway.Retry(attempts=1),
    )
    gov.register(
        "healthy",
        lambda: {"ok": True},
        effect="read",
        timeout=5,
        breaker=False,
        retry=headway.Retry(attempts=1),
    )
    try:
        calls = (gov.session(f"s{i}").acall("hung", {"i": i}) for i in range(300))
        hung = await asyncio.gather(*calls)
        assert {err(o)["code"] for o in hung} == {"timeout"}
        assert gov.session("s").call("healthy", {}).status is Status.EXECUTED
    finally:
        hang.set()


def test_a_hung_tool_does_not_keep_the_interpreter_from_exiting(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "hung.py"
    script.write_text(
        "import threading, headway\n"
        "gov = headway.Governor()\n"
        "gov.register('hung', lambda: threading.Event().wait(120), effect='read', timeout=0.1)\n"
        "print(gov.session('s').call('hung', {}).error['code'])\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "timeout", done.stderr
