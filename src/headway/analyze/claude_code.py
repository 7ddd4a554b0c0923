"""Claude Code session transcripts: ``~/.claude/projects/<project>/<session>.jsonl``.

One JSON object a line; the lines that matter have ``type`` ``assistant`` or ``user``, a
``sessionId`` and a ``message`` in the Anthropic Messages shape. An assistant line's
``tool_use`` blocks are the calls (``name``, ``input``), matched by ``id`` to the
``tool_result`` blocks of later user lines (``tool_use_id``, ``content``, ``is_error``).
One model response may be written over several lines that share its ``message.id``: it is
one model turn, and its ``message.usage`` (input, cache reads and writes, output) is
counted once. Other lines (``summary``, ``system``, file snapshots) are context only.
A session is a run; a file's sessions are held until its end (a resumed session may
continue in a later line).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._lines import json_lines
from ._model import Call, Problem, Run, iso_time, usage_of
from .chat import finish, text_of


def is_line(obj: Any) -> bool:
    return (
        isinstance(obj, Mapping)
        and obj.get("type") in ("user", "assistant")
        and "sessionId" in obj
        and isinstance(obj.get("message"), Mapping)
    )


class _Session:
    def __init__(self, source: str, session: str) -> None:
        self.run = Run(source, session, [])
        self.pending: dict[str, Call] = {}
        self.turns: dict[str, int] = {}  # message.id -> turn number
        self.context = 0

    def add(self, line: Mapping[str, Any]) -> None:
        message = line["message"]
        content = message.get("content")
        if line["type"] == "assistant":
            mid = str(message.get("id") or line.get("uuid") or len(self.turns))
            turn = self.turns.get(mid)
            if turn is None:
                turn = self.turns[mid] = len(self.turns)
                self.run.context[turn] = self.context
                recorded = usage_of(message.get("usage"))
                if recorded is not None:
                    self.run.usage[turn] = recorded
            for block in content if isinstance(content, list) else ():
                if isinstance(block, Mapping) and block.get("type") == "tool_use":
                    call = Call(str(block.get("name", "")), block.get("input"), "", "",
                                str(line.get("agentId") or ""), iso_time(line.get("timestamp")),
                                turn=turn)  # fmt: skip
                    self.pending[str(block.get("id"))] = call
                    self.run.calls.append(call)
        else:
            for block in content if isinstance(content, list) else ():
                if isinstance(block, Mapping) and block.get("type") == "tool_result":
                    answered = self.pending.pop(str(block.get("tool_use_id")), None)
                    if answered is not None:
                        answered.result = text_of(block.get("content"))
                        answered.error = bool(block.get("is_error"))
        self.context += len(text_of(content))


def read(path: Path) -> Iterator[Run | Problem]:
    source = path.name.split(".")[0]
    sessions: dict[str, _Session] = {}
    for item in json_lines(path):
        if isinstance(item, Problem):
            yield item
            continue
        number, line = item
        if not isinstance(line, Mapping):
            yield Problem(str(path), number, "not a Claude Code transcript line (an object)")
            continue
        if not is_line(line):
            continue  # summaries, system lines, snapshots: no tool call in them
        sid = str(line["sessionId"])
        session = sessions.get(sid) or sessions.setdefault(sid, _Session(source, sid))
        session.add(line)
    for session in sessions.values():
        finish(session.run.calls)
        yield session.run
