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
_SEPARATORS = frozenset([";", "&&", "||", "|", "&", "\n", "(", ")", ";;", "|&"])
_OUT = frozenset([">", ">>", ">|", "&>", "&>>"])
_IN = frozenset(["<", "<<", "<<<", "<<-", "<&"])
_HEREDOC = re.compile(r"(<<-?\s*(['\"]?)(\w+)\2[^\n]*)\n.*?\n\3(?=\n|$)", re.DOTALL)
_SUBSTITUTION = ("`", "$(", "<(", ">(")  # commands inside a word: not provably read-only
_EXPANDS = re.compile(r"[*?\[\]{}$~`\\]")  # a path the shell rewrites: cannot be listed

Segment = tuple[list[str], list[str], list[str]]  # words, files written, files read by "<"


def _segments(command: str) -> list[Segment] | None:
    """Quote-aware parse: per simple command (words, files written, files read by ``<``),
    or None when the command cannot be parsed or runs commands inside words (unknown
    means unsafe)."""
    if any(s in command for s in _SUBSTITUTION):
        return None
    lex = shlex.shlex(_HEREDOC.sub(r"\1", command), posix=True, punctuation_chars=";&|<>()\n")
    lex.whitespace = " \t\r"  # newlines separate commands
    lex.whitespace_split = True
    try:
        tokens = list(lex)
    except ValueError:
        return None
    out: list[Segment] = []
    words: list[str] = []
    written: list[str] = []
    read: list[str] = []
    it = iter(tokens)
    for tok in it:
        if tok in _SEPARATORS:
            if words or written or read:
                out.append((words, written, read))
            words, written, read = [], [], []
        elif tok in _OUT or tok == ">&":
            target = next(it, "")
            if tok == ">&" and (target.isdigit() or target == "-"):
                continue  # 2>&1: a file descriptor, not a file
            if target != "/dev/null":
                written.append(target)
        elif tok in _IN:
            source = next(it, "")
            if tok == "<":
                read.append(source)
        elif tok and all(ch in ";&|<>()\n" for ch in tok):
            return None  # an operator this parser does not know ("<>", ">>&")
        else:
            words.append(tok)
    if words or written or read:
        out.append((words, written, read))
    # a file descriptor number before a redirect ("2>/dev/null") is not an operand
    return [
        (_without_assignments([w for k, w in enumerate(ws) if not (w.isdigit() and k > 0)]), wr, rd)
        for ws, wr, rd in out
    ]


def _operands(words: list[str]) -> list[str]:
    """The words after the program that are not options (everything after ``--`` is one)."""
    found: list[str] = []
    for k, w in enumerate(words[1:], 1):
        if w == "--":
            return found + words[k + 1 :]
        if not w.startswith("-") or w == "-":
            found.append(w)
    return found


def _writes(prog: str, words: list[str]) -> bool:
    """A read-only program given an option or operand that makes it write (or run code)."""
    args = words[1:]
    if any(w == f or w.startswith(f) for w in args for f in _WRITE_FLAGS.get(prog, ())):
        return True
    shorts = "".join(w[1:] for w in args if w.startswith("-") and not w.startswith("--"))
    longs = [w for w in args if w.startswith("--")]
    if prog == "sed":
        sed = _sed(words)
        return sed is None or sed[0] != "read"
    if prog in ("awk", "gawk"):
        return _awk_program(words) is None
    if prog == "sort":
        return "o" in shorts or any(w.startswith(("--output", "--compress")) for w in longs)
    if prog == "uniq":
        return len(_operands(words)) > 1  # uniq IN OUT writes OUT
    if prog == "xxd":
        return "r" in shorts or len(_operands(words)) > 1  # xxd IN OUT writes OUT
    if prog == "env":
        return bool(_operands(words))  # env VAR=x program: runs a program
    if prog == "hostname":
        return bool(_operands(words))  # sets the host name
    if prog == "date":
        return any(not w.startswith("+") for w in _operands(words))  # sets the clock
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
    parsed = _segments(command)
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
    parsed = _segments(command) or []
    return any(ws[:1] and ws[0].rsplit("/", 1)[-1] in DYNAMIC for ws, _, _ in parsed)


def shell_effect(args: Mapping[str, Any]) -> Literal["read", "write"]:
    """An ``effect=`` function for a tool whose command is in ``command``, ``cmd`` or ``code``."""
    command = args.get("command", args.get("cmd", args.get("code")))
    return command_effect(command) if isinstance(command, str) else "write"


def _without_assignments(words: list[str]) -> list[str]:
    while words and "=" in words[0] and not words[0].startswith("="):  # VAR=value cmd
        words = words[1:]
    return words


# -- sed and awk scripts: do they write files or run commands? ------------------------------


_SED_OPTIONS = frozenset(
    [
        "-n",
        "-E",
        "-r",
        "-s",
        "-u",
        "-z",
        "--quiet",
        "--silent",
        "--posix",
        "--regexp-extended",
        "--separate",
        "--unbuffered",
        "--null-data",
        "--sandbox",
        "--debug",
    ]
)


