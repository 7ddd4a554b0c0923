import pytest

from headway.shell import command_effect, is_dynamic, shell_effect


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "cat a.py | grep foo",
        "sed -n '1,20p' x.py",
        "git diff HEAD~1",
        "find . -name '*.py'",
        "cd repo && grep -rn TODO src",
        "head -50 f 2>&1",
        "python_version=3 ls >/dev/null",
    ],
)
def test_reads(command: str) -> None:
    assert command_effect(command) == "read"


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf build",
        "echo x > a.txt",
        "cat <<'EOF' > f.py\nprint(1)\nEOF",
        "sed -i 's/a/b/' f",
        "find . -name '*.pyc' -delete",
        "python setup.py test",
        "ls && rm x",
        "git commit -m x",
        "pip install foo",
        "tee out.log",
        "unknown-tool --flag",
        "echo 'unterminated",
    ],
)
def test_writes(command: str) -> None:
    assert command_effect(command) == "write"


def test_shell_effect_reads_common_argument_names() -> None:
    assert shell_effect({"command": "cat x"}) == "read"
    assert shell_effect({"cmd": "rm x"}) == "write"
    assert shell_effect({"other": 1}) == "write"
    assert is_dynamic("date +%S") and not is_dynamic("cat f")


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cat src/a.py", ("a.py",)),
        ("sed -n '1,20p' /testbed/src/a.py && head b.txt", ("a.py", "b.txt")),
        ("grep -n foo src/a.py", ("a.py",)),
        ("ls src", None),
        ("grep -rn foo src", None),
        ("git diff", None),
        ("cat <<'EOF' > src/a.py\nprint(1)\nEOF", ("a.py",)),
        ("sed -i 's/a/b/' ./src/a.py", ("a.py",)),
        ("echo x >> log.txt", ("log.txt",)),
        ("rm -f build/out.o", ("out.o",)),
        ("python reproduce.py", None),
        ("cd src && python -m pytest", None),
    ],
)
def test_command_resources(command: str, expected: tuple[str, ...] | None) -> None:
    from headway.shell import command_resources

    assert command_resources(command) == expected


def test_quotes_are_respected() -> None:
    from headway.shell import command_resources

    assert command_effect('grep "a -> b" src/x.py') == "read"
    assert command_effect("grep 'a|b' src/x.py") == "read"
    assert command_resources("grep 'a|b' src/x.py") == ("x.py",)
    multi_line_sed = (
        "sed -i '/modules to check./i \\\\    def check(self, f: Sequence[str] | str) -> None:\\\\n' "
        "pylint/lint/pylinter.py"
    )
    assert command_effect(multi_line_sed) == "write"
    assert command_resources(multi_line_sed) == ("pylinter.py",)
    assert command_resources("cat a.py\nrm b.py") == ("b.py",)
    assert command_effect("cat a.py\nrm b.py") == "write"
