"""Tools that a framework runs (``register(name, None)`` and ``call(..., run=)``), and
results that say they are errors (the ``is_error`` predicate)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

import headway


def test_a_declared_tool_runs_through_the_callers_runner_with_the_arguments() -> None:
    gov = headway.Governor()
    gov.register("lookup", None, effect="read", deterministic=True)
    seen: list[dict[str, Any]] = []

    def runner(**args: Any) -> str:
        seen.append(args)
        return f"found {args['q']}"

    with gov.session("r") as s:
        first = s.call("lookup", {"q": "a"}, run=runner)
        again = s.call("lookup", {"q": "a"}, run=runner)
    assert first.status is headway.Status.EXECUTED and first.value == "found a"
    assert again.status is headway.Status.CACHED  # the declared quadrant still applies
    assert seen == [{"q": "a"}]


def test_a_declared_tool_called_without_a_runner_is_an_error_outcome_not_a_crash() -> None:
    gov = headway.Governor()
    gov.register("lookup", None, effect="read")
    with gov.session("r") as s:
        out = s.call("lookup", {"q": "a"})
    assert out.status is headway.Status.ERROR
    assert out.error is not None and out.error["code"] == "no_function"


def test_an_undeclared_tool_with_a_runner_gets_the_safe_default_an_unkeyed_write() -> None:
    gov = headway.Governor()
    runs: list[int] = []

    def send(**args: Any) -> str:
        runs.append(1)
        return "sent"

    with gov.session("r") as s:
        for _ in range(2):
            out = s.call("send", {"to": "x"}, run=send)
            assert out.status is headway.Status.EXECUTED
    spec = gov.spec("send")
    assert spec is not None and spec.effect == "write" and not spec.cacheable()
    assert len(runs) == 2  # never deduplicated by its arguments


async def test_an_async_runner_is_awaited_by_acall() -> None:
    gov = headway.Governor()
    gov.register("fetch", None, effect="read")

    async def runner(**args: Any) -> dict[str, Any]:
        return {"page": args["n"]}

    async with gov.session("r") as s:
        out = await s.acall("fetch", {"n": 2}, run=runner)
    assert out.status is headway.Status.EXECUTED and out.value == {"page": 2}


@pytest.mark.parametrize(
    "result",
    [
        "Error: payment amount does not add up",
        "error: no such reservation",
        {"isError": True, "content": [{"type": "text", "text": "boom"}]},
        {"is_error": True, "content": "boom"},
        {"error": "not found"},
        MappingProxyType({"isError": True}),  # a mapping that is not a dict: the same rule
    ],
)
def test_a_result_marked_as_an_error_is_an_error_outcome_and_never_cached(result: Any) -> None:
    gov = headway.Governor()
    runs: list[int] = []

    @gov.tool(effect="read", deterministic=True)
    def lookup(q: str) -> Any:
        runs.append(1)
        return result

    with gov.session("r") as s:
        outs = [s.call("lookup", {"q": "a"}) for _ in range(2)]
    assert [o.status for o in outs] == [headway.Status.ERROR] * 2
    assert len(runs) == 2  # an error is never served from the cache
    assert outs[0].value is None and outs[0].error is not None
    assert outs[0].error["code"] == "error_result" and outs[0].error["retryable"] is False
    text = result if isinstance(result, str) else None
    if text is not None:
        assert outs[0].to_model() == text  # the model reads the tool's own answer


@pytest.mark.parametrize(
    "result",
    ["No errors found", {"error": None, "rows": []}, {"isError": False, "error": "x"}, [1], 0],
)
def test_results_that_only_mention_errors_are_results(result: Any) -> None:
    gov = headway.Governor()
    gov.register("lookup", lambda q: result, effect="read")
    with gov.session("r") as s:
        assert s.call("lookup", {"q": "a"}).status is headway.Status.EXECUTED


def test_a_text_error_resubmitted_unchanged_gets_the_repeated_error_correction() -> None:
    gov = headway.Governor()
    runs: list[int] = []

    @gov.tool(effect="write")
    def book(amount: int) -> str:
        runs.append(amount)
        return "Error: payment amount does not add up"

    with gov.session("r") as s:
        outs = [s.call("book", {"amount": 100}) for _ in range(3)]
    assert [o.correction is not None for o in outs] == [False, False, True]
    assert "payment amount does not add up" in (outs[2].correction or "")
    assert outs[2].to_model().startswith("Error: payment amount")  # the text is still there


def test_the_predicate_is_per_tool_or_governor_wide_and_can_be_turned_off() -> None:
    off = headway.Governor(is_error=None)
    off.register("t", lambda: "Error: x", effect="read")
    mine = headway.Governor(is_error=lambda v: v == "FAIL")
    mine.register("t", lambda: "FAIL", effect="read")
    mine.register("u", lambda: "FAIL", effect="read", is_error=lambda v: False)
    with off.session("a") as a, mine.session("b") as b:
        assert a.call("t").status is headway.Status.EXECUTED
        assert b.call("t").status is headway.Status.ERROR
        assert b.call("u").status is headway.Status.EXECUTED


def test_a_predicate_that_raises_judges_nothing_and_is_recorded() -> None:
    def broken(value: Any) -> bool:
        raise RuntimeError("bad predicate")

    gov = headway.Governor(is_error=broken)
    gov.register("t", lambda: "ok", effect="read")
    with gov.session("a") as s:
        assert s.call("t").status is headway.Status.EXECUTED
        (record,) = s.audit_records()
    assert any("is_error_failed" in f for f in record["flags"])


def test_an_error_result_is_not_a_breaker_failure() -> None:
    gov = headway.Governor(breaker=headway.Breaker(failures=2))
    gov.register("t", lambda n: "Error: no", effect="read")
    with gov.session("a") as s:
        for n in range(5):
            assert s.call("t", {"n": n}).status is headway.Status.ERROR
    assert gov.breaker_state("t") == "closed"


def test_an_audit_record_does_not_keep_the_runner_a_framework_passed() -> None:
    """A kept record holding a framework's handler would hold all its per-call objects."""
    import gc
    import weakref

    class Runner:
        def __call__(self, **args: Any) -> str:
            return "ok"

    gov = headway.Governor()  # the default MemoryAudit keeps every record
    gov.register("lookup", None, effect="read")
    runner = Runner()
    alive = weakref.ref(runner)
    with gov.session("r") as s:
        assert s.call("lookup", {"q": "a"}, run=runner).status is headway.Status.EXECUTED
    del runner
    gc.collect()
    assert alive() is None
    assert len(gov.audit_records("r")) == 1  # the record is still there, unread until now


def test_an_audit_record_keeps_neither_the_arguments_nor_the_result_objects() -> None:
    """A record keeps the texts its fields are made from, not the caller's arguments or the
    tool's result: the default audit keeps up to 10,000 records per session, and each object
    a record holds is memory and a garbage collector's walk on every collection."""
    import gc
    import weakref

    class Result:  # any object: recorded as its text
        def __str__(self) -> str:
            return "result-text"

    class Args(dict[str, Any]):  # a dict subclass can be weakly referenced
        pass

    made: list[weakref.ref[Any]] = []

    def lookup(q: str) -> Result:
        result = Result()
        made.append(weakref.ref(result))
        return result

    gov = headway.Governor()
    gov.register("lookup", lookup, effect="read")
    args = Args(q="a")
    args_alive = weakref.ref(args)
    with gov.session("r") as s:
        out = s.call("lookup", args)
        assert out.status is headway.Status.EXECUTED and isinstance(out.value, Result)
        s.call("lookup", {"q": "b"})
    del out, args
    gc.collect()
    assert made[0]() is None and args_alive() is None
    first, _ = gov.audit_records("r")  # read now, made from the texts kept
    assert first["result_size"] == len('"result-text"') and first["args"] == '{"q":"a"}'
