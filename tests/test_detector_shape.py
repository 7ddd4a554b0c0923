"""The detectors' one shape, and the session record they are stored in: a record written
by the previous version of the detectors is read, and written back byte for byte."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

import headway
from headway._spec import make_spec
from headway.detectors import DEFAULT_DETECTORS, MARKS, SIGNALS, Monitor, Observation, Window
from headway.similarity import DEFAULT_NORMALIZERS

READ = make_spec("read_file", lambda **_: None, effect="read")
WRITE = make_spec("write_file", lambda **_: None, effect="write")
PAGE = "\n".join(f"line {i} of the file, at 2026-12-01T10:00:0{i % 10}Z" for i in range(12))
S = headway.Status
CALLS = [
    (READ, "a", PAGE, S.EXECUTED, None),
    (READ, "b", "No files found", S.EXECUTED, None),
    (READ, "a", PAGE.replace("10:00", "11:00"), S.EXECUTED, None),
    (READ, "c", "Error: no such file", S.ERROR, "FileNotFoundError"),
    (WRITE, "d", "ok: commit 1a2b3c4d", S.EXECUTED, None),
    (READ, "a", None, S.CACHED, None),
]
# written by the detectors of commit 09ead52 (one module) after CALLS, window 4
RECORD = rb"""{"w":[[2,"read_file","read_file:a",null,"read","executed","line 0 of the file, at 2026-12-01T11:00:00Z\nline 1 of the file, at 2026-12-01T11:00:01Z\nline 2 of the file, at 2026-12-01T11:00:02Z\nline 3 of the file, at 2026-12-01T11:00:03Z\nline 4 of the file, at 2026-12-01T11:00:04Z\nline 5 of the file, at 2026-12-01T11:00:05Z\nline 6 of the file, at 2026-12-01T11:00:06Z\nline 7 of the file, at 2026-12-01T11:00:07Z\nline 8 of the file, at 2026-12-01T11:00:08Z\nline 9 of the file, at 2026-12-01T11:00:09Z\nline 10 of the file, at 2026-12-01T11:00:00Z\nline 11 of the file, at 2026-12-01T11:00:01Z",529,"line 0 of the file, at 2026-12-01T11:00:00Z line 1 of the file, at 2026-12-01T11:00:01Z line 2 of the file, at 2026-12-01T11:00:02Z line 3 of the file, at 2026-12-01T11:00:03Z line 4 of the file, at 2026-12-01T11:00:04Z line 5 of the file, at 2026-12-01T11:00:05Z line 6 of the file, at 2026-12-01T11:00:06Z line 7 of the file, at 2026-12-01T11:00:07Z line 8 of the file, at 2026-12-01T11:00:08Z line 9 of the file, at 2026-12-01T11:00:09Z line 10 of the file, at 2026-12-01T11:00:00Z line 11 of the file, at 2026-12-01T11:00:01Z",null,529,null,"no_progress","a",true,true,"QFjM+IYLcBffTQuprwsQIOOUX2yEC0gX5AsJnogLmBdHx5oKigvAFwj/RjWCCyAXqzPVoYAL+BasrINTfAuoFg9gEMd+C9AWkRCouI4LEBgy3DssjAvoF3yBmD2tC+gf",0,"\u0000c8fb319484f82e25bfb43187493015ae"],[3,"read_file","read_file:c",null,"read","error","Error: no such file",19,null,null,-1,"FileNotFoundError","neutral","c",false,false,"",0,null],[4,"write_file","write_file:d",null,"write","executed","ok: commit 1a2b3c4d",19,"ok: commit 1a2b3c4d",null,19,null,"progress","d",false,false,"",13888268912929907519,null],[5,"read_file","read_file:a",null,"read","cached",null,-1,null,null,-1,null,"no_progress","a",true,true,"",0,null]],"last":[0,1,2],"page":0,"rk":"read_file:a","r":1,"np":1,"lp":4,"n":6,"ver":{},"err":{"read_file":["FileNotFoundError",1]},"polls":{},"lv":{"read_file":{"n":2},"write_file":{"n":4}}}"""


def _fed(detectors: Sequence[Any] = ()) -> Monitor:
    m = Monitor(limit=6, window=4, normalizers=DEFAULT_NORMALIZERS, detectors=detectors)
    for i, (spec, k, text, status, error) in enumerate(CALLS):
        obs = m.observation(
            i, spec.name, f"{spec.name}:{k}", k, str(spec.effect), status, text, error, k
        )
        m.after(spec, obs, {"n": i}, float(i), 6)
    return m


def _as_before(record: dict[str, Any]) -> bytes:
    """A record without what the previous version did not write: the recurrence's entries
    ("rc", read back when present)."""
    return orjson.dumps({k: v for k, v in record.items() if k != "rc"})


def test_a_session_record_is_written_as_the_previous_version_wrote_it() -> None:
    """But for the tools' last results ("lv"): kept only of a tool with its own progress
    check, and neither of these has one."""
    record = _fed().snapshot()
    assert record["lv"] == {}
    assert _as_before(record) == orjson.dumps(orjson.loads(RECORD) | {"lv": {}})
    # the recurrence's window: the steps with a result (a JSON text, as the steps are)
    assert len(orjson.loads(orjson.dumps(record["rc"]))) == 4


def test_a_record_of_the_previous_version_is_read_and_judges_as_the_live_window() -> None:
    restored = Monitor(limit=6, window=4, normalizers=DEFAULT_NORMALIZERS)
    restored.restore(orjson.loads(RECORD))
    assert _as_before(restored.snapshot()) == RECORD
    live = _fed()
    for m in (live, restored):
        obs = m.observation(6, "read_file", "read_file:a", "a", "read", S.EXECUTED, PAGE, None, "a")
        v = m.after(READ, obs, None, 6.0, 6)
        assert (v.mark, v.signals) == ("no_progress", {"repeat": 2, "near_duplicate": True})
    # the last results the older record holds of tools without a progress check judge
    # nothing; a new result of such a tool drops its own
    after = restored.snapshot()
    assert after["lv"] == {"write_file": {"n": 4}}
    assert _as_before(live.snapshot()) == _as_before(after | {"lv": {}})


def test_every_built_in_detector_has_the_shape_of_a_plug_in() -> None:
    assert DEFAULT_DETECTORS == SIGNALS + MARKS
    for detector in DEFAULT_DETECTORS:
        assert isinstance(detector.name, str)
        assert list(inspect.signature(detector.observe).parameters) == ["step", "window"]


def test_a_plug_in_reads_the_window_the_built_in_detectors_read() -> None:
    """The earlier steps, oldest first, as a sequence; its signals under its name."""
    seen: list[list[int]] = []

    class Steps:
        name = "steps"

        def observe(self, step: Observation, window: Sequence[Observation]) -> Mapping[str, Any]:
            assert isinstance(window, Window)
            seen.append([o.index for o in window])
            return {"n": len(window)}

    m = _fed([Steps()])
    assert seen[-1] == [1, 2, 3, 4]  # the window holds 4: the step judged is not in it yet
    obs = m.observation(6, "read_file", "read_file:e", "e", "read", S.EXECUTED, "x", None, "e")
    assert m.after(READ, obs, None, 6.0, 6).signals == {"steps": {"n": 4}}
