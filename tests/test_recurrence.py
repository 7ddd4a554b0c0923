"""Recurrence (issue 14): the same target reaching the same state with nothing new since is
corrected the third time, however its arguments look; errors given as text count for the
repeated-error signal. Each loop kind and each false-alarm shape readers found on browser
and exploring agents runs as a small scripted run through a real Governor, with browser
actions declared as uncached reads (semantics §4.1)."""

from __future__ import annotations

from typing import Any

import headway

RECURRENCE = "brought you back to a result you already had"  # the recurrence correction says this


class Page:
    """A browser page in text mode: every render numbers its elements anew."""

    def __init__(self) -> None:
        self.elements = [f"<button aria-label=Tool {i} />" for i in range(40)]
        self.elements[5] = "<span class=eye-icon />"
        self.elements[9] = "<button id=menuTrigger />"
        self.elements[3] = "<button aria-label=Close />"
        for row in range(30, 36):
            self.elements[row] = "<input type=checkbox />"
        self.open = False
        self.renders = 0
        self.numbers: dict[int, int] = {}  # number shown in the last render -> element

    def render(self, report: str) -> str:
        self.renders += 1
        base = 1000 * self.renders
        self.numbers = {}
        lines = [report, "<browser_state>", "Dashboard - Reports"]
        for n, element in enumerate(self.elements):
            self.numbers[base + n] = n
            lines.append(f"[{base + n}]{element}")
            lines.append(f"\tLabel {n}")
            if n == 9 and self.open:
                lines.extend(f"\t[{base + 100 + k}]<option /> Choice {k}" for k in range(3))
                self.numbers.update({base + 100 + k: 100 + k for k in range(3)})
        return "\n".join(lines)

    def number_of(self, element: int) -> int:
        return next(k for k, v in self.numbers.items() if v == element)


def browser(page: Page, *, seen: bool = True) -> headway.Session:
    gov = headway.Governor()

    def click(index: int) -> str:
        element = page.numbers[index]
        if element == 9:  # the dropdown's trigger opens and closes it
            page.open = not page.open
        elif element == 3:  # its close button
            page.open = False
        return page.render(f"Clicked {page.elements[element % 100]}")

    def check(index: int) -> str:  # a row's check box: a short answer, the page not shown
        return f"Clicked {page.elements[page.numbers[index]]}"

    def input_text(index: int, text: str) -> str:  # the page does not show typed values
        return page.render(f"Typed '{text}'")

    def search_page(pattern: str) -> str:
        return page.render(f'No matches found for "{pattern}" on page.')

    def scroll(down: bool, pages: float) -> str:  # at the bottom already: nothing moves
        return page.render(f"Scrolled {'down' if down else 'up'} {pages} pages")

    def evaluate(code: str) -> str:
        seed = sum(map(ord, code))  # each probe finds its own figures
        return f"{code} ->\n" + "\n".join(f"metric {i}: {seed * i % 997}" for i in range(20))

    def fill(index: int, text: str) -> str:  # a short answer: the page is not shown
        return f"Typed '{text}'"

    def find(selector: str) -> str:  # what it found, above the page it found it on
        return page.render(f"Found 2 elements matching {selector}:\n[0] <button> {selector} 0")

    def look() -> str:
        return page.render("Current page")

    for fn in (click, check, input_text, search_page, scroll, evaluate, fill, find, look):
        gov.register(fn.__name__, fn, effect="read")  # a view action: uncached, judged
    s = gov.session("run")
    if seen:
        s.call("look", {})  # the page the agent starts from
    return s


def corrections(s: headway.Session, calls: list[tuple[str, Any]]) -> list[str | None]:
    out = []
    for tool, args in calls:
        out.append(s.call(tool, args() if callable(args) else args).correction)
    return out


def test_the_same_element_clicked_under_a_new_number_on_an_unchanged_page_is_corrected() -> None:
    page = Page()
    s = browser(page)
    eye = [("click", lambda: {"index": page.number_of(5)}) for _ in range(3)]
    got = corrections(s, eye)
    assert got[:2] == [None, None]
    assert got[2] is not None and RECURRENCE in got[2]


def test_opening_a_dropdown_the_third_time_after_closing_it_is_corrected() -> None:
    page = Page()
    s = browser(page)
    toggle = ("click", lambda: {"index": page.number_of(9)})
    close = ("click", lambda: {"index": page.number_of(3)})
    got = corrections(s, [toggle, close] * 3)
    # open, close (the page it started from), open, close, open: the same element
    # brings the same open list a third time and nothing new came in between
    assert got[:4] == [None] * 4
    assert all(g is not None and RECURRENCE in g for g in got[4:])


