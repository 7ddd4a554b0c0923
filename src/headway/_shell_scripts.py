"""The scripts of ``sed`` and ``awk``: do they write files or run commands? A script this
cannot follow is treated as one that may (None): unknown means unsafe.
"""

from __future__ import annotations

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


def sed_script(words: list[str]) -> tuple[str, list[str], bool] | None:
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


def awk_program(words: list[str]) -> str | None:
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
            # output goes to a file or a command only by print > file, | or system();
            # a ">" in a program that prints nothing is a comparison (NR>=10)
            unsafe = any(s in w for s in ("|", "system", "@")) or ("print" in w and ">" in w)
            return None if unsafe else w
    return None
