"""Store URLs: a malformed URL is a ConfigError naming the problem; a server that refuses
says why in the StoreError, at once and without driver log noise."""

from __future__ import annotations

import logging

import pytest

import headway
from conftest import POSTGRES_URL


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("memory:/", "memory://"),
        ("memory:///x", "memory://"),
        ("redis://127.0.0.1:6379/abc", "must be a number"),
        ("redis:/127.0.0.1", "needs a host"),
        ("redis://127.0.0.1:99999/0", "port"),
        ("redis://:hunter2@127.0.0.1:99999/0", "port"),
        ("postgresql://127.0.0.1:99999/test", "port"),
        ("unix://", "needs a path"),
        ("mysql://127.0.0.1/x", "unknown store URL scheme"),
    ],
)
def test_a_malformed_store_url_is_a_config_error_naming_the_problem(url: str, problem: str) -> None:
    with pytest.raises(headway.ConfigError, match=problem) as raised:
        headway.open_store(url)
    assert "hunter2" not in str(raised.value)


def test_well_formed_urls_still_open(tmp_path: object) -> None:
    assert isinstance(headway.open_store("memory://"), headway.MemoryStore)


@pytest.mark.postgres
def test_a_wrong_postgres_role_says_so_in_one_short_message_without_log_noise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("psycopg")
    try:  # the server must be up for the role to be what fails
        headway.open_store(POSTGRES_URL).close()
    except headway.StoreError as exc:
        pytest.skip(f"PostgreSQL is not reachable: {exc}")
    wrong = POSTGRES_URL.replace("postgres@", "no_such_role_x@", 1)
    assert wrong != POSTGRES_URL
    with caplog.at_level(logging.DEBUG), pytest.raises(headway.StoreError) as raised:
        headway.open_store(wrong, timeout_s=10)
    message = str(raised.value)
    assert 'role "no_such_role_x" does not exist' in message
    assert "\n" not in message and len(message) < 300
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]
