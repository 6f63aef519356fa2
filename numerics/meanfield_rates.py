"""Mean-field convergence rates for every variant (experiment script, not part of the package).

Two measurements, printed side by side with their 95% intervals (Student-t on the OLS slope of ``log error``
on ``log n`` over all (n, seed) pairs; seed-bootstrap percentile interval as a cross-check):

* **propagation of chaos** (softmax, ℓ2, linear, multi-head: the Gaussian-preserving kinds with a closed-form
  affine field, :mod:`symbolic_tpde.experiments.meanfield_chaos`): ``((1/n) Σ_i |x_i(T) - x̄_i(T)|²)^{1/2}``
  between the interacting particles and the decoupled mean-field particles started from the *same* sample
  (a coupling; zero at ``t = 0``);
* **moment error** (the former figure, mostly the initial sample's CLT): against the Gaussian moment ODE
  (``symbolic_tpde.gaussian``) for the Gaussian-preserving variants (for the chaos variants from the same
  runs), between two independent ``n``-systems for sigmoid and masked (with sink);
* sigmoid (not Gaussian-preserving) also gets the propagation-of-chaos error against a reference system four
  times larger than its largest ``n``, started from the same points (finite-population corrected,
  :func:`~symbolic_tpde.experiments.meanfield_chaos.reference_convergence`).

Expected slope: -1/2 for both.  Usage::

    python numerics/meanfield_rates.py [--quick] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from symbolic_tpde.analysis import meanfield as MF
from symbolic_tpde.experiments import meanfield_chaos as MC
from symbolic_tpde.experiments import stability as S

A0 = np.array([[1.0, 0.5], [-0.5, 0.6]]) / np.linalg.norm([[1.0, 0.5], [-0.5, 0.6]], 2)
CASES = [("softmax", "chaos"), ("l2", "chaos"), ("linear", "chaos"), ("multihead", "chaos"),
         ("sinkhorn", "gaussian"), ("sigmoid", "reference"), ("sigmoid", "pair"), ("masked", "pair")]


def _row(var: str, what: str, c, dt: float) -> str:
    return (f"{var:<10} {what:<26} {c.fit.slope:7.3f} [{c.fit.ci[0]:7.3f}, {c.fit.ci[1]:7.3f}] "
            f"[{c.bootstrap_ci[0]:7.3f}, {c.bootstrap_ci[1]:7.3f}]  {str(c.fit.contains(-0.5)):<10} {dt:5.1f}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    ns = [64, 128, 256, 512, 1024] if args.quick else [64, 128, 256, 512, 1024, 2048]
    seeds = 6 if args.quick else 10
    alpha0, Sigma0 = np.array([0.5, 0.0]), np.array([[0.5, 0.1], [0.1, 0.3]])
    out = {}
    print(f"{'variant':<10} {'error':<26} {'slope':>7} {'95% t CI':>18} {'bootstrap CI':>18}  -1/2 in CI  time")
    for var, ref in CASES:
        # sinkhorn particles cost an inner Sinkhorn loop per field evaluation: fewer sizes
        ns_v = ns[:-1] if var == "sinkhorn" and len(ns) > 4 else ns
        w = S.variant_weights(var, 0.5 * A0, np.eye(2), sink_mass=0.3 if var == "masked" else None)
        t0 = time.perf_counter()
        if ref == "chaos":
            ch = MC.chaos_convergence(w, alpha0, Sigma0, 1.0, ns_v, seeds, rng, steps=16)
            dt = time.perf_counter() - t0
            out[var] = ch.as_dict()
            print(_row(var, "chaos (same-sample coupl.)", ch.chaos, dt))
            print(_row(var, "moments vs ODE (init. CLT)", ch.moments, 0.0), flush=True)
            continue
        if ref == "reference":  # any kind: coupling to a system 4x larger than n_max from the same points
            c = MC.reference_convergence(w, alpha0, Sigma0, 1.0, ns_v[:-1], seeds, rng, N=4 * ns_v[-2], steps=16)
            dt = time.perf_counter() - t0
            out[f"{var}_chaos"] = c.as_dict()
            print(_row(var, f"chaos (vs N = {4 * ns_v[-2]} system)", c, dt), flush=True)
            continue
        c = MF.moment_convergence(w, alpha0, Sigma0, 1.0, ns_v, seeds, rng, steps=16, reference=ref)
        dt = time.perf_counter() - t0
        out[var] = c.as_dict()
        print(_row(var, "moments vs ODE" if ref == "gaussian" else "moments vs indep. copy", c, dt), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1, default=float)


if __name__ == "__main__":
    main()
