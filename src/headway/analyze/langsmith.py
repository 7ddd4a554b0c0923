"""LangSmith run exports: runs as the LangSmith API returns them (``list_runs``), one a
line or a document (a list, or ``{"runs": [...]}``).

A run with ``run_type`` ``tool`` is a tool call: ``name``, ``inputs`` (a tool given one
string records ``{"input": TEXT}``) and ``outputs`` (``{"output": ...}``); ``error`` marks
a failure. ``llm`` runs are model turns, with ``prompt_tokens`` / ``completion_tokens``
and ``total_cost`` (USD) when recorded. Runs are grouped by ``trace_id`` (the root run's id) and ordered by
``dotted_order`` (else ``start_time``). A file's runs are held until its end.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._lines import records
from ._model import Call, Problem, Run, iso_time
from .chat import arguments, finish


def is_record(obj: Any) -> bool:
    return isinstance(obj, Mapping) and "run_type" in obj and "inputs" in obj


def _inputs(inputs: Any) -> Any:
    if isinstance(inputs, Mapping) and set(inputs) == {"input"}:
        return arguments(inputs["input"])
    return inputs


def _output(outputs: Any) -> str:
    if isinstance(outputs, Mapping) and set(outputs) == {"output"}:
        outputs = outputs["output"]
    if isinstance(outputs, str):
        return outputs
    return "" if outputs is None else json.dumps(outputs, sort_keys=True, default=str)


def read(path: Path, *, jsonl: bool) -> Iterator[Run | Problem]:
    source = path.name.split(".")[0]
    traces: dict[str, list[tuple[str, int, dict[str, Any]]]] = {}
    for item in records(path, jsonl, ("runs", "data")):
        if isinstance(item, Problem):
            yield item
            continue
        number, rec = item
        if not is_record(rec):
            yield Problem(str(path), number, "not a LangSmith run (needs run_type and inputs)")
            continue
        kind = rec.get("run_type")
        if kind not in ("tool", "llm"):
            continue
        order = str(rec.get("dotted_order") or rec.get("start_time") or "")
        slim = {"kind": kind, "name": rec.get("name"), "inputs": rec.get("inputs"),
                "outputs": rec.get("outputs"), "error": rec.get("error"),
                "at": rec.get("start_time"), "tokens": (rec.get("prompt_tokens"),
                                                        rec.get("completion_tokens")),
                "cost": rec.get("total_cost")}  # fmt: skip
        trace = str(rec.get("trace_id") or rec.get("id"))
        runs = traces.setdefault(trace, [])
        runs.append((order, len(runs), slim))
    for trace, runs in traces.items():
        run = Run(source, trace, [])
        turn = -1
        for _, _, r in sorted(runs, key=lambda x: x[:2]):
            if r["kind"] == "llm":
                turn += 1
                tin, tout = r["tokens"]
                if isinstance(tin, int) and tin > 0:
                    run.usage[turn] = (tin, tout if isinstance(tout, int) else 0)
                cost = r["cost"]
                if isinstance(cost, int | float | str) and not isinstance(cost, bool):
                    with contextlib.suppress(ValueError):  # a Decimal arrives as JSON text
                        run.cost = (run.cost or 0.0) + float(cost)
                continue
            run.calls.append(Call(str(r["name"] or ""), _inputs(r["inputs"]), _output(r["outputs"]),
                                  "", time=iso_time(r["at"]), error=bool(r["error"]),
                                  turn=turn if turn >= 0 else None))  # fmt: skip
        finish(run.calls)
        yield run
