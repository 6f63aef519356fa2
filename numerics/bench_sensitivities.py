"""Benchmark: forward-sensitivity integration as a multiple of the plain moment-ODE integration, and fit time.

Same run, same backend (``--backend``, default numpy), softmax head, ``A`` = 0.3√(2/d) x standard normal
(seed 0), ``V = I + 0.2√(2/d) x standard normal`` (the √(2/d) keeps the spectral scale of the d = 2 case; without
it the d = 8 problem grows by orders of magnitude on [0, 1], next to its blow-up, and measures stiffness, not
the sensitivity overhead), ``α₀ = 0.3 x standard normal``, ``Σ₀ = 0.5 I``, horizon ``T = 1``,
DOP853 at rtol 1e-12, output at T only, best of ``--repeat`` runs:

* plain: ``GaussianODE.integrate`` (``n = d + d(d+1)/2`` states);
* sensitivities: ``GaussianODE.integrate(..., sensitivities=names)`` (``n (1 + k)`` states, error control on
  all): d = 2 with every parameter (k = 8), d = 8 with k = 4 (A_01, A_73, V_25, Σ₀_34);
* the one-off derivation + code generation of the sensitivity system is timed separately (the first call;
  the generated code is cached on disk by content, later processes skip the generation, not the derivation).

Also: the fit of the planted d = 2 problem of tests/test_fit.py (8 parameters, exact moments at 4 times).
Usage: python numerics/bench_sensitivities.py [--backend numpy|c|auto] [--repeat 3]
"""

import argparse
import os
import time

import numpy as np

from symbolic_tpde.analysis.fit import fit
from symbolic_tpde.gaussian import GaussianODE
from symbolic_tpde.weights import make_head, make_weights


def _case(d, names, backend, repeat):
    rng = np.random.default_rng(0)
    A = 0.3 * np.sqrt(2 / d) * rng.normal(size=(d, d))
    V = np.eye(d) + 0.2 * np.sqrt(2 / d) * rng.normal(size=(d, d))
    a0, S0 = 0.3 * rng.normal(size=d), 0.5 * np.eye(d)
    ode = GaussianODE.from_weights(make_weights([make_head("softmax", d, A=A, V=V)]), backend=backend)
    t0 = time.perf_counter()
    ode.integrate(a0, S0, 1.0, sensitivities=names, t_eval=[1.0])
    first = time.perf_counter() - t0

    def best(fn):
        out = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
        return min(out)
    plain = best(lambda: ode.integrate(a0, S0, 1.0, t_eval=[1.0]))
    sens = best(lambda: ode.integrate(a0, S0, 1.0, sensitivities=names, t_eval=[1.0]))
    k = len(ode.integrate(a0, S0, 1.0, sensitivities=names, t_eval=[1.0]).names)
    print(f"d = {d}, k = {k:2d} directions, backend {ode.backend}: plain {1e3 * plain:8.2f} ms, with sensitivities "
          f"{1e3 * sens:8.2f} ms, ratio {sens / plain:6.2f} (states x{1 + k}); first call incl. derivation and "
          f"generation {first:6.1f} s")


def _fit():
    A = np.array([[0.4, -0.3], [0.2, -0.5]])
    V = np.array([[1.0, 0.3], [-0.2, 0.8]])
    S0 = np.array([[0.5, 0.1], [0.1, 0.3]])
    a0, times = np.array([1.5, -1.0]), np.linspace(0, 2, 4)
    sol = GaussianODE.from_weights(make_weights([make_head("softmax", 2, A=A, V=V)]), backend="numpy").integrate(
        a0, S0, 2.0, t_eval=times)
    start = GaussianODE.from_weights(make_weights([make_head("softmax", 2, A=np.zeros((2, 2)), V=np.eye(2))]),
                                     backend="numpy")
    t = time.perf_counter()
    r = fit(start, times, ["h0_A", "h0_V"], alpha=sol.alpha, Sigma=sol.Sigma, alpha0=a0, Sigma0=S0,
            noise=np.full(20, 1e-3))
    print(f"fit, planted d = 2 (A, V), 8 parameters, 20 observations: {time.perf_counter() - t:.1f} s, max error "
          f"{np.abs(r.estimate - np.r_[A.ravel(), V.ravel()]).max():.1e}, converged {r.converged}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    _case(2, ["h0_A", "h0_V"], args.backend, args.repeat)
    _case(8, ["h0_A_0_1", "h0_A_7_3", "h0_V_2_5", "Sigma0_3_4"], args.backend, args.repeat)
    _fit()


if __name__ == "__main__":
    main()
