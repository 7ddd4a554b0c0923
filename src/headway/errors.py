"""headway's exceptions.

Errors (something is wrong with the input, the configuration or a store)::

    HeadwayError(Exception)
    ├── ConfigError(HeadwayError, ValueError)     a tool spec or config file is invalid
    ├── ArgumentError(HeadwayError, ValueError)   arguments that cannot be canonicalised
    ├── KeyReuseError(HeadwayError, ValueError)   one idempotency key, different arguments
    ├── StoreError(HeadwayError, ConnectionError) a store cannot be reached or answered badly
    └── ClosedError(HeadwayError, RuntimeError)   a call on a closed session or Governor

Verdicts (the session is over; each carries a JSON-serialisable ``diagnostic``)::

    Stop(Exception)
    ├── LoopDetected(Stop)    no progress for K steps (semantics §4.2)
    └── BudgetExceeded(Stop)  a budget ran out (semantics §4.3)

A call raises only ``ArgumentError``, ``KeyReuseError`` and ``Stop`` (and ``ClosedError``
when made on a closed session or Governor); everything else a tool does becomes an outcome.
"""

from __future__ import annotations

import json
from typing import Any

from ._redact import scrub


class HeadwayError(Exception):
    """Base of headway's errors. Messages never show credentials (a URL's password, a
    ``password=``, a token): they are redacted when the error is made."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(scrub(a) if isinstance(a, str) else a for a in args))


class ConfigError(HeadwayError, ValueError):
    """A tool spec, a policy or a config file is invalid."""


class ArgumentError(HeadwayError, ValueError):
    """Arguments that cannot be canonicalised; ``path`` names the offending value."""

    def __init__(self, message: str, path: str = "args") -> None:
        super().__init__(f"{message} (at {path})")
        self.path = path


class KeyReuseError(HeadwayError, ValueError):
    """The same idempotency key was used with different arguments; nothing ran."""

    def __init__(self, key: str, tool: str) -> None:
        super().__init__(
            f"idempotency key {key!r} was first used for {tool!r} with other arguments; "
            "use a new key for a new operation"
        )
        self.key = key
        self.tool = tool


class StoreError(HeadwayError, ConnectionError):
    """A store could not be reached or failed an operation."""


class ClosedError(HeadwayError, RuntimeError):
    """A call on a session (or a Governor) that was closed: a bug in the caller, raised
    before anything runs. Open a new session handle with ``governor.session(run_id)``."""


class Stop(Exception):  # noqa: N818 - a verdict, not an error: "Stop" reads as what happened
    """The session is stopped; ``diagnostic`` says why, as a JSON-serialisable dict."""

    def __init__(self, diagnostic: dict[str, Any]) -> None:
        super().__init__(json.dumps(diagnostic, sort_keys=True, default=str))
        self.diagnostic = diagnostic


class LoopDetected(Stop):
    """The session made no progress for its no-progress limit."""


class BudgetExceeded(Stop):
    """A budget of the session ran out."""
