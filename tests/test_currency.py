"""Cache currency (semantics §1, issue 30 item 2): a cached read is served only while
headway knows it is current; ``validate=`` fingerprints what the read reads."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

import headway
from headway import Status
from headway._fingerprint import ABSENT, file_fingerprint
from headway.config import parse


def settled(path: Path) -> Path:
    """Wait until ``path``'s last change is older than a file-system clock tick: until
    then its fingerprint cannot tell a further change apart, and nothing is served."""
    while file_fingerprint(str(path)) is None and path.exists():
        time.sleep(0.005)
    return path


def reader(calls: list[str]) -> Any:
    def read_file(path: str) -> str:
        calls.append(path)
        return Path(path).read_text() if Path(path).exists() else "no such file"

    return read_file


def test_a_validated_read_is_served_while_its_file_is_unchanged_and_runs_once_it_changed(
    tmp_path: Path,
) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("version 1")
    settled(f)
    calls: list[str] = []
    gov = headway.Governor()
    gov.register("read_file", reader(calls), effect="read", validate="file:path")
    s = gov.session("r")
    args = {"path": str(f)}
    assert [s.call("read_file", args).status for _ in range(2)] == [Status.EXECUTED, Status.CACHED]
    f.write_text("version 2")  # the same size: an editor saving in place
    settled(f)
    out = s.call("read_file", args)
    assert (out.status, out.value) == (Status.EXECUTED, "version 2")
    assert s.call("read_file", {"path": str(f)}).value == "version 2"
    assert len(calls) == 2


def test_a_file_changed_within_its_clock_tick_is_never_served_from_before(
    tmp_path: Path,
) -> None:
    """Written, read and written again at once (the same size, maybe the same timestamp):
    the first read is not stored as current, so the second read runs."""
    f = tmp_path / "a.txt"
    gov = headway.Governor()
    gov.register("read_file", reader([]), effect="read", validate="file:path")
    s = gov.session("r")
    for n in range(5):
        f.write_text(f"v{n}")
        assert s.call("read_file", {"path": str(f)}).value == f"v{n}"


def test_a_validated_read_in_async_code_sees_the_changed_file(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("one")
    settled(f)
    calls: list[str] = []

    async def read_file(path: str) -> str:
        calls.append(path)
        return Path(path).read_text()

    async def main() -> list[Any]:
        gov = headway.Governor()
        gov.register("read_file", read_file, effect="read", validate="file:path")
        s = gov.session("r")
        seen = [await s.acall("read_file", {"path": str(f)}) for _ in range(2)]
        f.write_text("two")
        settled(f)
        seen.append(await s.acall("read_file", {"path": str(f)}))
        return [(o.status, o.value) for o in seen]

    assert asyncio.run(main()) == [
        (Status.EXECUTED, "one"),
        (Status.CACHED, "one"),
        (Status.EXECUTED, "two"),
    ]


def test_a_file_changed_within_the_last_clock_tick_has_no_fingerprint_yet(tmp_path: Path) -> None:
    """Timestamps have a grain (a coarse clock tick): a second change within it could
    leave the same mtime, size and inode, so a file just changed cannot be told current."""
    f = tmp_path / "a.txt"
    f.write_text("x")
    assert file_fingerprint(str(f)) is None
    settled(f)
    state = file_fingerprint(str(f))
    assert state is not None and state[0] == "file" and state[3] == 1


def test_a_missing_file_is_a_state_and_its_creation_a_change(tmp_path: Path) -> None:
    f = tmp_path / "later.txt"
    assert file_fingerprint(str(f)) == ABSENT
    calls: list[str] = []
    gov = headway.Governor()
    gov.register("read_file", reader(calls), effect="read", validate="file:path")
    s = gov.session("r")
    assert [s.call("read_file", {"path": str(f)}).status for _ in range(2)] == [
        Status.EXECUTED,
        Status.CACHED,
    ]
    f.write_text("here")
    settled(f)
    assert s.call("read_file", {"path": str(f)}).value == "here"


def test_a_directory_listing_is_current_until_an_entry_changes(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("1")
    settled(tmp_path / "a")
    settled(tmp_path)
    gov = headway.Governor()
    gov.register(
        "list_dir",
        lambda path: sorted(os.listdir(path)),
        effect="read",
        validate="file:path",
    )
    s = gov.session("r")
    args = {"path": str(tmp_path)}
    assert s.call("list_dir", args).value == ["a"]
    assert s.call("list_dir", args).status is Status.CACHED
    (tmp_path / "b").write_text("2")
    settled(tmp_path)
    assert s.call("list_dir", args).value == ["a", "b"]
    settled(tmp_path / "a")
    assert s.call("list_dir", args).status is Status.CACHED
    (tmp_path / "a").write_text("changed, longer")  # an entry's size, not the listing
    settled(tmp_path / "a")
    out = s.call("list_dir", args)
    assert out.status is Status.EXECUTED


@pytest.mark.parametrize("fingerprint", [lambda a: None, lambda a: 1 / 0, lambda a: object()])
def test_a_fingerprint_that_cannot_be_taken_means_not_current(fingerprint: Any) -> None:
    """None, an exception, something JSON cannot hold: the tool runs every time and its
    result is not stored (the audit says why)."""
    runs: list[int] = []

    def lookup(k: int) -> str:
        runs.append(k)
        return "value"

    gov = headway.Governor()
    gov.register("lookup", lookup, effect="read", deterministic=True, validate=fingerprint)
    s = gov.session("r")
    outs = [s.call("lookup", {"k": 1}) for _ in range(3)]
    assert [o.status for o in outs] == [Status.EXECUTED] * 3 and len(runs) == 3
    assert all(any(f.startswith("not_current") for f in r["flags"]) for r in gov.audit_records("r"))


def test_a_fingerprint_function_serves_while_its_value_is_the_one_stored() -> None:
    """An ETag or a row version: equal -> served; another value -> run and stored anew;
    the earlier value again -> the entry stored under it is current again."""
    etag = {"v": "e1"}
    runs: list[str] = []
    gov = headway.Governor()

    def get_doc(doc: int) -> str:
        runs.append(etag["v"])
        return f"doc {doc} at {etag['v']}"

    gov.register("get_doc", get_doc, effect="read", validate=lambda args: {"etag": etag["v"]})
    s = gov.session("r")
    assert s.call("get_doc", {"doc": 1}).status is Status.EXECUTED
    assert s.call("get_doc", {"doc": 1}).status is Status.CACHED
    etag["v"] = "e2"
    out = s.call("get_doc", {"doc": 1})
    assert (out.status, out.value) == (Status.EXECUTED, "doc 1 at e2")
    etag["v"] = "e1"
    assert s.call("get_doc", {"doc": 1}).value == "doc 1 at e1"
    assert runs == ["e1", "e2"]


def test_validate_with_a_ttl_needs_both_fresh_and_unchanged(clock: Any) -> None:
    gov = headway.Governor(clock=clock)
    version = {"v": 1}
    gov.register("quote", lambda s: f"q{version['v']}", effect="read", ttl=10, validate=lambda a: 1)
    s = gov.session("r")
    s.call("quote", {"s": "x"})
    assert s.call("quote", {"s": "x"}).status is Status.CACHED
    clock.advance(11)
    assert s.call("quote", {"s": "x"}).status is Status.EXECUTED


def test_a_shared_sqlite_store_serves_another_governor_only_the_current_file(
    tmp_path: Path,
) -> None:
    f = tmp_path / "shared.txt"
    f.write_text("first")
    settled(f)
    url = f"sqlite:///{tmp_path}/store.db"
    govs = [headway.Governor(store=headway.open_store(url)) for _ in range(2)]
    for gov in govs:
        gov.register("read_file", reader([]), effect="read", validate="file:path")
    args = {"path": str(f)}
    assert govs[0].session("r").call("read_file", args).status is Status.EXECUTED
    assert govs[1].session("r").call("read_file", args).status is Status.CACHED
    f.write_text("other")
    settled(f)
    out = govs[1].session("r").call("read_file", args)
    assert (out.status, out.value) == (Status.EXECUTED, "other")
    assert govs[0].session("r").call("read_file", args).value == "other"


def test_validate_names_a_built_in_or_is_a_clear_error() -> None:
    gov = headway.Governor()
    with pytest.raises(headway.ConfigError, match="unknown validate 'etag:url'"):
        gov.register("a", lambda url: 1, effect="read", validate="etag:url")
    with pytest.raises(headway.ConfigError, match="names no argument"):
        gov.register("b", lambda path: 1, effect="read", validate="file")
    with pytest.raises(headway.ConfigError, match="applies to reads only"):
        gov.register("c", lambda path: 1, effect="write", validate="file:path")
    with pytest.raises(headway.ConfigError, match="validate must be"):
        gov.register("d", lambda path: 1, effect="read", validate=3)  # type: ignore[arg-type]
    assert gov.tools() == []


def test_toml_validate_names_the_built_in_and_the_argument(tmp_path: Path) -> None:
    config = parse({"tools": {"read_file": {"validate": "file:path"}}})
    assert config.tools["read_file"] == {"validate": "file:path"}
    for bad, message in (
        ("file", "names no argument"),
        ("mtime:path", "unknown validate"),
        (True, "must name a built-in"),
    ):
        with pytest.raises(headway.ConfigError, match=message) as info:
            parse({"tools": {"read_file": {"validate": bad}}}, "headway.toml")
        assert "[tools.read_file]" in str(info.value)
    f = tmp_path / "a.txt"
    f.write_text("x")
    settled(f)
    toml = tmp_path / "headway.toml"
    toml.write_text('[tools.read_file]\neffect = "read"\nvalidate = "file:path"\n')
    gov = headway.Governor.from_config(toml)
    gov.register("read_file", reader([]))  # the operator's file gives the fingerprint
    spec = gov.spec("read_file")
    assert spec is not None and spec.effect == "read" and spec.validate == "file:path"
    s = gov.session("r")
    assert [s.call("read_file", {"path": str(f)}).status for _ in range(2)] == [
        Status.EXECUTED,
        Status.CACHED,
    ]


def test_a_relative_or_home_path_is_never_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool resolves a relative path (an MCP file server: against its own folder) or
    `~` itself, out of headway's sight: such a call runs every time, never served from a
    fingerprint of some other file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("v1")
    settled(tmp_path / "notes.txt")
    assert file_fingerprint("notes.txt") is None
    assert file_fingerprint("~/notes.txt") is None
    calls: list[str] = []
    gov = headway.Governor()
    gov.register("read_file", reader(calls), effect="read", validate="file:path")
    s = gov.session("r")
    assert [s.call("read_file", {"path": "notes.txt"}).status for _ in range(2)] == [
        Status.EXECUTED,
        Status.EXECUTED,
    ]
