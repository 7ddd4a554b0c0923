"""headway: governs the tool calls of LLM agents.

Safe deduplication of reads, exactly-once writes per idempotency key, progress-based loop
control, budgets, timeouts, retries and circuit breakers, with an audit of every decision.
"""

from __future__ import annotations

from ._canonical import canonical_json
from ._session import Governor, Session
from ._spec import ToolSpec
from .audit import AuditSink, JSONLSink, LoggingSink, MemoryAudit, SQLiteAuditSink
from .breaker import Breaker
from .budgets import Budgets
from .config import load_config
from .detectors import Detector, Observation
from .errors import (
    ArgumentError,
    BudgetExceeded,
    ClosedError,
    ConfigError,
    HeadwayError,
    KeyReuseError,
    LoopDetected,
    Stop,
    StoreError,
)
from .outcome import Outcome, Status
from .retry import (
    BEFORE_EFFECT,
    NON_RETRYABLE,
    RETRYABLE,
    Classifier,
    Retry,
    RetryAfter,
    set_testing,
)
from .stores import MemoryStore, SQLiteStore, Store, open_store

__version__ = "0.1.0"

__all__ = [
    "BEFORE_EFFECT",
    "NON_RETRYABLE",
    "RETRYABLE",
    "ArgumentError",
    "AuditSink",
    "Breaker",
    "BudgetExceeded",
    "Budgets",
    "Classifier",
    "ClosedError",
    "ConfigError",
    "Detector",
    "Governor",
    "HeadwayError",
    "JSONLSink",
    "KeyReuseError",
    "LoggingSink",
    "LoopDetected",
    "MemoryAudit",
    "MemoryStore",
    "Observation",
    "Outcome",
    "Retry",
    "RetryAfter",
    "SQLiteAuditSink",
    "SQLiteStore",
    "Session",
    "Status",
    "Stop",
    "Store",
    "StoreError",
    "ToolSpec",
    "__version__",
    "canonical_json",
    "load_config",
    "open_store",
    "set_testing",
]
