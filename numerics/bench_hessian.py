"""Benchmark: derive the n-particle Riemannian Hessian symbolically and certify one point at 50 digits.

Usage: ``python numerics/bench_hessian.py [--repeat 3]``.  Prints, for (n, d) in {(2,1), (2,2), (3,2)}:

* derivation time (Christoffel symbols + Hessian matrix, ``particle_hessian``), median of ``repeat`` fresh runs
  (SymPy caches are cleared between runs);
* certification time of one rational point at 50 digits (``certify_form``: mpmath.iv enclosure + 50/70-digit
  evaluations), median;
* baselines measured in the same run: the float64 closed-form Hessian (``numerics.energy.hessian_form``) at
  the same point, and one plain 50-digit mpmath evaluation of the same symbolic form; the ratios show what
  the symbolic derivation and the rigorous enclosure cost relative to them.
"""

from __future__ import annotations

import argparse
import statistics
import time

import mpmath
import numpy as np
import sympy as sp

from symbolic_tpde.numerics.particles.energy import hessian_form
from symbolic_tpde.symbolic.hessian import particle_hessian
from symbolic_tpde.validate.convexity import certify_form, mp_eval, to_fraction_array


def timed(f, repeat):
    ts, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'(n,d)':>6} {'derive [s]':>11} {'certify50 [s]':>14} {'float64 Hess [s]':>17} {'mp50 eval [s]':>14} "
          f"{'derive/f64':>11} {'certify/mp50':>13}")
    for n, d in [(2, 1), (2, 2), (3, 2)]:
        A, V = -np.eye(d), np.eye(d)

        def derive():
            sp.core.cache.clear_cache()
            return particle_hessian(n, d, A.tolist(), V.tolist())

        t_der, ph = timed(derive, args.repeat)
        X = to_fraction_array(rng.normal(scale=0.5, size=(n, d)), "X")
        U = to_fraction_array(rng.normal(size=(n, d)), "U")
        t_cert, cert = timed(lambda: certify_form(ph.H, ph.coords, X, U, dps=50), args.repeat)
        Xf, Uf = np.array(X, float), np.array(U, float)
        t_f64 = timed(lambda: [hessian_form(Xf, A, V, Uf) for _ in range(100)], args.repeat)[0] / 100
        us = [v for r in U for v in r]
        form = (sp.Matrix(us).T * ph.H * sp.Matrix(us))[0, 0]

        def mp50():
            with mpmath.workdps(50):
                env = {c: mpmath.mpf(v.numerator) / v.denominator for c, v in zip(ph.coords, [v for r in X for v in r])}
                return mp_eval(form, env)

        t_mp = timed(mp50, args.repeat)[0]
        assert cert["sign"] != 0
        print(f"{str((n, d)):>6} {t_der:11.3f} {t_cert:14.3f} {t_f64:17.2e} {t_mp:14.3f} {t_der / t_f64:11.0f} "
              f"{t_cert / t_mp:13.2f}")


if __name__ == "__main__":
    main()
