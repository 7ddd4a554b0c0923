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
_SEPARATORS = frozenset([";", "&&", "||", "|", "&", "\n", "(", ")", ";;", "|&"])
_OUT = frozenset([">", ">>", ">|", "&>", "&>>"])
_HEREDOC = re.compile(r"(<<-?\s*(['\"]?)(\w+)\2[^\n]*)\n.*?\n\3(?=\n|$)", re.DOTALL)


def _segments(command: str) -> list[tuple[list[str], list[str], list[str]]] | None:
    """Quote-aware parse: per simple command (words, files written, files read by ``<``),
    or None when the command cannot be parsed (unknown means unsafe)."""
    lex = shlex.shlex(_HEREDOC.sub(r"\1", command), posix=True, punctuation_chars=";&|<>()\n")
    lex.whitespace = " \t\r"  # newlines separate commands
    lex.whitespace_split = True
    try:
        tokens = list(lex)
    except ValueError:
        return None
    out: list[tuple[list[str], list[str], list[str]]] = []
    words: list[str] = []
    written: list[str] = []
    read: list[str] = []
    it = iter(tokens)
    for tok in it:
        if tok in _SEPARATORS:
            if words or written:
                out.append((words, written, read))
            words, written, read = [], [], []
        elif tok in _OUT:
            target = next(it, "")
            if target != "/dev/null":
                written.append(target)
        elif tok in ("<", "<<", "<<<", ">&", "<&", "<<-"):
            source = next(it, "")
            if tok == "<":
                read.append(source)
        else:
            words.append(tok)
    if words or written:
        out.append((words, written, read))
    # a file descriptor number before a redirect ("2>/dev/null") is not an operand
    return [
        (_without_assignments([w for k, w in enumerate(ws) if not (w.isdigit() and k > 0)]), wr, rd)
        for ws, wr, rd in out
    ]


def command_effect(command: str) -> Literal["read", "write"]:
    """'read' when the command only reads (see the module docstring), else 'write'."""
    parsed = _segments(command)
    if parsed is None:
        return "write"  # cannot parse it: unknown means unsafe
    for words, written, _ in parsed:
        if written:
            return "write"
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
        if prog == "awk" and any("system(" in w for w in words):
            return "write"
    return "read"


def is_dynamic(command: str) -> bool:
    """A read whose answer changes with time (``date``, ``ps``): never cache it."""
    parsed = _segments(command) or []
    return any(
        _without_assignments(ws)[:1] and _without_assignments(ws)[0] in DYNAMIC
        for ws, _, _ in parsed
    )


def shell_effect(args: Mapping[str, Any]) -> Literal["read", "write"]:
    """An ``effect=`` function for a tool whose command is in ``command``, ``cmd`` or ``code``."""
    command = args.get("command", args.get("cmd", args.get("code")))
    return command_effect(command) if isinstance(command, str) else "write"


def _without_assignments(words: list[str]) -> list[str]:
    while words and "=" in words[0] and not words[0].startswith("="):  # VAR=value cmd
        words = words[1:]
    return words


# -- resources: which files a command reads or writes (finer cache invalidation, §1) --------

_FILE_READERS = frozenset(
    [
        "cat",
        "head",
        "tail",
        "nl",
        "wc",
        "sed",
        "grep",
        "egrep",
        "fgrep",
        "diff",
        "cmp",
        "stat",
        "file",
        "md5sum",
        "sha1sum",
        "sha256sum",
        "strings",
        "tac",
        "less",
        "more",
    ]
)
_PATTERN_FIRST = frozenset(["grep", "egrep", "fgrep", "sed", "awk"])  # first operand is not a path
_FILE_WRITERS = frozenset(
    ["rm", "mv", "cp", "touch", "mkdir", "rmdir", "chmod", "chown", "ln", "truncate"]
)


def command_resources(command: str) -> tuple[str, ...] | None:
    """The files a command reads (when it reads) or writes (when it writes), as basenames,
    or None when that cannot be told: a directory read (``ls``, ``find``, ``grep -r``), a
    program whose writes are unknown (``python x.py``, ``make``), a command that does not
    parse. Basenames over-invalidate (``a/x.py`` and ``b/x.py`` share one), never under."""
    parsed = _segments(command)
    if parsed is None:
        return None
    effect = command_effect(command)
    found: set[str] = set()
    for words, written, read in parsed:
        found.update(written if effect == "write" else read)
        if not words:
            continue
        prog = words[0].rsplit("/", 1)[-1]
        operands = [w for w in words[1:] if not w.startswith("-")]
        if effect == "read":
            if prog in ("cd", "echo", "printf", "true", "false", "pwd"):
                continue
            if prog not in _FILE_READERS or _recursive(words):
                return None  # a directory or a whole-repository read: any write may change it
            if prog in _PATTERN_FIRST and "-e" not in words:
                operands = operands[1:]
            if not operands and not read:
                return None  # reading standard input
            found.update(operands)
        elif prog == "sed" and any(w.startswith(("-i", "--in-place")) for w in words):
            found.update(operands[1:])
        elif prog == "tee" or prog in _FILE_WRITERS:
            found.update(operands)
        elif prog not in READ_ONLY:
            return None  # a program whose writes we cannot see
    names = {p.rstrip("/").rsplit("/", 1)[-1] for p in found}
    names.discard("")
    return tuple(sorted(names)) if names else None


def _recursive(words: list[str]) -> bool:
    return any(
        w == "--recursive"
        or (w.startswith("-") and not w.startswith("--") and ("r" in w or "R" in w))
        for w in words[1:]
    )


def shell_resources(args: Mapping[str, Any]) -> tuple[str, ...] | None:
    """A ``resources=`` function for a tool whose command is in ``command``, ``cmd`` or ``code``."""
    command = args.get("command", args.get("cmd", args.get("code")))
    return command_resources(command) if isinstance(command, str) else None
