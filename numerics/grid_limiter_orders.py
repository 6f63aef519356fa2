"""Measurement: the observed L¹ order of the MUSCL finite volumes in 2-D under three slope limiters.

Run:  python numerics/grid_limiter_orders.py [--N 16 32 64 [128]] [--limiters mc minmod central] [--cfl 0.8]

Problem: softmax_2d weights (A = [[-0.6, 0.2], [0.1, -0.4]], V = [[1, 0.3], [-0.2, 0.8]]), Gaussian data
α₀ = (0.5, -0.3), Σ₀ = [[1, 0.3], [0.3, 0.6]], T = 0.5, fixed box [-6, 7] x [-5.5, 5]; error: L¹ distance of the
cell masses to the cell masses of N(α(T), Σ(T)) from the Gaussian moment ODE (the exact solution).  Limiters:
``mc`` (the solver's, monotonized central), ``minmod``, ``central`` (unlimited (Δ⁺ + Δ⁻)/2: not positivity-
preserving, the solver's negative-mass retry is switched off for it).  The slope function of
:mod:`symbolic_tpde.numerics.grid` is swapped in this process only.  Prints errors and orders per limiter.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import symbolic_tpde.numerics.grid as G
from symbolic_tpde.gaussian import GaussianODE
from symbolic_tpde.numerics.init_data import cell_masses
from symbolic_tpde.scenario import InitSpec, parse_scenario

LIMITERS = {
    "mc": G._mc_slope,
    "minmod": lambda dp, dm: np.where(dp * dm > 0, np.sign(dp) * np.minimum(np.abs(dp), np.abs(dm)), 0.0),
    "central": lambda dp, dm: (dp + dm) / 2,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--limiters", nargs="+", default=list(LIMITERS), choices=list(LIMITERS))
    ap.add_argument("--cfl", type=float, default=0.8)
    a = ap.parse_args()
    init = {"type": "gaussian", "alpha": [0.5, -0.3], "Sigma": [[1.0, 0.3], [0.3, 0.6]]}
    scn = parse_scenario({"attention": "softmax", "A": [[-0.6, 0.2], [0.1, -0.4]], "V": [[1.0, 0.3], [-0.2, 0.8]],
                          "init": init, "T": 0.5}, gaussian_data=False)
    T = 0.5
    sol = GaussianODE(scn.schedule).integrate(scn.alpha0, scn.Sigma0, T, rtol=1e-12)
    ref = InitSpec("gaussian", 2, {"alpha": sol.alpha[-1], "Sigma": sol.Sigma[-1]}, sol.alpha[-1], sol.Sigma[-1],
                   gaussian=True)
    lo, hi = np.array([-6.0, -5.5]), np.array([7.0, 5.0])
    slope, pos = G._mc_slope, G.POS_TOL
    for name in a.limiters:
        G._mc_slope = LIMITERS[name]
        G.POS_TOL = 1e300 if name == "central" else pos
        errs = []
        for N in a.N:
            t0 = time.perf_counter()
            g = G.Grid(lo, (hi - lo) / N, (N, N))
            r = G.solve_grid(scn.init, scn.schedule, T, N, grid=g, max_growth=1.0, cfl=a.cfl)
            errs.append(float(np.abs(r.masses - cell_masses(ref, g.edges)).sum()))
            print(f"{name:8s} N = {N:4d}: L1 = {errs[-1]:.4e}  (min mass {r.min_mass:.1e}, {r.steps} steps, "
                  f"{time.perf_counter() - t0:.1f} s)", flush=True)
        e = np.array(errs)
        print(f"{name:8s} orders: {np.round(np.log2(e[:-1] / e[1:]), 2).tolist()}", flush=True)
    G._mc_slope, G.POS_TOL = slope, pos


if __name__ == "__main__":
    main()
