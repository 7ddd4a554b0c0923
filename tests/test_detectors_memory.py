"""What a judged step keeps in the window: its text once, not its normalised form as well;
what a plug-in and a session record read of it is unchanged."""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pytest

import headway
from headway._spec import make_spec
from headway.detectors import Monitor, Observation
from headway.similarity import DEFAULT_NORMALIZERS, normalize, strip_wrappers

SPEC = make_spec("read_file", lambda **_: None, effect="read")
WORDS = ["alpha", "gamma", "kilo", "lima", "mike", "oscar", "romeo", "sierra", "tango"]


CONTENT_NORMALIZERS = (strip_wrappers,)  # the defaults but the volatile one


def page(seed: int, edit: int, lines: int = 40) -> str:
    """A source file of ~2 KB (uuids and times that the normalisers strip) after ``edit``
    one-line edits."""
    rng = random.Random(seed)
    body = [f"# file {seed} at 2026-12-01T10:00:{edit % 60:02d}Z"]
    for i in range(lines):
        body.append("    " * (i % 3) + " ".join(rng.choice(WORDS) for _ in range(6)) + f"  # {i}")
    body[lines // 2] = f"    edited = {edit}"
    return "\n".join(body)


def feed(m: Monitor, index: int, key: str, text: str) -> headway.Status:
    obs = m.observation(index, "read_file", key, key, "read", headway.Status.EXECUTED, text)
    m.after(SPEC, obs, text, float(index), 10**6)
    return obs.status


def test_a_window_step_keeps_its_text_and_not_its_normalised_form_as_well() -> None:
    """Re-reads of edited 2 KB files, each compared with the read before it (its
    normalised form rebuilt from its text): the window holds about one text per step."""
    texts = [page(i % 4, i // 4) for i in range(96)]  # made first: the tool's, not ours
    m = Monitor(limit=10**6, window=32, normalizers=DEFAULT_NORMALIZERS)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i, text in enumerate(texts):
            feed(m, i, f"read_file:{i % 4}", text)
        texts = texts[-1:]  # the tool's results are gone: what is left is the window's
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    per_step = held / 32
    size = len(texts[0])
    # a text (~2 KB) plus its sketch, units and counters; with its normalised form kept
    # as well it held ~2 KB more
    assert per_step < 1.6 * size, f"{per_step:.0f} bytes a step for {size}-character results"


class Seen:
    """A plug-in that records what it reads of the window."""

    name = "seen"

    def __init__(self) -> None:
        self.texts: dict[int, str | None] = {}
        self.norms: dict[int, str | None] = {}

    def observe(self, step: Observation, window: Sequence[Observation]) -> Mapping[str, Any] | None:
        for o in window:
            self.texts[o.index], self.norms[o.index] = o.text, o.norm
        return None


def test_a_plug_in_reads_a_window_step_s_text_head_and_normalised_text() -> None:
    """As when the window kept both: the first 1,500 characters of the text, and the
    normalised result (past 4 KiB, the head and tail that shingling reads)."""
    seen = Seen()
    m = Monitor(limit=10**6, window=8, normalizers=DEFAULT_NORMALIZERS, detectors=[seen])
    long = page(9, 1, lines=120)  # ~6 KB
    texts = [page(1, 0), "short answer", long, page(2, 0), page(3, 0), page(4, 0)]
    for i, text in enumerate(texts):
        feed(m, i, f"read_file:{i}", text)
    for i, text in enumerate(texts[:-1]):  # the last one is the step being judged
        assert seen.texts[i] == text[:1500]
        norm = normalize(text, CONTENT_NORMALIZERS)
        if len(norm) > 4096:
            norm = norm[:2048] + "\x00" + norm[-2048:]
        assert seen.norms[i] == norm, i
    # the normalised result keeps volatile parts: they are content between other calls
    assert "2026-12-01T10:00:00Z" in (seen.norms[0] or "")


def test_a_normaliser_that_failed_on_a_result_is_not_run_again_on_it() -> None:
    """The normalised form judged is the one kept (a normaliser can fail on one call only)."""
    calls = {"n": 0}

    def flaky(text: str) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ValueError("first call fails")
        return text.replace("alpha", "ALPHA")

    seen = Seen()
    m = Monitor(limit=10**6, window=8, normalizers=[flaky], detectors=[seen])
    texts = [page(1, 0), page(2, 0), page(3, 0)]
    for i, text in enumerate(texts):
        feed(m, i, f"read_file:{i}", text)
    assert seen.norms[0] == " ".join(texts[0].split())  # judged as it was
    assert seen.norms[1] == " ".join(texts[1].replace("alpha", "ALPHA").split())


def test_a_session_record_stores_a_step_s_normalised_text_whole_up_to_4_kib() -> None:
    """The record's form is unchanged: the normalised text (rebuilt for a step that no
    longer keeps it) and no digest for a result under 4 KiB, the text's head and length."""
    m = Monitor(limit=10**6, window=8, normalizers=DEFAULT_NORMALIZERS)
    texts = [page(1, 0), page(2, 0), page(3, 0)]
    for i, text in enumerate(texts):
        feed(m, i, f"read_file:{i}", text)
    steps = orjson.loads(orjson.dumps(m.snapshot()))["w"]
    for item, text in zip(steps, texts, strict=True):
        assert item[6] == text[:1500] and item[7] == len(text)
        assert item[8] == normalize(text, CONTENT_NORMALIZERS)
        assert item[9] is None  # compared by the text itself
        assert item[10] == len(item[8])


def test_an_edited_file_read_again_is_a_near_duplicate_of_the_earlier_read() -> None:
    """The earlier read is no longer the window's last step: its normalised text, rebuilt
    from its text, is what the 5-gram comparison reads."""
    m = Monitor(limit=10**6, window=32, normalizers=DEFAULT_NORMALIZERS)
    feed(m, 0, "read_file:a", page(1, 0))
    feed(m, 1, "read_file:b", page(2, 0))
    feed(m, 2, "read_file:c", page(3, 0))
    obs = m.observation(
        3, "read_file", "read_file:a", "a", "read", headway.Status.EXECUTED, page(1, 1)
    )
    v = m.after(SPEC, obs, None, 3.0, 10**6)
    assert v.signals.get("near_duplicate") is True and v.mark == "no_progress"
    other = page(7, 0)  # another file: not near the earlier read
    obs = m.observation(4, "read_file", "read_file:b", "b", "read", headway.Status.EXECUTED, other)
    assert m.after(SPEC, obs, None, 4.0, 10**6).mark == "progress"


def test_the_same_long_result_for_other_arguments_is_the_same_result() -> None:
    m = Monitor(limit=10**6, window=32, normalizers=DEFAULT_NORMALIZERS)
    feed(m, 0, "read_file:a", page(1, 0))
    feed(m, 1, "read_file:b", page(2, 0))
    obs = m.observation(
        2, "read_file", "read_file:c", "c", "read", headway.Status.EXECUTED, page(1, 0)
    )
    v = m.after(SPEC, obs, None, 2.0, 10**6)
    assert v.signals.get("same_result") is True and v.mark == "no_progress"


def test_a_result_for_other_arguments_with_a_new_timestamp_is_new_information() -> None:
    """Volatile parts are set aside only between results of the same call: for other
    arguments a new timestamp is content (issue 30: a converted time, a new commit)."""
    m = Monitor(limit=10**6, window=32, normalizers=DEFAULT_NORMALIZERS)
    feed(m, 0, "read_file:a", page(1, 0))
    feed(m, 1, "read_file:b", page(2, 0))
    again = page(1, 0).replace("10:00:00", "11:11:11")
    obs = m.observation(2, "read_file", "read_file:c", "c", "read", headway.Status.EXECUTED, again)
    v = m.after(SPEC, obs, None, 2.0, 10**6)
    assert "same_result" not in v.signals and "near_duplicate" not in v.signals
    assert v.mark == "progress"
    # the same call again with only the timestamp changed: the same result
    obs = m.observation(
        3, "read_file", "read_file:c", "c", "read", headway.Status.EXECUTED, page(1, 0)
    )
    v = m.after(SPEC, obs, None, 3.0, 10**6)
    assert v.mark == "no_progress" and obs.unchanged


def test_setting_a_step_s_text_or_norm_keeps_them_consistent() -> None:
    m = Monitor(limit=10**6, window=8, normalizers=DEFAULT_NORMALIZERS)
    obs = m.observation(0, "t", "t:a", "a", "read", headway.Status.EXECUTED, page(1, 0))
    norm = obs.norm
    obs.text = "replaced"
    assert obs.text == "replaced" and obs.norm == norm  # the norm judged stays
    obs.norm = "x" * 100
    assert obs.norm == "x" * 100 and obs.nlen == 100 and obs.nkey.startswith("\x00")
    obs.norm = "tiny"
    assert obs.nkey == "tiny" and obs.nlen == 4


def test_a_normaliser_that_changes_nothing_runs_once_per_result() -> None:
    """A window step whose text the normalisers left as it was is compared again from its
    text with whitespace collapsed: the normalisers do not run on it again."""
    calls: list[str] = []

    def counting(text: str) -> str:
        calls.append(text)
        return text

    m = Monitor(limit=10**6, window=32, normalizers=[counting])
    texts = [page(i % 3, i // 3).replace("2026-", "year ") for i in range(12)]
    for i, text in enumerate(texts):
        feed(m, i, f"read_file:{i % 3}", text)  # each re-read compared with the last read
    assert calls == texts


def test_a_request_reissued_in_new_words_is_compared_with_one_compared_before() -> None:
    """The earlier request's arguments were compared once already (their 5-gram count is
    known); similar in size, they are compared again: the page it brings back is no news."""
    m = Monitor(limit=10**6, window=32, normalizers=DEFAULT_NORMALIZERS)
    calls = [
        ("list every open issue about the release of the mobile app for android", page(5, 0)),
        (
            "please search the repository for the function that parses configuration files",
            page(1, 0),
        ),
        (
            "please search the repository for the function which parses configuration file",
            page(1, 0).replace("edited = 0", "edited = 1"),  # edited, the same timestamp
        ),
    ]
    marks = []
    for i, (args, text) in enumerate(calls):
        key = f"search:{args}"
        obs = m.observation(
            i, "search", key, args, "read", headway.Status.EXECUTED, text, None, args
        )
        v = m.after(SPEC, obs, None, float(i), 10**6)
        marks.append((v.mark, v.signals.get("near_duplicate")))
    assert marks == [("progress", None), ("progress", None), ("no_progress", True)]


def test_a_repeated_call_s_step_shares_the_previous_step_s_texts() -> None:
    """The same call again (a re-read): its key and argument texts are the earlier step's
    strings, not equal copies (each ~100 bytes a step)."""
    m = Monitor(limit=10**6, window=32, normalizers=DEFAULT_NORMALIZERS)
    args = '{"path":"src/app.py"}'
    steps = []
    for i in range(2):
        key = "read_file:" + args[:-1] + "}"  # a new string per call, as the pipeline's
        text = page(1, i)
        obs = m.observation(
            i, "read_file", key, key[10:], "read", headway.Status.EXECUTED, text, args=key[10:]
        )
        m.after(SPEC, obs, text, float(i), 10**6)
        steps.append(obs)
    assert steps[1].key is steps[0].key
    assert steps[1].args_id is steps[0].args_id and steps[1].args is steps[0].args


def test_a_window_step_s_packed_hashes_have_no_spare_room() -> None:
    """Its content units as an array of exactly their size (filled from a set, an array
    grows as it goes: up to 32 bytes more), its sketch as bytes, 8 a hash, read back as
    the hashes of the sketch it was judged with."""
    import sys
    from array import array

    m = Monitor(limit=10**6, window=32, normalizers=DEFAULT_NORMALIZERS)
    for i in range(4):
        feed(m, i, "read_file:a", page(1, i, lines=30))
    o = m.window[0]
    assert isinstance(o.units, array)
    assert sys.getsizeof(o.units) == sys.getsizeof(array("Q", o.units.tolist()))
    fresh = Observation(0, "read_file", "k", "k", "read", headway.Status.EXECUTED, norm=o.norm)
    hashes = fresh.anchors()
    assert isinstance(o._sketch, bytes) and len(o._sketch) == 8 * len(hashes) > 8 * 16
    assert sorted(o.anchors(packed=True)) == sorted(hashes)


def test_a_step_no_decision_reads_again_keeps_no_text() -> None:
    """One file read once, then four read in turn: a read older than the last 8 of its
    tool that a later read of the same file replaced is never compared again. Its text
    and sketch are dropped; its digest still counts (the same content again is the same
    result), and a session record restores it so."""
    m = Monitor(limit=10**6, window=32, normalizers=DEFAULT_NORMALIZERS)
    texts = [page(9, 0)] + [page(i % 4, i // 4) for i in range(1, 20)]
    for i, text in enumerate(texts):
        feed(m, i, f"read_file:{i % 4 if i else 'once'}", text)
    kept = [o.text is not None for o in m.window]
    assert kept == [True] + [False] * 11 + [True] * 8  # the last of a call, the last 8
    assert all(o._sketch is None for o in list(m.window)[1:12])

    again = Monitor(limit=10**6, window=32, normalizers=DEFAULT_NORMALIZERS)
    again.restore(orjson.loads(orjson.dumps(m.snapshot())))
    for monitor in (m, again):  # the first read's content, under another name
        obs = monitor.observation(
            20, "read_file", "read_file:x", "x", "read", headway.Status.EXECUTED, texts[1]
        )
        v = monitor.after(SPEC, obs, texts[1], 20.0, 10**6)
        assert v.signals.get("same_result") is True


def test_a_plug_in_reads_every_window_step_s_text() -> None:
    seen = Seen()
    m = Monitor(limit=10**6, window=32, normalizers=DEFAULT_NORMALIZERS, detectors=[seen])
    for i in range(20):
        feed(m, i, f"read_file:{i % 4}", page(i % 4, i // 4))
    assert all(o.text is not None for o in m.window)


def test_a_window_step_keeps_a_long_text_deflated_and_reads_it_back_whole() -> None:
    """Once it is not the last step, a long text is kept deflated; what a detector reads
    of it (its head, its normalised form) is what the text was, any character kept."""
    seen = Seen()
    m = Monitor(limit=10**6, window=8, normalizers=DEFAULT_NORMALIZERS, detectors=[seen])
    odd = page(5, 0) + "\nnaïve ☃ \U0001f600 lone \ud800 surrogate"
    texts = [odd, page(1, 0), page(9, 1, lines=120), "short", page(2, 0)]
    for i, text in enumerate(texts):
        feed(m, i, f"read_file:{i}", text)
    steps = list(m.window)
    assert [type(o._body) for o in steps[:-1]] == [bytes, bytes, bytes, str]
    for i, text in enumerate(texts[:-1]):
        assert seen.texts[i] == text[:1500]
        norm = normalize(text, CONTENT_NORMALIZERS)
        if len(norm) > 4096:
            norm = norm[:2048] + "\x00" + norm[-2048:]
        assert seen.norms[i] == norm, i


def test_deflated_window_texts_give_the_same_judgments(monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-reads of edited files and repeated pages, judged against older (deflated) steps:
    the same signals, marks and corrections as with every text kept whole."""
    from headway.detectors import _observation

    def judged() -> list[tuple[Any, ...]]:
        m = Monitor(limit=10**6, window=16, normalizers=DEFAULT_NORMALIZERS)
        out = []
        rng = random.Random(3)
        for i in range(120):
            f = rng.randrange(5)
            text = page(f, rng.randrange(3), lines=rng.choice((20, 40, 90)))
            obs = m.observation(
                i, "read_file", f"read_file:{f}", str(f), "read", headway.Status.EXECUTED, text
            )
            signals = m.after(SPEC, obs, text, float(i), 10**6)
            out.append((obs.mark, obs.duplicate, obs.unchanged, repr(signals)))
        return out

    deflated = judged()
    monkeypatch.setattr(_observation, "DEFLATED", 10**9)
    whole = judged()
    assert deflated == whole
    assert len({d[3] for d in deflated}) > 1  # the run has judgments that differ


def test_a_session_holds_a_tool_s_last_result_only_for_its_own_progress_check() -> None:
    """Only a tool's own progress check (``progress=``, ``progress_fields=``) compares a
    result with the tool's last one: the session holds no other tool's result once the
    call has returned (a read's 2 KB page is the tool's memory, not the session's), and
    still hands a checked tool's last result to its check."""
    import weakref

    class Page:  # any object: judged as its text
        def __init__(self, n: int) -> None:
            self.n = n

        def __str__(self) -> str:
            return f"page {self.n}"

    made: list[weakref.ref[Page]] = []

    def read(n: int) -> Page:
        made.append(weakref.ref(page := Page(n)))
        return page

    seen: list[int] = []

    def moved(prev: Page, cur: Page) -> bool:
        seen.append(prev.n)
        return cur.n > prev.n

    gov = headway.Governor()
    gov.register("read", read, effect="read")
    gov.register("poll", read, effect="read", progress=moved)
    with gov.session("s") as s:
        s.call("read", {"n": 1})
        s.call("poll", {"n": 2})
        assert s.call("poll", {"n": 3}).status is headway.Status.EXECUTED
        gc.collect()
        assert made[0]() is None  # the read's result: let go
        assert made[2]() is not None  # the checked tool's last result: kept for its check
        assert seen == [2]  # handed to the check beside the next result
