"""``headway demo``: a scripted agent (no LLM, deterministic) through a real Governor.

Each scene is one session showing one kind of repetition and what headway does with it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from ._session import Governor, Session
from .breaker import Breaker
from .budgets import Budgets
from .errors import Stop
from .outcome import Status
from .retry import RETRYABLE, Retry
from .stores import Store


@dataclasses.dataclass
class Row:
    scene: str
    step: int
    tool: str
    args: str
    status: str
    executed: bool
    note: str


class World:
    """The fake services behind the demo's tools (counts what really ran)."""

    def __init__(self) -> None:
        self.executions = 0
        self.orders: list[dict[str, Any]] = []
        self.charges: dict[str, dict[str, Any]] = {}  # the payment provider's ledger
        self.polls = 0
        self.tick = 0

    def ran(self) -> None:
        self.executions += 1


def build(store: Store) -> tuple[Governor, World]:
    w = World()
    gov = Governor(store=store, agent="demo")

    @gov.tool(effect="read", deterministic=True)
    def get_company_overview(ticker: str) -> dict[str, Any]:
        w.ran()
        return {
            "ticker": ticker,
            "name": {"AAPL": "Apple Inc."}.get(ticker, ticker),
            "sector": "Technology",
        }

    @gov.tool(effect="read")
    def search_news(query: str) -> list[str]:
        w.ran()
        return [f"{query}: headline {i}" for i in range(2)]

    @gov.tool(effect="write")
    def start_export(dataset: str) -> dict[str, str]:
        w.ran()
        return {"op": "exp-1", "status": "RUNNING"}

    @gov.tool(effect="read", poll=True)
    def get_operation_status(op: str) -> dict[str, str]:
        w.ran()
        w.polls += 1
        return {"op": op, "status": "DONE" if w.polls >= 7 else "RUNNING"}

    @gov.tool(effect="write")
    def create_order(sku: str, qty: int) -> dict[str, Any]:
        w.ran()
        order = {"order_id": f"o-{len(w.orders) + 1}", "sku": sku, "qty": qty}
        w.orders.append(order)
        return order

    @gov.tool(effect="read")
    def search_orders(customer_id: str) -> dict[str, Any]:
        w.ran()
        return {"customer_id": customer_id, "orders": [], "note": "no orders match"}

    pages = {
        "/pricing": "Pricing: the Basic plan costs 10 EUR a month, the Team plan 25 EUR per seat.",
        "/faq": "FAQ: refunds are possible within 30 days; contact support for invoices and VAT.",
    }

    @gov.tool(effect="read")
    def open_page(url: str) -> str:
        w.ran()
        return f"<html><title>{url}</title><body>{pages.get(url, 'Not found')}</body></html>"

    def find_charge(key: str, args: Any) -> dict[str, Any] | None:
        return w.charges.get(key)  # what a payment API offers: look up by idempotency key

    @gov.tool(effect="write", reconcile=find_charge)
    def charge_card(customer: str, cents: int, idempotency_key: str = "") -> dict[str, Any]:
        w.ran()
        first = not w.charges
        w.charges[idempotency_key] = {"charge": f"ch-{len(w.charges) + 1}", "cents": cents}
        if first:
            raise TimeoutError("payment gateway timed out after charging")
        return w.charges[idempotency_key]

    @gov.tool(
        effect="read",
        retry=Retry(attempts=1),
        breaker=Breaker(failures=2, cooldown_s=60),
        fallback={"quote": None, "degraded": True},
        classify=lambda exc: RETRYABLE,
    )
    def get_quote(ticker: str) -> dict[str, Any]:
        w.ran()
        raise ConnectionError("quote service unreachable")

    @gov.tool(effect="read")
    def run_shell(cmd: str) -> str:
        w.ran()
        w.tick += 1
        return f"{cmd}: tick {w.tick}"

    return gov, w


Script = list[tuple[str, dict[str, Any]]]


