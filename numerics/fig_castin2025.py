"""The authors' figure families beside ours (README "Reproducing the authors' figures"); the same as
`tpde figures --preset castin2025`.  Prints each family's files and wall time, then the recomputed findings.

Usage: python numerics/fig_castin2025.py [OUT_DIR] [--panels] [--only NAME ...] [--no-findings]
       (default OUT_DIR ./figures/castin2025; families: symbolic_tpde.experiments.castin2025.NAMES)
"""

import argparse
import json
import time
import warnings

from symbolic_tpde.experiments import castin2025, castin2025_findings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default="figures/castin2025")
    ap.add_argument("--panels", action="store_true", help="one file per panel")
    ap.add_argument("--only", nargs="+", choices=castin2025.NAMES, metavar="NAME")
    ap.add_argument("--no-findings", action="store_true", help="skip the recomputed findings")
    args = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for name in args.only or castin2025.NAMES:
            t0 = time.perf_counter()
            paths = castin2025.make(name, args.out, panels=args.panels)
            print(f"{name}: {', '.join(map(str, paths))} ({time.perf_counter() - t0:.1f} s)", flush=True)
        if not args.no_findings:
            for f in castin2025_findings.findings():
                print(json.dumps(f), flush=True)


if __name__ == "__main__":
    main()
