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
LOOPS = ["tests/test_loops.py", "tests/test_pinned.py", "tests/test_read_dedup.py"]
TESTS = {
    "detectors": LOOPS,
    "similarity": LOOPS,
    "_session": LOOPS,
    "_pipeline": ["tests/test_read_dedup.py", "tests/test_pinned.py", *LOOPS[:1]],
    "budgets": ["tests/test_budgets.py", "tests/test_pinned.py"],
    "idempotency": ["tests/test_idempotency.py", "tests/test_pinned.py"],
    "shell": ["tests/test_shell.py"],
    "breaker": ["tests/test_resilience.py", "tests/test_pinned.py"],
}

# (module, what the mutant breaks, text in the module, replacement)
MUTANTS: list[tuple[str, str, str, str]] = [
    (
        "_session",
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
    ("detectors", "cycles of period 3-5 off", "for p in range(2, 6):", "for p in range(2, 3):"),
    (
        "detectors",
        "near-duplicates of other arguments' results off",
        "elif step.unchanged or self._near_any(step):",
        "elif step.unchanged:",
    ),
    ("detectors", "candidate count 8 -> 1", "_CANDIDATES = 8", "_CANDIDATES = 1"),
    ("detectors", "trivial-result rule off", "(same_call or len(step.norm) > _TRIVIAL)", "True"),
    (
        "detectors",
        "read repeat corrected from the 4th call",
        'effect == "read" and repeat >= 3',
        'effect == "read" and repeat >= 4',
    ),
    ("detectors", "repeated error corrected from the 4th", "if run >= 3:", "if run >= 4:"),
    ("detectors", "repeated error is not no_progress at 2", "if run >= 2:", "if run >= 3:"),
    ("detectors", "stop one step after the limit", "if run >= limit:", "if run > limit:"),
    (
        "detectors",
        "no escalation at half the limit",
        "elif run >= (limit // 2 or 1)",
        "elif run >= limit + 1",
    ),
    (
        "detectors",
        "the same write with a near-duplicate result is progress",
        '                return "no_progress"\n            return "progress"',
        '                return "progress"\n            return "progress"',
    ),
    ("detectors", "an unchanged poll is no progress", 'return "waiting"', 'return "no_progress"'),
    (
        "detectors",
        "a cycle with changing results corrected",
        'if all(o.mark != "progress" for o in recent):',
        "if True:",
    ),
    (
        "detectors",
        "poll budget one poll late",
        "if limit is not None and used >= limit:",
        "if limit is not None and used > limit:",
    ),
    (
        "detectors",
        "a user turn keeps the no-progress run",
        "        self.no_progress_run = 0\n        self._errors.clear()",
        "        self._errors.clear()",
    ),
    (
        "detectors",
        "a cached step is neutral",
        '            step.mark = "no_progress"\n            step.duplicate = step.unchanged = True',
        '            step.mark = "neutral"\n            step.duplicate = step.unchanged = True',
    ),
    (
        "_pipeline",
        "TTL boundary < -> <=",
        'gov.clock() - entry["t"] < spec.ttl',
        'gov.clock() - entry["t"] <= spec.ttl',
    ),
    (
        "_pipeline",
        "errors cached",
        "        if c.status is EXECUTED:\n            c.text = result_text(c.value)",
        "        if True:\n            c.text = result_text(c.value)",
    ),
    (
        "_pipeline",
        "results over the size limit cached",
        "if len(c.text) <= gov.max_cached_bytes:",
        "if True:",
    ),
    (
        "_pipeline",
        "uncached reads never corrected",
        "if (fresh is not None or not spec.ttl) and",
        "if fresh is not None and",
    ),
    (
        "_pipeline",
        "a write naming resources invalidates nothing",
        'bump = ("any", *("r:" + r for r in touched))',
        'bump = ("any",)',
    ),
    (
        "_pipeline",
        "a write naming no resource spares resource reads",
        'bump = ("any", "*")',
        'bump = ("any",)',
    ),
    (
        "_pipeline",
        "sessions share their cache",
        'else st.session_id + "#" + _generation',
        'else "s#" + _generation',
    ),
    ("budgets", "wall-clock boundary >= -> >", "now >= self.deadline", "now > self.deadline"),
    ("budgets", "total calls boundary", "self.calls >= b.tool_calls", "self.calls > b.tool_calls"),
    ("budgets", "tokens boundary", "self.tokens >= b.tokens", "self.tokens > b.tokens"),
    (
        "idempotency",
        "key reused by another tool not rejected",
        ' or record.get("tool") != c.spec.name',
        "",
    ),
    (
        "idempotency",
        "key reused with other arguments not rejected",
        'record.get("args") != c.args_digest or ',
        "",
    ),
    (
        "shell",
        "uniq IN OUT is a read",
        "return len(_operands(words)) > 1  # uniq",
        "return len(_operands(words)) > 2  # uniq",
    ),
    ("shell", "sort -o is a read", 'return "o" in shorts or', "return"),
    (
        "shell",
        "sed w command is a read",
        'commands is None or commands & {"w", "W", "e"}',
        "commands is None",
    ),
    (
        "shell",
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
        "shell",
        ".. accepted in paths",
        'return None if not parts or ".." in parts else parts',
        "return parts or None",
    ),
    ("shell", "env runs no program", "return bool(_operands(words))  # env", "return False  # env"),
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
]


def run(module: str, old: str, new: str) -> bool:
    """True when a test fails with the mutant applied (killed)."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "src", Path(tmp) / "src")
        path = Path(tmp) / "src" / "headway" / f"{module}.py"
        source = path.read_text()
        if source.count(old) != 1:
            raise SystemExit(f"{module}: {old!r} occurs {source.count(old)} times (needs 1)")
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