def test_reworded_searches_on_an_unchanged_page_are_corrected_the_third_time() -> None:
    s = browser(Page())
    patterns = ["Save button", "save changes", "Save settings button"]
    got = corrections(s, [("search_page", {"pattern": p}) for p in patterns])
    assert got[:2] == [None, None]
    assert got[2] is not None and RECURRENCE in got[2]


def test_scrolling_a_page_that_no_longer_moves_is_corrected_the_third_time() -> None:
    s = browser(Page())
    got = corrections(s, [("scroll", {"down": True, "pages": p}) for p in (1, 2, 5)])
    assert got[:2] == [None, None]
    assert got[2] is not None and RECURRENCE in got[2]


def test_the_same_failure_reported_as_text_three_times_gets_the_repeated_error_correction() -> None:
    gov = headway.Governor()

    def edit(old: str) -> str:
        return "<tool_use_error>File has not been read yet. Read it first.</tool_use_error>"

    gov.register("edit", edit, effect="write")
    s = gov.session("run")
    got = [s.call("edit", {"old": f"line {i}"}) for i in range(3)]
    assert [o.status for o in got] == [headway.Status.EXECUTED] * 3  # still a result
    assert got[1].correction is None
    assert got[2].correction is not None and "same failure 3 times" in got[2].correction


def test_filling_five_fields_once_each_on_an_unchanged_page_is_not_corrected() -> None:
    page = Page()
    s = browser(page)
    fields = [
        ("input_text", lambda n=n: {"index": page.number_of(20 + n), "text": "same value"})
        for n in range(5)
    ]
    assert corrections(s, fields) == [None] * 5


def test_reopening_a_dropdown_once_is_not_corrected() -> None:
    page = Page()
    s = browser(page)
    toggle = ("click", lambda: {"index": page.number_of(9)})
    choose = ("click", lambda: {"index": page.number_of(101)})
    assert corrections(s, [toggle, toggle, toggle, choose]) == [None] * 4


def test_probing_a_dashboard_four_ways_is_not_corrected() -> None:
    s = browser(Page())
    probes = ["revenue", "users by week", "errors today", "latency p95"]
    assert corrections(s, [("evaluate", {"code": p}) for p in probes]) == [None] * 4


def test_element_arguments_are_read_under_the_names_a_tool_declares() -> None:
    page = Page()
    gov = headway.Governor()

    def tap(element_id: int) -> str:
        return page.render(f"Tapped {page.elements[page.numbers[element_id]]}")

    gov.register("tap", tap, effect="read", targets=["element_id"])
    gov.register("look", lambda: page.render("Current page"), effect="read")
    s = gov.session("run")
    s.call("look", {})
    got = [s.call("tap", {"element_id": page.number_of(5)}).correction for _ in range(3)]
    assert got[2] is not None and RECURRENCE in got[2]


def test_going_back_to_a_list_between_new_pages_is_not_corrected() -> None:
    page = Page()
    s = browser(page)
    calls: list[tuple[str, Any]] = []
    for k in range(3):  # the inbox, then a message not read before, three times
        calls.append(("click", lambda: {"index": page.number_of(1)}))
        calls.append(("evaluate", {"code": f"read message {k}"}))
    assert corrections(s, calls) == [None] * 6


def test_different_writes_with_the_same_acknowledgement_are_not_corrected() -> None:
    gov = headway.Governor()

    def restore(path: str) -> str:  # three files restored: each a change of its own
        return "Updated 1 path from the index; the working tree now matches the last commit"

    gov.register("restore", restore, effect="write")
    s = gov.session("run")
    got = [s.call("restore", {"path": p}).correction for p in ("a.py", "b.py", "c.py")]
    assert got == [None] * 3


def test_ticking_the_check_boxes_of_five_rows_is_not_corrected() -> None:
    page = Page()
    s = browser(page)
    rows = [("check", lambda n=n: {"index": page.number_of(30 + n)}) for n in range(5)]
    # five elements alike but for their rows' text, each answering the same short text
    assert corrections(s, rows) == [None] * 5


def test_ticking_rows_by_number_before_any_page_was_seen_is_not_corrected() -> None:
    page = Page()
    page.render("the page the task started on")  # its numbers reached the agent elsewhere
    s = browser(page, seen=False)
    rows = [("check", {"index": page.number_of(30 + n)}) for n in range(5)]
    # no page to read the numbers from: each number still names one element of its own
    assert corrections(s, rows) == [None] * 5


