"""A shell command line taken apart as the shell would, quotes and all: its simple
commands (``segments``: the words, the files redirected into and out of), a program's
operands, and a path's components. ``shell`` classifies what this finds; anything this
cannot take apart (command substitution, an unknown operator) is None: unknown means
unsafe.
"""

from __future__ import annotations

import re
import shlex

_SEPARATORS = frozenset([";", "&&", "||", "|", "&", "\n", "(", ")", ";;", "|&"])
_OUT = frozenset([">", ">>", ">|", "&>", "&>>"])
_IN = frozenset(["<", "<<", "<<<", "<<-", "<&"])
_HEREDOC = re.compile(r"(<<-?\s*(['\"]?)(\w+)\2[^\n]*)\n.*?\n\3(?=\n|$)", re.DOTALL)
_SUBSTITUTION = ("`", "$(", "<(", ">(")  # commands inside a word: not provably read-only
_EXPANDS = re.compile(r"[*?\[\]{}$~`\\]")  # a path the shell rewrites: cannot be listed


Segment = tuple[list[str], list[str], list[str]]  # words, files written, files read by "<"


def segments(command: str) -> list[Segment] | None:
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
        (without_assignments([w for k, w in enumerate(ws) if not (w.isdigit() and k > 0)]), wr, rd)
        for ws, wr, rd in out
    ]


def operands_of(words: list[str]) -> list[str]:
    """The words after the program that are not options (everything after ``--`` is one)."""
    found: list[str] = []
    for k, w in enumerate(words[1:], 1):
        if w == "--":
            return found + words[k + 1 :]
        if not w.startswith("-") or w == "-":
            found.append(w)
    return found


def without_assignments(words: list[str]) -> list[str]:
    while words and "=" in words[0] and not words[0].startswith("="):  # VAR=value cmd
        words = words[1:]
    return words


def components(path: str) -> list[str] | None:
    """The components of a path as the command states it, or None when the shell rewrites
    it (a glob, a variable, ``~``) or it climbs out (``..``) or names no file (``/``)."""
    if _EXPANDS.search(path):
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return None if not parts or ".." in parts else parts
