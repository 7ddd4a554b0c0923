"""A write whose connection was lost after the request may have reached the tool
(semantics §5.2: a reset or closed connection, a broken pipe, an MCP upstream that exited
mid-call) is UNKNOWN: never retried in the call, keyed or not, and the model is not told
that retrying may help. A read that loses its connection is tried again."""

from __future__ import annotations

import pytest

import headway
from headway import Status


@pytest.mark.parametrize("lost", [ConnectionResetError, BrokenPipeError, ConnectionAbortedError])
@pytest.mark.parametrize("key", [None, "order-1"])
def test_a_write_that_acted_then_lost_its_connection_is_unknown_and_runs_once(
    lost: type[Exception], key: str | None
) -> None:
    gov = headway.Governor()
    ran: list[str] = []

    def pay(amount: int) -> str:
        ran.append("pay")  # the effect happened
        raise lost("connection reset by peer")

    gov.register("pay", pay, effect="write")
    out = gov.session("r").call("pay", {"amount": 5}, idempotency_key=key)
    assert out.status is Status.UNKNOWN and ran == ["pay"]
    assert "Retrying may help" not in out.to_model()
    assert out.error is not None and out.error["code"] == "connection_lost"


def test_a_read_that_lost_its_connection_is_tried_again() -> None:
    gov = headway.Governor()
    answers: list[Exception | str] = [ConnectionResetError("reset"), "fresh"]

    def look() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    gov.register("look", look, effect="read")
    out = gov.session("r").call("look", {})
    assert out.status is Status.EXECUTED and out.value == "fresh"


def test_a_refused_connection_ran_nothing_and_a_keyed_write_may_be_retried() -> None:
    gov = headway.Governor()
    answers: list[Exception | str] = [ConnectionRefusedError("refused"), "paid"]

    def pay() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    gov.register("pay", pay, effect="write")
    out = gov.session("r").call("pay", {}, idempotency_key="k-refused")
    assert out.status is Status.EXECUTED and out.value == "paid"
