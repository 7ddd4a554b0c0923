"""``Governor`` (tools, store, policies) and ``Session`` (one agent run).

``Session.call`` and ``Session.acall`` are thin drivers over the same I/O-free pipeline
(``_pipeline.plan``): there is one decision path, not a sync and an async copy.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, Unpack, overload

from . import _epochs, _pipeline, _reading, _shared
from ._canonical import canonical_json
from ._context import Context
from ._effects import Flights, drive_async, drive_sync
from ._recent import Recent
from ._redact import DEFAULT_NAMES, scrub
from ._spec import ToolOptions, ToolSpec, error_result, make_spec, options_from_mcp
from ._state import SessionState
from ._steps import check_stop, reach
from .audit import AuditSink, MemoryAudit, refusal_record
from .breaker import Breaker
from .budgets import Budgets, diagnostic
from .detectors import Detector, Monitor
from .errors import (
    ArgumentError,
    BudgetExceeded,
    ClosedError,
    ConfigError,
    KeyReuseError,
    LoopDetected,
    Stop,
)
from .idempotency import Writes
from .outcome import Outcome
from .retry import default_rng
from .similarity import DEFAULT_NORMALIZERS, Normalizer
from .stores import MemoryStore, Store
from .stores._base import check_key
from .stores._signed import SignedStore

F = TypeVar("F", bound=Callable[..., Any])


def _wall_clock() -> float:
    return time.time()  # looked up on each call, so a patched time.time is honoured


def _monotonic() -> float:
    return time.monotonic()  # looked up on each call too


log = logging.getLogger("headway")


class Governor:
    """Holds the tools, the store and the policies; opens sessions.

    ``enforce=False`` is shadow mode (semantics §9): every call runs as if headway were
    absent, and the audit records what headway would have done.

    ``secret`` (default: the ``HEADWAY_SECRET`` environment variable) turns record
    integrity on: every stored record carries an HMAC over its key and content, and a
    record that fails the check is treated as absent (an idempotency record: as a store
    fault, so keyed writes fail closed).

    ``workspace`` names a set of governors sharing one store (the MCP servers of one desktop
    client, each behind its own proxy; the workers of one deployment): a write through any
    of them makes the session-scoped cached reads of all of them stale.

    ``idle_turn_s`` is for clients that mark no user turns (``headway proxy``: a stdio
    session lives as long as the desktop client): a call after this long a pause, with
    nothing in flight, starts a new user turn and lifts a no-progress stop. In code, call
    ``session.user_turn()`` instead.

    With a store other processes share (SQLite, Redis, PostgreSQL), a session's state lives
    in the store: every worker that opens ``session(run_id)`` continues the same run
    (``share_sessions=False`` keeps it in this process, as with ``MemoryStore``). Its record
    expires ``session_ttl_s`` after the run's last call.
    """

    def __init__(
        self,
        store: Store | None = None,
        *,
        enforce: bool = True,
        no_progress_limit: int = 6,
        window: int = 32,
        namespace: str = "default",
        task_limits: Mapping[str, int] | None = None,
        normalizers: Sequence[Normalizer] = DEFAULT_NORMALIZERS,
        similarity: float = 0.75,
        detectors: Sequence[Detector] = (),
        ignore_fields: Sequence[str] = (),
        audit: Sequence[AuditSink] | None = None,
        max_cached_bytes: int = 1_000_000,
        cache_gc_s: float = 86_400.0,
        idempotency_ttl_s: float = 86_400.0,
        session_ttl_s: float = 86_400.0,
        share_sessions: bool = True,
        in_progress_wait_s: float = 5.0,
        lease_s: float | None = None,
        deadline_s: float | None = 120.0,
        store_failure: str = "closed",
        breaker: Breaker | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Any] | None = None,
        rng: Callable[[], float] = default_rng,
        on_retry: Callable[[dict[str, Any]], None] | None = None,
        agent: str | None = None,
        is_error: Callable[[Any], bool] | None = error_result,
        secret: str | None = None,
        workspace: str | None = None,
        idle_turn_s: float | None = 120.0,
    ) -> None:
        if secret is None:
            secret = os.environ.get("HEADWAY_SECRET") or None
        elif not isinstance(secret, str) or not secret:
            raise ConfigError("secret must be a non-empty string (or None: no record integrity)")
        if no_progress_limit < 1 or window < 2:
            raise ConfigError("no_progress_limit must be >= 1 and window >= 2")
        if not 0 < similarity <= 1:
            raise ConfigError("similarity must be in (0, 1] (5-gram Jaccard threshold)")
        if not (isinstance(session_ttl_s, int | float) and session_ttl_s > 0):
            raise ConfigError("session_ttl_s must be a number of seconds > 0")
        if workspace is not None and (not isinstance(workspace, str) or not workspace.strip()):
            raise ConfigError("workspace must be a non-empty name (or None: no workspace)")
        for label, name in (("namespace", namespace), ("workspace", workspace)):
            if not isinstance(name, str):
                continue
            try:  # part of every stored key: what no store can hold is refused here
                check_key(label, name)
            except ArgumentError as exc:
                raise ConfigError(str(exc)) from None
        if idle_turn_s is not None and (
            isinstance(idle_turn_s, bool)
            or not isinstance(idle_turn_s, int | float)
            or idle_turn_s < 0
        ):
            raise ConfigError(f"idle_turn_s must be a number of seconds >= 0, not {idle_turn_s!r}")
        if store_failure not in ("closed", "open"):
            raise ConfigError("store_failure must be 'closed' (keyed writes refused) or 'open'")
        self.store: Store = store if store is not None else MemoryStore()
        if secret is not None:  # record integrity: every stored value carries an HMAC
            self.store = SignedStore(self.store, secret)
        self.enforce = enforce
        self.no_progress_limit = no_progress_limit
        self.window = window
        self.namespace = namespace
        self.workspace = workspace
        # the workspace's write epochs (``_epochs``): its record, as this process knows it
        self.epochs: dict[str, _epochs.Epochs] = {}
        self.task_limits = dict(task_limits or {})
        self.normalizers = tuple(normalizers)
        self.similarity = similarity
        self.detectors = tuple(detectors)
        self.ignore_fields = tuple(ignore_fields)
        self.audit = MemoryAudit() if audit is None else None
        self.sinks: tuple[AuditSink, ...] = (
            (self.audit,) if self.audit is not None else tuple(audit or ())
        )
        self.sink_modes = tuple((s, bool(getattr(s, "lazy", False))) for s in self.sinks)
        self.max_cached_bytes = max_cached_bytes
        self.cache_gc_s = cache_gc_s
        self.idempotency_ttl_s = idempotency_ttl_s
        self.session_ttl_s = float(session_ttl_s)  # a shared session's record, after its last call
        self.share_sessions = bool(share_sessions)
        self.in_progress_wait_s = in_progress_wait_s
        self.lease_s = lease_s
        self.deadline_s = deadline_s  # every call's total time: all attempts and retry waits
        self.store_failure = store_failure
        self.default_breaker = breaker or Breaker()
        # a client that marks no user turns (an MCP proxy's): this idle gap is one (0: none)
        self.idle_turn_s = float(idle_turn_s or 0)
        self.clock = clock or _wall_clock  # timestamps: audit records, stored records
        self.timer = clock or _monotonic  # durations in this process (never steps back)
        self.sleep = sleep
        self.rng = rng
        self.on_retry = on_retry
        self.agent = agent
        self.is_error = is_error
        self.tool_config: dict[str, dict[str, Any]] = {}
        self.flights = Flights()
        # the cache entries this worker stored or served for its shared sessions' reads
        self.held: Recent[str] = Recent(_reading.HELD)
        self.writes = Writes()
        self.breakers: dict[str, dict[str, Any]] = {}
        self.default_budgets: Budgets | None = None
        self.breaker_lock = threading.Lock()
        self._specs: dict[str, ToolSpec] = {}
        # names whose spec headway declared itself (the default, MCP hints): not the
        # operator's choice, so a later register() replaces it without replace=True
        self._declared: set[str] = set()
        self._session_cached: set[str] = set()  # tools caching per session
        self._sessions: dict[str, SessionState] = {}
        self._sessions_lock = threading.Lock()
        self.closed = False
        self.context = Context(
            specs=self._specs,
            declare=self._declare,
            session_cached=self._session_cached,
            ignore_fields=self.ignore_fields,
            store=self.store,
            namespace=namespace,
            workspace=workspace,
            clock=self.clock,
            timer=self.timer,
            sleep=sleep,
            rng=rng,
            enforce=enforce,
            max_cached_bytes=max_cached_bytes,
            cache_gc_s=cache_gc_s,
            idempotency_ttl_s=idempotency_ttl_s,
            session_ttl_s=self.session_ttl_s,
            in_progress_wait_s=in_progress_wait_s,
            lease_s=lease_s,
            deadline_s=deadline_s,
            store_failure=store_failure,
            default_breaker=self.default_breaker,
            on_retry=on_retry,
            is_error=is_error,
            sinks=self.sinks,
            sink_modes=self.sink_modes,
            writes=self.writes,
            flights=self.flights,
            held=self.held,
            breakers=self.breakers,
            breaker_lock=self.breaker_lock,
        )

    @classmethod
    def from_config(cls, path: str | Path, **overrides: Any) -> Governor:
        """A Governor configured by a TOML file; ``register`` then applies each tool's table."""
        from .config import load_config
        from .stores import open_store

        config = load_config(path)
        options = {**config.governor, **overrides}
        store = options.pop("store", None)
        budgets = options.pop("budgets", None)
        gov = cls(open_store(store) if isinstance(store, str) else store, **options)
        gov.tool_config = config.tools
        gov.default_budgets = budgets
        return gov

    def breaker_stats(self, tool: str) -> dict[str, Any]:
        """The breaker's state as stored: ``state``, ``fails``, ``opens``, ``opened_at``..."""
        spec = self._specs.get(tool)
        b = spec.breaker if spec is not None and isinstance(spec.breaker, Breaker) else None
        b = b or self.default_breaker
        if b.shared:
            state = self.store.get(self.breaker_key(tool))
        else:
            with self.breaker_lock:
                state = self.breakers.get(tool)
        return (
            dict(state) if isinstance(state, dict) else {"state": "closed", "fails": 0, "opens": 0}
        )

    # -- tools ---------------------------------------------------------------------

    def register(
        self, name: str, fn: Callable[..., Any] | None, **options: Unpack[ToolOptions]
    ) -> ToolSpec:
        """Register ``fn`` as tool ``name`` (the options are the fields of semantics §1).

        ``fn=None`` declares a tool that something else runs (a framework, an MCP server):
        each call then passes its runner, ``session.call(name, args, run=...)``.
        ``annotations=`` takes MCP tool annotations; explicit options win over them.
        Registering a name again with a different spec needs ``replace=True`` (a second
        registration by mistake would silently change the first tool's behaviour).
        """
        given: dict[str, Any] = dict(options)
        annotations = given.pop("annotations", None)
        replace = bool(given.pop("replace", False))
        operator = {**given, **self.tool_config.get(name, {})}  # the operator's file wins
        merged = operator
        if annotations is not None:
            merged = {**options_from_mcp(annotations), **operator}
        spec = make_spec(name, fn, **merged)
        old = self._specs.get(name)
        if old is not None and old != spec and not replace and name not in self._declared:
            raise ConfigError(
                f"tool {name!r} is already registered; pass replace=True to replace it"
            )
        self._specs[name] = spec
        self._declared.discard(name)
        if spec.cacheable() and spec.scope == "session":
            self._session_cached.add(name)
        else:
            self._session_cached.discard(name)
        return spec

    def _declare(self, name: str, annotations: Mapping[str, Any] | None = None) -> ToolSpec:
        """The spec of a tool something else runs, when nobody registered one: from its MCP
        annotations, else the safe default (an unkeyed write). It stands until the tool is
        registered: ``register(name, ...)`` then replaces it, whenever it comes."""
        spec = self._specs.get(name)
        if spec is None:
            hints = None if annotations is None else dict(annotations)
            spec = self.register(name, None, annotations=hints)
            self._declared.add(name)
        return spec

    @overload
    def tool(self, fn: F, /) -> F: ...

    @overload
    def tool(
        self, fn: None = None, /, *, name: str | None = None, **options: Unpack[ToolOptions]
    ) -> Callable[[F], F]: ...

    def tool(
        self, fn: F | None = None, /, *, name: str | None = None, **options: Unpack[ToolOptions]
    ) -> F | Callable[[F], F]:
        """Decorator form of ``register``; the tool is named after the function by default."""

        def wrap(f: F) -> F:
            self.register(name or f.__name__, f, **options)
            return f

        return wrap(fn) if fn is not None else wrap

    def has_session_cache(self) -> bool:
        """Whether any registered tool keeps a session-scoped read cache."""
        return bool(self._session_cached)

    def spec(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def tools(self) -> list[str]:
        return list(self._specs)

    # -- sessions ------------------------------------------------------------------

    def session(
        self,
        run_id: str,
        *,
        budgets: Budgets | None = None,
        no_progress_limit: int | None = None,
        task_type: str | None = None,
        agent: str | None = None,
    ) -> Session:
        """Open (or resume, in this process) the session of one agent run."""
        if self.closed:
            raise ClosedError("this Governor is closed: create a new one to open sessions")
        if isinstance(run_id, str):
            check_key("run_id", run_id)  # before the store is asked to hold it
        with self._sessions_lock:
            st = self._sessions.get(run_id)
            if st is None:
                limit = no_progress_limit or self.task_limits.get(
                    task_type or "", self.no_progress_limit
                )

                def make_monitor(limit: int = limit) -> Monitor:
                    return Monitor(
                        limit=limit,
                        window=self.window,
                        normalizers=self.normalizers,
                        threshold=self.similarity,
                        detectors=self.detectors,
                    )

                monitor = make_monitor()
                st = SessionState.new(
                    run_id,
                    budgets=budgets or self.default_budgets or Budgets(),
                    monitor=monitor,
                    limit=limit,
                    now=self.clock(),
                    agent=agent or self.agent,
                    task_type=task_type,
                )
                st.make_monitor = make_monitor
                # a store other processes share holds the session: every worker continues it
                st.shared = self.store.blocking and self.share_sessions
                st.epochs = _epochs.of(self.context, st, self.epochs)
                if st.epochs is None:
                    self._load_generation(st)
                self._sessions[run_id] = st
                while len(self._sessions) > 10_000:  # forget the oldest sessions' in-process state
                    self._sessions.pop(next(iter(self._sessions)))
            elif no_progress_limit is not None:
                st.no_progress_limit = no_progress_limit
        if st.shared:
            _shared.fetch(self.context, st)  # other workers may have moved the run on
        return Session(self, st)

    def _load_generation(self, st: SessionState) -> None:
        try:
            saved = self.store.get(self.generation_key(st.session_id))
        except Exception:
            saved = None
        if not isinstance(saved, dict):
            # a session seen for the first time, or a store that lost it: start from an
            # epoch no earlier entry can have, so a resumed run never reads a stale cache
            saved = {"*": int(time.time() * 1000)}
            try:
                if not self.store.add(self.generation_key(st.session_id), saved, self.cache_gc_s):
                    saved = self.store.get(self.generation_key(st.session_id)) or saved
            except Exception as exc:  # reads fail open: the session works, just uncached
                log.warning(
                    "store unavailable at session start (%s): %s", st.session_id, scrub(str(exc))
                )
        try:
            epochs = {str(k): int(v) for k, v in saved.items()}
        except (TypeError, ValueError):  # a malformed record: start from a fresh epoch
            epochs = {"*": int(time.time() * 1000)}
        st.generation.update(epochs)

    def session_key(self, session_id: str) -> str:
        return self.context.session_key(session_id)

    def generation_key(self, session_id: str) -> str:
        return self.context.generation_key(session_id)

    def idempotency_record_key(self, key: str) -> str:
        return self.context.idempotency_record_key(key)

    def breaker_key(self, tool: str) -> str:
        return self.context.breaker_key(tool)

    def breaker_state(self, tool: str) -> str:
        """'closed', 'open' or 'half_open'."""
        return str(self.breaker_stats(tool)["state"])

    # -- audit ---------------------------------------------------------------------

    def audit_records(self, session_id: str) -> list[dict[str, Any]]:
        """The session's audit records, oldest first, from the first sink that can read."""
        for sink in self.sinks:
            records = getattr(sink, "records", None)
            if callable(records):
                result: list[dict[str, Any]] = records(session_id)
                return result
        return []

    def report_sink_error(self, sink: AuditSink, exc: Exception) -> None:
        self.context.report_sink_error(sink, exc)

    def close(self) -> None:
        """Close the store (its connections); calls on its sessions then raise ClosedError."""
        if not self.closed:
            self.closed = True
            self.store.close()

    def __enter__(self) -> Governor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Session:
    """One agent run. Use as a context manager (sync or async) or directly."""

    def __init__(self, gov: Governor, state: SessionState) -> None:
        self.governor = gov
        self._ctx = gov.context
        self._st = state
        self.closed = False

    def close(self) -> None:
        """Close this handle: further calls through it raise ``ClosedError``. The run's
        state stays (in the store and in the Governor): ``governor.session(run_id)`` resumes
        it. Leaving a ``with`` block closes the handle."""
        self.closed = True

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedError(
                f"session {self.id!r} is closed (its with block ended or close() was called): "
                f"open it again with governor.session({self.id!r})"
            )
        if self.governor.closed:
            raise ClosedError(f"session {self.id!r} cannot be used: its Governor is closed")

    @property
    def id(self) -> str:
        return self._st.session_id

    @property
    def steps(self) -> int:
        return self._st.steps

    @property
    def stopped(self) -> bool:
        return self._st.stop is not None

    def call(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        step_id: str | None = None,
        run: Callable[..., Any] | None = None,
        agent: str | None = None,
        call_id: str | None = None,
    ) -> Outcome:
        """Run one tool call through headway. Returns an Outcome; raises only
        ArgumentError, KeyReuseError and Stop (ClosedError on a closed session).

        ``agent`` names the agent making the call in a multi-agent run (a crew, a team):
        the session's cache and budgets are shared, while each agent has its own repeat,
        cycle and no-progress stream.

        ``run`` runs the tool for this call instead of the registered function (called with
        the arguments as keywords): how integrations govern tools their framework executes.
        A name never registered is then declared with the safe default (an unkeyed write).

        ``call_id`` is the framework's id of this tool call, when it has one: it goes to
        the audit record (``call_id``) and the span (``gen_ai.tool.call.id``), nowhere else.
        """
        if self.closed or self.governor.closed:
            self._check_open()
        ctx = self._ctx
        try:
            c = _pipeline.begin(
                ctx,
                self._st,
                name,
                {} if args is None else args,
                idempotency_key,
                step_id,
                run,
                agent,
                call_id,
            )
            if isinstance(c, Outcome):
                return c
            return drive_sync(_pipeline.plan(ctx, self._st, c), ctx.sleep or time.sleep)
        except (Stop, ArgumentError, KeyReuseError) as exc:
            self._refused(name, args, exc, agent, call_id)
            raise

    async def acall(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        step_id: str | None = None,
        run: Callable[..., Any] | None = None,
        agent: str | None = None,
        call_id: str | None = None,
    ) -> Outcome:
        """``call`` for async code: async tools are awaited, sync tools run in a thread."""
        if self.closed or self.governor.closed:
            self._check_open()
        ctx = self._ctx
        try:
            c = _pipeline.begin(
                ctx,
                self._st,
                name,
                {} if args is None else args,
                idempotency_key,
                step_id,
                run,
                agent,
                call_id,
            )
            if isinstance(c, Outcome):
                return c
            return await drive_async(_pipeline.plan(ctx, self._st, c), ctx.sleep or asyncio.sleep)
        except (Stop, ArgumentError, KeyReuseError) as exc:
            self._refused(name, args, exc, agent, call_id)
            raise

    def _refused(
        self, name: Any, args: Any, exc: Exception, agent: str | None, call_id: str | None
    ) -> None:
        """The audit record of a call that raised instead of taking a step (semantics §10:
        every call has one): a stopped session's, or one whose arguments or key cannot be
        used."""
        gov = self.governor
        try:
            canonical: str | None = canonical_json({} if args is None else args)
        except (ArgumentError, TypeError, ValueError, RecursionError):
            canonical = None
        spec = gov.spec(name) if isinstance(name, str) else None
        stopped = isinstance(exc, Stop)
        record = refusal_record(
            time=gov.clock(),
            session=self.id,
            tool=name,
            canonical=canonical,
            redact=spec.redact_names if spec is not None else DEFAULT_NAMES,
            status="stopped" if stopped else "refused",
            error=(
                ("loop_detected" if isinstance(exc, LoopDetected) else "budget_exceeded")
                if stopped
                else ("key_reuse" if isinstance(exc, KeyReuseError) else "bad_arguments")
            ),
            agent=agent or self._st.agent,
            call_id=call_id if isinstance(call_id, str) else None,
        )
        for sink in gov.sinks:
            try:
                sink.write(record)
            except Exception as sink_exc:  # an audit sink must never break a call
                gov.report_sink_error(sink, sink_exc)

    def record_turn(self, *, tokens: int = 0, cost: float = 0.0) -> None:
        """Report one model turn; the next call stops if a turn, token or cost budget ran out."""
        self._check_open()
        ctx, st = self._ctx, self._st
        check_stop(ctx, st)

        def count() -> None:
            reached = st.meter.count_turn(tokens, cost)
            if reached is not None:
                step = max(st.steps - 1, 0)
                reach(
                    ctx,
                    st,
                    BudgetExceeded(diagnostic(*reached, step, st.monitor.last_progress_step)),
                )

        if st.shared:
            _shared.run_now(ctx, st, count)
            return
        with st.lock:
            count()

    def user_turn(self) -> None:
        """A new user request: repeat and no-progress counters reset, budgets do not, and
        a no-progress stop is lifted (it ended the run the user asked for, not the
        conversation); a budget's stop stays."""
        st = self._st

        def reset() -> None:
            for monitor in st.monitors():
                monitor.user_turn()
            if isinstance(st.stop, LoopDetected):
                st.stop = None
            if (st.would_stop or {}).get("terminated_by") == "no_progress":
                st.would_stop = None  # shadow mode: the stop that would have been lifted

        if st.shared:
            _shared.run_now(self._ctx, st, reset)
            return
        with st.lock:
            reset()

    def audit_records(self) -> list[dict[str, Any]]:
        return self.governor.audit_records(self.id)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
