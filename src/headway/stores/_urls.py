"""Store URLs and connection strings: parsed once, their password never shown.

``target(url)`` finds the password of a ``redis://``, ``rediss://`` or ``postgresql://``
URL, or of a PostgreSQL ``key=value`` connection string, and gives

- ``connect``: what the driver is handed, the user and password percent-encoded, so a
  driver never misreads a password holding ``@``, a space, a quote, ``%``, ``:`` or
  unicode (and never quotes a piece of it back in an error);
- ``shown``: the URL with the password ``[redacted]``, for messages and ``repr``;
- ``hide(text)``: ``text`` with the password replaced in every form it may take there
  (as written, decoded, percent-encoded, quoted or escaped by Python, JSON or libpq),
  then ``scrub``-bed.

In a URL, the password ends at the last ``@`` before the host. A raw ``/``, ``?`` or ``#``
in it (which should be written ``%2F``, ``%3F``, ``%23``) is understood when the URL
cannot be read otherwise: when the part before the first of them is not a host and port,
or an ``@`` follows in the path.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, quote_plus, unquote

from .._redact import REDACTED, scrub
from ..errors import ConfigError

# host[:port], comma-separated (libpq takes several); IPv6 in brackets
_HOST = r"(?:\[[0-9A-Za-z:.%]*\]|[^\s@/?#:\[\],]*)(?::[0-9]*)?"
_HOSTS = re.compile(rf"{_HOST}(?:,{_HOST})*")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
_SECRET_PARAMS = ("password", "passwd", "pass", "sslpassword")


@dataclass(frozen=True)
class Target:
    """A store's address, parsed (see the module's doc)."""

    connect: str
    shown: str
    secrets: tuple[str, ...] = ()

    def hide(self, text: str) -> str:
        for secret in self.secrets:  # longest first: no form hides part of a longer one
            text = text.replace(secret, REDACTED)
        return scrub(text)


def target(url: str) -> Target:
    """Parse a store URL (or a PostgreSQL ``key=value`` string)."""
    scheme, sep, rest = url.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        return _key_values(url) if "=" in url else Target(url, scrub(url))
    userinfo, hosted = _split(rest)
    query = hosted.partition("?")[2].partition("#")[0]
    passwords = [v for k, v in parse_qsl(query) if k.lower() in _SECRET_PARAMS and v]
    if userinfo is None:
        forms = _forms(passwords)
        return Target(url, _hidden(url, forms), forms)
    user, has_password, raw = userinfo.partition(":")
    password = unquote(raw)
    forms = _forms([password, raw, userinfo, *passwords] if has_password else passwords)
    credentials = quote(unquote(user), safe="")
    connect = f"{scheme}://{credentials}"
    shown = f"{scheme}://{user}"
    if has_password:
        connect += ":" + quote(password, safe="")
        shown += ":" + REDACTED
    return Target(f"{connect}@{hosted}", _hidden(f"{shown}@{hosted}", forms), forms)


def _split(rest: str) -> tuple[str | None, str]:
    """(userinfo or None, the rest from the host on)."""
    end = _first(rest, "/?#")
    netloc = rest[:end]
    at = netloc.rfind("@")
    host, tail = netloc[at + 1 :], rest[end:]
    path = "" if tail.startswith("?") else tail.partition("?")[0]
    if _HOSTS.fullmatch(host) and "@" not in path:
        return (netloc[:at] if at >= 0 else None), rest[at + 1 :]
    # a raw "/", "?" or "#" in the password: it ends at the first "@" before a host
    for found in re.finditer("@", rest):
        after = rest[found.end() :]
        if after[: _first(after, "/?#")] and _HOSTS.fullmatch(after[: _first(after, "/?#")]):
            return rest[: found.start()], after
    return (netloc[:at] if at >= 0 else None), rest[at + 1 :]


def _first(text: str, chars: str) -> int:
    found = [i for i in (text.find(c) for c in chars) if i >= 0]
    return min(found) if found else len(text)


def _key_values(dsn: str) -> Target:
    """A PostgreSQL ``key=value`` connection string, read by libpq's own parser; a string
    it cannot read is refused without quoting the driver (its message quotes the text
    around the fault: maybe a piece of the password)."""
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo
    except ImportError:  # not a PostgreSQL store: nothing to find
        return Target(dsn, scrub(dsn))
    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        raise ConfigError(
            "the PostgreSQL connection string is malformed (shown without its values: "
            "they may hold the password): write key=value pairs, quoting a value that "
            "holds spaces or quotes as 'it\\'s' (a backslash before ' and \\)"
        ) from None
    passwords = [str(v) for k, v in params.items() if k in _SECRET_PARAMS and v]
    shown = make_conninfo(
        **{k: (REDACTED if k in _SECRET_PARAMS else str(v)) for k, v in params.items()}
    )
    forms = _forms(passwords)
    return Target(dsn, _hidden(shown, forms), forms)


def _forms(passwords: list[str]) -> tuple[str, ...]:
    """Every form a password may take in a message, longest first."""
    forms: set[str] = set()
    for p in passwords:
        forms.update(
            (
                p,
                quote(p, safe=""),
                quote(p),
                quote_plus(p),
                quote(p, safe="@:"),
                repr(p)[1:-1],
                json.dumps(p)[1:-1],
                json.dumps(p, ensure_ascii=False)[1:-1],
                p.replace("\\", "\\\\").replace("'", "\\'"),  # libpq's quoting
                repr(p.encode("utf-8", "surrogatepass"))[2:-1],
                p.encode("unicode_escape").decode("ascii"),
            )
        )
    forms.discard("")
    return tuple(sorted(forms, key=len, reverse=True))


def _hidden(text: str, forms: tuple[str, ...]) -> str:
    for secret in forms:
        text = text.replace(secret, REDACTED)
    return text
