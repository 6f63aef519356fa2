"""Benchmark of the ℓ2 verdict sweep (issue 30, item 5): what each grid point costs, against a baseline measured
in the same run.

Run:  python numerics/bench_verdict_l2.py [--n 3] [--K 1] [--T 1000] [--d 3]

The ℓ2 sweep (``tpde sweep --kind l2``) classifies every ``Σ₀`` of every grid point with
:func:`symbolic_tpde.analysis.verdict.classify_long_time`, whose covariance equation is the inverse-free matrix
form (no theorem decides ℓ2).  Two variants on the same points, interleaved (point by point) so that the load of
the shared machine hits both alike:

* **baseline** (the code before this issue): per classification, the test "does ``dΣ/dt`` involve ``α``?"
  (:func:`symbolic_tpde.analysis.clustering.covariance_closed`) walks the free symbols of the derived system
  (about a second at d = 3), and the matrix form is evaluated by
  :func:`~symbolic_tpde.gaussian.matrix_form.covariance_velocity` on every call (the weights' dictionaries are
  read and ``V``, ``B``, ``R`` rebuilt per call);
* **prebuilt**: that test memoised by the weights structure (it is a property of the symbols, not of the
  values) and :func:`~symbolic_tpde.gaussian.matrix_form.matrix_rhs` (per-head matrices assembled once).

Per point it prints the outcome, the right-hand-side evaluations of the regular-form run (from the verdict's
evidence), CPU seconds of both variants and their ratio; at the end the totals, the time per right-hand side and
the per-call cost of both right-hand sides alone (``timeit`` at a well-conditioned ``Σ``).  CPU time
(``time.process_time``) is reported because the machine is shared; both variants give the same verdicts (checked).
"""

from __future__ import annotations

import argparse
import re
import time
import timeit

import numpy as np


def main(argv=None) -> int:
    import symbolic_tpde.analysis.verdict as verdict
    import symbolic_tpde.gaussian.matrix_form as mf
    from symbolic_tpde.analysis.sweep import SweepSpec, head_for, initial_sample
    from symbolic_tpde.analysis.verdict import classify_long_time
    from symbolic_tpde.gaussian import GaussianODE
    from symbolic_tpde.registry import layout
    from symbolic_tpde.weights import make_weights

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--K", type=int, default=1)
    ap.add_argument("--T", type=float, default=1000.0)
    ap.add_argument("--d", type=int, default=3)
    a = ap.parse_args(argv)
    spec = SweepSpec(n=a.n, K=a.K, T=a.T, d=a.d, kind="l2", v=(1.0,) * a.d)
    pts, V, S0 = spec.points(), spec.V(), initial_sample(spec)
    prebuilt = mf.matrix_rhs
    tot = {"baseline": 0.0, "prebuilt": 0.0}
    nfev_total = 0
    print(f"ℓ2 sweep, d = {a.d}, {len(pts)} points x {len(S0)} clouds, T = {a.T:g}")
    print(f"{'point (s1, s2)':>18} {'outcome':>28} {'rhs evals':>10} {'baseline s':>11} {'prebuilt s':>11} {'ratio':>6}")
    for p in pts:
        ode = GaussianODE.from_weights(make_weights([head_for("l2", spec.A(*p), V)]))
        cost, outs, nfev = {}, {}, 0
        for variant in ("baseline", "prebuilt"):
            mf.matrix_rhs = (lambda w, d: None) if variant == "baseline" else prebuilt
            t0 = time.process_time()
            vs = []
            for S in S0:
                if variant == "baseline":
                    verdict._CLOSED.clear()
                vs.append(classify_long_time(ode, S, a.T))
            cost[variant] = time.process_time() - t0
            outs[variant] = [v.short for v in vs]
            if variant == "prebuilt":
                for v in vs:
                    m = next((re.search(r"(\d+) right-hand sides", e) for e in v.evidence if "right-hand sides" in e), None)
                    nfev += int(m.group(1)) if m else 0
        mf.matrix_rhs = prebuilt
        if outs["baseline"] != outs["prebuilt"]:
            print("   verdicts differ:", outs)
        for k in tot:
            tot[k] += cost[k]
        nfev_total += nfev
        print(f"{'(%.2f, %.2f)' % tuple(p):>18} {', '.join(outs['prebuilt'])[:28]:>28} {nfev:>10d} "
              f"{cost['baseline']:>11.2f} {cost['prebuilt']:>11.2f} {cost['baseline'] / cost['prebuilt']:>6.2f}")
    n_cls = len(pts) * len(S0)
    print(f"total: baseline {tot['baseline']:.1f} s, prebuilt {tot['prebuilt']:.1f} s CPU "
          f"(ratio {tot['baseline'] / tot['prebuilt']:.2f}); per classification {tot['prebuilt'] / n_cls:.2f} s, "
          f"{nfev_total / n_cls:.0f} regular-form right-hand sides, "
          f"{1e6 * tot['prebuilt'] / max(nfev_total, 1):.0f} us per right-hand side all included")
    # the right-hand sides alone, at one well-conditioned Σ
    ode = GaussianODE.from_weights(make_weights([head_for("l2", spec.A(*pts[0]), V)]))
    w = ode.schedule(0.0)
    S = S0[0]
    y = layout.pack(np.zeros(a.d), S)
    fm = prebuilt(w, a.d)[0]
    base = lambda: layout.pack(np.zeros(a.d), mf.covariance_velocity(w, layout.unpack(y, a.d)[1]))  # noqa: E731
    assert np.allclose(fm(0.0, y)[a.d:], base()[a.d:], rtol=1e-12, atol=1e-14)
    tb = min(timeit.repeat(base, number=2000, repeat=3)) / 2000
    tp = min(timeit.repeat(lambda: fm(0.0, y), number=2000, repeat=3)) / 2000
    print(f"right-hand side alone: baseline {1e6 * tb:.1f} us, prebuilt {1e6 * tp:.1f} us per call (ratio {tb / tp:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
