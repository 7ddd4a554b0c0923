"""TOML configuration: the same field names as in Python (style principle 4).

    [governor]
    store = "sqlite:///headway.db"      # any open_store() URL
    no_progress_limit = 6
    enforce = true

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

    [tools.read_file]
    validate = "file:path"              # cached while the file at args["path"] is unchanged

Options in the file are the operator's: they win over what code passes to ``register``
(and over MCP annotations). Python-only fields (``progress``, ``reconcile``, ``classify``,
an ``effect`` function) stay in code.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._fingerprint import resolve as resolve_validate
from ._spec import ToolSpec
from .breaker import Breaker
from .budgets import Budgets
from .errors import ConfigError
from .retry import Retry

_PYTHON_ONLY = {
    "fn",
    "name",
    "progress",
    "reconcile",
    "classify",
    "is_async",
    "redact_names",
    "fingerprint",
}
_TOOL_FIELDS = {f.name for f in dataclasses.fields(ToolSpec)} - _PYTHON_ONLY
_GOVERNOR_FIELDS = {
    "store",
    "enforce",
    "no_progress_limit",
    "window",
    "namespace",
    "task_limits",
    "similarity",
    "ignore_fields",
    "max_cached_bytes",
    "cache_gc_s",
    "idempotency_ttl_s",
    "session_ttl_s",
    "share_sessions",
    "in_progress_wait_s",
    "lease_s",
    "deadline_s",
    "store_failure",
    "agent",
    "budgets",
    "secret",
    "workspace",
    "idle_turn_s",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    governor: dict[str, Any]
    tools: dict[str, dict[str, Any]]


def _build(cls: type[Any], table: Any, where: str) -> Any:
    if isinstance(table, bool) and cls is Breaker:
        return table  # breaker = false turns it off
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - names)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}"
        )
    try:
        return cls(**table)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def parse(data: Mapping[str, Any], source: str = "config") -> Config:
    unknown = sorted(set(data) - {"governor", "tools"})
    if unknown:
        raise ConfigError(
            f"{source}: unknown table(s) {', '.join(unknown)} (expected [governor], [tools.NAME])"
        )
    governor = dict(data.get("governor", {}))
    bad = sorted(set(governor) - _GOVERNOR_FIELDS)
    if bad:
        raise ConfigError(f"{source} [governor]: unknown key(s) {', '.join(bad)}")
    if "budgets" in governor:
        governor["budgets"] = _build(Budgets, governor["budgets"], f"{source} [governor.budgets]")
    tools: dict[str, dict[str, Any]] = {}
    for name, table in dict(data.get("tools", {})).items():
        where = f"{source} [tools.{name}]"
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where} must be a table")
        options = dict(table)
        bad = sorted(set(options) - _TOOL_FIELDS)
        if bad:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(bad)}")
        if "validate" in options:
            _check_validate(options["validate"], where)
        if "retry" in options:
            options["retry"] = _build(Retry, options["retry"], f"{where}.retry")
        if "breaker" in options:
            options["breaker"] = _build(Breaker, options["breaker"], f"{where}.breaker")
        tools[name] = options
    return Config(governor, tools)


def _check_validate(value: Any, where: str) -> None:
    """``validate`` in a file names a built-in: ``"file:ARGUMENT"`` (a function is
    Python's)."""
    if not isinstance(value, str):
        raise ConfigError(
            f"{where}: validate must name a built-in fingerprint such as 'file:path' "
            f"(the argument that holds the path), not {type(value).__name__}"
        )
    try:
        resolve_validate(where, value)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace(f"tool {where!r}", where, 1)) from None


def load_config(path: str | Path) -> Config:
    """Read a headway TOML file (see the module docstring); ConfigError names what is wrong."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p} is not valid TOML: {exc}") from exc
    return parse(data, str(p))
