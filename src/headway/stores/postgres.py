"""A store in PostgreSQL (psycopg 3 with a connection pool): several machines.

One table; the claim is a single ``INSERT ... ON CONFLICT`` (which takes over only a row
whose garbage-collection time has passed) and every transition is a single conditional
``UPDATE`` or ``DELETE``: never check-then-insert. A long expected value (a session
record's head) is compared by its SHA-256, computed by the server: a swap sends the new
value only, in a batch as its edits of the stored one where they are shorter
(``_delta``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import StoreError
from . import _delta
from ._base import SAME, SAME_TEXT, Op, digest, dumps, loads, shared_prefix
from ._urls import target

try:
    import psycopg
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError("PostgresStore needs psycopg: pip install 'headway[postgres]'") from exc

_TABLE = "headway_kv"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    gc_at DOUBLE PRECISION
)
"""
# garbage-collection times are the server's clock: workers' clocks never have to agree
_NOW = "extract(epoch from clock_timestamp())"
_LIVE = f"(gc_at IS NULL OR gc_at > {_NOW})"
_GC = f"{_NOW} + %s"


def _match(expected: Any, name: str = "") -> tuple[str, str | bytes]:
    """The condition that the stored value is ``expected``, and its parameter (``name``:
    a named one): a long one compared by its SHA-256, which the server computes (a swap
    sends the new value only), sent as its first 20 bytes (160 bits, as long as the SHA-1
    Redis compares: no accidental match, and a value that matches one it did not write
    is beyond reach)."""
    text = dumps(expected)
    if len(text) < _DIGESTED:
        return f"value = %{'(' + name + ')' if name else ''}s", text
    param = f"%({name})b" if name else "%b"
    held = bytes.fromhex(digest(text, "sha256"))[:20]
    return f"substr(sha256(convert_to(value, 'UTF8')), 1, 20) = {param}", held


#: an expected value this long or longer is compared by its digest
_DIGESTED = 64


def _keys(keys: list[str], params: dict[str, Any]) -> dict[str, str]:
    """Each key of a batch as an SQL expression, its parameters put in ``params``: a key
    that extends a shorter one of the batch (a session's part its record's key, a lease
    its idempotency record's) as that one's expression and its tail, any other as the
    part all the batch's keys share and its tail: a key's text is sent about once."""
    distinct = sorted(set(keys), key=len)
    common = distinct[0][: shared_prefix(min(distinct), max(distinct))]
    params["p"] = common
    out: dict[str, str] = {}
    for i, key in enumerate(distinct):
        base = next((k for k in reversed(distinct[:i]) if key.startswith(k)), None)
        head = "%(p)s" if base is None else out[base]
        params[f"k{i}"] = key[len(common if base is None else base) :]
        out[key] = f"({head} || %(k{i})s)"
    return out


#: edits of more than twice this many runs copy only the value's start and end: a
#: statement's text grows with the square of its slots
_SLOTS = 16


def _new(op: Op, i: int, params: dict[str, Any]) -> str:
    """A swap's new value, its parameters put in ``params``: its text, or its edits of the
    value it replaces when they are shorter (``_delta``: a session record's head, a
    completion). The server applies them as slots, each a run of the stored value then a
    run of the inserted text ``s``, from one array of three numbers a slot: how far past
    the run copied before its copy starts, its length, and the length of its insert (the
    starts are their sums). The statement has room for a multiple of four slots (those
    past the array's end add nothing): it takes one of four texts, without a set-returning
    function that would make its generic plan look dearer than one made for its values,
    so PostgreSQL plans each text once (a ``generate_series`` had it plan every time)."""
    text = dumps(op.value)
    if len(text) >= _delta.LONG:
        old = dumps(op.expected)
        runs = _delta.edits(old, text)
        if len(runs) > 2 * _SLOTS:
            runs = _delta.edits(old, text, cuts=())  # its start and end only: three runs
        if _delta.worth(runs, len(text), 5):
            return _slots(runs, i, params)
    params[f"v{i}"] = text
    return f"%(v{i})s"


