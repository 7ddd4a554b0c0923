"""A shell classifier: is a command a read or a write, and which files does it touch?
(a shell tool reads with ``cat`` and writes with ``rm``).

The rule is "never under-invalidate": a command is a read only when the classifier can
prove it: every segment (split on ``;``, ``&&``, ``||``, ``|``, newlines) starts with a
known read-only program, no segment redirects output into a file, no read-only program is
given an option or operand that makes it write (``sed -i``, ``sed 'w f'``, ``sort -o``,
``uniq a b``, ``awk '{print > "f"}'``, ``find -delete``, ``xxd -r``), and the command
has no command substitution. Anything else is a write: unknown means unsafe.

Resources are path components. A read declares every component of every path it reads
(``cat build/out`` declares ``build`` and ``out``; ``cd src && cat a.py`` declares ``src``
and ``a.py``); a write declares the last component of every path it writes (``rm -rf
build`` declares ``build``). A write therefore invalidates every read of a path under a
directory of that name (it may over-invalidate, never under). When a path cannot be
listed (a glob, a variable, ``..``, a program whose writes are unseen) the call declares
none, which invalidates everything (a write) or makes it invalidated by every write (a
read). Paths are taken as the command states them: every command must start in the same
working directory (a fresh shell per call), and symbolic or hard links to a path the agent
also reads through another name are not followed.

This module owns the classification; taking a command line apart is ``_shell_words``,
and reading ``sed`` and ``awk`` scripts is ``_shell_scripts``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from ._shell_scripts import awk_program, sed_script
from ._shell_words import Segment, components, operands_of, segments

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
        "gawk",
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
    ["date", "ps", "top", "uptime", "free", "df", "du", "stat"]
)  # reads whose answer changes with time (stat shows access times)
_WRITE_FLAGS = {
    "find": ("-delete", "-exec", "-ok", "-fprint", "-fls"),
    "rg": ("--pre",),
    "file": ("-C", "--compile"),
    "tree": ("-o",),
    "date": ("-s", "--set"),
    "git": ("--output", "-O", "--open-files-in-pager"),
}


def _writes(prog: str, words: list[str]) -> bool:
    """A read-only program given an option or operand that makes it write (or run code)."""
    args = words[1:]
    if any(w == f or w.startswith(f) for w in args for f in _WRITE_FLAGS.get(prog, ())):
        return True
    shorts = "".join(w[1:] for w in args if w.startswith("-") and not w.startswith("--"))
    longs = [w for w in args if w.startswith("--")]
    if prog == "sed":
        sed = sed_script(words)
        return sed is None or sed[0] != "read"
    if prog in ("awk", "gawk"):
        return awk_program(words) is None
    if prog == "sort":
        return "o" in shorts or any(w.startswith(("--output", "--compress")) for w in longs)
    if prog == "uniq":
        return len(operands_of(words)) > 1  # uniq IN OUT writes OUT
    if prog == "xxd":
        return "r" in shorts or len(operands_of(words)) > 1  # xxd IN OUT writes OUT
    if prog == "env":
        return bool(operands_of(words))  # env VAR=x program: runs a program
    if prog == "hostname":
        return bool(operands_of(words))  # sets the host name
    if prog == "date":
        return any(not w.startswith("+") for w in operands_of(words))  # sets the clock
    if prog == "git":
        sub = words[1] if len(words) > 1 else ""
        if sub not in GIT_READ:
            return True
        return sub == "branch" and any(
            w not in ("-a", "-r", "-v", "-vv", "-l", "--list", "--all", "--show-current")
            for w in words[2:]
        )
    if prog in ("pip", "pip3"):
        return len(words) < 2 or words[1] not in PIP_READ
    return False


def command_effect(command: str) -> Literal["read", "write"]:
    """'read' when the command provably only reads (see the module docstring), else 'write'."""
    parsed = segments(command)
    if parsed is None:
        return "write"  # cannot parse it: unknown means unsafe
    for words, written, _ in parsed:
        if written:
            return "write"
        if not words:
            continue
        prog = words[0].rsplit("/", 1)[-1]
        if prog not in READ_ONLY and prog not in ("git", "pip", "pip3"):
            return "write"
        if _writes(prog, words):
            return "write"
    return "read"


def is_dynamic(command: str) -> bool:
    """A read whose answer changes with time (``date``, ``ps``): never cache it."""
    parsed = segments(command) or []
    return any(ws[:1] and ws[0].rsplit("/", 1)[-1] in DYNAMIC for ws, _, _ in parsed)


def shell_effect(args: Mapping[str, Any]) -> Literal["read", "write"]:
    """An ``effect=`` function for a tool whose command is in ``command``, ``cmd`` or ``code``."""
    command = args.get("command", args.get("cmd", args.get("code")))
    return command_effect(command) if isinstance(command, str) else "write"


# -- resources: which files a command reads or writes ---------------------------------------

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
        "file",
        "md5sum",
        "sha1sum",
        "sha256sum",
        "strings",
        "tac",
        "more",
    ]
)
_PATTERN_FIRST = frozenset(["grep", "egrep", "fgrep"])  # first operand is not a path
_FILE_WRITERS = frozenset(["rm", "mv", "cp", "touch", "mkdir", "rmdir", "chmod", "chown", "ln"])
_TREE_WRITERS = frozenset(
    ["rm", "mv", "cp", "rmdir", "chmod", "chown", "ln"]
)  # may act on a directory


def command_resources(command: str) -> tuple[str, ...] | None:
    """The resources of a command (see the module docstring): every path component a read
    reads, or the last component of every path a write writes; None when that cannot be
    told: a directory read (``ls``, ``find``, ``grep -r``), a program whose writes are
    unseen (``python x.py``, ``make``), a path the shell rewrites, a command that does not
    parse."""
    parsed = segments(command)
    if parsed is None:
        return None
    found = _written(parsed) if command_effect(command) == "write" else _read(parsed)
    return tuple(sorted(found)) if found else None


def _read(parsed: list[Segment]) -> set[str] | None:
    found: set[str] = set()
    for words, _, read in parsed:
        paths = list(read)
        if words:
            prog = words[0].rsplit("/", 1)[-1]
            operands = operands_of(words)
            if prog in ("cd", "pushd"):
                paths += operands or ["~"]  # later relative paths are under it
            elif prog in ("echo", "printf", "true", "false", "pwd", "test", "["):
                pass
            elif prog not in _FILE_READERS or _recursive(words):
                return None  # a directory or a whole-repository read: any write may change it
            elif prog == "sed":
                sed = sed_script(words)
                if sed is None or sed[2] or not sed[1]:
                    return None  # a script that reads other files, or standard input
                paths += sed[1]
            else:
                if any(w.startswith(("-f", "--file")) for w in words):
                    return None  # patterns read from a file
                if prog in _PATTERN_FIRST and not any(w.startswith("-e") for w in words):
                    operands = operands[1:]
                if not operands and not read:
                    return None  # reading standard input
                paths += operands
                paths += [w.split("=", 1)[1] for w in words[1:] if w.startswith("--") and "=" in w]
        for path in paths:
            parts = components(path)
            if parts is None:
                return None
            found.update(parts)
    return found


def _written(parsed: list[Segment]) -> set[str] | None:
    found: set[str] = set()
    moved = False  # a cd to a path outside the working directory
    for words, written, _ in parsed:
        paths = list(written)
        if words:
            prog = words[0].rsplit("/", 1)[-1]
            operands = operands_of(words)
            if prog == "cd":
                target = components(operands[0]) if len(operands) == 1 else None
                moved = moved or target is None or operands[0].startswith("/")
            elif prog == "sed" and (sed := sed_script(words)) is not None and sed[0] == "in-place":
                paths += sed[1]
            elif prog == "tee" or prog in _FILE_WRITERS:
                if prog in _TREE_WRITERS and any(p.startswith("/") for p in operands):
                    return None  # may be a directory above the working directory
                if prog in _TREE_WRITERS and moved:
                    return None
                paths += operands
            elif prog not in READ_ONLY or _writes(prog, words):
                return None  # a program whose writes we cannot see
        for path in paths:
            parts = components(path)
            if parts is None:
                return None
            found.add(parts[-1])
    return found


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
