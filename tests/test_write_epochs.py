"""A write's invalidation is never lost (semantics §6), and a workspace shares it (§1).

Each test names what must hold; the stores are real (SQLite files, Redis, PostgreSQL)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import headway
from conftest import POSTGRES_URL, make_store, purge_prefix
from headway.stores._base import Op
from headway.testing import FakeClock

SHARED = [
    "sqlite",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("postgres", marks=pytest.mark.postgres),
]


class HotRecord:
    """A store whose session records are always moved on by another worker: every swap of
    one fails (the record read back is the same), as on a session swapped very often."""

    def __init__(self, inner: headway.Store) -> None:
        self.inner, self.blocking, self.hot = inner, inner.blocking, False

    def swap(self, key: str, expected: Any, value: Any, ttl_s: float | None = None) -> bool:
        if self.hot and ":sess:" in key:
            return False
        return self.inner.swap(key, expected, value, ttl_s)

    def batch(self, ops: Sequence[Op]) -> list[Any]:
        results: list[Any] = []
        last: Any = None
        for op in ops:
            if op.only_if is not None and (last is True) is not op.only_if:
                last = None
            elif self.hot and op.name == "swap" and ":sess:" in op.key:
                last = False
            else:
                last = headway.stores._base.batch(self.inner, [op._replace(only_if=None)])[0]
            results.append(last)
        return results

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Faults:
    """A store whose next ``fail`` operations raise, as a store error or a dropped
    connection would."""

    def __init__(self, inner: headway.Store) -> None:
        self.inner, self.blocking, self.fail = inner, inner.blocking, 0

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)
        if name not in ("get", "set", "add", "swap", "delete", "batch"):
            return fn

        def op(*args: Any) -> Any:
            if self.fail > 0:
                self.fail -= 1
                raise headway.StoreError("connection reset")
            return fn(*args)

        return op


def _account(gov: headway.Governor, balance: list[int], on_pay: Any = None) -> None:
    gov.register("balance", lambda: {"eur": balance[0]}, effect="read", deterministic=True)

    def pay(amount: int) -> dict[str, int]:
        balance[0] -= amount
        if on_pay is not None:
            on_pay()
        return {"paid": amount}

    gov.register("pay", pay, effect="write", timeout=None)


def look(s: headway.Session, tool: str = "balance", args: Any = None) -> headway.Outcome:
    """A read in a new user turn: never a repeat of the reads before it (the read-repeat
    rule is not what these tests are about)."""
    s.user_turn()
    return s.call(tool, args)


@pytest.mark.parametrize("kind", SHARED)
def test_a_write_whose_record_swaps_all_fail_still_invalidates_every_worker(
    kind: str, tmp_path: Path
) -> None:
    """The session record is swapped so often that the write's settle never lands its
    swap: the write's invalidation is published all the same, and another worker's next
    read runs instead of serving the balance from before the write."""
    store = HotRecord(make_store(kind, tmp_path))
    balance = [90]
    a, b = headway.Governor(store=store), headway.Governor(store=store)
    _account(a, balance)
    _account(b, balance)
    sa, sb = a.session("r"), b.session("r")
    assert sb.call("balance").value == {"eur": 90}
    assert sb.call("balance").status is headway.Status.CACHED  # held by b
    store.hot = True
    out = sa.call("pay", {"amount": 25})
    assert out.executed
    assert any("session_state_conflict" in f for f in sa.audit_records()[-1]["flags"])
    store.hot = False
    after = look(sb)
    assert after.status is headway.Status.EXECUTED and after.value == {"eur": 65}
    assert look(sa).value == {"eur": 65}
    store.close()


@pytest.mark.parametrize("kind", SHARED)
@pytest.mark.parametrize("failures", [1, 2, 3])
def test_store_errors_after_a_write_ran_never_let_a_read_be_served_from_before_it(
    kind: str, failures: int, tmp_path: Path
) -> None:
    """The store fails just after the write's tool ran (its second publication, its
    settle): no worker serves the pre-write balance, the writer included, and the writer
    publishes what it owes on its next call, after which reads are cached again."""
    faults = Faults(make_store(kind, tmp_path))
    balance = [90]
    a, b = headway.Governor(store=faults), headway.Governor(store=faults)

    def drop() -> None:
        faults.fail = failures

    _account(a, balance, on_pay=drop)
    _account(b, balance)
    sa, sb = a.session("r"), b.session("r")
    assert sa.call("balance").value == {"eur": 90}
    assert sb.call("balance").status is headway.Status.CACHED
    assert sa.call("pay", {"amount": 25}).executed
    faults.fail = 0  # errors during the write's settle only
    for s in (sb, sa, sb):
        out = look(s)
        assert out.value == {"eur": 65}, out
    # published again by a's calls: the reads are cached once more
    assert look(sb).status is headway.Status.CACHED
    faults.close()


@pytest.mark.postgres
def test_the_writers_connections_terminated_mid_write_never_serve_a_stale_read() -> None:
    """pg_terminate_backend of every connection of the writer's store while its write
    runs: its settle loses its connection, and still no worker serves the pre-write
    balance (only this test's connections are terminated: by an application_name)."""
    import psycopg

    prefix = f"t{uuid.uuid4().hex[:8]}:"
    app = f"headway-epochs-{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in POSTGRES_URL else "?"
    try:
        writer = headway.open_store(f"{POSTGRES_URL}{sep}application_name={app}", prefix=prefix)
        reader = headway.open_store(POSTGRES_URL, prefix=prefix)
    except headway.StoreError as exc:
        pytest.skip(f"PostgreSQL is not reachable: {exc}")

    def terminate() -> None:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            pids = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (app,),
            ).fetchall()
        assert pids, "the writer's connections were found"

    balance = [90]
    a, b = headway.Governor(store=writer), headway.Governor(store=reader)
    _account(a, balance, on_pay=terminate)
    _account(b, balance)
    try:
        sa, sb = a.session("r"), b.session("r")
        assert sb.call("balance").value == {"eur": 90}
        assert sa.call("balance").status is headway.Status.CACHED
        assert sa.call("pay", {"amount": 25}).executed
        assert look(sb).value == {"eur": 65}
        assert look(sa).value == {"eur": 65}
    finally:
        writer.close()
        reader.close()
        purge_prefix(POSTGRES_URL, prefix)


