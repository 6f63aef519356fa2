"""Benchmark of the Wasserstein routes in ``symbolic_tpde.numerics.measures.distances`` (not part of the package).

For two Gaussian clouds in ``d = 2`` (``N(0, I)`` and ``N((1, 0), diag(1, 0.25))``, whose exact ``W2`` is
the Bures-Wasserstein value plus an ``O(n^{-1/2})``-ish sampling term) and growing ``n``, prints the time of

* exact ``W2`` by assignment (``scipy.optimize.linear_sum_assignment``): the baseline, measured in the same run;
* exact ``W2`` by POT's network simplex ``ot.emd`` (if installed);
* entropic bracket (blocked log-domain Sinkhorn, ``ε = 0.05``, marginal tolerance 1e-4): bracket width and whether it contains the exact value;
* sliced ``W2`` (200 directions) with its Monte-Carlo standard error and the lower bound ``sqrt(d)·SW2 ≤ W2``,

with the time ratio against the assignment baseline.  Usage::

    python numerics/meanfield_bench_distances.py [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from symbolic_tpde.numerics.measures import distances as D


def timed(fn, *a, **k):
    t0 = time.perf_counter()
    out = fn(*a, **k)
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes = [250, 500, 1000] if args.quick else [250, 500, 1000, 2000, 4000]
    rng = np.random.default_rng(0)
    bw = D.bures_wasserstein([0, 0], np.eye(2), [1, 0], np.diag([1.0, 0.25]))
    print(f"Bures-Wasserstein W2 of the two Gaussians: {bw:.4f}")
    print(f"{'n':>6} {'W2 exact':>9} {'t_lsa':>8} {'t_emd/lsa':>9} {'entropic [lo, hi]':>20} {'in':>3} "
          f"{'t_ent/lsa':>9} {'sqrt(d)SW2±se':>15} {'t_sl/lsa':>8}")
    for n in sizes:
        X = rng.standard_normal((n, 2))
        Y = np.array([1.0, 0.0]) + rng.standard_normal((n, 2)) * [1.0, 0.5]
        exact, t_lsa = timed(D.wasserstein, X, Y, 2.0, method="assignment")
        if D.have_pot():
            emd, t_emd = timed(D.wasserstein, X, Y, 2.0, method="lp")
            assert abs(emd - exact) < 1e-8 * exact, (emd, exact)
            r_emd = f"{t_emd / t_lsa:9.2f}"
        else:
            r_emd = f"{'n/a':>9}"
        ent, t_ent = timed(D.entropic_wasserstein, X, Y, 2.0, eps=0.05, tol=1e-4, max_iter=500, debias=False)
        inside = ent.w_lower <= exact <= ent.w_upper
        sl, t_sl = timed(D.sliced_wasserstein, X, Y, 2.0, n_proj=200, rng=rng)
        print(f"{n:6d} {exact:9.4f} {t_lsa:8.3f} {r_emd} [{ent.w_lower:8.4f}, {ent.w_upper:8.4f}] "
              f"{'yes' if inside else 'NO':>3} {t_ent / t_lsa:9.2f} {sl.lower_bound_w2:8.4f}±{np.sqrt(2) * sl.stderr:.4f} "
              f"{t_sl / t_lsa:8.3f}", flush=True)


if __name__ == "__main__":
    main()
