"""``ampcap pay``: the payer's side of RFC 007 on the CAP path, one step per
command, one line of output each (``--json``: one JSON object).

``quote`` makes the payment intent (a new ``payment_id`` unless
``--payment-id`` names one to retry) and prints the checked quote;
``authorize`` and ``capture`` take that quote back (``--quote``, the JSON
``quote --json`` printed), so their bodies are built from the terms the
payee signed up to; ``cancel``, ``refund`` and ``status`` name the payment;
``buy`` runs quote, authorize and capture in one go. A retried command with
the same ``payment_id`` (and quote) is the same §5.9 ``op_key`` with the
same body: the payee answers it again, and nothing moves twice.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import AmpError
from .calling import call_daemon, to_json
from .errors import UsageError

__all__ = ["register"]

LEDGER = "ampcap-local-ledger"


def register(subparsers: Any) -> None:
    from .client import common_parser

    common = common_parser()
    common.add_argument("--delegation", type=Path, default=None, metavar="FILE",
                        help="pay on a delegator's behalf with this RFC 005 credential chain file")
    p = subparsers.add_parser(
        "pay", help="RFC 007 payments: quote, authorize, capture, cancel, refund, status, buy",
        description="Pay an agent that serves org.agentries.payment.workflow:1.0.0 (`ampcap serve --payments`), "
                    "one step per command, one line each (--json: a JSON object). Exit status: 0 done, 1 the "
                    "payee's or the network's error, 2 usage error. docs/payments.md")
    sub = p.add_subparsers(dest="pay_command", metavar="STEP")
    p.set_defaults(func=lambda args: _usage(p))

    def money_options(parser: argparse.ArgumentParser, required: bool) -> None:
        parser.add_argument("--amount", type=_amount, required=required, default=None, metavar="N",
                            help="integer minor units (500 = 5.00 USD)")
        parser.add_argument("--asset", default="USD", metavar="CODE", help="asset code (default USD)")
        parser.add_argument("--network", default=LEDGER, metavar="NET", help=f"settlement network (default {LEDGER})")

    q = sub.add_parser("quote", parents=[common], help="ask for a quote (starts a payment intent)",
                       description="Ask the payee for a quote and print it checked (payment, payee, money, "
                                   "expiry). Keep the --json output: authorize and capture take it.")
    money_options(q, True)
    q.add_argument("--service-ref", default=None, metavar="ID", help="what is bought (a paid capability's id)")
    q.add_argument("--payment-id", default=None, metavar="HEX", help="retry this intent (32 hex digits)")
    q.set_defaults(func=run_step, step="quote")
    for step, text in (("authorize", "authorize a quote (the payee holds the money)"),
                       ("capture", "capture an authorized payment (verifies the settlement proof)")):
        s = sub.add_parser(step, parents=[common], help=text, description=text + ".")
        s.add_argument("--quote", required=True, metavar="JSON", help="the quote, as `ampcap pay quote --json` printed")
        if step == "capture":
            s.add_argument("--amount", type=_amount, default=None, metavar="N", help="capture less than authorized")
        s.set_defaults(func=run_step, step=step)
    for step, text in (("cancel", "cancel a payment before capture"), ("refund", "refund a captured payment"),
                       ("status", "the payment's state")):
        s = sub.add_parser(step, parents=[common], help=text, description=text + ".")
        s.add_argument("payment_id", metavar="PAYMENT_ID", help="32 hex digits")
        if step == "refund":
            money_options(s, False)
        if step in ("cancel", "refund"):
            s.add_argument("--reason", default=None, metavar="TEXT")
        s.set_defaults(func=run_step, step=step)
    b = sub.add_parser("buy", parents=[common], help="quote, authorize and capture in one go",
                       description="Quote, authorize and capture one payment; prints the payment_id to pass as "
                                   "params[\"$payment\"] to the paid capability.")
    money_options(b, True)
    b.add_argument("--service-ref", default=None, metavar="ID", help="what is bought (a paid capability's id)")
    b.add_argument("--payment-id", default=None, metavar="HEX", help="finish this intent (32 hex digits)")
    b.set_defaults(func=run_step, step="buy")


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _amount(text: str) -> int:
    if not text.isdigit() or len(text) > 20:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of minor units (500 = 5.00 USD)")
    return int(text)


def _hex16(text: str, what: str) -> bytes:
    try:
        value = bytes.fromhex(text)
    except ValueError:
        value = b""
    if len(value) != 16:
        raise UsageError(f"{what} {text!r}: 32 hex digits (16 bytes)")
    return value


def _quote_json(quote: Any) -> dict[str, Any]:
    return {"payment_id": quote.payment_id.hex(), "quote_id": quote.quote_id.hex(), "payer": quote.payer,
            "payee": quote.payee, "money": quote.money.to_wire(), "expires_at": quote.expires_at}


def _quote_from(text: str) -> Any:
    from ..decoders import json_loads
    from ..pay.money import parse_money
    from ..pay.payer import Quote

    try:
        data = json_loads(text)
        if isinstance(data, dict) and "quote" in data:
            data = data["quote"]
        return Quote(payment_id=_hex16(data["payment_id"], "payment_id"), quote_id=_hex16(data["quote_id"], "quote_id"),
                     payer=str(data["payer"]), payee=str(data["payee"]), money=parse_money(data["money"]),
                     expires_at=int(data["expires_at"]))
    except (ValueError, KeyError, TypeError, AmpError) as exc:
        raise UsageError(f"--quote: not a quote as `ampcap pay quote --json` prints it ({exc})") from None


def _line(step: str, result: dict[str, Any]) -> str:
    pid = result.get("payment_id")
    parts = [step, f"payment_id={pid.hex() if isinstance(pid, bytes) else '?'}", f"status={result.get('status')}"]
    if "reason_code" in result:
        parts.append(f"reason_code={result['reason_code']}")
    proof = result.get("settlement")
    if isinstance(proof, dict) and isinstance(proof.get("payload"), dict):
        parts.append(f"reference={proof['payload'].get('reference')}")
    return " ".join(str(p) for p in parts)


def run_step(args: argparse.Namespace) -> int:
    from ..pay.money import Money

    chain = None
    if args.delegation is not None:
        from ..files.delegation import load_chain
        from .errors import local_file_errors

        with local_file_errors():
            chain = load_chain(args.delegation)
    step = args.step
    quote_in: Any = _quote_from(args.quote) if step in ("authorize", "capture") else None
    payment_id = (_hex16(args.payment_id, "PAYMENT_ID") if step in ("cancel", "refund", "status")
                  else _hex16(args.payment_id, "--payment-id") if getattr(args, "payment_id", None) else None)
    money = None
    if getattr(args, "amount", None) is not None and step != "capture":
        try:
            money = Money(args.amount, args.asset, args.network)
        except AmpError as exc:
            raise UsageError(f"--amount/--asset/--network: {exc.message}") from None

    async def call(remote: Any) -> str:
        from ..net.api.payments import Payer
        from .client import trusted

        payer = Payer(trusted(args, remote) or remote, delegation=chain, timeout=args.timeout or 30.0)
        if step in ("quote", "buy"):
            assert money is not None
            if step == "quote":
                quote = await payer.quote(money, service_ref=args.service_ref, payment_id=payment_id)
                if args.json:
                    return to_json({"quote": _quote_json(quote)})
                return (f"quote payment_id={quote.payment_id.hex()} quote_id={quote.quote_id.hex()} "
                        f"amount={quote.money.amount_minor} asset={quote.money.asset} expires_at={quote.expires_at}")
            quote, result = await payer.pay(money, service_ref=args.service_ref, payment_id=payment_id)
        elif step == "authorize":
            result = await payer.authorize(quote_in)
        elif step == "capture":
            result = await payer.capture(quote_in, args.amount)
        elif step == "cancel":
            result = await payer.cancel(payment_id, reason=args.reason)  # type: ignore[arg-type]
        elif step == "refund":
            result = await payer.refund(payment_id, money=money, reason=args.reason)  # type: ignore[arg-type]
        else:
            result = await payer.status(payment_id)  # type: ignore[arg-type]
        return to_json({step: result}) if args.json else _line(step, result)

    return call_daemon(args, call)
