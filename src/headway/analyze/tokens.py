"""Token estimates for tool results: ``tiktoken`` (cl100k_base) when it is installed
(``pip install 'headway[analyze]'``) and its encoding can be loaded within
``LOAD_TIMEOUT_S`` seconds (tiktoken downloads it once, then reads its cache: behind a
proxy that never answers the download would wait forever), else one token per 4
characters (the usual rule of thumb for English text and code), with a warning."""

from __future__ import annotations

import functools
import math
import sys
import threading
from typing import Any

LOAD_TIMEOUT_S = 10.0
_why = {"fallback": ""}  # why the fallback is in use, when tiktoken is installed


def _load(found: dict[str, Any]) -> None:
    try:
        import tiktoken  # type: ignore[import-not-found, unused-ignore]

        found["enc"] = tiktoken.get_encoding("cl100k_base")
    except ImportError:
        found["missing"] = True
    except Exception as exc:  # no cached encoding and no network: fall back
        found["error"] = type(exc).__name__
        found["detail"] = str(exc)[:200]


@functools.cache
def _encoder() -> Any:
    found: dict[str, Any] = {}
    # a daemon thread: a download that never ends is left behind, never waited for
    loader = threading.Thread(target=_load, args=(found,), daemon=True, name="tiktoken-load")
    loader.start()
    loader.join(LOAD_TIMEOUT_S)
    if "enc" in found:
        return found["enc"]
    if found.get("missing"):
        return None
    if loader.is_alive():
        _why["fallback"] = f"tiktoken's encoding did not load within {LOAD_TIMEOUT_S:g} s"
    else:
        _why["fallback"] = f"tiktoken's encoding could not be loaded ({found.get('error')})"
    detail = f" ({found['detail']})" if found.get("detail") else ""
    print(f"headway analyze: warning: {_why['fallback']}; counting characters / 4{detail}",
          file=sys.stderr)  # fmt: skip
    return None


def method() -> str:
    if _encoder() is not None:
        return "tiktoken cl100k_base"
    return "characters / 4" + (f" ({_why['fallback']})" if _why["fallback"] else "")


def count(text: str, size: int | None = None) -> int:
    """Tokens in a result of ``size`` characters of which ``text`` was recorded (a cut
    result is scaled up from its recorded part)."""
    size = max(size or 0, len(text))
    enc = _encoder()
    if enc is None or not text:
        return math.ceil(size / 4)
    n = len(enc.encode(text, disallowed_special=()))
    return n if size <= len(text) else math.ceil(n * size / len(text))
