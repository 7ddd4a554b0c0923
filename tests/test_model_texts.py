"""What the model reads is true: UNKNOWN says what happens next, shadow mode shows exactly
the tool's result, exhausted retries do not invite a retry, an open circuit does not ask
for other arguments."""

from __future__ import annotations

import json

import headway
from headway.testing import ScriptedTool


def test_unknown_says_nothing_reconciles_until_the_call_is_repeated_with_its_key() -> None:
    text = headway.Outcome(
        status=headway.Status.UNKNOWN, tool="charge", reconcile_key="order-7"
    ).to_model()
    assert "reconciling" not in text  # nothing runs in the background
    assert "Nothing checks it in the meantime" in text
    assert "same arguments and key" in text and "never runs twice" in text.replace("\n", " ")
    assert "order-7" in text


def test_shadow_mode_shows_exactly_the_tools_result() -> None:
    gov = headway.Governor(enforce=False, no_progress_limit=4)
    gov.register("search", ScriptedTool([{"hits": []}]), effect="read", deterministic=True)
    s = gov.session("shadow")
    texts = [s.call("search", {"q": "x"}).to_model() for _ in range(8)]
    assert texts == [json.dumps({"hits": []})] * 8  # no note, no correction, no stop notice
    records = gov.audit_records("shadow")
    assert {"correct", "stop"} <= {r["would"] for r in records}  # what headway would have done


def test_an_error_after_exhausted_retries_does_not_say_retrying_may_help(
    gov: headway.Governor,
) -> None:
    gov.register(
        "quote",
        ScriptedTool([ConnectionError("upstream reset")]),
        effect="read",
        retry=headway.Retry(attempts=3),
    )
    out = gov.session("r").call("quote", {"s": "X"})
    assert out.status is headway.Status.ERROR and out.attempts == 3
    assert out.error is not None and out.error["retryable"] is True
    text = out.to_model()
    assert "Retrying may help" not in text and "already tried it 3 times" in text


def test_a_single_retryable_failure_still_says_retrying_may_help(gov: headway.Governor) -> None:
    """A write whose connection was refused never acted: trying again may help."""
    gov.register("post", ScriptedTool([ConnectionRefusedError("refused")]), effect="write")
    out = gov.session("r").call("post", {"n": 1})
    assert out.attempts == 1 and "Retrying may help" in out.to_model()


def test_an_open_circuit_says_when_to_call_again_and_never_to_change_the_arguments(
    gov: headway.Governor,
) -> None:
    gov.register(
        "quote",
        ScriptedTool([ConnectionError("down")]),
        effect="read",
        retry=headway.Retry(attempts=1),
        breaker=headway.Breaker(failures=2),
    )
    s = gov.session("r", no_progress_limit=50)
    outs = [s.call("quote", {"s": "X"}) for _ in range(6)]
    opened = [o for o in outs if o.error and o.error["code"] == "circuit_open"]
    assert len(opened) >= 3
    for out in opened:
        text = out.to_model()
        assert "Retrying may help" not in text and "change the arguments" not in text
        assert "Do not call quote for" in text
