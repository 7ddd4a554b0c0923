"""The default policy: how a tool seen only in a recording is declared.

An operator's ``--config`` file wins over these (its ``[tools.NAME]`` tables apply on
registration). Without one, tools are declared by what they do, as an operator would:

- a record marked ``side_effect: true`` is a write; ``side_effect: false`` a
  deterministic read (tau-bench's lookups), unless it is a view tool (below);
- view tools (a browser's click, type, scroll; a file viewer's page-down) and
  delegations to a sub-agent: reads with no cache: never served, judged for progress;
- file tools: ``Read``/``Glob``/``Grep``/``LS`` deterministic reads, ``Write``/``Edit``
  writes; ``Read`` and the writes name their file (``resources``), so an edit
  invalidates only the reads of that file and the directory reads;
- shell tools (``bash``, ``shell``...): read or write by ``headway.shell`` from the
  command; a time-dependent command (``date``, ``ps``) is never cached;
- anything else: a write (unknown means unsafe: executed every time, never cached).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Literal

from ..shell import DYNAMIC, command_effect, command_resources, is_dynamic
from ._model import Call

VIEW_TOOLS = frozenset(
    [
        "click",
        "type",
        "input",
        "input_text",
        "send_keys",
        "page_down",
        "page_up",
        "scroll",
        "scroll_up",
        "scroll_down",
        "history_back",
        "go_back",
        "go_forward",
        "navigate",
        "visit_url",
        "click_control",
        "websurfer_other",
        "file_view",
        "web_search",
        "search_page",
        "find_elements",
        "find_text",
        "extract",
        "wait",
        "select_dropdown",
        "evaluate",
        "screenshot",
    ]
)
SHELL_TOOLS = frozenset(("bash", "shell", "sh", "terminal", "run_shell_command", "execute_command"))
UNCACHED_READS = frozenset(("WebSearch", "WebFetch", "TaskOutput", "BashOutput", "think"))
DYNAMIC_SUFFIX = " (time-dependent)"


def _path(args: Any) -> tuple[str, ...] | None:
    if not isinstance(args, Mapping):
        return None
    path = args.get("file_path") or args.get("notebook_path")
    # basenames, like headway.shell's: over-invalidate (two x.py share one), never under
    return (str(path).rstrip("/").rsplit("/", 1)[-1],) if path else None


def _command(args: Mapping[str, Any]) -> Any:
    return args.get("command", args.get("cmd", args.get("code")))


# a replay classifies each command several times (effect, resources, dynamic): parse once
_effect_of = functools.lru_cache(maxsize=4096)(command_effect)
_resources_of = functools.lru_cache(maxsize=4096)(command_resources)
_dynamic = functools.lru_cache(maxsize=4096)(is_dynamic)


def shell_effect(args: Mapping[str, Any]) -> Literal["read", "write"]:
    command = _command(args)
    return _effect_of(command) if isinstance(command, str) else "write"


def shell_resources(args: Mapping[str, Any]) -> tuple[str, ...] | None:
    command = _command(args)
    return _resources_of(command) if isinstance(command, str) else None


def declare(call: Call) -> tuple[dict[str, Any], str]:
    """The ``register`` options for the tool of this call (see the module docstring), and
    why: the rule of the default policy, or the recorded flag, that gave them."""
    tool, hints = call.tool, call.hints
    if hints.get("kind") == "delegation" or tool.startswith("delegate:"):
        return {"effect": "read"}, "default: a delegation to a sub-agent (never cached)"
    if tool in VIEW_TOOLS:
        return {"effect": "read"}, "default: a view tool (its result is the page seen next)"
    if tool in UNCACHED_READS:
        return {"effect": "read"}, "default: a read whose result changes (never cached)"
    if hints.get("side_effect") is True:
        return {"effect": "write"}, "recorded side_effect: true"
    if hints.get("side_effect") is False:
        return {"effect": "read", "deterministic": True}, "recorded side_effect: false"
    if tool == "Read":
        options = {"effect": "read", "deterministic": True, "resources": _path}
        return options, "default: Claude Code's file read (names its file)"
    if tool in ("Glob", "Grep", "LS"):  # directory reads: any write may change them
        return {"effect": "read", "deterministic": True}, "default: a directory read"
    if tool in ("Write", "Edit", "MultiEdit", "NotebookEdit"):
        return {"effect": "write", "resources": _path}, "default: a file write (names its file)"
    if tool.lower() in SHELL_TOOLS:
        options = {"effect": shell_effect, "deterministic": True, "resources": shell_resources}
        return options, "default: a shell tool, read or write by its command (headway.shell)"
    return {"effect": "write"}, "default: an unknown tool is a write (executed, never cached)"


def declaration(call: Call) -> dict[str, Any]:
    """The ``register`` options for the tool of this call (see ``declare``)."""
    return declare(call)[0]


def registered_name(call: Call, args: Mapping[str, Any]) -> str:
    """The name the replay registers: a time-dependent shell read goes to an uncached twin."""
    command = _command(args)
    if (
        call.tool.lower() in SHELL_TOOLS
        and isinstance(command, str)
        and any(word in command for word in DYNAMIC)  # most commands: no parse needed
        and _dynamic(command)
    ):
        return call.tool + DYNAMIC_SUFFIX
    return call.tool