def test_ticking_rows_again_after_the_page_changed_is_not_corrected() -> None:
    page = Page()
    s = browser(page)
    rows = [("check", lambda n=n: {"index": page.number_of(30 + n)}) for n in range(3)]
    assert corrections(s, rows) == [None] * 3
    page.elements[0] = "<button aria-label=Reloaded />"  # a reload: the rows unticked again
    s.call("look", {})
    # the same rows on a page that changed since: new targets, not the same clicks again
    assert corrections(s, rows) == [None] * 3


def test_typing_the_same_text_again_between_looks_at_an_unchanged_page_is_corrected() -> None:
    page = Page()
    s = browser(page)
    fill = ("fill", lambda: {"index": page.number_of(20), "text": "invoice OR payment"})
    calls = [fill, ("find", {"selector": "#panel button"}), fill]
    calls += [("find", {"selector": "#panel *"}), fill]
    got = corrections(s, calls)
    # each look finds something of its own, but the page it shows never changed: the
    # third identical fill is the same target, the same state, nothing new
    assert got[:4] == [None] * 4
    assert got[4] is not None and RECURRENCE in got[4]


def test_typing_the_same_text_again_after_the_page_changed_is_not_corrected() -> None:
    page = Page()
    s = browser(page)
    fill = ("fill", lambda: {"index": page.number_of(20), "text": "invoice OR payment"})

    def reload(label: str) -> tuple[str, Any]:
        def change() -> dict[str, Any]:
            page.elements[0] = f"<button aria-label={label} />"
            return {"selector": label}

        return ("find", change)

    calls = [fill, reload("first"), fill, reload("second"), fill]
    assert corrections(s, calls) == [None] * 5


def test_the_recurrence_window_keeps_its_size_s_newest_entries_and_reloads_them_exactly() -> None:
    """Its entries are packed (a tool, three 64-bit digests, new): the oldest past the
    window's size goes, a session record's entries come back as they were (digests of
    all 64 bits, the tool, whether the step was new), and a reloaded window counts the
    same recurrences as the one it was dumped from."""
    from headway._recurrence import Recurrence

    page = "Dashboard\n" + "a row of the page\n" * 8

    def look(r: Recurrence, i: int, text: str | None) -> int:
        return r.observe(
            "look", f'{{"i":{i}}}', f"id{i}", text, targets=(), read=True, fresh_write=text is None
        )

    r = Recurrence(3)
    assert [
        look(r, 0, "another page\n" * 9),
        look(r, 1, None),
        look(r, 2, page),
        look(r, 3, page),
    ] == [0, 0, 0, 0]
    entries = r.dump()
    assert [e[0] for e in entries] == ["look"] * 3  # the first step left
    assert [e[4] for e in entries] == [True, True, False]  # a write, a new page, again
    assert entries[0][2:4] == [0, 0]  # no result: no state, no body
    assert all(0 < e[1] < 1 << 64 for e in entries) and entries[1][2:4] == entries[2][2:4]

    top = [["t", (1 << 64) - 1, (1 << 64) - 2, (1 << 63) + 5, True]]
    again = Recurrence(3)
    again.load(top)
    assert again.dump() == top
    again.load(top + entries)  # one more than fits: the oldest goes
    assert again.dump() == entries
    # the same page a third time with nothing new since: reloaded or not, it recurs
    assert look(r, 4, page) == look(again, 4, page) == 3


def test_the_recurrence_entries_texts_are_its_entries_as_json_after_every_change() -> None:
    """A shared session writes the entries' JSON texts at every step, each encoded once
    and kept: after steps past the window's size, a user turn and a reload they are still
    the window's entries, in order, and a copy the window's later steps leave alone."""
    import orjson

    from headway._recurrence import Recurrence

    def look(r: Recurrence, i: int) -> None:
        r.observe("look", f'{{"i":{i}}}', f"id{i}", f"page {i % 5}\n{i % 3} rows", targets=(),
                  read=True, fresh_write=False)  # fmt: skip

    r = Recurrence(4)
    for i in range(11):
        look(r, i)
        texts = r.texts()
        assert [orjson.loads(t) for t in texts] == r.dump() and len(texts) == min(i + 1, 4)
    look(r, 11)
    assert [orjson.loads(t) for t in texts] != r.dump()  # the copy taken before stayed
    assert [orjson.loads(t) for t in r.texts()] == r.dump()
    r.clear()
    assert r.texts() == [] == r.dump()
    look(r, 12)
    again = Recurrence(4)
    again.load(r.dump())
    look(again, 13)
    look(r, 13)
    assert again.texts() == r.texts() and len(r.texts()) == 2
