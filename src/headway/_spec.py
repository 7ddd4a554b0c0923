"""Tool specs (semantics §1): what a tool does to the world, and what follows from it."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypedDict

from ._fingerprint import resolve
from ._redact import DEFAULT_NAMES
from .errors import ConfigError

Effect = Literal["read", "write"]
_NO_FALLBACK: Any = object()


class ToolOptions(TypedDict, total=False):
    """The keyword options of ``Governor.register`` and ``Governor.tool``: the fields of
    ``ToolSpec`` (typed, so editors and mypy catch a misspelt option), plus
    ``annotations`` (MCP tool annotations) and ``replace`` (re-register a name). Functions
    are typed loosely (``Callable[..., X]``): a reconcile taking ``dict`` is as good as one
    taking ``Mapping``."""

    effect: Effect | Callable[..., str]
    idempotent: bool
    deterministic: bool
    ttl: float | None
    validate: Callable[..., Any] | str | None
    version: str
    scope: Literal["session", "global"]
    invalidates: Sequence[str] | str | None
    resources: Callable[..., Any] | Sequence[str] | str | None
    poll: bool
    max_polls: int | None
    max_wait_s: float | None
    progress: Callable[..., bool] | None
    progress_fields: Sequence[str] | str | None
    no_progress_limit: int | None
    ignore_fields: Sequence[str] | str
    targets: Sequence[str] | str
    timeout: float | None
    retry: Any
    breaker: Any
    fallback: Any
    reconcile: Callable[..., Any] | None
    classify: Any
    failed_final: bool
    redact: Sequence[str] | str
    redact_defaults: bool
    is_error: Callable[..., bool] | None
    annotations: Mapping[str, Any] | None
    replace: bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """Everything headway knows about one tool. The field names are the TOML keys."""

    name: str
    fn: Callable[..., Any] | None  # None: the framework runs the tool (``call(..., run=)``)
    effect: Effect | Callable[[Mapping[str, Any]], str] = "write"
    idempotent: bool = False
    deterministic: bool = False
    ttl: float | None = None
    # a fingerprint of what the read reads (``_fingerprint``): a function of the arguments,
    # or a built-in's name ("file:path"); an entry is served while it is unchanged
    validate: Callable[[Mapping[str, Any]], Any] | str | None = None
    version: str = ""
    scope: Literal["session", "global"] = "session"
    invalidates: tuple[str, ...] | None = None
    resources: Callable[[Mapping[str, Any]], Any] | tuple[str, ...] | None = None
    poll: bool = False
    max_polls: int | None = None
    max_wait_s: float | None = None
    progress: Callable[[Any, Any], bool] | None = None
    progress_fields: tuple[str, ...] | None = None
    no_progress_limit: int | None = None
    ignore_fields: tuple[str, ...] = ()
    # arguments that number an element of the page the agent saw (a browser's ``index``):
    # read as the element the page shows under that number (``_recurrence``)
    targets: tuple[str, ...] = ("index",)
    timeout: float | None = 30.0
    retry: Any = None
    breaker: Any = None
    fallback: Any = _NO_FALLBACK
    reconcile: Callable[[str, Mapping[str, Any]], Any] | None = None
    classify: Any = None
    failed_final: bool = False
    redact: tuple[str, ...] = ()
    redact_defaults: bool = True
    is_error: Callable[[Any], bool] | None = None  # None: the Governor's predicate decides
    is_async: bool = False
    #: the argument names the audit masks: the defaults (unless turned off) plus ``redact``
    redact_names: tuple[str, ...] = dataclasses.field(default=(), init=False)
    #: the function ``validate`` names (None: no fingerprint)
    fingerprint: Callable[[Mapping[str, Any]], Any] | None = dataclasses.field(
        default=None, init=False
    )

    def __post_init__(self) -> None:
        if self.fn is not None and not callable(self.fn):
            raise ConfigError(f"tool {self.name!r}: fn must be callable or None")
        if self.is_error is not None and not callable(self.is_error):
            raise ConfigError(f"tool {self.name!r}: is_error must be a function of the result")
        if not callable(self.effect) and self.effect not in ("read", "write"):
            raise ConfigError(
                f"tool {self.name!r}: effect must be 'read', 'write' or a function, "
                f"not {self.effect!r}"
            )
        if self.effect == "write":  # a write cannot also be what only a read can be
            for option, value in (
                ("deterministic", self.deterministic),
                ("poll", self.poll),
                ("ttl", self.ttl),
                ("validate", self.validate),
                ("scope", self.scope != "session"),
            ):
                if value:
                    raise ConfigError(
                        f"tool {self.name!r}: {option}={value!r} applies to reads only, and "
                        "this tool is a write (effect='write', the default): set effect='read' "
                        f"or drop {option}"
                    )
        if self.ttl is not None and self.ttl < 0:
            raise ConfigError(f"tool {self.name!r}: ttl must be >= 0")
        if self.scope not in ("session", "global"):
            raise ConfigError(f"tool {self.name!r}: scope must be 'session' or 'global'")
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError(f"tool {self.name!r}: timeout must be > 0 or None")
        for name in ("max_polls", "no_progress_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"tool {self.name!r}: {name} must be >= 1")
        fn = self.fn
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(fn))
        defaults = DEFAULT_NAMES if self.redact_defaults else ()
        object.__setattr__(self, "redact_names", (*defaults, *self.redact))
        object.__setattr__(self, "fingerprint", resolve(self.name, self.validate))

    @property
    def has_fallback(self) -> bool:
        return self.fallback is not _NO_FALLBACK

    def effect_for(self, args: Mapping[str, Any]) -> Effect:
        """The effect of this call; a classifier that fails or answers oddly means write."""
        if not callable(self.effect):
            return self.effect
        try:
            answer = self.effect(args)
        except Exception:
            return "write"
        return "read" if answer == "read" else "write"

    def cacheable(self) -> bool:
        """Read + deterministic (exact cache), read + ttl > 0 (TTL cache), or a read with
        a ``validate`` fingerprint (served while the fingerprint is unchanged)."""
        return (
            self.deterministic
            or (self.ttl is not None and self.ttl > 0)
            or self.validate is not None
        )


def error_result(value: Any) -> bool:
    """The default error-result predicate, for tools that answer a failure instead of
    raising: a string that starts with ``Error:`` (any case); a mapping whose ``isError`` /
    ``is_error`` flag is true, or else whose ``error`` field is set; an object whose
    ``isError`` / ``is_error`` attribute is true or whose ``status`` is ``"error"`` (an MCP
    ``CallToolResult``, a LangChain ``ToolMessage``)."""
    if type(value) is not dict:  # a dict, the commonest result, skips the ABC's check
        if isinstance(value, str):
            return value[:6].lower() == "error:"
        if value is None or isinstance(value, _NEVER_ERRORS):
            return False
        if not isinstance(value, Mapping):
            flag = getattr(value, "isError", getattr(value, "is_error", None))
            if flag is not None:
                return flag is True
            return getattr(value, "status", None) == "error"
    flag = value.get("isError", value.get("is_error"))
    return flag is True if flag is not None else bool(value.get("error"))


_NEVER_ERRORS = (int, float, list, tuple)  # a tuple: ``int | float`` builds a union per call


def declares_read(table: Mapping[str, Any]) -> bool:
    """An operator's table that gives a tool what only a read can have (a ttl, an exact
    cache, a ``validate`` fingerprint, polling, a global scope) and no effect declares it a read, whatever the upstream's
    annotations say: the operator's file wins, and it would be a contradiction otherwise."""
    if "effect" in table:
        return False
    return bool(
        table.get("ttl") or table.get("deterministic") or table.get("poll") or table.get("validate")
    ) or (table.get("scope") == "global")


