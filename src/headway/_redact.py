"""Redaction: what headway shows of a secret is ``[redacted]``.

One module for every surface (``to_model()`` texts, audit records, flags, logs, exception
messages), so a secret hidden in one place is hidden in all:

- ``secret_name``: an argument name is secret when its normalised form (lower case, letters
  and digits only: ``apiKey``, ``api-key`` and ``API_KEY`` are all ``apikey``) contains one of
  the secret names (``DEFAULT_NAMES`` plus the tool's ``redact=``);
- ``scrub``: secret shapes inside any text: the password of a URL (``redis://:pw@host``), a
  DSN's ``password=``, ``?api_key=``-style query parameters, ``Bearer`` tokens and
  ``sk-``-style API keys;
- ``redact``: a copy of a structure with secret-named values masked at any depth and every
  string scrubbed (structures nested deeper than ``MAX_DEPTH`` are cut, never printed).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "[redacted]"
MAX_DEPTH = 32

#: the names redacted by default (normalised: lower-case letters and digits only)
DEFAULT_NAMES = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "authorization",
    "cookie",
    "privatekey",
    "credential",
    "signature",
)

_NOT_ALNUM = re.compile(r"[^a-z0-9]+")  # "+": one removal per run, not per character
# names that contain a secret name but hold none: "author", "max_tokens"
_NOT_SECRET = re.compile(
    r"author(?!ization)|(?:max|num|total|input|output|prompt|completion)tokens?"
)

# A URL scheme: matched from the start of its run of scheme characters (digits and
# "+.-" before the first letter are kept in the group, so the replacement is unchanged),
# possessively. Searching for a scheme inside every suffix of a long word is quadratic:
# a 1,200-character word took 0.7 ms per pattern.
_SCHEME = r"(?<![a-zA-Z0-9+.\-])[0-9+.\-]*+[a-zA-Z][a-zA-Z0-9+.\-]*+://"
_SHAPES = (
    # the userinfo of a URL: scheme://user:password@host -> scheme://user:[redacted]@host
    (re.compile(rf"({_SCHEME}[^/\s:@'\"]*):[^@\s'\"]*@"), r"\1:" + REDACTED + "@"),
    # a URL with a user but no password marker still hides nothing; a bare token@ does
    (re.compile(rf"({_SCHEME})[^/\s:@'\"]+@"), r"\1" + REDACTED + "@"),
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9\-._~+/]{8,}=*"), r"\1 " + REDACTED),
    # name=value pairs with secret names: query strings, DSNs, headers, JSON-ish text
    (
        re.compile(
            r"(?i)\b((?:[a-z0-9]+[_\-])*(?:password|passwd|pwd|secret|token|api[_\-]?key"
            r"|access[_\-]?key|auth|authorization|signature|sig|credentials?|cookie)"
            r"(?:[_\-][a-z0-9]+)*)([\"']?\s*[=:]\s*)(?![\"']?\[redacted\])"
            r"('[^']*'|\"[^\"]*\"|[^\s&,;'\"}]+)"
        ),
        r"\1\2" + REDACTED,
    ),
    (re.compile(r"\b(sk|pk|rk|ghp|gho|ghs|xox[abps])[-_][A-Za-z0-9\-_]{12,}"), REDACTED),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), REDACTED),
)


# every ASCII byte but a-z and 0-9: what _NOT_ALNUM removes from lower-cased ASCII text
_NOT_ALNUM_BYTES = bytes(b for b in range(128) if not (chr(b).isdigit() or "a" <= chr(b) <= "z"))


def normalise(name: str) -> str:
    """``name`` lower-cased, with everything but ASCII letters and digits removed."""
    lowered = name.lower()
    if lowered.isascii():
        # a byte table in C: the regex's one substitution per run of punctuation cost
        # 5-9 us on a call's 130-character arguments, the table under 1 us
        return lowered.encode().translate(None, _NOT_ALNUM_BYTES).decode()
    return _NOT_ALNUM.sub("", lowered)  # lower() may make ASCII of non-ASCII: "K" (Kelvin)


@functools.lru_cache(maxsize=256)
def names_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    """A pattern matching the normalised form of any secret name."""
    words = sorted({normalise(n) for n in names} - {""})
    return re.compile("|".join(map(re.escape, words)) or "(?!)")


def secret_name(name: str, names: tuple[str, ...] = DEFAULT_NAMES) -> bool:
    """Whether an argument called ``name`` holds a secret."""
    key = _NOT_SECRET.sub("", normalise(name))
    return names_pattern(names).search(key) is not None


# Per shape, words one of which any match contains, and whether they are looked for in
# the text as it is (the shape is case-sensitive) or lower-cased. ASCII text holding none
# of a shape's words cannot match it, so its pattern is skipped: the patterns scan every
# position of the text, the words take one pass each.
_WORDS = (
    (("://",), False),
    (("://",), False),
    (("bearer", "basic", "token"), False),
    (("pass", "pwd", "secret", "token", "key", "auth", "sig", "credential", "cookie"), False),
    (("k-", "k_", "ghp", "gho", "ghs", "xox"), True),  # sk-, pk-, rk-, ghp_, xoxb-...
    (("AKIA",), True),
)
_LOWER = tuple(dict.fromkeys(w for words, cased in _WORDS if not cased for w in words))
_CASED = tuple(dict.fromkeys(w for words, cased in _WORDS if cased for w in words))


def scrub(text: str) -> str:
    """``text`` with URL passwords, ``password=``/``api_key=`` values, bearer tokens and
    API-key shapes replaced by ``[redacted]``."""
    # most texts (arguments, flags, errors) hold no word of any shape: plain substring
    # tests, and none of the patterns runs
    if not text or (text.isascii() and not _holds_a_word(text)):
        return text
    return _scrub_recent(text) if len(text) <= 1000 else _scrub(text)


def _holds_a_word(text: str) -> bool:
    lowered = text.lower()
    for word in _LOWER:  # plain loops: a generator per call costs as much as the tests
        if word in lowered:
            return True
    for word in _CASED:  # noqa: SIM110  (any() over a generator: the slower half)
        if word in text:
            return True
    return False


def _scrub(text: str) -> str:
    # only in ASCII text does lower() match the patterns' case-insensitivity exactly
    # (re's IGNORECASE also pairs "K" with the Kelvin sign, "s" with the long s)
    lowered = text.lower() if text.isascii() else None
    original = text
    for (pattern, repl), (words, cased) in zip(_SHAPES, _WORDS, strict=True):
        # replacing never makes a word: "[redacted]" holds none and its brackets join none,
        # so the words are looked for in the text before any replacement
        hay = original if cased else lowered
        if hay is None or any(w in hay for w in words):
            text = pattern.sub(repl, text)
    return text


# texts holding a shape's word recur (flags, error messages, a retried call's arguments)
_scrub_recent = functools.lru_cache(maxsize=1024)(_scrub)


def redact(value: Any, names: Iterable[str] = DEFAULT_NAMES, depth: int = 0) -> Any:
    """A JSON-ready copy of ``value``: secret-named values masked at any depth, strings
    scrubbed, long strings and lists cut, anything below ``MAX_DEPTH`` replaced by a marker."""
    names = names if isinstance(names, tuple) else tuple(names)
    if depth >= MAX_DEPTH:
        return "[nested too deeply]"
    if isinstance(value, Mapping):
        return {
            str(k): REDACTED if secret_name(str(k), names) else redact(v, names, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v, names, depth + 1) for v in value[:50]]
    if isinstance(value, str):
        return scrub(value if len(value) <= 200 else value[:200] + "...")
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        return value if abs(value) < 10**18 else f"<int of {value.bit_length()} bits>"
    return scrub(_safe_repr(value)[:200])


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:  # a repr that fails (or recurses too deeply) shows the type only
        return f"<{type(value).__name__}>"


# a secret-named key and its value in canonical JSON text: "api_key":"..." or "x":{...
_JSON_PAIR = re.compile(r'"((?:[^"\\]|\\.)*)":("(?:[^"\\]|\\.)*"?|[^,}\]{\[]*)')


def redact_json_text(text: str, names: tuple[str, ...], limit: int) -> str:
    """Redact canonical JSON text without parsing it (for text too long or too deep to
    parse cheaply): secret-named scalar values are masked; at a secret-named object or
    list the summary stops. Only the first ``limit`` characters are looked at."""
    head = text[: limit + 200]
    out: list[str] = []
    pos = 0
    for m in _JSON_PAIR.finditer(head):
        if not secret_name(m.group(1), names):
            continue
        out.append(head[pos : m.start(2)])
        if m.group(2) == "" and m.end() < len(head) and head[m.end()] in "{[":
            out.append('"' + REDACTED + '"...')
            pos = len(head)
            break
        out.append('"' + REDACTED + '"')
        pos = m.end()
    out.append(head[pos:])
    result = scrub("".join(out))
    return result if len(result) <= limit and len(text) <= limit else result[:limit] + "..."