def scenes() -> Iterator[tuple[str, str, Script, Budgets | None]]:
    yield (
        "cache",
        "a research agent asks for the same company overview again later",
        [
            ("get_company_overview", {"ticker": "AAPL"}),
            ("search_news", {"query": "Apple earnings"}),
            ("get_company_overview", {"ticker": "AAPL"}),
        ],
        None,
    )
    yield (
        "poll",
        "an agent polls a running export: waiting, not looping",
        [("start_export", {"dataset": "sales"})] + [("get_operation_status", {"op": "exp-1"})] * 7,
        None,
    )
    yield (
        "orders",
        "the user asked for two identical orders: both are placed",
        [
            ("create_order", {"sku": "MUG-1", "qty": 1}),
            ("create_order", {"sku": "MUG-1", "qty": 1}),
        ],
        None,
    )
    yield (
        "stuck",
        "an agent searches the same thing again and again: corrected, then stopped",
        [("search_orders", {"customer_id": "c-17"})] * 9,
        None,
    )
    yield (
        "cycle",
        "an agent goes back and forth between two pages",
        [("open_page", {"url": "/pricing"}), ("open_page", {"url": "/faq"})] * 5,
        None,
    )
    yield (
        "payment",
        "a charge times out after the money moved; the retry is reconciled, not re-charged",
        [("charge_card", {"customer": "c-9", "cents": 1999, "idempotency_key": "order-77"})] * 3,
        None,
    )
    yield (
        "failing",
        "a quote service is down: the breaker opens, the fallback is served",
        [("get_quote", {"ticker": t}) for t in ("AAPL", "MSFT", "NVDA", "AMZN")],
        None,
    )
    yield (
        "budget",
        "a runaway agent whose output keeps changing: stopped by its budget",
        [("run_shell", {"cmd": "date"})] * 8,
        Budgets(tool_calls=6),
    )


def _note(
    status: Status, out_text: str, correction: str | None, error: dict[str, Any] | None
) -> str:
    notes = {
        Status.CACHED: "served from cache",
        Status.CORRECTED: "not run: model told to change course",
        Status.REPLAYED: "replayed stored result",
        Status.UNKNOWN: "outcome unknown",
        Status.FALLBACK: "fallback value",
    }
    note = notes.get(status, "")
    if error is not None:
        note = (note + "; " if note else "") + f"error {error.get('code')}"
    if status is Status.EXECUTED:
        note = out_text[:38]
    if correction and status is not Status.CORRECTED:
        note = (note + "; " if note else "") + "+ correction"
    return note


def run(store: Store, out: TextIO, on_scene: Callable[[str], None] | None = None) -> dict[str, Any]:
    gov, world = build(store)
    rows: list[Row] = []
    stops: list[dict[str, Any]] = []
    for name, title, script, budgets in scenes():
        if on_scene:
            on_scene(name)
        out.write(f"\n== {name}: {title}\n")
        s: Session = gov.session(f"demo-{name}", budgets=budgets)
        for tool, args in script:
            try:
                key = args.get("idempotency_key")
                o = s.call(tool, args, idempotency_key=key) if key else s.call(tool, args)
            except Stop as stop:
                d = stop.diagnostic
                stops.append(d)
                kind = d.get("budget_type") or d.get("signal")
                rows.append(
                    Row(
                        name,
                        s.steps,
                        tool,
                        _args(args),
                        "STOP",
                        False,
                        f"{type(stop).__name__}: {kind}",
                    )
                )
                out.write(_fmt(rows[-1]) + "\n")
                out.write("   diagnostic: " + json.dumps(_short(d)) + "\n")
                break
            rows.append(
                Row(
                    name,
                    o.step,
                    tool,
                    _args(args),
                    o.status.value,
                    o.executed,
                    _note(o.status, o.to_model(), o.correction, o.error),
                )
            )
            out.write(_fmt(rows[-1]) + "\n")
    calls = len([r for r in rows if r.status != "STOP"])
    summary = {
        "calls": calls,
        "executions": world.executions,
        "executions_saved": sum(r.status in ("cached", "corrected", "replayed") for r in rows),
        "corrections": sum(r.status == "corrected" or "correction" in r.note for r in rows),
        "stops": len(stops),
        "orders_placed": len(world.orders),
        "cards_charged": len(world.charges),
    }
    out.write(
        "\nsummary: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in summary.items()) + "\n"
    )
    return summary


def _args(args: dict[str, Any]) -> str:
    return json.dumps(args, separators=(",", ":"))[:34]


def _fmt(r: Row) -> str:
    ran = "ran" if r.executed else "-"
    return f"  {r.step:>3}  {r.tool:<22} {r.args:<34} {r.status:<10} {ran:<4} {r.note}"


def _short(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != "last_k_steps"}
