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
