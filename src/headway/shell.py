"""A shell classifier: is a command a read or a write? (semantics §1: "a shell tool reads
with ``cat`` and writes with ``rm``").

A command is a read when every segment (split on ``;``, ``&&``, ``||``, ``|``, newlines)
starts with a known read-only program, no segment redirects output into a file, and no
read-only program is given a flag that makes it write (``sed -i``, ``find -delete``).
Anything else is a write: unknown means unsafe.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any, Literal

READ_ONLY = frozenset(
    [
        "ls",
        "cat",
        "head",
        "tail",
        "grep",
        "egrep",
        "fgrep",
        "rg",
        "find",
        "wc",
        "pwd",
        "echo",
        "printf",
        "nl",
        "sed",
        "awk",
        "sort",
        "uniq",
        "cut",
        "diff",
        "file",
        "stat",
        "which",
        "type",
        "tree",
        "du",
        "df",
        "env",
        "printenv",
        "whoami",
        "id",
        "uname",
        "hostname",
        "date",
        "ps",
        "jq",
        "xxd",
        "od",
        "hexdump",
        "md5sum",
        "sha1sum",
        "sha256sum",
        "cmp",
        "column",
        "tr",
        "comm",
        "cd",
        "true",
        "false",
        "test",
        "[",
        "readlink",
        "realpath",
        "basename",
        "dirname",
        "less",
        "more",
        "strings",
        "locate",
        "tac",
        "fold",
        "expand",
    ]
)
GIT_READ = frozenset(
    [
        "status",
        "diff",
        "log",
        "show",
        "branch",
        "grep",
        "ls-files",
        "blame",
        "rev-parse",
        "describe",
        "shortlog",
    ]
)
PIP_READ = frozenset(["list", "show", "freeze", "check"])
DYNAMIC = frozenset(
    ["date", "ps", "top", "uptime", "free", "df", "du"]
)  # reads whose answer changes with time
_WRITE_FLAGS = {
    "sed": ("-i", "--in-place"),
    "find": ("-delete", "-exec", "-execdir", "-ok", "-fprint"),
}
_SPLIT = re.compile(r"\|\||&&|[;|\n]")
_REDIRECT = re.compile(r"(?<![0-9&<>])>{1,2}(?!&)\s*(?!/dev/null)\S")


def command_effect(command: str) -> Literal["read", "write"]:
    """'read' when the command only reads (see the module docstring), else 'write'."""
    if _REDIRECT.search(command) or ("<<" in command and ">" in command):
        return "write"
    for segment in _SPLIT.split(command):
        words = _words(segment)
        if words is None:
            return "write"  # cannot parse it: unknown means unsafe
        if not words:
            continue
        prog = words[0].rsplit("/", 1)[-1]
        if prog in ("git", "pip", "pip3") and len(words) > 1:
            allowed = GIT_READ if prog == "git" else PIP_READ
            if words[1] not in allowed:
                return "write"
            continue
        if prog not in READ_ONLY:
            return "write"
        flags = _WRITE_FLAGS.get(prog, ())
        if any(w == f or w.startswith(f) for w in words[1:] for f in flags):
            return "write"
        if prog == "awk" and "system(" in segment:
            return "write"
    return "read"


def is_dynamic(command: str) -> bool:
    """A read whose answer changes with time (``date``, ``ps``): never cache it."""
    return any((_words(seg) or [""])[0] in DYNAMIC for seg in _SPLIT.split(command))


def shell_effect(args: Mapping[str, Any]) -> Literal["read", "write"]:
    """An ``effect=`` function for a tool whose command is in ``command``, ``cmd`` or ``code``."""
    command = args.get("command", args.get("cmd", args.get("code")))
    return command_effect(command) if isinstance(command, str) else "write"


def _words(segment: str) -> list[str] | None:
    try:
        words = shlex.split(segment, posix=True)
    except ValueError:
        return None
    while words and "=" in words[0] and not words[0].startswith("="):  # VAR=value cmd
        words = words[1:]
    return words
