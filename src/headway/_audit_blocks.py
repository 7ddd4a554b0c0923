"""One session's records in ``MemoryAudit``, packed: the newest few kept whole, the older
ones in blocks of ``BLOCK`` records, each block one ``marshal`` bytes object, deflated.

The default audit keeps thousands of records per session and a process may hold a
thousand sessions: a record kept whole is a dozen objects (its snapshot tuple, two
floats, a digest, texts), about 600 bytes; packed it is its values' bytes, 110 to 190
(bench/sessions_memory.py's calls), deflated about half that (zlib's fastest level, ~1.5 us a
record paid once: the texts, keys and paths of a session's calls repeat).
Reading unpacks them into the same records (``marshal`` keeps types, float bits, key
order and any text, lone surrogates included). A block that ``marshal`` cannot write
(a plain record holding some other object) is kept whole.

Writers append to ``recent`` without a lock; packing and dropping the oldest records
take the audit's lock, and so does a reader's snapshot, so a reader never sees a record
twice or not at all.
"""

from __future__ import annotations

import marshal
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from ._audit_record import AuditRecord, packable, unpacked

BLOCK = 16  # records a block holds: marshal's per-call cost is spread over them


class _Block:
    __slots__ = ("data", "make", "n", "skip")

    def __init__(self, data: bytes | tuple[Mapping[str, Any], ...], make: Any, n: int) -> None:
        self.data = data  # deflated marshal bytes, or the records themselves if marshal cannot
        self.make = make  # what makes an unread record's values (one per block)
        self.n = n
        self.skip = 0  # its oldest records dropped


class Blocks:
    """A session's records, oldest first: packed blocks, then the newest records whole."""

    __slots__ = ("blocks", "packed", "recent")

    def __init__(self) -> None:
        # lists, not deques: an empty deque is 760 bytes, and a process holds thousands
        self.blocks: list[_Block] = []
        self.recent: list[Mapping[str, Any]] = []
        self.packed = 0  # records held in blocks (less those skipped)

    def __len__(self) -> int:
        return self.packed + len(self.recent)

    def tidy(self, fit: int) -> None:
        """Pack whole blocks of the older records, then keep only the newest ``fit``
        (the caller holds the audit's lock)."""
        recent = self.recent
        while len(recent) >= BLOCK:
            records = recent[:BLOCK]
            del recent[:BLOCK]  # writers append at the end meanwhile: kept
            self.blocks.append(_pack(records))
            self.packed += BLOCK
        over = self.packed + len(recent) - fit
        while over > 0 and self.blocks:
            first = self.blocks[0]
            dropped = min(over, first.n - first.skip)
            first.skip += dropped
            self.packed -= dropped
            over -= dropped
            if first.skip == first.n:
                del self.blocks[0]
        if over > 0:
            del recent[:over]

    def snapshot(self) -> tuple[list[tuple[_Block, int]], list[Mapping[str, Any]]]:
        """What a reader unpacks (the caller holds the audit's lock)."""
        return [(b, b.skip) for b in self.blocks], self.recent[:]


def unpack(
    snapshot: tuple[list[tuple[_Block, int]], list[Mapping[str, Any]]], session: str
) -> list[Mapping[str, Any]]:
    """The records of a ``snapshot()``, oldest first (no lock needed: blocks never change
    but for ``skip``, read under the lock)."""
    blocks, recent = snapshot
    out: list[Mapping[str, Any]] = []
    for block, skip in blocks:
        data = block.data
        if isinstance(data, bytes):
            # bytes this process wrote
            entries = marshal.loads(zlib.decompress(data, -15))  # noqa: S302
            out.extend(unpacked(e, block.make, session) for e in entries[skip:])
        else:
            out.extend(data[skip:])
    out.extend(recent)
    return out


def _pack(records: list[Mapping[str, Any]]) -> _Block:
    entries: list[Any] = []
    makes: set[Callable[..., Any]] = set()
    for record in records:
        if type(record) is AuditRecord:  # the common case inline: no call per record
            source = record._source  # before _make: a reader clears _make, then _source
            make = record._make
            if make is not None and source:
                entries.append(source)
                makes.add(make)
                continue
        entry, make = packable(record)
        entries.append(entry)
        if make is not None:
            makes.add(make)
    if len(makes) <= 1:
        try:
            # raw deflate (no header, no checksum: the bytes never leave this process)
            data = zlib.compress(marshal.dumps(entries), 1, -15)
            return _Block(data, next(iter(makes), None), len(records))
        except ValueError:  # an object marshal cannot write: the block is kept whole
            pass
    return _Block(tuple(records), None, len(records))


__all__ = ["BLOCK", "Blocks", "unpack"]
