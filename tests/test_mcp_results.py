"""What the proxy's detectors judge of an MCP result: what it says (``result_said``), once.

The governed value stays the whole ``CallToolResult`` (cached, replayed and sent as it
came); only the text its signals are judged by leaves out the envelope, ``_meta`` and the
structured value that the text already carries. In process, through a governor as both
forms of the proxy set it up (``judge_results``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import headway
from headway._call import result_text
from headway._mcp_calls import judge_results, result_said


def envelope(text: str, structured: Any = None, **meta: Any) -> dict[str, Any]:
    """A result as FastMCP servers give it: the text, its structured value, their _meta."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if structured is not None:
        result["structuredContent"] = structured
    if meta:
        result["_meta"] = meta
    return result


def judged(results: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """The audit records of a read tool (run every time) answering ``results`` in turn:
    (arguments, the upstream's result)."""
    gov = headway.Governor()
    judge_results(gov)
    gov.register("search", None, effect="read")
    session = gov.session("s")

    answers = iter([result for _, result in results])

    async def upstream(**_: Any) -> dict[str, Any]:
        return next(answers)

    async def run_all() -> None:
        for args, _ in results:
            await session.acall("search", args, run=upstream)

    asyncio.run(run_all())
    assert gov.audit is not None
    return gov.audit.records("s")


def test_a_wrapped_plain_value_is_judged_as_its_text() -> None:
    wrapped = envelope("hello", {"result": "hello"}, fastmcp={"wrap_result": True})
    assert result_said(result_text(wrapped)) == "hello"
    assert result_said(result_text(envelope("5", {"result": 5}))) == "5"


def test_structured_content_repeated_as_text_is_judged_once() -> None:
    said = result_said(result_text(envelope('{"b": [2], "a": 1}', {"a": 1, "b": [2]})))
    assert said == '{"b": [2], "a": 1}'


def test_structured_content_the_text_does_not_carry_is_judged_too() -> None:
    said = result_said(result_text(envelope("Found 2", {"items": [1, 2]})))
    assert said == 'Found 2\n{"items":[1,2]}'


def test_text_blocks_keep_their_lines_and_other_blocks_are_judged_as_json() -> None:
    image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    result = {"content": [{"type": "text", "text": "a\nb"}, image]}
    assert result_said(result_text(result)) == f"a\nb\n{result_text(image)}"


def test_a_text_that_is_no_mcp_result_is_judged_as_it_is() -> None:
    for text in ("plain", '{"content": "x"}', '{"content": [], "other": 1}', "{not json"):
        assert result_said(text) == text


def test_distinct_short_answers_to_new_queries_are_progress_not_near_duplicates() -> None:
    # judged with their envelope (130 characters, the short-answer rule escaped) these
    # were near-duplicates of each other, and the 7th lookup stopped the session
    records = judged(
        [
            ({"key": f"k{i}"}, envelope(f"value of k{i}", {"result": f"value of k{i}"}))
            for i in range(9)
        ]
    )
    assert [r["mark"] for r in records] == ["progress"] * 9
    assert all(not r["signals"] for r in records)


def test_the_same_page_for_other_arguments_is_still_the_same_result() -> None:
    page = "\n".join(f"line {i}: the same content of a long page" for i in range(20))
    records = judged([({"page": 1}, envelope(page, request="a")), ({"page": 2}, envelope(page))])
    assert records[1]["signals"] == {"same_result": True}
    assert records[1]["mark"] == "no_progress"


def test_a_page_with_a_new_timestamp_in_its_meta_is_still_a_near_duplicate() -> None:
    page = "\n".join(f"line {i}: the same content of a long page" for i in range(20))
    records = judged(
        [
            ({"page": 1}, envelope(page, trace={"at": "10:00:01.123"})),
            ({"page": 1}, envelope(page + " one more word", trace={"at": "10:00:02.456"})),
        ]
    )
    assert records[1]["signals"].get("near_duplicate") is True
    assert records[1]["mark"] == "no_progress"


def test_a_changed_structured_value_behind_the_same_text_is_new_information() -> None:
    records = judged(
        [
            ({"q": "a"}, envelope("Found 2 items", {"items": ["x1", "x2"]})),
            ({"q": "a"}, envelope("Found 2 items", {"items": ["y1", "y2"]})),
        ]
    )
    assert records[1]["mark"] == "progress"


def test_a_governor_judges_results_so_once_whatever_both_proxies_do() -> None:
    gov = headway.Governor()
    judge_results(gov)
    judge_results(gov)
    assert gov.normalizers.count(result_said) == 1
    assert gov.normalizers[1:] == headway.Governor().normalizers
