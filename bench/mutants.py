"""A small mutation run: one-line changes of documented behaviour must each fail a test.

Each mutant replaces one exact text in one module of a temporary copy of ``src/``, then
runs the tests that pin that module against the copy (``PYTHONPATH`` puts it first) and
prints KILLED (a test failed) or SURVIVED. Redis and PostgreSQL tests are deselected (the
in-process stores run the same code paths). Not exhaustive: a focused list of mutants of
the rules the docs state.

    python bench/mutants.py            # all mutants
    python bench/mutants.py shell      # the mutants of one module
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOPS = [
    "tests/test_loops.py",
    "tests/test_mutation_pins.py",
    "tests/test_read_dedup.py",
    "tests/test_loop_judgment.py",
]
TESTS = {
    **{
        "detectors/" + m: LOOPS
        for m in (
            "_cycle",
            "_decide",
            "_monitor",
            "_near_duplicate",
            "_progress",
            "_repeated_error",
            "_same_result",
            "_window",
        )
    },
    "similarity": LOOPS,
    "_governor": LOOPS,
    "_pipeline": [
        "tests/test_read_dedup.py",
        "tests/test_mutation_pins.py",
        "tests/test_budgets.py",
        *LOOPS[:1],
    ],
    "_reading": [
        "tests/test_read_dedup.py",
        "tests/test_mutation_pins.py",
        "tests/test_budgets.py",
        *LOOPS[:1],
    ],
    "budgets": ["tests/test_budgets.py", "tests/test_mutation_pins.py"],
    "_keylife": ["tests/test_idempotency.py", "tests/test_mutation_pins.py"],
    "shell": ["tests/test_shell.py"],
    "_shell_words": ["tests/test_shell.py"],
    "_shell_scripts": ["tests/test_shell.py"],
    "breaker": ["tests/test_resilience.py", "tests/test_mutation_pins.py"],
    "integrations/langchain": ["tests/test_integration_langchain.py"],
    "integrations/openai_agents": ["tests/test_integration_openai_agents.py"],
    "integrations/pydantic_ai": ["tests/test_integration_pydantic_ai.py"],
    "integrations/_common": [
        "tests/test_integration_langchain.py",
        "tests/test_integration_openai_agents.py",
        "tests/test_integration_pydantic_ai.py",
    ],
}

# (module, what the mutant breaks, text in the module, replacement)
MUTANTS: list[tuple[str, str, str, str]] = [
    (
        "_governor",
        "near-duplicate threshold 0.75 -> 0.90",
        "similarity: float = 0.75",
        "similarity: float = 0.90",
    ),
    ("similarity", "short-result cut-off 64 -> 16", "SHORT = 64", "SHORT = 16"),
    (
        "similarity",
        "shingle size 5 -> 3",
        "text[i : i + 5] for i in range(max(1, len(text) - 4))",
        "text[i : i + 3] for i in range(max(1, len(text) - 2))",
    ),
    ("similarity", "volatile ids not stripped", 'return "#"', "return token"),
    (
        "similarity",
        "wrappers not stripped",
        'return _WRAPPERS.sub("", text) if "<" in text else text',
        "return text",
    ),
    ("similarity", "sketch floor 0.5 -> 0.9", "SKETCH_FLOOR = 0.5", "SKETCH_FLOOR = 0.9"),
    (
        "similarity",
        "size pre-filter too strict",
        "small / large >= threshold",
        "small / large >= 0.99",
    ),
    (
        "detectors/_cycle",
        "cycles of period 3-5 off",
        "for p in range(2, 6):",
        "for p in range(2, 3):",
    ),
    (
        "detectors/_near_duplicate",
        "an in-place change of the last page is no progress (a form stopped)",
        "not edits_last(window, step) and near_any(window, step)",
        "near_any(window, step)",
    ),
    (
        "detectors/_near_duplicate",
        "a request re-issued in new words is a new target",
        "if prev is not None or similar_call(window, step):",
        "if prev is not None:",
    ),
    ("detectors/_window", "candidate count 8 -> 1", "CANDIDATES = 8", "CANDIDATES = 1"),
    (
        "detectors/_same_result",
        "a short answer to a new query is a repeat",
        "found = same or step.probe in window.probes",
        "found = same or step.norm in window.norms",
    ),
    (
        "similarity",
        "cosmetic variants of a query are different queries",
        'return " ".join(_WORDS.findall(args.lower()))',
        "return args",
    ),
    (
        "detectors/_monitor",
        "read repeat corrected from the 4th call",
        "if same >= 2:",
        "if same >= 3:",
    ),
    ("detectors/_decide", "repeated error corrected from the 4th", "if run >= 3:", "if run >= 4:"),
    (
        "detectors/_repeated_error",
        "repeated error is not no_progress at 2",
        "if run >= 2:",
        "if run >= 3:",
    ),
    ("detectors/_decide", "stop one step after the limit", "if run >= limit:", "if run > limit:"),
    (
        "detectors/_decide",
        "no escalation at half the limit",
        "elif run >= (limit // 2 or 1)",
        "elif run >= limit + 1",
    ),
    (
        "detectors/_progress",
        "the same write with a near-duplicate result is progress",
        '            return "no_progress"\n        return "progress"',
        '            return "progress"\n        return "progress"',
    ),
    (
        "detectors/_progress",
        "an unchanged poll is no progress",
        'return "waiting"',
        'return "no_progress"',
    ),
    (
        "detectors/_monitor",
        "a cycle with changing results corrected",
        'if all(o.mark != "progress" for o in recent):',
        "if True:",
    ),
    (
        "detectors/_decide",
        "poll budget one poll late",
        "if limit is not None and used >= limit:",
        "if limit is not None and used > limit:",
    ),
    (
        "detectors/_window",
        "a user turn keeps the no-progress run",
        "        self.no_progress_run = 0\n        self.errors.clear()",
        "        self.errors.clear()",
    ),
    (
        "detectors/_progress",
        "a cached step is neutral",
        '            step.mark = "no_progress"\n            step.duplicate = step.unchanged = True',
        '            step.mark = "neutral"\n            step.duplicate = step.unchanged = True',
    ),
    (
        "_reading",
        "TTL boundary < -> <=",
        "return 0 <= age < spec.ttl",
        "return 0 <= age <= spec.ttl",
    ),
    (
        "_reading",
        "errors cached",
        "if c.status is EXECUTED and recordable(c):",
        "if recordable(c):",
    ),
    (
        "_reading",
        "results over the size limit cached",
        "if len(c.text) <= ctx.max_cached_bytes:",
        "if True:",
    ),
    (
        "_reading",
        "uncached reads never corrected",
        "if (fresh is not None or not spec.ttl) and",
        "if fresh is not None and",
    ),
    (
        "_pipeline",
        "a write naming resources invalidates nothing",
        'return ("any", *("r:" + r for r in touched))',
        'return ("any",)',
    ),
    (
        "_pipeline",
        "a write naming no resource spares resource reads",
        '    return ("any", "*")\n',
        '    return ("any",)\n',
    ),
    (
        "_pipeline",
        "concurrent calls of an in-process session run past a call budget",
        "    if counts_calls(st):\n        # the step is taken",
        "    if False:\n        # the step is taken",
    ),
    (
        "_reading",
        "a parallel batch's late identical read is a repeat",
        "if fresh is not None and ctx.enforce and st.in_batch(c.key):",
        "if False:",
    ),
    (
        "_reading",
        "sessions share their cache",
        'else st.session_id + "#" + _generation',
        'else "s#" + _generation',
    ),
    ("budgets", "wall-clock boundary >= -> >", "now >= self.deadline", "now > self.deadline"),
    ("budgets", "total calls boundary", "self.calls >= b.tool_calls", "self.calls > b.tool_calls"),
    ("budgets", "tokens boundary", "self.tokens >= b.tokens", "self.tokens > b.tokens"),
    (
        "_keylife",
        "key reused by another tool not rejected",
        'if record["args"] != args or record["tool"] != tool:',
        'if record["args"] != args:',
    ),
    (
        "_keylife",
        "key reused with other arguments not rejected",
        'if record["args"] != args or record["tool"] != tool:',
        'if record["tool"] != tool:',
    ),
    (
        "shell",
        "uniq IN OUT is a read",
        "return len(operands_of(words)) > 1  # uniq",
        "return len(operands_of(words)) > 2  # uniq",
    ),
    ("shell", "sort -o is a read", 'return "o" in shorts or', "return"),
    (
        "_shell_scripts",
        "sed w command is a read",
        'commands is None or commands & {"w", "W", "e"}',
        "commands is None",
    ),
    (
        "_shell_words",
        "command substitution is parsed as words",
        "    if any(s in command for s in _SUBSTITUTION):\n        return None\n",
        "",
    ),
    (
        "shell",
        "reads declare basenames only",
        "            found.update(parts)\n    return found",
        "            found.add(parts[-1])\n    return found",
    ),
    (
        "shell",
        "recursive writes of absolute paths listed",
        'any(p.startswith("/") for p in operands)',
        'any(p.startswith("//") for p in operands)',
    ),
    (
        "_shell_words",
        ".. accepted in paths",
        'return None if not parts or ".." in parts else parts',
        "return parts or None",
    ),
    (
        "shell",
        "env runs no program",
        "return bool(operands_of(words))  # env",
        "return False  # env",
    ),
    (
        "breaker",
        "trips one failure late",
        "tripped = fails >= b.failures",
        "tripped = fails > b.failures",
    ),
    ("breaker", "cooldown boundary", "if now < ready_at:", "if now <= ready_at:"),
    (
        "breaker",
        "a successful probe re-opens",
        "        if ok:\n            return dict(CLOSED)",
        "        if ok:\n            return _open(st, now)",
    ),
    ("breaker", "cooldown does not double", "self.cooldown_s * 2.0 **", "self.cooldown_s * 1.0 **"),
    (
        "breaker",
        "a hung probe is not detected at its lease",
        "if any(expiry <= now for expiry in leases):",
        "if any(expiry < now for expiry in leases):",
    ),
    (
        "breaker",
        "ratio boundary",
        "sum(recent) / len(recent) >= (b.ratio or 1.0)",
        "sum(recent) / len(recent) > (b.ratio or 1.0)",
    ),
    ("breaker", "min_calls boundary", "len(recent) >= b.min_calls", "len(recent) > b.min_calls"),
    # the integrations: what each framework's user is promised
    (
        "integrations/langchain",
        "a ToolMessage with status='error' is a result, not an error",
        'if result.status == "error":',
        "if False:",
    ),
    (
        "integrations/langchain",
        "a cached read answers with an error message, not the stored content",
        "if status is CACHED or status is REPLAYED:",
        "if status is REPLAYED:",
    ),
    (
        "integrations/langchain",
        "a new human message is not a new user turn",
        "            session.user_turn()",
        "            pass",
    ),
    (
        "integrations/langchain",
        "the stop's diagnostic is not put in the state",
        'command=Command(update={**update, "headway_stop": stop.diagnostic})',
        'command=Command(update={**update, "headway_stop": {}})',
    ),
    (
        "integrations/langchain",
        "a write has no idempotency step from its tool call id",
        'keys["step_id"] = step_of(call.get("id"), spec, call["args"])',
        'keys["step_id"] = None',
    ),
    (
        "integrations/langchain",
        "the thread id does not name the session",
        'sid = state.get("headway_session") or _thread_of(config)',
        'sid = state.get("headway_session") or "one"',
    ),
    (
        "integrations/langchain",
        "on_stop='raise' ends the run quietly",
        '            if self.on_stop == "raise":\n                raise _native(stop) from None\n            return _stopped(request.tool_call, stop)\n        return self._answer(request, session, out, box)\n\n    async',
        "            return _stopped(request.tool_call, stop)\n        return self._answer(request, session, out, box)\n\n    async",
    ),
    (
        "integrations/openai_agents",
        "an exception the SDK turned into text is a result, not an error",
        'return f"Error: {result}"',
        "return result",
    ),
    (
        "integrations/openai_agents",
        "a new Runner.run on a named session is not a new user turn",
        "            run.session.user_turn()",
        "            pass",
    ),
    (
        "integrations/openai_agents",
        "a write has no idempotency step from its tool call id",
        "step = step_of(call_id, spec, args)",
        "step = None",
    ),
    (
        "integrations/openai_agents",
        "a stop inside an MCP server's call_tool is swallowed by the SDK",
        "            if isinstance(cause, HeadwayStop):\n                raise cause",
        "            if isinstance(cause, HeadwayStop):\n                break",
    ),
    (
        "integrations/openai_agents",
        "a correction of an MCP call is not marked isError",
        '"isError": out.status in _NOT_DONE',
        '"isError": out.status is Status.ERROR',
    ),
    (
        "integrations/pydantic_ai",
        "a correction is a retry prompt even with no retries left (the run crashes)",
        "if ctx.retries.get(call.tool_name, 0) < ctx.max_retries:",
        "if True:",
    ),
    (
        "integrations/pydantic_ai",
        "a new run of a conversation is not a new user turn",
        "        session.user_turn()",
        "        pass",
    ),
    (
        "integrations/pydantic_ai",
        "a tool's ModelRetry is a result, not an error",
        "return _ERROR + str(exc)",
        "return str(exc)",
    ),
    (
        "integrations/_common",
        "a budget stop is raised as the framework's loop stop",
        "return (budget if isinstance(stop, BudgetExceeded) else loop)(stop.diagnostic)",
        "return loop(stop.diagnostic)",
    ),
    (
        "integrations/_common",
        "a write's step does not name its arguments (a reused call id is a key reuse)",
        'return f"call:{call_id}:{digest(canonical_json(args))}"',
        'return f"call:{call_id}"',
    ),
    (
        "integrations/pydantic_ai",
        "a write has no idempotency step from its tool call id",
        '"step_id": step_of(call_id, spec, args)}',
        '"step_id": None}',
    ),
]


def run(module: str, old: str, new: str) -> bool:
    """True when a test fails with the mutant applied (killed); ``old == ""`` runs the
    module's tests on the unchanged source."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "src", Path(tmp) / "src")
        path = Path(tmp) / "src" / "headway" / f"{module}.py"
        source = path.read_text()
        if old and source.count(old) != 1:
            raise SystemExit(f"{module}: {old!r} occurs {source.count(old)} times (needs 1)")
        if old:
            path.write_text(source.replace(old, new))
        env = {**os.environ, "PYTHONPATH": str(Path(tmp) / "src")}
        args = ["-x", "-q", "-p", "no:cacheprovider", "-m", "not redis and not postgres"]
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *args, *TESTS[module]],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=900,
            check=False,
        )
        return done.returncode != 0


def main() -> None:
    only = set(sys.argv[1:])
    for module in sorted({m for m, *_ in MUTANTS if not only or m in only}):
        if run(module, "", ""):  # a mutant only counts as killed if the tests pass without it
            raise SystemExit(f"the tests of {module} fail on the unchanged source: fix them first")
    survived: list[str] = []
    killed = 0
    for module, what, old, new in MUTANTS:
        if only and module not in only:
            continue
        started = time.monotonic()
        dead = run(module, old, new)
        killed += dead
        if not dead:
            survived.append(f"{module}: {what}")
        status = "KILLED  " if dead else "SURVIVED"
        print(f"{status} {module:12} {what}  ({time.monotonic() - started:.0f} s)", flush=True)
    print(f"\n{killed} killed, {len(survived)} survived")
    for line in survived:
        print("  survived:", line)


if __name__ == "__main__":
    main()
