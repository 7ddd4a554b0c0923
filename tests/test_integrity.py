"""Record integrity: with a secret, a forged or rewritten store entry is never served
(cache: treated as absent; idempotency record: keyed writes fail closed, logged as
tampering); malformed entries never raise out of call()."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

import headway
from headway.testing import ScriptedTool


def _tamper(path: Path, old: str, new: str) -> int:
    """What an attacker with write access to the shared store does: rewrite the values."""
    with sqlite3.connect(path) as conn:
        cur = conn.execute("UPDATE headway_kv SET value = replace(value, ?, ?)", (old, new))
        return cur.rowcount


def _gov(path: Path, secret: str | None) -> headway.Governor:
    gov = headway.Governor(headway.SQLiteStore(str(path)), secret=secret)
    gov.register(
        "profile",
        ScriptedTool([{"email": "alice@example.com"}]),
        effect="read",
        deterministic=True,
        scope="global",
    )
    gov.register("charge", ScriptedTool([{"charge_id": "ch_real"}]), effect="write")
    return gov


def test_a_rewritten_cache_entry_is_not_served_with_a_secret(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    gov = _gov(db, secret="s3cret")
    gov.session("a").call("profile", {"user": "u1"})
    assert _tamper(db, "alice@example.com", "attacker@evil.test") >= 1
    out = gov.session("b").call("profile", {"user": "u1"})
    assert out.status is headway.Status.EXECUTED  # the forged entry counted as absent
    assert out.value == {"email": "alice@example.com"}


def test_without_a_secret_the_same_forgery_is_served(tmp_path: Path) -> None:
    """The control: what integrity protects against (so the test above means something)."""
    db = tmp_path / "shared.db"
    gov = _gov(db, secret=None)
    gov.session("a").call("profile", {"user": "u1"})
    _tamper(db, "alice@example.com", "attacker@evil.test")
    out = gov.session("b").call("profile", {"user": "u1"})
    assert out.status is headway.Status.CACHED and out.value == {"email": "attacker@evil.test"}


def test_a_rewritten_idempotency_record_fails_closed_and_is_logged_as_tampering(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "shared.db"
    gov = _gov(db, secret="s3cret")
    first = gov.session("a").call("charge", {"n": 1}, idempotency_key="order-1")
    assert first.status is headway.Status.EXECUTED
    assert _tamper(db, "ch_real", "ch_attacker") >= 1
    with caplog.at_level(logging.WARNING, logger="headway"):
        again = gov.session("b").call("charge", {"n": 1}, idempotency_key="order-1")
    assert again.status is headway.Status.ERROR and not again.executed
    assert again.error is not None and again.error["code"] == "store_unavailable"
    assert "ch_attacker" not in again.to_model()
    assert "tampering" in caplog.text


def test_a_record_signed_with_another_secret_is_absent(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    _gov(db, secret="one").session("a").call("profile", {"user": "u1"})
    out = _gov(db, secret="two").session("b").call("profile", {"user": "u1"})
    assert out.status is headway.Status.EXECUTED


def test_the_secret_comes_from_the_environment_or_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEADWAY_SECRET", "from-env")
    assert isinstance(headway.Governor().store, headway.stores._signed.SignedStore)
    monkeypatch.delenv("HEADWAY_SECRET")
    assert isinstance(headway.Governor().store, headway.MemoryStore)
    config = tmp_path / "headway.toml"
    config.write_text('[governor]\nsecret = "from-file"\n', encoding="utf-8")
    assert isinstance(
        headway.Governor.from_config(config).store, headway.stores._signed.SignedStore
    )
    with pytest.raises(headway.ConfigError, match="secret"):
        headway.Governor(secret="")


@pytest.mark.parametrize(
    "entry",
    [
        {"v": {"x": 1}, "t": "soon"},
        {"t": 1.0},
        {"v": 1, "t": None},
        "not a record",
        [1, 2],
    ],
)
def test_a_malformed_cache_entry_never_raises(gov: headway.Governor, entry: object) -> None:
    gov.register("quote", ScriptedTool([{"p": 1}]), effect="read", ttl=60)
    s = gov.session("run-m")
    s.call("quote", {"s": "X"})
    store = gov.store
    assert isinstance(store, headway.MemoryStore)
    for key in [k for k in store._data if ":cache:" in k]:
        store.set(key, entry)
    out = s.call("quote", {"s": "X"})
    assert out.status is headway.Status.EXECUTED and out.value == {"p": 1}
