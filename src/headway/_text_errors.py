"""Errors given as text (semantics §3, repeated error): a result the tool returned as a
normal value whose first line says it failed.

Many tools report a failure inside an ordinary result instead of raising or setting an
error flag: a browser action answers ``Error: Element index 12 not found``, Claude Code
wraps a refused edit in ``<tool_use_error>``, a script prints a traceback. The Governor's
error predicate (``is_error``) decides what is an ERROR outcome; this module only lets the
repeated-error signal see such a failure, so the third identical failure in a row gets the
repeated-error correction. The step keeps its status and its progress mark: a text that
merely looks like an error never stops a run.
"""

from __future__ import annotations

import re

# the start of a failure report: an error word and a colon, or a wrapper that only
# failures carry (a traceback is not read: its first line names no failure)
_FAILED = re.compile(r"\s*(?:<tool_use_error>|(?:error|exception|fatal)\s*:)", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_HEAD = 400  # characters of a result looked at: the first line is all that is read


def text_error(text: str | None) -> str | None:
    """The fingerprint of a failure reported as text, or None for any other result.

    The fingerprint is the report's first line with numbers and quoted parts set aside
    (the same failure on another element, file or line is the same failure)."""
    if not text:
        return None
    head = text[:_HEAD]
    m = _FAILED.match(head)
    if m is None:
        return None
    rest = head[m.end() :].replace("</tool_use_error>", "").strip()
    line = rest.split("\n", 1)[0]
    return "text:" + _DIGITS.sub("#", _QUOTED.sub("'…'", line))[:200]
