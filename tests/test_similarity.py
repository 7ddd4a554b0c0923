"""The similarity helpers' fast paths give exactly what their plain forms give."""

from __future__ import annotations

import re

from hypothesis import example, given, settings
from hypothesis import strategies as hs

from headway.similarity import _VOLATILE, _volatile, query_shape, strip_volatile

_WORDS = re.compile(r"[^\W\d_]+")


def _shape(args: str) -> str:  # the definition: the words, lower-cased, one space apart
    return " ".join(_WORDS.findall(args.lower()))


@settings(max_examples=500, deadline=None)
@given(hs.text(alphabet=hs.characters(max_codepoint=127)))
def test_the_ascii_query_shape_is_the_words_of_the_text(text: str) -> None:
    # every ASCII character, controls and punctuation included: the translate table must
    # keep exactly the letters (a digit or "_" kept, or a letter dropped, fails here)
    assert query_shape(text) == _shape(text)


def test_every_ascii_character_is_a_letter_or_a_separator_as_the_regex_says() -> None:
    # exhaustive: the shape of an ASCII text depends only on each character's class
    for c in map(chr, range(128)):
        for text in (c, f"ab{c}cd", f"{c}{c}Z{c}"):
            assert query_shape(text) == _shape(text), repr(text)


@settings(max_examples=300, deadline=None)
@given(hs.text())
def test_the_query_shape_of_any_text_is_its_words(text: str) -> None:
    assert query_shape(text) == _shape(text)


def test_cosmetic_variants_of_a_query_share_a_shape_and_other_queries_do_not() -> None:
    a, b = '{"pattern":"launchcode*"}', '{"pattern":"*LaunchCode*","offset":20}'
    assert query_shape(a) == "pattern launchcode"
    assert query_shape(b) == "pattern launchcode offset"
    assert query_shape('{"q":"Ünïcode_wörds 42"}') == "q ünïcode wörds"
    assert query_shape('{"pattern":"launchpad*"}') != query_shape(a)


# the characters the volatile patterns are made of, a few others, and a non-ASCII digit
_VOLATILE_PARTS = "0123456789abcdefABCDEF:-T Z+.x\u0663\n"


@settings(max_examples=1000, deadline=None)
@given(hs.text(alphabet=_VOLATILE_PARTS, max_size=60))
@example("at 12:30:45 ok")
@example("2024-01-02T10:11Z")
@example("id 0123456789abcdef done")
@example("x 123e4567-e89b-12d3-a456-426614174000")
@example("1\u0662:\u0663\u0664:\u0665\u0666")  # after an ASCII digit, \d takes others
def test_strip_volatile_skips_only_texts_the_regex_leaves_alone(text: str) -> None:
    # the shape check returns a text untouched only when the regex changes nothing
    assert strip_volatile(text) == _VOLATILE.sub(_volatile, text)
