"""A call on a closed session or a closed Governor raises a clear ClosedError; nothing runs."""

from __future__ import annotations

import pytest

import headway
from headway.testing import ScriptedTool


def test_a_call_after_the_with_block_raises_session_is_closed(gov: headway.Governor) -> None:
    tool = ScriptedTool(["ok"])
    gov.register("t", tool, effect="read")
    with gov.session("run-1") as s:
        s.call("t", {})
    with pytest.raises(headway.ClosedError, match="session 'run-1' is closed"):
        s.call("t", {})
    assert tool.count == 1
    # the run itself is not over: a new handle resumes it
    assert gov.session("run-1").call("t", {"n": 2}).step == 1


async def test_acall_after_close_raises_session_is_closed(gov: headway.Governor) -> None:
    gov.register("t", ScriptedTool(["ok"]), effect="read")
    async with gov.session("run-2") as s:
        await s.acall("t", {})
    s2 = gov.session("run-3")
    s2.close()
    for handle in (s, s2):
        with pytest.raises(headway.ClosedError, match=r"session .* is closed"):
            await handle.acall("t", {})
    with pytest.raises(headway.ClosedError, match="closed"):
        s2.record_turn(tokens=1)


def test_a_call_on_a_closed_governor_raises_governor_is_closed() -> None:
    gov = headway.Governor()
    tool = ScriptedTool(["ok"])
    gov.register("t", tool, effect="read")
    s = gov.session("run-1")
    gov.close()
    with pytest.raises(headway.ClosedError, match="Governor is closed"):
        s.call("t", {})
    with pytest.raises(headway.ClosedError, match="Governor is closed"):
        gov.session("run-2")
    assert tool.count == 0
    gov.close()  # closing twice is harmless
