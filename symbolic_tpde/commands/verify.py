"""``tpde verify``: run every cross-check of the toolkit and print a pass/fail table (exit 1 on failure)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("verify", help="run all cross-checks (symbolic vs mpmath vs numeric vs particles)")
    p.add_argument("--quick", action="store_true", help="smaller particle counts, fewer points")
    p.add_argument("--only", metavar="AREA", help="run only check modules whose name contains AREA")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..validate.verify import main

    return main(quick=args.quick, only=args.only, as_json=args.json)
