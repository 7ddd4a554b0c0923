"""Token estimates for tool results: ``tiktoken`` (cl100k_base) when it is installed, else
one token per 4 characters (the usual rule of thumb for English text and code)."""

from __future__ import annotations

import functools
import math
from typing import Any


@functools.cache
def _encoder() -> Any:
    try:
        import tiktoken  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    try:
        return tiktoken.get_encoding("cl100k_base")
    except Exception:  # no cached encoding and no network: fall back
        return None


def method() -> str:
    return "tiktoken cl100k_base" if _encoder() is not None else "characters / 4"


def count(text: str, size: int | None = None) -> int:
    """Tokens in a result of ``size`` characters of which ``text`` was recorded (a cut
    result is scaled up from its recorded part)."""
    size = max(size or 0, len(text))
    enc = _encoder()
    if enc is None or not text:
        return math.ceil(size / 4)
    n = len(enc.encode(text, disallowed_special=()))
    return n if size <= len(text) else math.ceil(n * size / len(text))
