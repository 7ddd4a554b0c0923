"""The per-call cost of redaction and of the JSONL audit sink, before and after, in one run.

    python bench/redaction_cost.py [--quick] [--base REV]

"before" is the code of git revision REV (default: e7314dc, the branch's base): its
``_redact.py`` and its ``JSONLSink`` are loaded from git beside the working tree's. Every
path takes turns in short batches over many rounds and keeps its best batch, so both
sides see the same machine. Prints microseconds per operation.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import tempfile
import timeit
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import headway
import headway._audit_record
import headway._call
import headway._redact
import headway.audit
import headway.outcome

ROOT = Path(__file__).resolve().parent.parent


def load(rev: str, path: str, name: str) -> types.ModuleType:
    """A module made from ``path`` as it was at ``rev`` (relative imports: headway's)."""
    source = subprocess.run(
        ["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    module = types.ModuleType(f"headway.{name}")
    module.__package__ = "headway"
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    return module


def best_of(rows: list[tuple[str, Callable[[], Any]]], batch: int, rounds: int) -> None:
    best = {name: float("inf") for name, _ in rows}
    for r in range(rounds):
        for name, fn in rows if r % 2 else rows[::-1]:  # neither side always goes first
            best[name] = min(best[name], timeit.timeit(fn, number=batch) / batch * 1e6)
    width = max(len(name) for name, _ in rows)
    for name, _ in rows:
        print(f"  {name:<{width}}  {best[name]:8.2f} us")


TEXTS = {
    # new arguments on every call (canonical JSON, as settling an executed call sees them)
    "fresh arguments, no secret word": '{{"n":{},"q":"weather in Paris"}}',
    "fresh arguments with a key word": '{{"idempotency_key":"order-{}","q":"ok"}}',
    "fresh arguments, a password": '{{"dsn":"postgresql://app:pw{}@db/prod"}}',
    "fresh arguments, non-ASCII": '{{"n":{},"q":"météo à Zürich"}}',
}


def fresh(template: str) -> Iterator[str]:
    return (template.format(i) for i in itertools.count())


def redaction(base: types.ModuleType, batch: int, rounds: int) -> None:
    now = headway._redact
    for label, template in TEXTS.items():
        print(f"scrub, {label}:")
        b, n, f = fresh(template), fresh(template), fresh(template)
        best_of(
            [
                ("making the text (in both)", lambda f=f: next(f)),  # type: ignore[misc]
                ("before", lambda b=b: base.scrub(next(b))),  # type: ignore[misc]
                ("after", lambda n=n: now.scrub(next(n))),  # type: ignore[misc]
            ],
            batch,
            rounds,
        )
    flag = "key_ignored_on_read: a read takes no idempotency key (search)"
    print("scrub, the same flag text each call:")
    best_of(
        [("before", lambda: base.scrub(flag)), ("after", lambda: now.scrub(flag))], batch, rounds
    )
    text = '{"n":17,"q":"weather in Paris","filters":{"from":"2024-01-01"}}'
    print("normalise, 60 characters of arguments:")
    best_of(
        [("before", lambda: base.normalise(text)), ("after", lambda: now.normalise(text))],
        batch,
        rounds,
    )


# where the core calls the redaction functions: swapped to run the whole path "before"
_USERS = (
    (headway._audit_record, "scrub"),
    (headway._audit_record, "normalise"),
    (headway._call, "scrub"),
    (headway.outcome, "scrub"),
)


def use(module: types.ModuleType) -> None:
    for user, name in _USERS:
        setattr(user, name, getattr(module, name))


def executed_path(base: types.ModuleType, batch: int, rounds: int) -> None:
    """``session.acall`` of a read with new arguments each call (every call executes)."""
    gov = headway.Governor()

    async def search(q: str, n: int) -> dict[str, Any]:
        return {"q": q, "n": n}

    gov.register("search", search, effect="read")
    session = gov.session("bench")
    loop = asyncio.new_event_loop()
    counter = itertools.count()

    async def calls(k: int) -> None:
        for _ in range(k):
            await session.acall("search", {"q": "weather in Paris", "n": next(counter)})

    best = {"before": float("inf"), "after": float("inf")}
    sides = (("before", base), ("after", headway._redact))
    for r in range(rounds):
        for name, module in sides if r % 2 else sides[::-1]:
            use(module)
            t = timeit.timeit(lambda: loop.run_until_complete(calls(batch)), number=1)
            best[name] = min(best[name], t / batch * 1e6)
    use(headway._redact)
    loop.close()
    gov.close()
    print("session.acall, executed read, new arguments each call:")
    for name, value in best.items():
        print(f"  {name:<6}  {value:8.2f} us")


def jsonl(base_audit: types.ModuleType, batch: int, rounds: int) -> None:
    record: dict[str, Any] = dict.fromkeys(headway.audit.FIELDS)
    record.update(session="bench", tool="search", status="executed", args='{"q":"weather"}')
    with tempfile.TemporaryDirectory() as tmp:
        before = base_audit.JSONLSink(Path(tmp) / "before.jsonl")
        after = headway.JSONLSink(Path(tmp) / "after.jsonl")
        print("JSONLSink.write, one 32-field record:")
        best_of(
            [
                ("json.dumps (in both)", lambda: json.dumps(record, default=str, sort_keys=True)),
                ("before", lambda: before.write(record)),
                ("after", lambda: after.write(record)),
            ],
            batch,
            rounds,
        )
        after.close()


def main() -> None:
    quick = "--quick" in sys.argv
    rev = sys.argv[sys.argv.index("--base") + 1] if "--base" in sys.argv else "e7314dc"
    batch, rounds = (500, 10) if quick else (2_000, 40)
    base = load(rev, "src/headway/_redact.py", "_redact_before")
    base_audit = load(rev, "src/headway/audit.py", "audit_before")
    print(f"before: {rev}; after: the working tree; best batch of {rounds} rounds")
    redaction(base, batch, rounds)
    executed_path(base, batch // 4, rounds)
    jsonl(base_audit, batch // 4, rounds)


if __name__ == "__main__":
    main()
