"""Measurement: the observed L¹ order of the MUSCL finite volumes in 2-D under four slope limiters.

Run:  python numerics/grid_limiter_orders.py [--N 16 32 64 [128]] [--limiters solver mc minmod central]
      [--cfl 0.8] [--method ssprk2|ssprk3] [--exact-velocity]

Problem: softmax_2d weights (A = [[-0.6, 0.2], [0.1, -0.4]], V = [[1, 0.3], [-0.2, 0.8]]), Gaussian data
α₀ = (0.5, -0.3), Σ₀ = [[1, 0.3], [0.3, 0.6]], T = 0.5, fixed box [-6, 7] x [-5.5, 5]; error: L¹ distance of the
cell masses to the cell masses of N(α(T), Σ(T)) from the Gaussian moment ODE (the exact solution; both cell-mass
arrays by 4x4 Gauss-Legendre per cell).  Limiters: ``solver`` (the solver's: central where
``|Δ⁺ - Δ⁻| ≤ SMOOTH m_c``, MC elsewhere), ``mc`` (monotonized central everywhere), ``minmod``, ``central``
(unlimited (Δ⁺ + Δ⁻)/2: not positivity-preserving, the solver's negative-mass retry is switched off for it).
``--exact-velocity``: the attention field of the exact solution, ``Γ(x) = V(α(t) + Σ(t) A x)`` (the tilted
Gaussian's mean; dense ODE output), replaces the cell-mass field, which isolates the transport error from the
velocity's quadrature error.  The slope function (and velocity) of :mod:`symbolic_tpde.numerics.grids.euclidean` are
swapped in this process only.  Prints errors and orders per limiter.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.integrate import solve_ivp

import symbolic_tpde.numerics.grids.euclidean as G
from symbolic_tpde.gaussian import GaussianODE
from symbolic_tpde.gaussian.ode import pack_state, unpack_state
from symbolic_tpde.numerics.measures.laws import cell_masses
from symbolic_tpde.inputs.scenario import InitSpec, parse_scenario

LIMITERS = {
    "solver": G._slope,
    "mc": lambda dp, dm, m: G._mc_slope(dp, dm),
    "minmod": lambda dp, dm, m: np.where(dp * dm > 0, np.sign(dp) * np.minimum(np.abs(dp), np.abs(dm)), 0.0),
    "central": lambda dp, dm, m: (dp + dm) / 2,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--limiters", nargs="+", default=list(LIMITERS), choices=list(LIMITERS))
    ap.add_argument("--cfl", type=float, default=0.8)
    ap.add_argument("--method", default="ssprk2", choices=["ssprk2", "ssprk3"])
    ap.add_argument("--exact-velocity", action="store_true")
    a = ap.parse_args()
    A, V, T = np.array([[-0.6, 0.2], [0.1, -0.4]]), np.array([[1.0, 0.3], [-0.2, 0.8]]), 0.5
    init = {"type": "gaussian", "alpha": [0.5, -0.3], "Sigma": [[1.0, 0.3], [0.3, 0.6]]}
    scn = parse_scenario({"attention": "softmax", "A": A.tolist(), "V": V.tolist(), "init": init, "T": T},
                         gaussian_data=False)
    ode = GaussianODE(scn.schedule)
    sol = solve_ivp(ode.rhs, (0, T), pack_state(scn.alpha0, scn.Sigma0), method="DOP853", rtol=1e-13,
                    atol=1e-14, dense_output=True)
    aT, ST = unpack_state(sol.y[:, -1], 2)
    ref = InitSpec("gaussian", 2, {"alpha": aT, "Sigma": ST}, aT, ST, gaussian=True)
    lo, hi = np.array([-6.0, -5.5]), np.array([7.0, 5.0])
    saved = G._slope, G.POS_TOL, G._Rhs.velocity
    if a.exact_velocity:
        def velocity(self, t, m):
            al, S = unpack_state(sol.sol(t), 2)
            return ((al + self.C @ (S @ A).T) @ V.T).reshape(m.shape + (2,))
        G._Rhs.velocity = velocity
    for name in a.limiters:
        G._slope = LIMITERS[name]
        G.POS_TOL = 1e300 if name == "central" else saved[1]
        errs = []
        for N in a.N:
            t0 = time.perf_counter()
            g = G.Grid(lo, (hi - lo) / N, (N, N))
            r = G.solve_grid(scn.init, scn.schedule, T, N, grid=g, max_growth=1.0, cfl=a.cfl, method=a.method)
            errs.append(float(np.abs(r.masses - cell_masses(ref, g.edges)).sum()))
            print(f"{name:8s} N = {N:4d}: L1 = {errs[-1]:.4e}  (min mass {r.min_mass:.1e}, lost {r.lost:.1e}, "
                  f"{r.steps} steps, {time.perf_counter() - t0:.1f} s)", flush=True)
        e = np.array(errs)
        print(f"{name:8s} orders: {np.round(np.log2(e[:-1] / e[1:]), 2).tolist()}", flush=True)
    G._slope, G.POS_TOL, G._Rhs.velocity = saved


if __name__ == "__main__":
    main()
