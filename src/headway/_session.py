"""``Governor`` (opens sessions) and ``Session`` (one agent run: its calls and turns).

The Governor's construction, its tools and the ``Context`` it hands every call are
``_governor``'s. ``Session.call`` and ``Session.acall`` are thin drivers over the same
I/O-free pipeline (``_pipeline.plan``): one decision path, not a sync and an async copy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import _epochs, _pipeline, _shared
from ._canonical import canonical_json
from ._effects import drive_async, drive_sync
from ._governor import GovernorBase
from ._redact import DEFAULT_NAMES, scrub
from ._state import SessionState
from ._steps import check_stop, reach
from .audit import AuditSink, refusal_record
from .budgets import Budgets, diagnostic
from .detectors import Monitor
from .errors import (
    ArgumentError,
    BudgetExceeded,
    ClosedError,
    KeyReuseError,
    LoopDetected,
    Stop,
)
from .outcome import Outcome
from .stores._base import check_key

log = logging.getLogger("headway")


class Governor(GovernorBase):
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
        if self.closed or self.governor.closed:  # inline: a frame less (bench/overhead.py)
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
