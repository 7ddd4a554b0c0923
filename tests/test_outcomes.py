"""Outcomes (semantics §2): statuses, values and texts a model can act on."""

from __future__ import annotations

import headway
from headway.outcome import Outcome, Status, error_info
from headway.testing import ScriptedTool


def test_error_outcome_is_structured_and_says_whether_to_retry(gov: headway.Governor) -> None:
    gov.register("div", ScriptedTool([ZeroDivisionError("division by zero")]), effect="read")
    out = gov.session("r").call("div", {"a": 1})
    assert out.status is Status.ERROR and out.value is None and out.executed
    assert out.error is not None
    assert {"code", "retryable", "message", "hint"} <= set(out.error)
    assert out.error["retryable"] is False
    text = out.to_model()
    assert "division by zero" in text and "will not help" in text


def test_cached_text_notes_the_stored_result(gov: headway.Governor) -> None:
    gov.register("r", ScriptedTool([{"a": 1}]), effect="read", deterministic=True)
    s = gov.session("s")
    s.call("r", {})
    text = s.call("r", {}).to_model()
    assert '{"a": 1}' in text and "identical earlier call" in text


def test_unknown_status_text_names_the_key() -> None:
    out = Outcome(status=Status.UNKNOWN, tool="charge", reconcile_key="k-1")
    assert "k-1" in out.to_model() and "Do not repeat" in out.to_model()
    assert out.value is None and not out.ok


def test_fallback_text_is_marked_degraded() -> None:
    out = Outcome(status=Status.FALLBACK, tool="quote", value={"quote": None})
    assert "degraded" in out.to_model() and out.ok


def test_retryable_error_text() -> None:
    out = Outcome(
        status=Status.ERROR, tool="t", error=error_info("x", "m", retryable=True, hint="h")
    )
    assert "Retrying may help" in out.to_model()


def test_long_results_are_cut_for_the_model() -> None:
    out = Outcome(status=Status.EXECUTED, tool="t", value="x" * 10_000)
    assert len(out.to_model()) < 4200 and "more characters" in out.to_model()


def test_tool_with_wrong_arguments_gets_invalid_arguments(gov: headway.Governor) -> None:
    def lookup(ticker: str) -> str:
        return ticker

    gov.register("lookup", lookup, effect="read")
    out = gov.session("r").call("lookup", {"symbol": "A"})
    assert out.status is Status.ERROR and out.error is not None
    assert out.error["code"] == "invalid_arguments" and out.error["retryable"] is False


def test_unknown_tool_is_an_error_outcome_not_an_exception(gov: headway.Governor) -> None:
    gov.register("known", ScriptedTool(["x"]), effect="read")
    out = gov.session("r").call("nope", {"a": 1})
    assert out.status is Status.ERROR and out.tool == "nope" and not out.executed
    assert (
        out.error is not None
        and out.error["code"] == "unknown_tool"
        and "known" in out.error["hint"]
    )


def test_outcomes_from_calls_carry_every_field(gov: headway.Governor) -> None:
    # the pipeline builds Outcome from its field tuple: a field added to Outcome must be filled
    gov.register("f", ScriptedTool([{"a": 1}]), effect="read", deterministic=True)
    s = gov.session("fields")
    for status in (Status.EXECUTED, Status.CACHED):
        out = s.call("f", {"x": 1})
        assert out.status is status and len(out) == len(Outcome._fields)
        assert out._asdict()["tool"] == "f" and out.value == {"a": 1}
