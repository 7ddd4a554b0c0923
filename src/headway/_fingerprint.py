"""Cache currency (semantics §1): ``validate=``, a cheap look at what a read reads.

A cached read is served only while headway knows it is current. ``validate(args)``
returns a fingerprint of the resource's state (mtime and size, an ETag, a row version:
any JSON value); an entry is stored with the fingerprint taken before its tool ran, and
served only to a call whose fingerprint is equal. None, or a function that raises, means
"cannot tell": the entry is not current and the tool runs.

Named built-ins stand in for a function where only text can be written (a TOML file):
``validate = "file:path"`` fingerprints the file or directory whose path is in the
argument ``path``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
import time
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ConfigError

ABSENT = "absent"  # a path that does not exist: a state like any other
_GRAIN_NS = 20_000_000  # a file system's timestamp tick (a coarse clock: 1 to 10 ms)
_WHOLE_SECONDS_GRAIN_NS = 2_000_000_000  # timestamps in whole seconds (FAT: 2 s)
_MAX_ENTRIES = 10_000  # a directory larger than this: its state is not looked at


def file_fingerprint(path: Any) -> Any:
    """The state of a file: ``["file", mtime_ns, ctime_ns, size, inode]``; of a
    directory, the same plus a digest of its entries (name, kind, size, mtime), one
    level deep; ``"absent"`` when nothing is there; None when it cannot be told: not an
    absolute path (a tool resolves a relative one against its own root), unreadable, or
    changed so recently that a further change within the same tick
    of the file system's clock would leave the same timestamps."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path or "\x00" in path:
        return None
    if not os.path.isabs(path):
        return None  # relative or ``~``: the tool resolves it (its root, its home), not us
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return ABSENT
    except (OSError, ValueError):
        return None
    newest = st.st_ctime_ns
    state: list[Any] = ["file", st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino]
    if stat.S_ISDIR(st.st_mode):
        listing = hashlib.sha256()
        try:
            with os.scandir(path) as entries:
                for n, entry in enumerate(sorted(entries, key=lambda e: e.name)):
                    if n >= _MAX_ENTRIES:
                        return None
                    es = entry.stat(follow_symlinks=False)
                    newest = max(newest, es.st_ctime_ns)
                    listing.update(
                        f"{entry.name}\x00{stat.S_IFMT(es.st_mode)}\x00{es.st_size}\x00"
                        f"{es.st_mtime_ns}\x00{es.st_ctime_ns}\x01".encode(
                            "utf-8", "surrogateescape"
                        )
                    )
        except (OSError, ValueError):
            return None
        state[0] = "dir"
        state.append(listing.hexdigest()[:32])
    grain = _WHOLE_SECONDS_GRAIN_NS if newest % 1_000_000_000 == 0 else _GRAIN_NS
    if time.time_ns() - newest < grain:
        return None  # too recent to tell a change within the same tick apart
    return state


BUILT_INS: dict[str, Callable[[Any], Any]] = {"file": file_fingerprint}


@dataclasses.dataclass(frozen=True, slots=True)
class OnArgument:
    """A built-in fingerprint of the value of one argument (``"file:path"``)."""

    kind: str
    argument: str

    def __call__(self, args: Mapping[str, Any]) -> Any:
        value = args.get(self.argument)
        if value is None:
            return None  # the argument is missing: nothing to look at
        return BUILT_INS[self.kind](value)


def resolve(tool: str, validate: Any) -> Callable[[Mapping[str, Any]], Any] | None:
    """The function behind a spec's ``validate``: a callable as it is, a built-in's name
    (``"file:path"``) as that built-in; anything else is a ConfigError."""
    if validate is None or callable(validate):
        return validate  # type: ignore[no-any-return]
    if not isinstance(validate, str):
        raise ConfigError(
            f"tool {tool!r}: validate must be a function of the arguments or a built-in "
            f"such as 'file:path', not {type(validate).__name__}"
        )
    kind, _, argument = validate.partition(":")
    if kind not in BUILT_INS:
        known = ", ".join(f"'{k}:ARGUMENT'" for k in sorted(BUILT_INS))
        raise ConfigError(
            f"tool {tool!r}: unknown validate {validate!r}; the built-ins are {known} "
            "(ARGUMENT: the name of the argument that holds the path)"
        )
    if not argument.strip():
        raise ConfigError(
            f"tool {tool!r}: validate {validate!r} names no argument: write "
            f"'{kind}:ARGUMENT', e.g. '{kind}:path'"
        )
    return OnArgument(kind, argument.strip())
