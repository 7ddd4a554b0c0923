"""``GovernorBase``: a Governor's construction and its tools.

The options are checked, the store wrapped (record integrity), the policies and the
registries a call shares made, and the ``Context`` the pipeline sees built from them
once; tools are registered (``register``, ``tool``, declared for a runner that brings
them). ``_session.Governor`` adds what uses all this: sessions, their audit, closing.
The options are documented on ``Governor``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar, Unpack, overload

from ._context import Context
from ._effects import Flights
from ._epochs import Epochs
from ._reading import HELD
from ._recent import Recent
from ._spec import ToolOptions, ToolSpec, error_result, make_spec, options_from_mcp
from ._state import SessionState
from .audit import AuditSink, MemoryAudit
from .breaker import Breaker
from .budgets import Budgets
from .detectors import Detector
from .errors import ArgumentError, ConfigError
from .idempotency import Writes
from .retry import default_rng
from .similarity import DEFAULT_NORMALIZERS, Normalizer
from .stores import MemoryStore, Store
from .stores._base import check_key
from .stores._signed import SignedStore

F = TypeVar("F", bound=Callable[..., Any])


# the options every call reads from the Context (see GovernorBase.__setattr__)
_CONTEXT_FIELDS = frozenset(f.name for f in dataclasses.fields(Context))


def _wall_clock() -> float:
    return time.time()  # looked up on each call, so a patched time.time is honoured


def _monotonic() -> float:
    return time.monotonic()  # looked up on each call too


class GovernorBase:
    """A Governor's options, store, policies, registries and tools (``Governor``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        # every call reads these from the Context built once at construction: a later
        # assignment would change the attribute and nothing else, silently
        if name in _CONTEXT_FIELDS and "context" in self.__dict__:
            raise AttributeError(
                f"{name} is read by every call from the options given at construction: "
                f"pass {name}= to Governor(...) instead of setting it afterwards"
            )
        object.__setattr__(self, name, value)

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
        self.epochs: dict[str, Epochs] = {}
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
        self.held: Recent[str] = Recent(HELD)
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
    def from_config(cls, path: str | Path, **overrides: Any) -> Self:
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