@pytest.mark.parametrize("kind", SHARED)
@pytest.mark.parametrize("share_sessions", [True, False])
def test_governors_of_one_workspace_see_each_others_writes(
    kind: str, share_sessions: bool, tmp_path: Path
) -> None:
    """Two governors on one store and one workspace, each with its own session (two MCP
    servers of one desktop client, each behind its own proxy): a write through one makes
    the other's cached read run again. A third governor of another workspace is not
    concerned: its read stays cached."""
    store = make_store(kind, tmp_path)
    files = {"a.txt": "old"}

    def options() -> dict[str, Any]:
        return {"store": store, "share_sessions": share_sessions}

    fs = headway.Governor(**options(), workspace="w")
    git = headway.Governor(**options(), workspace="w")
    other = headway.Governor(**options(), workspace="elsewhere")
    for gov in (fs, other):
        gov.register("read_file", lambda path: files[path], effect="read", deterministic=True)
    git.register("checkout", lambda branch: files.update({"a.txt": branch}), effect="write")
    s_fs, s_git, s_other = fs.session("fs"), git.session("git"), other.session("x")
    assert s_fs.call("read_file", {"path": "a.txt"}).value == "old"
    assert s_fs.call("read_file", {"path": "a.txt"}).status is headway.Status.CACHED
    assert s_other.call("read_file", {"path": "a.txt"}).value == "old"
    assert s_git.call("checkout", {"branch": "main"}).executed
    again = look(s_fs, "read_file", {"path": "a.txt"})
    assert again.status is headway.Status.EXECUTED and again.value == "main"
    assert s_other.call("read_file", {"path": "a.txt"}).status is headway.Status.CACHED
    store.close()


