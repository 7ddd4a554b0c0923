"""Every ```python block of docs/guide.md runs as written, in order, in one namespace.

The guide's blocks call the reader's own tools by name (``search_web``, ``charge``, ...);
the prelude below defines those stand-ins and nothing else."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"


class Payments:
    def __init__(self) -> None:
        self.by_key: dict[str, dict[str, Any]] = {}

    def find_by_idempotency_key(self, key: str) -> dict[str, Any] | None:
        return self.by_key.get(key)


def prelude() -> dict[str, Any]:
    payments = Payments()

    def charge(customer: str, cents: int) -> dict[str, Any]:
        return {"customer": customer, "cents": cents}

    return {
        "search_web": lambda query="": f"results for {query}",
        "get_overview": lambda ticker="": {"ticker": ticker},
        "get_price": lambda ticker="": 1.0,
        "send_email": lambda to="", body="": "sent",
        "run": lambda command="": f"ran {command}",
        "charge": charge,
        "payments": payments,
        "fn": lambda **kw: {"quote": 1},
        "read_file": lambda path="": f"contents of {path}",
        "get_doc": lambda url="": f"document at {url}",
        "head": lambda url: {"ETag": f"etag of {url}"},
        "framework_call": lambda args: f"the framework ran web_search with {args}",
    }


def test_every_guide_block_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    namespace = prelude()
    for number, block in enumerate(blocks, 1):
        try:
            exec(compile(block, f"{GUIDE}: python block {number}", "exec"), namespace)
        except Exception as exc:
            pytest.fail(f"guide block {number} fails: {type(exc).__name__}: {exc}\n{block}")
    assert "gov" in namespace and "out" in namespace
