"""Coverage of the joint (A, V) confidence intervals of ``fit(..., clouds=...)`` over seeds, by regime.

Each seed: one independent particle run per observation time (n tokens from fresh draws of N(a0, S0),
error-controlled :func:`simulate`), then ``fit`` of all 8 entries of A and V (d = 2) from the clouds, started
at the planted values (this measures the intervals of the estimator, not the optimiser's basin).  Printed per
seed: z = (estimate - planted)/stderr, the smallest ESS fraction over the times at the fit and at the planted
values (:func:`softmax_ess`), whether `fit` warned (smallest ESS at the fit below MEAN_FIELD_ESS); then the
coverage counts, over all fits and split by the warning, with the binomial sd of calibrated 95% intervals
(independent intervals) and the sd from the per-seed scatter of the counts (misses cluster within a seed).

Designs (the planted A is the contracting ``AC`` of tests/test_fit.py in both):
  meanfield: V = [[-0.2, 0.8], [-0.8, -0.2]] (a decaying rotation: the mean turns through every direction and
             shrinks, so the softmax weights stay spread: ESS 45-63% of n at the planted values), a0 = (1.5, -1),
             5 times on [0, 2]
  reference: V = [[1, 0.3], [-0.2, 0.8]] (expanding: |α| reaches ~7, ESS 5-10% of n at t = 2 at the planted
             values), a0 = (1.5, -1), 5 times on [0, 2]  (the 33/48 and 26/32 of README, Fitting)
Usage: python numerics/fit_coverage.py [--design meanfield] [--seeds 0 40] [--n 1000] [--replicates 0]
       [--start planted|zero] [--compare]
"""

import argparse
import time

import numpy as np

from symbolic_tpde import make_head, make_weights
from symbolic_tpde.analysis.fit import fit, softmax_ess
from symbolic_tpde.gaussian import GaussianODE
from symbolic_tpde.numerics.particles.simulate import simulate

AC = np.array([[-0.6, 0.2], [0.1, -0.4]])
S0 = np.array([[0.5, 0.1], [0.1, 0.3]])
DESIGNS = {"meanfield": (np.array([[-0.2, 0.8], [-0.8, -0.2]]), np.array([1.5, -1.0]), np.linspace(0, 2, 5)),
           "reference": (np.array([[1.0, 0.3], [-0.2, 0.8]]), np.array([1.5, -1.0]), np.linspace(0, 2, 5))}


def clouds(V, a0, times, n, seed):
    rng = np.random.default_rng(seed)
    w = make_weights([make_head("softmax", 2, A=AC, V=V)])
    out = []
    for t in times:
        X0 = rng.multivariate_normal(a0, S0, size=n)
        out.append(X0 if t == 0 else simulate(X0, w, t, progress=False).X)
    return w, out


def one(design, seed, n=1000, replicates=0, start="planted", compare=False):
    """``(z, inside, min ESS at the fit, min ESS at the planted values, warned, result, shift)`` for one seed;
    ``start``: the optimiser's start, the planted values (one run on all times, ``start="given"``) or ``zero``
    (A = 0, V = I, horizon continuation, the default of `fit`).  ``compare``: also fit from the planted values
    and return ``shift`` = max |difference of the end points| / stderr (``nan`` without)."""
    V, a0, times = DESIGNS[design]
    w, cl = clouds(V, a0, times, n, seed)
    ode = GaussianODE.from_weights(w if start == "planted" else make_weights(
        [make_head("softmax", 2, A=np.zeros((2, 2)), V=np.eye(2))]), backend="numpy")
    kw = dict(clouds=cl, alpha0=a0, Sigma0=S0, replicates=replicates, seed=10_000 + seed)
    r = fit(ode, times, ["h0_A", "h0_V"], start="given" if start == "planted" else "continuation", **kw)
    shift = np.nan
    if compare and start != "planted":
        rp = fit(GaussianODE.from_weights(w, backend="numpy"), times, ["h0_A", "h0_V"], start="given", **kw)
        shift = float(np.max(np.abs(r.point - rp.point) / rp.stderr))
    truth = np.concatenate([AC.ravel(), V.ravel()])
    inside = (r.lower <= truth) & (truth <= r.upper)
    return ((r.estimate - truth) / r.stderr, inside, float(np.min(r.ess)), float(np.min(softmax_ess(cl, w))),
            r.warning is not None, r, shift)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--design", choices=sorted(DESIGNS), default="meanfield")
    ap.add_argument("--seeds", type=int, nargs=2, default=[0, 40])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--replicates", type=int, default=0)
    ap.add_argument("--start", choices=["planted", "zero"], default="planted")
    ap.add_argument("--compare", action="store_true", help="--start zero: also fit from the planted values")
    a = ap.parse_args()
    rows = []
    t0 = time.time()
    for s in range(*a.seeds):
        t1 = time.time()
        z, inside, e_fit, e_true, warned, r, shift = one(a.design, s, a.n, a.replicates, a.start, a.compare)
        rows.append((int(np.sum(inside)), z.size, warned, shift))
        print(f"seed {s:3d}: inside {rows[-1][0]}/{z.size}  min ESS fit {e_fit:.3f} planted {e_true:.3f}  "
              f"warned {warned}  s2 {r.scale:.2f}  vs planted start {shift:.1e} se  ({time.time() - t1:.0f} s)  z {np.array2string(z, precision=2, max_line_width=200)}",
              flush=True)
    print(f"design {a.design}, n = {a.n}, replicates {a.replicates}, start {a.start}, seeds "
          f"{a.seeds[0]}-{a.seeds[1] - 1} ({time.time() - t0:.0f} s):")
    sh = np.array([r[3] for r in rows])
    if a.compare:
        same = sh < 1        # measured: same basin 0.003-0.8 se apart (the reweighting path), others >= 24 se
        print(f"  same minimum as the planted start (end points < 1 stderr apart): {np.sum(same)}/{len(sh)} seeds")
        k = np.array([r[0] for r, s in zip(rows, same) if s and not r[2]])
        print(f"  among them un-warned: {k.sum()}/{8 * len(k)} inside ({len(k)} seeds)")
    for label, sel in (("all fits", lambda w: True), ("no warning", lambda w: not w), ("warning", lambda w: w)):
        k = np.array([r[0] for r in rows if sel(r[2])])
        cnt = sum(r[1] for r in rows if sel(r[2]))
        if cnt:
            print(f"  {label:>10}: {k.sum()}/{cnt} inside ({len(k)} seeds); calibrated 95%: {0.95 * cnt:.1f} "
                  f"+- {np.sqrt(cnt * 0.05 * 0.95):.1f} (binomial sd), per-seed scatter sd "
                  f"{np.sqrt(len(k)) * k.std(ddof=1) if len(k) > 1 else float('nan'):.1f}")

if __name__ == "__main__":
    main()