def test_without_a_workspace_governors_keep_their_own_cache(tmp_path: Path) -> None:
    """No workspace: another governor's write in another session invalidates nothing here
    (the behaviour before workspaces)."""
    store = headway.SQLiteStore(str(tmp_path / "s.db"))
    files = {"a.txt": "old"}
    fs, git = headway.Governor(store=store), headway.Governor(store=store)
    fs.register("read_file", lambda path: files[path], effect="read", deterministic=True)
    git.register("checkout", lambda branch: files.update({"a.txt": branch}), effect="write")
    s_fs = fs.session("fs")
    assert s_fs.call("read_file", {"path": "a.txt"}).value == "old"
    git.session("git").call("checkout", {"branch": "main"})
    assert s_fs.call("read_file", {"path": "a.txt"}).status is headway.Status.CACHED
    store.close()


def test_a_workspace_on_an_in_process_store_is_shared_by_its_governors() -> None:
    """Two governors of one workspace on one MemoryStore (one process)."""
    store = headway.MemoryStore()
    balance = [90]
    a = headway.Governor(store=store, workspace="w")
    b = headway.Governor(store=store, workspace="w")
    _account(a, balance)
    _account(b, balance)
    sa = a.session("a")
    assert sa.call("balance").value == {"eur": 90}
    assert sa.call("balance").status is headway.Status.CACHED
    assert b.session("b").call("pay", {"amount": 5}).executed
    assert look(sa).value == {"eur": 85}


@pytest.mark.parametrize("workspace", ["", "  ", 3])
def test_a_workspace_must_be_a_name(workspace: Any) -> None:
    with pytest.raises(headway.ConfigError, match="workspace"):
        headway.Governor(workspace=workspace)


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ],
)
def test_a_tenant_never_replays_another_tenants_record_copied_under_its_prefix(
    kind: str, tmp_path: Path
) -> None:
    """Two tenants share a secret and a namespace, told apart by their store prefixes.
    Tenant A's signed idempotency record, copied under tenant B's prefix, is refused by
    B (logged as tampering; the keyed write fails closed): B's write is neither replayed
    from A's result nor run."""
    a_store, b_store = make_store(kind, tmp_path), make_store(kind, tmp_path)
    a = headway.Governor(store=a_store, secret="shared")
    b = headway.Governor(store=b_store, secret="shared")
    runs: list[str] = []
    for gov, name in ((a, "A"), (b, "B")):

        def pay(order: int, n: str = name) -> dict[str, str]:
            runs.append(n)
            return {"by": n}

        gov.register("pay", pay, effect="write")
    assert a.session("r").call("pay", {"order": 1}, idempotency_key="k").value == {"by": "A"}
    key = a.idempotency_record_key("k")
    b_store.set(key, a_store.get(key))  # the raw signed record, under B's prefix
    out = b.session("r").call("pay", {"order": 1}, idempotency_key="k")
    assert out.status is not headway.Status.REPLAYED and out.value is None
    assert runs == ["A"]
    assert out.error is not None and out.error["code"] == "store_unavailable"
    a_store.close()
    b_store.close()