def make_spec(name: str, fn: Callable[..., Any] | None, **options: Any) -> ToolSpec:
    """Build a spec from keyword options, turning lists into tuples and checking names."""
    fields = {f.name for f in dataclasses.fields(ToolSpec)} - {
        "name",
        "fn",
        "is_async",
        "redact_names",
        "fingerprint",
    }
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ConfigError(f"tool {name!r}: unknown option(s) {', '.join(unknown)}")
    for key in (
        "invalidates",
        "progress_fields",
        "ignore_fields",
        "redact",
        "resources",
        "targets",
    ):
        value = options.get(key)
        if isinstance(value, str):
            options[key] = (value,)
        elif isinstance(value, Sequence):
            options[key] = tuple(value)
    return ToolSpec(name=name, fn=fn, **options)


def _hint(annotations: Mapping[str, Any], camel: str, snake: str) -> bool | None:
    value = annotations.get(camel, annotations.get(snake))
    return None if value is None else bool(value)


def options_from_mcp(annotations: Mapping[str, Any] | None) -> dict[str, Any]:
    """Spec options implied by MCP tool annotations (camelCase or snake_case hints).

    readOnlyHint -> a read, never cached (neither deterministic nor a TTL) whatever
    openWorldHint says: a closed world (a file system, a git repository, a clock) still
    changes under other writers, and no annotation says a result never changes; exact and
    TTL caching are the operator's declaration. idempotentHint on a write -> idempotent.
    Annotations come from a possibly untrusted server: the caller merges operator options
    over these.
    """
    annotations = annotations or {}
    if _hint(annotations, "readOnlyHint", "read_only_hint"):
        return {"effect": "read"}
    return {
        "effect": "write",
        "idempotent": bool(_hint(annotations, "idempotentHint", "idempotent_hint")),
    }
