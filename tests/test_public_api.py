import headway


def test_all_is_pinned_and_sorted() -> None:
    # isort-style, as ruff keeps it: CONSTANTS, then Classes, then functions
    style = sorted(headway.__all__, key=lambda n: (not n.isupper(), not n[:1].isupper(), n))
    assert headway.__all__ == style
    assert set(headway.__all__) == {
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
    }
    for name in headway.__all__:
        assert hasattr(headway, name), name


def test_exception_tree() -> None:
    for cls in (
        headway.ConfigError,
        headway.ArgumentError,
        headway.KeyReuseError,
        headway.StoreError,
        headway.ClosedError,
    ):
        assert issubclass(cls, headway.HeadwayError)
    assert issubclass(headway.ArgumentError, ValueError)
    assert issubclass(headway.StoreError, ConnectionError)
    assert issubclass(headway.ClosedError, RuntimeError)
    assert issubclass(headway.LoopDetected, headway.Stop)
    assert issubclass(headway.BudgetExceeded, headway.Stop)
    assert not issubclass(headway.Stop, headway.HeadwayError)


def test_status_values() -> None:
    assert [s.name for s in headway.Status] == [
        "EXECUTED",
        "CACHED",
        "REPLAYED",
        "CORRECTED",
        "UNKNOWN",
        "FALLBACK",
        "ERROR",
    ]
