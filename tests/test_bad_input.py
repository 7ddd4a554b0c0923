"""Bad input gets a clear error and loses nothing."""

from __future__ import annotations

import sys
from typing import Any, Literal

import pytest

import headway
from headway.testing import ScriptedTool


class Weird(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str() itself fails")


def test_malformed_arguments_raise_argument_error_and_count_nothing(gov: headway.Governor) -> None:
    tool = ScriptedTool(["ok"])
    gov.register("t", tool, effect="read")
    s = gov.session("r", budgets=headway.Budgets(tool_calls=1))
    for bad in (["not", "a", "dict"], "text", 42):
        with pytest.raises(headway.ArgumentError, match="mapping"):
            s.call("t", bad)  # type: ignore[arg-type]
    with pytest.raises(headway.ArgumentError) as info:
        s.call("t", {"when": object()})
    assert info.value.path == "args.when"
    # nothing ran and nothing was consumed: the one allowed call still works
    assert tool.count == 0 and s.call("t", {"a": 1}).status is headway.Status.EXECUTED


def test_non_json_values_are_canonicalised_and_passed_through(gov: headway.Governor) -> None:
    import datetime as dt

    seen: list[Any] = []

    def tool(**kw: Any) -> str:
        seen.append(kw)
        return "ok"

    gov.register("t", tool, effect="read", deterministic=True)
    s = gov.session("r")
    args = {"day": dt.date(2024, 1, 1), "ids": {3, 1}, "raw": b"\x00"}
    assert s.call("t", args).status is headway.Status.EXECUTED
    assert s.call("t", dict(reversed(list(args.items())))).status is headway.Status.CACHED
    assert seen == [args]  # the tool got the original values


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("v"),
        KeyError("k"),
        RuntimeError("r"),
        Weird(),
        AssertionError(),
        OSError(5, "io"),
    ],
)
def test_a_tool_that_raises_anything_becomes_an_error_outcome(
    gov: headway.Governor, exc: Exception
) -> None:
    gov.register("t", ScriptedTool([exc]), effect="read")
    out = gov.session("r").call("t", {})
    assert out.status is headway.Status.ERROR and out.error is not None
    assert out.error["code"] == "tool_error"  # none of these is a TypeError of the call
    assert isinstance(out.to_model(), str) and "tool_error" in out.to_model()


def test_keyboard_interrupt_is_not_swallowed(gov: headway.Governor) -> None:
    gov.register("t", ScriptedTool([KeyboardInterrupt()]), effect="read")
    with pytest.raises(KeyboardInterrupt):
        gov.session("r").call("t", {})


def test_huge_payloads_work_and_are_not_cached(gov: headway.Governor) -> None:
    big = "x" * 5_000_000
    gov.register(
        "t", ScriptedTool([lambda blob: blob[:10] + big]), effect="read", deterministic=True
    )
    s = gov.session("r")
    out = s.call("t", {"blob": big})
    assert out.status is headway.Status.EXECUTED and len(out.value) == 5_000_010
    assert s.call("t", {"blob": big}).status is headway.Status.EXECUTED  # too large to cache
    record = gov.audit_records("r")[0]
    assert record["result_size"] == 5_000_010 and len(record["args"]) < 1100


def test_non_json_result_is_returned_and_not_cached(gov: headway.Governor) -> None:
    marker = object()
    gov.register("t", ScriptedTool([marker]), effect="read", deterministic=True)
    s = gov.session("r")
    first, second = s.call("t", {}), s.call("t", {})
    assert first.value is marker and second.value is marker
    assert second.status is headway.Status.EXECUTED  # not cached: it ran again
    flags = gov.audit_records("r")[0]["flags"]
    assert "not_cached" in flags
    assert any(f.startswith("store_error: ") and "JSON" in f for f in flags)


