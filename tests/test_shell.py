"""The shell classifier: reads are proved read-only, writes list every path they write or
invalidate everything, and a cached read is never stale (checked against a real bash)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headway
from headway.shell import command_effect, command_resources, is_dynamic, shell_effect

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash is not installed")


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "cat a.py | grep foo",
        "sed -n '1,20p' x.py",
        "sed -n '/def /,/return/p' x.py",
        "git diff HEAD~1",
        "find . -name '*.py'",
        "cd repo && grep -rn TODO src",
        "head -50 f 2>&1",
        "python_version=3 ls >/dev/null",
        "awk '{print $1}' f",
        "sort a",
        "uniq -c a",
        "xxd a",
        "env",
        "git branch -a",
    ],
)
def test_reads(command: str) -> None:
    assert command_effect(command) == "read"


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf build",
        "echo x > a.txt",
        "ls >&out.txt",
        "cat <<'EOF' > f.py\nprint(1)\nEOF",
        "sed -i 's/a/b/' f",
        "sed -ni 's/a/b/' f",
        "sed -n 'w b' a",
        "sed 's/a/b/w out' a",
        "sed '1e date' a",
        "sed -f script.sed a",
        "find . -name '*.pyc' -delete",
        "find . -fls out",
        "python setup.py test",
        "ls && rm x",
        "git commit -m x",
        "git branch new-feature",
        "git diff --output=patch.txt",
        "pip install foo",
        "tee out.log",
        "unknown-tool --flag",
        "echo 'unterminated",
        "env rm -f a",
        "env X=1 python x.py",
        "sort -o b a",
        "sort -uo b a",
        "sort --output=b a",
        "awk '{print > \"b\"}' a",
        "awk '{print | \"sh\"}' a",
        "awk 'BEGIN{system(\"rm a\")}'",
        "awk -f prog.awk a",
        "uniq a b",
        "xxd -r dump bin",
        "xxd a b",
        "cat `rm a`",
        "cat $(rm a; echo b)",
        "diff <(rm a) b",
        "date -s '2020-01-01'",
        "cat a <> b",
    ],
)
def test_writes(command: str) -> None:
    """Anything not provably read-only is a write (each of these writes a file or runs code)."""
    assert command_effect(command) == "write"


def test_shell_effect_reads_common_argument_names() -> None:
    assert shell_effect({"command": "cat x"}) == "read"
    assert shell_effect({"cmd": "rm x"}) == "write"
    assert shell_effect({"other": 1}) == "write"
    assert is_dynamic("date +%S") and not is_dynamic("cat f")


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cat src/a.py", ("a.py", "src")),
        (
            "sed -n '1,20p' /testbed/src/a.py && head b.txt",
            ("a.py", "b.txt", "src", "testbed"),
        ),
        ("grep -n foo src/a.py", ("a.py", "src")),
        ("cd build && cat out", ("build", "out")),
        ("cat build/../a", None),
        ("cat *.py", None),
        ("cat $F", None),
        ("ls src", None),
        ("grep -rn foo src", None),
        ("git diff", None),
        ("cat <<'EOF' > src/a.py\nprint(1)\nEOF", ("a.py",)),
        ("sed -i 's/a/b/' ./src/a.py", ("a.py",)),
        ("sed -i.bak 's/a/b/' a.py", None),
        ("echo x >> log.txt", ("log.txt",)),
        ("rm -f build/out.o", ("out.o",)),
        ("rm -rf build", ("build",)),
        ("rm -rf /abs/build", None),
        ("rm -rf / a", None),
        ("rm *.o", None),
        ("cd .. && rm -rf w", None),
        ("cp a dir", ("a", "dir")),
        ("env rm -f a", None),
        ("sort -o b a", None),
        ("uniq a b", None),
        ("python reproduce.py", None),
        ("cd src && python -m pytest", None),
    ],
)
def test_command_resources(command: str, expected: tuple[str, ...] | None) -> None:
    """A read declares every component of its paths; a write the last component of the
    paths it writes; anything that cannot be listed declares none (everything)."""
    assert command_resources(command) == expected


def test_quotes_are_respected() -> None:
    assert command_effect('grep "a -> b" src/x.py') == "read"
    assert command_effect("grep 'a|b' src/x.py") == "read"
    assert command_resources("grep 'a|b' src/x.py") == ("src", "x.py")
    multi_line_sed = (
        "sed -i '/modules to check./i \\\\    def check(self, f: Sequence[str] | str) -> None:\\\\n' "
        "pylint/lint/pylinter.py"
    )
    assert command_effect(multi_line_sed) == "write"
    assert command_resources(multi_line_sed) == ("pylinter.py",)
    assert command_resources("cat a.py\nrm b.py") == ("b.py",)
    assert command_effect("cat a.py\nrm b.py") == "write"


# -- through a real Governor, with the guide's declaration, against a real bash ---------------


def _bash(directory: str, command: str) -> str:
    assert BASH is not None
    done = subprocess.run(
        [BASH, "-c", command],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
        check=False,
    )
    return f"{done.returncode}\n{done.stdout}{done.stderr}"


def _shell_governor(directory: str) -> headway.Governor:
    gov = headway.Governor(no_progress_limit=100_000)

    def run(command: str) -> str:
        return _bash(directory, command)

    from headway.shell import shell_resources

    gov.register("shell", run, effect=shell_effect, deterministic=True, resources=shell_resources)
    return gov


@pytest.fixture
def workdir() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as d:
        yield d


STALE_CASES = [
    # (setup, read, write): the read after the write must show the write's effect
    ("mkdir -p build && echo one > build/out", "cat build/out", "rm -rf build"),
    ("mkdir -p build && echo one > build/out", "cd build && cat out", "rm -rf build"),
    ("echo one > a", "cat a", "env rm -f a"),
    ("printf '2\\n1\\n' > a && echo old > b", "cat b", "sort -o b a"),
    ("echo new > a && echo old > b", "cat b", "awk '{print > \"b\"}' a"),
    ("echo new > a && echo old > b", "cat b", "sed -n 'w b' a"),
    ("echo new > a && echo old > b", "cat b", "uniq a b"),
    ("echo 00000000: 4142 > a && echo old > b", "cat b", "xxd -r a b"),
    ("echo new > a && echo old > b", "cat b", "xxd a b"),
    ("mkdir -p d && echo one > d/f", "cat d/f", "mv d e && mkdir d && echo two > d/f"),
    ("mkdir -p d n && echo one > d/f && echo two > n/f", "cat d/f", "rm -rf d && mv n d"),
    ("echo one > a", "cat a", "cp /dev/null a"),
]


@needs_bash
@pytest.mark.parametrize(("setup", "read", "write"), STALE_CASES)
def test_a_write_invalidates_the_reads_it_changes(
    workdir: str, setup: str, read: str, write: str
) -> None:
    """Through a Governor declared as in the guide, a read repeated after a write is run
    again (or served only if it still equals what the shell prints now)."""
    _bash(workdir, setup)
    gov = _shell_governor(workdir)
    with gov.session(f"stale-{uuid.uuid4().hex}") as s:
        first = s.call("shell", {"command": read})
        assert first.status is headway.Status.EXECUTED
        assert s.call("shell", {"command": write}).status is headway.Status.EXECUTED
        again = s.call("shell", {"command": read})
    now = _bash(workdir, read)
    assert again.value == now
    assert now != first.value, "the write must change what the read prints"
    assert again.status is headway.Status.EXECUTED


@needs_bash
def test_an_unrelated_write_keeps_the_cached_read(workdir: str) -> None:
    """The saving that resources buy: a write to another file does not invalidate."""
    _bash(workdir, "mkdir -p build && echo one > build/out")
    gov = _shell_governor(workdir)
    with gov.session(f"keep-{uuid.uuid4().hex}") as s:
        s.call("shell", {"command": "cat build/out"})
        s.call("shell", {"command": "echo x > other"})
        again = s.call("shell", {"command": "cat build/out"})
    assert again.status is headway.Status.CACHED


_COMMANDS = [
    "cat a",
    "cat b",
    "cat build/out",
    "cd build && cat out",
    "cat {d}/build/out",
    "head -n 3 a b",
    "grep -n x a",
    "sed -n '1,2p' b",
    "wc -c a build/out",
    "ls build",
    "ls",
    "sort a",
    "uniq -c b",
    "echo x{n} > a",
    "echo y{n} >> b",
    "mkdir -p build && echo z{n} > build/out",
    "rm -rf build",
    "rm -f a",
    "rm -rf {d}/build",
    "env rm -f b",
    "sort -o b a",
    "awk '{{print > \"b\"}}' a",
    "sed -n 'w a' b",
    "uniq a b",
    "xxd a b",
    "cp a b",
    "mv a b",
    "mv build old && mkdir build && echo w{n} > build/out",
    "sed -i 's/x/q/' a",
    "touch a",
    "cd build && rm -f out",
    "cat a > b",
    "true > a",
]


@needs_bash
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.tuples(st.sampled_from(_COMMANDS), st.integers(0, 3)), max_size=12))
def test_cached_reads_equal_what_bash_prints_now(commands: list[tuple[str, int]]) -> None:
    """Random sequences through the Governor and through bash directly: every result the
    Governor serves from its cache equals what the shell prints at that moment."""
    with tempfile.TemporaryDirectory() as d:
        _bash(d, "echo x1 > a && echo y1 > b && mkdir build && echo z1 > build/out")
        gov = _shell_governor(d)
        with gov.session(f"prop-{uuid.uuid4().hex}") as s:
            for template, n in commands:
                command = template.format(d=d, n=n)
                out = s.call("shell", {"command": command})
                if out.status is headway.Status.CACHED:
                    assert out.value == _bash(d, command), command
        assert Path(d).exists()