def _sed(words: list[str]) -> tuple[str, list[str], bool] | None:
    """(``"read"`` or ``"in-place"``, files, whether the script reads other files), or None
    when an option is unknown or the script may write a file or run a command."""
    scripts: list[str] = []
    files: list[str] = []
    mode = "read"
    args = iter(words[1:])
    for w in args:
        if w in ("-i", "--in-place"):
            mode = "in-place"
        elif w.startswith(("-i", "--in-place=")):
            return None  # a backup suffix: another file is written
        elif w in ("-e", "--expression"):
            scripts.append(next(args, ""))
        elif w.startswith("--expression="):
            scripts.append(w.split("=", 1)[1])
        elif w in _SED_OPTIONS:
            continue
        elif w.startswith("-") and w != "-" and len(w) > 1:
            if not set(w[1:]) <= set("nErsuz"):
                return None  # -f script, -l, a cluster with -i or -e: not followed
        elif not scripts:
            scripts.append(w)
        else:
            files.append(w)
    reads_files = False
    for script in scripts:
        commands = _sed_commands(script)
        if commands is None or commands & {"w", "W", "e"}:
            return None
        reads_files = reads_files or bool(commands & {"r", "R"})
    return (mode, files, reads_files) if scripts else None


def _sed_commands(script: str) -> set[str] | None:
    """The command letters of a sed script (``w`` and ``e`` also for the flags of ``s``),
    or None when it does not parse."""
    found: set[str] = set()
    i, n = 0, len(script)
    while i < n:
        c = script[i]
        if c in " \t\n;{}!,$~+0123456789":  # separators and addresses
            i += 1
        elif c in "/\\":  # a regex address: /re/ or \%re%
            delim = "/" if c == "/" else script[i + 1 : i + 2]
            i = _skip_delimited(script, i + (1 if c == "/" else 2), delim)
            if i < 0:
                return None
            while i < n and script[i] in "IM":
                i += 1
        elif c in "sy":
            delim = script[i + 1 : i + 2]
            if delim in ("", "\\", "\n"):
                return None
            i = _skip_delimited(script, i + 2, delim)
            i = _skip_delimited(script, i, delim) if i >= 0 else -1
            if i < 0:
                return None
            end = i
            while end < n and script[end] not in ";\n}":
                end += 1
            flags = script[i:end]
            found.update(f for f in "we" if c == "s" and f in flags)
            i = end
        elif c in "aicrRwWe:btTv":  # the rest of the line is text, a file name or a label
            found.add(c)
            while i < n and script[i] != "\n" and not (c in ":btTv" and script[i] == ";"):
                i += 2 if script[i] == "\\" else 1
        elif c in "pPdDnNgGhHxlLqQzF=":
            found.add(c)
            i += 1
        else:
            return None
    return found


def _skip_delimited(text: str, i: int, delim: str) -> int:
    """The index after the next unescaped ``delim`` from ``i``, or -1."""
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == delim:
            return i + 1
        else:
            i += 1
    return -1


def _awk_program(words: list[str]) -> str | None:
    """The program of an awk call that cannot write a file or run a command, else None."""
    args = iter(words[1:])
    for w in args:
        if w in ("-F", "-v"):
            next(args, "")
        elif w.startswith(("-F", "-v")):
            continue
        elif w.startswith("-"):
            return None  # -f program file, -i inplace, ...: not followed
        else:
            return None if any(s in w for s in (">", "|", "system", "getline")) else w
    return None


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


def _components(path: str) -> list[str] | None:
    """The components of a path as the command states it, or None when the shell rewrites
    it (a glob, a variable, ``~``) or it climbs out (``..``) or names no file (``/``)."""
    if _EXPANDS.search(path):
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return None if not parts or ".." in parts else parts


def command_resources(command: str) -> tuple[str, ...] | None:
    """The resources of a command (see the module docstring): every path component a read
    reads, or the last component of every path a write writes; None when that cannot be
    told: a directory read (``ls``, ``find``, ``grep -r``), a program whose writes are
    unseen (``python x.py``, ``make``), a path the shell rewrites, a command that does not
    parse."""
    parsed = _segments(command)
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
            operands = _operands(words)
            if prog in ("cd", "pushd"):
                paths += operands or ["~"]  # later relative paths are under it
            elif prog in ("echo", "printf", "true", "false", "pwd", "test", "["):
                pass
            elif prog not in _FILE_READERS or _recursive(words):
                return None  # a directory or a whole-repository read: any write may change it
            elif prog == "sed":
                sed = _sed(words)
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
            parts = _components(path)
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
            operands = _operands(words)
            if prog == "cd":
                target = _components(operands[0]) if len(operands) == 1 else None
                moved = moved or target is None or operands[0].startswith("/")
            elif prog == "sed" and (sed := _sed(words)) is not None and sed[0] == "in-place":
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
            parts = _components(path)
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
