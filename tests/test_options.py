"""Tool options: typed keywords (mypy catches a misspelt option), ConfigErrors for
contradictory options, and re-registration only with replace=True."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import headway
from headway.testing import ScriptedTool


@pytest.mark.parametrize(
    "options",
    [{"deterministic": True}, {"poll": True}, {"ttl": 30}, {"scope": "global"}],
    ids=["deterministic", "poll", "ttl", "scope"],
)
@pytest.mark.parametrize("effect", [{}, {"effect": "write"}], ids=["default", "explicit"])
def test_read_only_options_on_a_write_are_a_config_error(
    gov: headway.Governor, options: dict[str, object], effect: dict[str, object]
) -> None:
    option = next(iter(options))
    with pytest.raises(headway.ConfigError, match=f"{option}=.*reads only"):
        gov.register("send", ScriptedTool(["ok"]), **effect, **options)  # type: ignore[arg-type]
    assert gov.spec("send") is None


def test_registering_a_name_twice_needs_replace(gov: headway.Governor) -> None:
    first, second = ScriptedTool(["one"]), ScriptedTool(["two"])
    gov.register("t", first, effect="read")
    with pytest.raises(headway.ConfigError, match=r"already registered.*replace=True"):
        gov.register("t", second, effect="read")
    assert gov.session("a").call("t", {}).value == "one"  # the first tool is untouched
    gov.register("t", second, effect="read", replace=True)
    assert gov.session("b").call("t", {}).value == "two"
    gov.register("t", second, effect="read")  # the very same spec again: harmless


def test_a_spec_headway_declared_itself_is_replaced_by_a_registration(
    gov: headway.Governor,
) -> None:
    """A tool a framework ran before anyone registered it got the safe default; the
    operator's registration that comes later replaces it, without replace=True."""
    ran: list[str] = []

    def lookup(q: str) -> str:
        ran.append(q)
        return "found"

    gov.session("a").call("lookup", {"q": "x"}, run=lookup)  # declared: an unkeyed write
    gov.register("lookup", None, effect="read", deterministic=True)
    session = gov.session("b")
    statuses = [session.call("lookup", {"q": "x"}, run=lookup).status.value for _ in range(2)]
    assert statuses == ["executed", "cached"] and ran == ["x", "x"]
    with pytest.raises(headway.ConfigError, match="replace=True"):  # now it is the operator's
        gov.register("lookup", None, effect="read")


def test_a_misspelt_option_fails_mypy_and_raises(tmp_path: Path, gov: headway.Governor) -> None:
    pytest.importorskip("mypy")
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        textwrap.dedent(
            """
            import headway
            gov = headway.Governor()
            gov.register("t", print, efect="read")
            gov.tool(name="u", deterministc=True)(print)
            gov.register("v", print, effect="read", deterministic=True, ttl=5.0)
            """
        ),
        encoding="utf-8",
    )
    # in a subprocess: mypy changes interpreter state (its recursion limit) when run in-process
    done = subprocess.run(
        [sys.executable, "-m", "mypy", str(snippet), "--strict", "--no-incremental"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    out, status = done.stdout, done.returncode
    assert status == 1
    assert 'Unexpected keyword argument "efect"' in out
    assert 'Unexpected keyword argument "deterministc"' in out
    assert f"{snippet}:6:" not in out  # the well-spelt call type-checks
    with pytest.raises(headway.ConfigError, match="unknown option"):
        gov.register("t", print, efect="read")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("name", "value"),
    [("enforce", False), ("deadline_s", 1.0), ("store_failure", "open"), ("is_error", None)],
)
def test_an_option_every_call_reads_is_refused_after_construction(
    gov: headway.Governor, name: str, value: object
) -> None:
    """Calls read these options from what the Governor was built with: setting one
    afterwards would change the attribute and not the behaviour, so it is refused and
    the option keeps its value."""
    before = getattr(gov, name)
    with pytest.raises(AttributeError, match=rf"pass {name}= to Governor"):
        setattr(gov, name, value)
    assert getattr(gov, name) == before
    assert getattr(gov.context, name) == before


def test_other_attributes_stay_settable(gov: headway.Governor) -> None:
    """Options read when a session starts (the detector window, the limits) and the
    Governor's own attributes are not guarded: only what the Context froze is."""
    gov.no_progress_limit = 3
    assert gov.no_progress_limit == 3