def _slots(runs: list[_delta.Edit], i: int, params: dict[str, Any]) -> str:
    """The expression applying these edits to the stored value (``_new``)."""
    at: list[int] = []  # per slot: skip, copied, inserted
    inserted: list[str] = []
    end = 0  # where the run copied before ends
    for r in runs:
        if isinstance(r, tuple):
            at += (r[0] - end, r[1], 0)
            end = r[0] + r[1]
        else:
            if not at or at[-1]:
                at += (0, 0, 0)
            at[-1] = len(r)
            inserted.append(str(r))
    slots = -(-len(at) // 12) * 4  # rounded up to a multiple of four
    params[f"a{i}"], params[f"s{i}"] = at, "".join(inserted)
    pieces = []
    for k in range(slots):  # a slot past the array's end has no numbers: it adds nothing
        copied = "".join(f"+a[{3 * j + 1}]+a[{3 * j + 2}]" for j in range(k)) + f"+a[{3 * k + 1}]"
        sent = "".join(f"+a[{3 * j + 3}]" for j in range(k))
        pieces.append(
            f"coalesce(substr({_TABLE}.value, 1{copied}, a[{3 * k + 2}]) || "
            f"substr(x.s, 1{sent}, a[{3 * k + 3}]), '')"
        )
    # the array as text: shorter than binary's 8 bytes a number
    return f"(SELECT {' || '.join(pieces)} FROM (SELECT %(a{i})t::int[] AS a, %(s{i})s AS s) x)"


def _runs(ops: Sequence[Op], names: list[str]) -> dict[int, tuple[str, list[str]]]:
    """Each run of deletes, each made when the one before it is (a session record's parts
    it no longer needs): by its first one's place, the start its keys share and their
    tails. Two keys or more are one ``DELETE`` whose text is the same for any number of
    them: planned once, not once per number of parts (a statement of 64 deletes took
    4.5 ms of the server's time, most of it to parse and plan)."""
    out: dict[int, tuple[str, list[str]]] = {}
    first = -1
    for i, op in enumerate(ops):
        if op.name != "delete":
            continue
        if not (op.only_if and i and ops[i - 1].name == "delete"):
            first = i
            out[i] = ("", [])
        out[first][1].append(names[i])
    for i, (_, run) in out.items():
        head = run[0][: shared_prefix(min(run), max(run))]
        out[i] = head, [k[len(head) :] for k in run]
    return out


_WRITTEN = {"1": True, "0": False, "-": None}  # a write's result in a batch's column


def _results(ops: Sequence[Op], text: str) -> list[Any]:
    """A batch's results from its one column: per operation, a get's 'n' (no value) or 'v',
    its value's length, ':' and the value; a write's '1', '0', or '-' when skipped."""
    out: list[Any] = []
    at = 0
    for op in ops:
        if op.name != "get":
            out.append(_WRITTEN[text[at]])
            at += 1
        elif text[at] == "n":
            out.append(None)
            at += 1
        else:
            colon = text.index(":", at)
            end = colon + 1 + int(text[at + 1 : colon])
            value = text[colon + 1 : end]
            out.append(SAME if value == SAME_TEXT else loads(value))
            at = end
    return out


def _reason(exc: Exception) -> str:
    """The server's own words, on one line (libpq's message repeats per address tried)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(dict.fromkeys(lines)) or type(exc).__name__


class PostgresStore:
    blocking = True

    def __init__(
        self,
        dsn: str,
        *,
        prefix: str = "",
        min_size: int = 1,
        max_size: int = 10,
        timeout_s: float = 10.0,
    ) -> None:
        self._target = where = target(dsn)
        self.dsn = where.shown  # the password [redacted]: safe to print
        self.prefix = prefix
        connect_timeout = max(1, int(timeout_s))
        failure: StoreError | None = None
        try:
            # one direct connection first: a wrong role, password or database fails here at
            # once with the server's reason, instead of the pool retrying (and logging) until
            # its timeout and then reporting only that it timed out
            psycopg.connect(where.connect, connect_timeout=connect_timeout, autocommit=True).close()
        except psycopg.Error as exc:
            failure = StoreError(f"PostgreSQL store: {where.hide(_reason(exc))}")
        if failure is None:
            try:
                self._pool = ConnectionPool(
                    where.connect,
                    min_size=min_size,
                    max_size=max_size,
                    timeout=timeout_s,
                    open=True,
                    kwargs={"autocommit": True, "connect_timeout": connect_timeout},
                )
                with self._pool.connection() as conn, conn.transaction():
                    # one creator at a time: concurrent CREATE TABLE IF NOT EXISTS can collide
                    conn.execute("SELECT pg_advisory_xact_lock(727274)")
                    conn.execute(_SCHEMA)
            except Exception as exc:  # a driver error, the pool's own timeout error
                failure = self._failure(exc)
        if failure is not None:
            raise failure  # outside the handler: the driver's error is not chained to it

    def __repr__(self) -> str:
        return f"PostgresStore({self.dsn!r}, prefix={self.prefix!r})"

    def _failure(self, exc: Exception) -> StoreError:
        """A driver error as a ``StoreError`` whose message shows no password."""
        return StoreError(f"PostgreSQL store: {type(exc).__name__}: {self._target.hide(str(exc))}")

    def _run(self, sql: str, params: tuple[Any, ...] | dict[str, Any]) -> tuple[int, Any]:
        try:
            with self._pool.connection() as conn:
                cur = conn.execute(sql, params)
                row = cur.fetchone() if cur.description is not None else None
                return cur.rowcount, row
        except Exception as exc:
            failure = self._failure(exc)
        raise failure  # not chained: a traceback would print the driver's message as it is

    def get(self, key: str) -> Any | None:
        _, row = self._run(
            f"SELECT value FROM {_TABLE} WHERE key = %s AND {_LIVE}",
            (self.prefix + key,),
        )
        return loads(row[0]) if row else None

    def set(self, key: str, value: Any, ttl_s: float | None = None) -> None:
        self._run(
            f"INSERT INTO {_TABLE} (key, value, gc_at) VALUES (%s, %s, {_GC}) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, gc_at = EXCLUDED.gc_at",
            (self.prefix + key, dumps(value), ttl_s),
        )

    def add(self, key: str, value: Any, ttl_s: float | None = None) -> bool:
        count, _ = self._run(
            f"INSERT INTO {_TABLE} (key, value, gc_at) VALUES (%s, %s, {_GC}) "
            f"ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, gc_at = EXCLUDED.gc_at "
            f"WHERE {_TABLE}.gc_at IS NOT NULL AND {_TABLE}.gc_at <= {_NOW}",
            (self.prefix + key, dumps(value), ttl_s),
        )
        return count == 1

    def swap(self, key: str, expected: Any, value: Any | None, ttl_s: float | None = None) -> bool:
        same, old = _match(expected)
        if value is None:
            count, _ = self._run(
                f"DELETE FROM {_TABLE} WHERE key = %s AND {same} AND {_LIVE}",
                (self.prefix + key, old),
            )
        else:
            count, _ = self._run(
                f"UPDATE {_TABLE} SET value = %s, gc_at = {_GC} "
                f"WHERE key = %s AND {same} AND {_LIVE}",
                (dumps(value), ttl_s, self.prefix + key, old),
            )
        return count == 1

    def batch(self, ops: Sequence[Op]) -> list[Any]:
        """Several operations in one statement (one round trip, one transaction): each a
        data-modifying ``WITH`` query, its condition on the one before it. They all see
        the table as it was before the statement (see ``_base.batch``). Each key is sent
        once, and the results come back in one text column (``_results``). The text
        holds no value, each one a parameter (it changes with the batch's shape): psycopg
        prepares it after a few uses, and the server reuses its plan."""
        if not ops:
            return []
        parts: list[str] = []
        outs: list[str] = []  # each operation's result, as text
        params: dict[str, Any] = {}
        names = [self.prefix + op.key for op in ops]
        runs = _runs(ops, names)
        keys = _keys(
            [k for k, op in zip(names, ops, strict=True) if op.name != "delete"]
            + [head for head, _ in runs.values()],
            params,
        )
        ttls: dict[float | None, str] = {}
        done = "FALSE"  # whether the operation before succeeded
        for i, op in enumerate(ops):
            if op.name == "delete" and i not in runs:
                continue  # in the run before it: done with it, whenever it is done
            cond = "TRUE" if op.only_if is None else (done if op.only_if else f"NOT {done}")
            if op.name == "delete":
                head, tails = runs[i]
                using, key, result = "", keys[head], f"CASE WHEN {cond} THEN '1' ELSE '-' END"
                if len(tails) > 1:  # one key: its plan is kept (an array's is guessed 10 keys)
                    params[f"d{i}"], d = tails, f"%(d{i})s::text[]"
                    using, key = f" USING unnest({d}) AS d(tail)", f"{key} || d.tail"
                    result = f"repeat({result}, cardinality({d}))"
                parts.append(
                    f"r{i} AS (DELETE FROM {_TABLE}{using} WHERE key = {key} AND {cond} RETURNING 1)"
                )
                done = cond  # done when performed, whether or not the keys were there
                outs.append(result)
                continue
            key = keys[names[i]]
            if op.name == "get":
                shown = "value"
                if op.expected is not None:  # '=' when the value is still the expected one
                    same, params[f"e{i}"] = _match(op.expected, f"e{i}")
                    shown = f"CASE WHEN {same} THEN '{SAME_TEXT}' ELSE value END"
                parts.append(
                    f"r{i} AS (SELECT {shown} AS value FROM {_TABLE} "
                    f"WHERE key = {key} AND {_LIVE} AND {cond})"
                )
                got = f"(SELECT 'v' || length(value) || ':' || value FROM r{i})"
                outs.append(f"COALESCE({got}, 'n')")
                done = "FALSE"
                continue
            t = ttls.setdefault(op.ttl_s, f"t{len(ttls)}")  # each time to live sent once
            gc = f"{_NOW} + %({t})s"
            if op.name in ("set", "add"):
                taken = (
                    ""
                    if op.name == "set"
                    else f" WHERE {_TABLE}.gc_at IS NOT NULL AND {_TABLE}.gc_at <= {_NOW}"
                )
                parts.append(
                    f"r{i} AS (INSERT INTO {_TABLE} (key, value, gc_at) "
                    f"SELECT {key}, %(v{i})s, {gc} WHERE {cond} ON CONFLICT (key) DO UPDATE "
                    f"SET value = EXCLUDED.value, gc_at = EXCLUDED.gc_at{taken} RETURNING 1)"
                )
                params[f"v{i}"], params[t] = dumps(op.value), op.ttl_s
            elif op.name == "swap" and op.value is None:
                same, params[f"e{i}"] = _match(op.expected, f"e{i}")
                parts.append(
                    f"r{i} AS (DELETE FROM {_TABLE} WHERE key = {key} AND {same} "
                    f"AND {_LIVE} AND {cond} RETURNING 1)"
                )
            elif op.name == "swap":
                same, params[f"e{i}"] = _match(op.expected, f"e{i}")
                parts.append(
                    f"r{i} AS (UPDATE {_TABLE} SET value = {_new(op, i, params)}, "
                    f"gc_at = {gc} WHERE key = {key} AND {same} AND {_LIVE} AND {cond} "
                    "RETURNING 1)"
                )
                params[t] = op.ttl_s
            else:
                raise StoreError(f"unknown store operation {op.name!r}")
            done = f"EXISTS (SELECT 1 FROM r{i})"
            outs.append(
                f"CASE WHEN {cond} THEN CASE WHEN {done} THEN '1' ELSE '0' END ELSE '-' END"
            )
        columns = [" || ".join(outs) + " r"]
        durable = [op.durable for op in ops if op.name != "get"]
        if durable and not any(durable):
            # no write here needs its commit to wait for the WAL flush (a session record's,
            # ``Op.durable``): set for this statement's transaction only, read at its commit
            columns.append("set_config('synchronous_commit', 'off', true)")
        sql = f"WITH {', '.join(parts)} SELECT {', '.join(columns)}"
        _, row = self._run(sql, params)
        return _results(ops, row[0])

    def delete(self, key: str) -> None:
        self._run(f"DELETE FROM {_TABLE} WHERE key = %s", (self.prefix + key,))

    def purge(self) -> int:
        count, _ = self._run(
            f"DELETE FROM {_TABLE} WHERE gc_at IS NOT NULL AND gc_at <= {_NOW}", ()
        )
        return count

    def close(self) -> None:
        self._pool.close()