@pytest.mark.parametrize("kind", SHARED)
def test_a_worker_rejects_an_older_signed_session_record_and_logs_it(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An older signed copy of the session record restored in the store (a budget stop
    undone, write epochs of before a write): a worker that has seen a newer version keeps
    its own state, raises the stop, logs the rollback with the session and both
    versions, and writes its newer state back over the old copy."""
    store = make_store(kind, tmp_path)
    gov = headway.Governor(store=store, secret="s3cret")
    gov.register("ping", lambda n: n, effect="read")
    s = gov.session("r", budgets=headway.Budgets(tool_calls=3))
    key = gov.session_key("r")
    s.call("ping", {"n": 0})
    old = store.get(key)  # the signed record after one step, as a backup would hold it
    s.call("ping", {"n": 1})
    s.call("ping", {"n": 2})  # the third call: the budget is reached
    with pytest.raises(headway.BudgetExceeded):
        s.call("ping", {"n": 3})
    store.set(key, old)  # rolled back to the valid older copy
    with caplog.at_level("WARNING", logger="headway"), pytest.raises(headway.BudgetExceeded):
        gov.session("r").call("ping", {"n": 4})
    rolled = [r.getMessage() for r in caplog.records if "rolled back" in r.getMessage()]
    assert rolled and re.search(r"\(r\): version 2, older than version 6", rolled[0]), rolled
    store.close()


@pytest.mark.parametrize("kind", SHARED)
def test_randomized_contention_on_one_shared_session(kind: str, tmp_path: Path) -> None:
    """Three workers of three threads on one session, cached reads and keyed payments,
    store errors at random: 0 stale reads after an acknowledged write, 0 duplicates, 0
    lost acknowledged results (``bench/contention_schedules.py`` runs more)."""
    from contention import run_contention

    first = make_store(kind, tmp_path)
    prefix = getattr(first, "prefix", "")
    first.close()

    def store() -> headway.Store:
        if kind == "sqlite":
            return headway.SQLiteStore(str(tmp_path / "store.db"))
        url = getattr(first, "url", None) or first.dsn  # type: ignore[attr-defined]
        return headway.open_store(url, prefix=prefix)

    counts = run_contention(store, calls=60)
    assert counts["stale"] == counts["duplicates"] == counts["lost"] == 0, counts
    assert counts["writes"] > 0 and counts["cached"] > 0, counts


@pytest.mark.parametrize("kind", SHARED)
def test_a_read_made_while_a_write_runs_is_not_cached_when_the_write_cannot_publish_after(
    kind: str, tmp_path: Path
) -> None:
    """Worker b reads the balance while a's payment is running, before it takes effect;
    the store then fails as a's payment settles. The balance b read during the write was
    never cached (the write was marked pending before it ran), so neither b nor a is
    served it afterwards."""
    faults = Faults(make_store(kind, tmp_path))
    balance = [90]
    a, b = headway.Governor(store=faults), headway.Governor(store=faults)
    _account(b, balance)
    sb = b.session("r")

    def pay(amount: int) -> dict[str, int]:
        assert look(sb).value == {"eur": 90}  # read while the write runs: before its effect
        balance[0] -= amount
        faults.fail = 3  # the write's settle then fails
        return {"paid": amount}

    a.register("balance", lambda: {"eur": balance[0]}, effect="read", deterministic=True)
    a.register("pay", pay, effect="write", timeout=None)
    sa = a.session("r")
    assert sa.call("balance").value == {"eur": 90}
    assert sa.call("pay", {"amount": 25}).executed
    faults.fail = 0
    for s in (sb, sa, sb):
        out = look(s)
        assert out.value == {"eur": 65}, out


@pytest.mark.parametrize("kind", SHARED)
def test_a_writer_that_dies_before_publishing_after_leaves_no_read_from_before_it(
    kind: str, tmp_path: Path
) -> None:
    """The writer's publication after the write never happens (it died): the mark made
    before the write keeps the read uncached until it expires, and after that the read
    is still not served from before the write (the mark came with a bump)."""
    faults = Faults(make_store(kind, tmp_path))
    clock = FakeClock()
    balance = [90]
    a = headway.Governor(store=faults, clock=clock, deadline_s=10)
    b = headway.Governor(store=faults, clock=clock, deadline_s=10)
    _account(a, balance, on_pay=lambda: setattr(faults, "fail", 10**6))
    _account(b, balance)
    sa, sb = a.session("r"), b.session("r")
    assert sb.call("balance").value == {"eur": 90}
    assert sb.call("balance").status is headway.Status.CACHED
    assert sa.call("pay", {"amount": 25}).executed  # then a is gone: it never calls again
    faults.fail = 0
    assert look(sb).value == {"eur": 65}
    clock.advance(10 + 61)  # the mark expired
    assert look(sb).value == {"eur": 65}
    assert look(sb).status is headway.Status.CACHED  # cached again, the new balance


@pytest.mark.parametrize("kind", SHARED)
def test_a_writer_that_could_not_publish_at_all_serves_none_of_its_reads_until_it_does(
    kind: str, tmp_path: Path
) -> None:
    """The store fails through the whole write (neither publication lands): the writer
    serves none of the session's cached reads, not even the entry it holds, and
    publishes on its next call."""
    faults = Faults(make_store(kind, tmp_path))
    balance = [90]
    a = headway.Governor(store=faults)
    _account(a, balance)
    sa = a.session("r")
    assert sa.call("balance").value == {"eur": 90}  # held by a
    faults.fail = 10**6
    assert sa.call("pay", {"amount": 25}).executed  # an unkeyed write runs (fails open)
    faults.fail = 0
    out = sa.call("balance")
    assert out.status is headway.Status.EXECUTED and out.value == {"eur": 65}


@pytest.mark.parametrize("kind", SHARED)
async def test_async_calls_publish_and_honour_the_workspace_epochs(
    kind: str, tmp_path: Path
) -> None:
    """The same through ``acall``: a write through one governor of the workspace, then a
    read through another runs again (the async driver shares the one path)."""
    store = make_store(kind, tmp_path)
    balance = [90]
    a = headway.Governor(store=store, workspace="w")
    b = headway.Governor(store=store, workspace="w")
    _account(a, balance)
    _account(b, balance)
    sa, sb = a.session("a"), b.session("b")
    assert (await sa.acall("balance")).value == {"eur": 90}
    assert (await sa.acall("balance")).status is headway.Status.CACHED
    assert (await sb.acall("pay", {"amount": 5}, idempotency_key="p1")).executed
    sa.user_turn()
    again = await sa.acall("balance")
    assert again.status is headway.Status.EXECUTED and again.value == {"eur": 85}
    store.close()


@pytest.mark.parametrize("kind", SHARED)
def test_an_unreadable_epochs_record_is_replaced_by_the_next_write(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An epochs record that fails its integrity check (tampered): no read is served
    from it, the next write replaces it at once (one publication, not a loop of
    compare-and-set rounds), and reads are cached again after."""
    store = make_store(kind, tmp_path)
    balance = [90]
    gov = headway.Governor(store=store, secret="s3cret")
    _account(gov, balance)
    s = gov.session("r")
    assert s.call("balance").value == {"eur": 90}
    assert s.call("pay", {"amount": 5}).executed
    store.set("default:wep:{r}", {"hmac": "0" * 64, "v": {"g": {"*": 1}, "p": {}}})
    assert s.call("pay", {"amount": 5}).executed
    assert not any("epochs_unpublished" in f for f in s.audit_records()[-1]["flags"])
    assert look(s).value == {"eur": 80}
    assert look(s).status is headway.Status.CACHED
    assert "tampering" in caplog.text
    store.close()


@pytest.mark.parametrize("kind", SHARED)
def test_a_fresh_worker_still_raises_a_stop_the_rolled_back_record_lost(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that has seen nothing of the session (a new process) opens it after its
    record was rolled back to a signed copy from before a budget stop: the stop, kept in
    the session's epochs record with the version that first held it, is raised all the
    same, and the rollback is logged."""
    store = make_store(kind, tmp_path)
    gov = headway.Governor(store=store, secret="s3cret")
    gov.register("ping", lambda n: n, effect="read")
    s = gov.session("r", budgets=headway.Budgets(tool_calls=2))
    key = gov.session_key("r")
    s.call("ping", {"n": 0})
    old = store.get(key)
    s.call("ping", {"n": 1})  # the budget is reached: the session stops
    store.set(key, old)
    fresh = headway.Governor(store=store, secret="s3cret")
    fresh.register("ping", lambda n: n, effect="read")
    with caplog.at_level("WARNING", logger="headway"), pytest.raises(headway.BudgetExceeded):
        fresh.session("r", budgets=headway.Budgets(tool_calls=2)).call("ping", {"n": 2})
    assert "holds its stop" in caplog.text
    store.close()