class BrokenStore(headway.MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def get(self, key: str) -> Any:
        if self.down:
            raise headway.StoreError("connection refused")
        return super().get(key)

    def set(self, key: str, value: Any, ttl_s: float | None = None) -> None:
        if self.down:
            raise headway.StoreError("connection refused")
        super().set(key, value, ttl_s)


def test_store_that_goes_away_mid_run_fails_open_for_reads() -> None:
    store = BrokenStore()
    gov = headway.Governor(store=store)
    tool: ScriptedTool = ScriptedTool([lambda q: f"result {q} {tool.count}"])
    gov.register("search", tool, effect="read", deterministic=True)
    s = gov.session("r")
    s.call("search", {"q": 1})
    store.down = True
    out = s.call("search", {"q": 2})
    assert out.status is headway.Status.EXECUTED
    assert any(f.startswith("store_error") for f in gov.audit_records("r")[-1]["flags"])
    store.down = False
    assert s.call("search", {"q": 1}).status is headway.Status.CACHED


# -- call() raises only ArgumentError, KeyReuseError and Stop --------------------------


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"text": "model JSON with a lone \ud800 surrogate"}, "args.text"),
        ({"nested": {"list": ["ok", "\udfff"]}}, "args.nested.list[1]"),
        ({"n": 10**5000}, "args.n"),  # more than Python's 4,300-digit int-to-text limit
    ],
)
def test_hostile_arguments_raise_argument_error_naming_the_path(
    gov: headway.Governor, args: dict[str, Any], path: str
) -> None:
    tool = ScriptedTool(["ok"])
    gov.register("t", tool, effect="read")
    with pytest.raises(headway.ArgumentError) as info:
        gov.session("r").call("t", args)
    assert info.value.path == path and tool.count == 0


def test_a_tool_name_that_is_not_a_string_is_an_argument_error(gov: headway.Governor) -> None:
    gov.register("f", ScriptedTool(["ok"]), effect="read")
    with pytest.raises(headway.ArgumentError, match="tool name must be a string"):
        gov.session("r").call(print, {"a": 1})  # type: ignore[arg-type]


def _deep() -> list[Any]:
    value: list[Any] = []
    for _ in range(max(10_000, sys.getrecursionlimit() + 1000)):
        value = [value]
    return value


@pytest.mark.parametrize("effect", ["read", "write"])
@pytest.mark.parametrize("result", [_deep(), {"n": 10**5000}], ids=["deep", "huge_int"])
def test_a_result_that_cannot_be_recorded_is_an_error_outcome_with_an_audit_record(
    gov: headway.Governor, effect: Literal["read", "write"], result: Any
) -> None:
    """The tool ran (its effect happened), so the ERROR says so; nothing is raised."""
    gov.register("t", lambda: result, effect=effect, deterministic=effect == "read")
    with gov.session("r") as s:
        out = s.call("t", {})
    assert out.status is headway.Status.ERROR and out.executed
    assert out.error is not None and out.error["code"] == "unrecordable_result"
    assert "ran" in out.to_model() and "do not repeat" in out.to_model()
    (record,) = gov.audit_records("r")
    assert record["status"] == "error" and record["error"] == "unrecordable_result"


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("str() fails")

    def __repr__(self) -> str:
        raise RuntimeError("repr() fails")


@pytest.mark.parametrize("result", [Unprintable(), {"item": Unprintable()}, [Unprintable()]])
def test_a_result_whose_str_raises_is_returned_not_raised(
    gov: headway.Governor, result: Any
) -> None:
    gov.register("t", ScriptedTool([result]), effect="read", deterministic=True)
    s = gov.session("r")
    out = s.call("t", {})
    assert out.status is headway.Status.EXECUTED and out.value is result
    assert gov.audit_records("r")[0]["status"] == "executed"


def test_a_raising_detector_never_escapes_a_call(clock: Any) -> None:
    class Broken:
        name = "broken"

        def observe(self, step: Any, window: Any) -> None:
            raise RuntimeError("detector bug")

    gov = headway.Governor(clock=clock, sleep=clock.sleep, detectors=[Broken()])
    gov.register("t", ScriptedTool(["a result"]), effect="read")
    out = gov.session("r").call("t", {})
    assert out.status is headway.Status.EXECUTED and out.value == "a result"
    assert gov.audit_records("r")[0]["signals"]["broken"] == {"error": "detector bug"}


def test_a_raising_normaliser_never_escapes_a_call(clock: Any) -> None:
    def broken(text: str) -> str:
        raise ValueError("normaliser bug")

    gov = headway.Governor(clock=clock, sleep=clock.sleep, normalizers=[broken])
    gov.register("t", ScriptedTool(["same"]), effect="read")
    s = gov.session("r")
    outs = [s.call("t", {}) for _ in range(3)]
    # the text is still judged: the third identical unchanged result comes with the correction
    assert [o.status for o in outs] == [headway.Status.EXECUTED] * 3
    assert "returned the same result 3 times" in str(outs[2].correction)
