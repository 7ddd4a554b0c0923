"""Loop judgment on browser, coding and multi-agent runs (issue 11): no false stops on form
filling or exploration, repeats and returns to a page already seen still caught. Every
scenario runs through a real Governor and Session, with the tools declared as advised:
browser actions and delegations are uncached reads, file searches cached reads."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

import headway
from headway import Status
from headway.similarity import DEFAULT_NORMALIZERS, strip_element_refs
from headway.testing import FakeClock, ScriptedTool

# what a browser agent's operator adds: its pages renumber their elements at every step
BROWSER_NORMALIZERS = (*DEFAULT_NORMALIZERS, strip_element_refs)

WORDS = [a + b for a in "bdfgklmnprstvz" for b in ("a", "e", "i", "o", "u", "ai", "ou")]


def _words(seed: str, n: int) -> str:
    digest = b"".join(hashlib.sha256(f"{seed}{i}".encode()).digest() for i in range(n // 32 + 1))
    return " ".join(WORDS[b % len(WORDS)] for b in digest[:n])


class SettingsPage:
    """A large settings page in a browser's text mode: ~300 elements with their numbers
    (renumbered, as browsers do, from one step to the next); each action changes a few
    words of it."""

    def __init__(self) -> None:
        self.fields = {f"field{i}": _words(f"value{i}", 3) for i in range(300)}
        self.options: list[str] = []
        self.renders = 0

    def render(self, action: str) -> str:
        self.renders += 1
        base = 1000 * self.renders
        lines = [action, "Settings - Notifications and privacy"]
        for n, (name, value) in enumerate(self.fields.items()):
            lines.append(f"[{base + n}]<div id={name} /> {name.upper()} {value}")
            if name == "field40":
                lines.extend(
                    f"\t[{base + 500 + k}]<option /> {o}" for k, o in enumerate(self.options)
                )
        return "\n".join(lines)

    def click(self, index: int) -> str:
        if index == 7:  # the frequency dropdown opens: the page gains a few options
            self.options = ["Daily digest", "Weekly digest", "Never"]
        elif index in (11, 12):  # a check box
            self.fields[f"field{index}"] = "checked" if index == 11 else "unchecked"
        else:
            self.fields[f"field{index}"] = f"{self.fields[f'field{index}']} (selected)"
        return self.render(f"Clicked element {index}")

    def select_dropdown(self, index: int, text: str) -> str:
        self.options = []  # the page loses them and shows the new value
        self.fields["field40"] = text
        return self.render(f"Selected option {text}")

    def input(self, index: int, text: str) -> str:
        self.fields[f"field{index}"] = text
        return self.render(f"Typed {text!r}")


def _browser(gov: headway.Governor, page: SettingsPage) -> headway.Session:
    for name in ("click", "select_dropdown", "input"):
        gov.register(name, getattr(page, name), effect="read")  # a view change: uncached
    return gov.session("form")


FORM: list[tuple[str, dict[str, Any]]] = [
    ("click", {"index": 7}),
    ("select_dropdown", {"index": 40, "text": "Weekly digest"}),
    ("input", {"index": 21, "text": "Alex Johnson"}),
    ("input", {"index": 22, "text": "alex@example.com"}),
    ("click", {"index": 11}),
    ("click", {"index": 12}),
    ("input", {"index": 23, "text": "Out of office until Monday"}),
    ("click", {"index": 30}),
    ("click", {"index": 31}),
    ("input", {"index": 24, "text": "+1 555 0100"}),
    ("click", {"index": 32}),
    ("click", {"index": 33}),
]


def test_a_form_filled_on_one_page_is_never_corrected_or_stopped(gov: headway.Governor) -> None:
    """Twelve actions on different elements, each changing a few words of a large page
    (the dropdown opens, an option is picked, fields are typed, boxes ticked): each moved
    the world, so no correction and no stop (the old rule stopped this run at step 6)."""
    page = SettingsPage()
    s = _browser(gov, page)
    outs = [s.call(tool, args) for tool, args in FORM]
    assert all(o.status is Status.EXECUTED and o.correction is None for o in outs)
    assert [r["mark"] for r in gov.audit_records("form")] == ["progress"] * len(FORM)
    assert not s.stopped


def test_the_same_click_on_an_unchanged_page_is_no_progress(clock: FakeClock) -> None:
    """The counterpart of the form: the same element clicked again, the same page back
    (renumbered), moved nothing: no progress, and corrected from the third identical call
    (the click runs: headway holds no current page)."""
    gov = headway.Governor(clock=clock, normalizers=BROWSER_NORMALIZERS)
    page = SettingsPage()
    s = _browser(gov, page)
    s.call("click", {"index": 7})
    again = [s.call("click", {"index": 7}) for _ in range(2)]
    assert gov.audit_records("form")[1]["mark"] == "no_progress"
    assert again[1].status is Status.EXECUTED
    assert "click returned the same result 3 times" in str(again[1].correction)


def test_clicking_different_links_that_land_on_a_page_already_seen_is_no_progress(
    clock: FakeClock,
) -> None:
    """Different links, each bringing back the inbox already read (under new element
    numbers): no new information, so the run is corrected at half the limit, then stopped."""
    gov = headway.Governor(clock=clock, normalizers=BROWSER_NORMALIZERS)
    inbox = SettingsPage()
    pages = {k: _words(f"page{k}", 400) for k in range(3)}

    def click(index: int) -> str:
        if index < 3:
            return pages[index]
        return inbox.render("Inbox - Mail")  # the page's title, then the inbox

    gov.register("click", click, effect="read")
    s = gov.session("links")
    s.call("click", {"index": 100})  # the inbox itself: new
    for k in range(3):
        assert s.call("click", {"index": k}).correction is None  # three new pages
    outs = [s.call("click", {"index": 100 + k}) for k in range(1, 6)]
    marks = [r["mark"] for r in gov.audit_records("links")][4:]
    assert marks == ["no_progress"] * 5
    assert outs[2].correction is not None and "no progress" in outs[2].correction
    s.call("click", {"index": 200})  # the sixth step without progress: recorded, returned
    with pytest.raises(headway.LoopDetected) as info:
        s.call("click", {"index": 201})
    assert info.value.diagnostic["signal"] == "same_result"  # the same page, renumbered


GLOBS = [
    "**/setup.py",
    "**/pyproject.toml",
    "**/Pipfile",
    "**/requirements.txt",
    "**/setup.cfg",
    "**/tox.ini",
    "**/environment.yml",
    "**/poetry.lock",
    "**/Makefile",
    "**/conftest.py",
]


def test_a_sweep_of_ten_different_queries_answering_no_files_found_is_never_stopped(
    gov: headway.Governor,
) -> None:
    """Each "No files found" to a new query is news (that thing is not there): exploration,
    bounded by the budgets, not a repeat. Neither corrected nor stopped, twice over."""
    gov.register("Glob", ScriptedTool(["No files found"]), effect="read", deterministic=True)
    gov.register("Grep", ScriptedTool(["No matches found"]), effect="read", deterministic=True)
    s = gov.session("sweep")
    outs = [s.call("Glob", {"pattern": p}) for p in GLOBS]
    outs += [s.call("Grep", {"pattern": "fasttext", "glob": p}) for p in GLOBS]
    assert all(o.status is Status.EXECUTED and o.correction is None for o in outs)
    assert {r["mark"] for r in gov.audit_records("sweep")} == {"progress"}
    assert not s.stopped


def test_the_same_query_reissued_three_times_with_the_same_answer_is_corrected(
    gov: headway.Governor,
) -> None:
    """A cached read (served the 2nd time) and an uncached one: the 3rd identical call is
    corrected, with the answer it keeps getting; the uncached one runs (headway holds no
    current answer) and its unchanged answer comes with the correction."""
    glob = ScriptedTool(["No files found"])
    gov.register("Glob", glob, effect="read", deterministic=True)
    gov.register("search", ScriptedTool(["No results"]), effect="read")
    s = gov.session("q")
    cached = [s.call("Glob", {"pattern": "**/launchcode.txt"}) for _ in range(3)]
    assert [o.status for o in cached] == [Status.EXECUTED, Status.CACHED, Status.CORRECTED]
    assert "3 times" in cached[2].to_model() and "No files found" in cached[2].to_model()
    assert glob.count == 1
    s.user_turn()
    plain = [s.call("search", {"q": "launchcode"}) for _ in range(3)]
    assert [o.status for o in plain] == [Status.EXECUTED] * 3
    assert [o.correction is None for o in plain] == [True, True, False]
    assert "search returned the same result 3 times" in plain[2].to_model()
    assert plain[2].to_model().startswith("No results")


def test_cosmetic_variants_of_one_query_count_as_repeats(gov: headway.Governor) -> None:
    """``launchcode*``, ``*launchcode*``, ``.launchcode*``...: the same query with other
    wildcards and punctuation, the same negative answer: no progress, corrected at half
    the limit and stopped at the limit."""
    gov.register("Glob", ScriptedTool(["No files found"]), effect="read", deterministic=True)
    s = gov.session("v")
    variants = [
        "/app/**/launchcode*",
        "/app/**/*launchcode*",
        "/app/**/.launchcode*",
        "/app/**/*launchcode*.*",
        "/app/**/.*launchcode*",
        "/app/**/launchcode**",
        "/app/**/*.launchcode*",
    ]
    outs = [s.call("Glob", {"pattern": p}) for p in variants[:4]]
    marks = [r["mark"] for r in gov.audit_records("v")]
    assert marks == ["progress", "no_progress", "no_progress", "no_progress"]
    assert outs[3].correction is not None
    for p in variants[4:]:  # the sixth step without progress is recorded and returned
        s.call("Glob", {"pattern": p})
    with pytest.raises(headway.LoopDetected) as info:
        s.call("Glob", {"pattern": "/app/**/launchcode"})
    assert info.value.diagnostic["signal"] == "same_result"


def test_an_instruction_reissued_in_new_words_gets_no_progress(gov: headway.Governor) -> None:
    """An orchestrator asking its sub-agent for the same thing in other words, and getting
    the same reply back: a repeated request, no progress, corrected at half the limit."""
    reply = (
        "I looked through the archive listing but the entries for the first week of August "
        "2015 are not shown on this page; the list I can see ends in July. "
    )
    n = iter(range(100))

    def websurfer(instruction: str) -> str:  # the sub-agent's reply is the result
        return reply + f"(look {next(n)})"

    gov.register("delegate_websurfer", websurfer, effect="read")
    s = gov.session("o")
    asks = [
        "Please continue scrolling down in the Astronomy Picture of the Day archive to locate "
        "the first week of August 2015 and identify the city on the horizon.",
        "Please keep scrolling down in the Astronomy Picture of the Day archive to locate the "
        "first week of August 2015 and identify the city shown on the horizon.",
        "Please continue scrolling in the Astronomy Picture of the Day archive to find the "
        "first week of August 2015 and identify which city is on the horizon.",
        "Continue scrolling down the Astronomy Picture of the Day archive to locate the first "
        "week of August 2015, then identify the city on the horizon.",
    ]
    outs = [s.call("delegate_websurfer", {"instruction": a}) for a in asks]
    assert [r["mark"] for r in gov.audit_records("o")] == ["progress"] + ["no_progress"] * 3
    assert outs[3].correction is not None


def test_a_text_error_resubmitted_unchanged_three_times_gets_the_repeated_error_correction(
    gov: headway.Governor,
) -> None:
    """tau-bench style: the tool answers ``Error: ...`` as a normal result. Recognised as
    an error (never cached, the model reads the text), the third identical failure gets
    the repeated-error correction quoting it."""
    book = ScriptedTool(["Error: payment amount does not add up, total must be 1002"])
    gov.register("book_reservation", book, effect="write")
    s = gov.session("t")
    args: dict[str, Any] = {"user_id": "u1", "flight": "HAT001", "payment": {"amount": 957}}
    outs = [s.call("book_reservation", args) for _ in range(3)]
    assert all(o.status is Status.ERROR for o in outs) and book.count == 3
    assert outs[0].correction is None and outs[1].correction is None
    text = outs[2].to_model()
    assert outs[2].correction is not None and "3 times" in outs[2].correction
    assert "payment amount does not add up" in text and "fail again" in text
    assert [r["mark"] for r in gov.audit_records("t")] == ["neutral", "no_progress", "no_progress"]
