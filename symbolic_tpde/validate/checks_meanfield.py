"""``tpde verify`` rows: distances (known answers), mean-field rates (initial-sample CLT of the moments and the
propagation-of-chaos coupling, :mod:`symbolic_tpde.experiments.meanfield_chaos`), stability, attention sink,
Gaussianity.

Every row states where its tolerance comes from.  Monte-Carlo rows use fixed seeds (reproducible) and
tolerances of 4 estimated standard errors or a 95% confidence interval.
"""

from __future__ import annotations

import numpy as np

from .verify import result, row_rng

A0 = np.array([[1.0, 0.5], [-0.5, 0.6]]) / np.linalg.norm([[1.0, 0.5], [-0.5, 0.6]], 2)


def _distance_rows():
    from ..numerics.measures import distances as D

    X = row_rng("distances: points").standard_normal((60, 3))
    v = np.array([0.3, -1.2, 2.0])
    nv = float(np.linalg.norm(v))
    err = max(abs(D.wasserstein(X, X + v, p) - nv) / nv for p in (1.0, 2.0, 3.0))
    yield result("W_p(μ, μ+v) = |v| (assignment, p=1,2,3)", "distance", 3, err, 1e-12,
                 "float64 round-off of an O(n) sum of O(1) costs")
    rng = row_rng("distances: 1-D")
    x, y = rng.standard_normal(80), rng.exponential(size=80)
    err = abs(D.wasserstein(x, y, 2) - float(np.sqrt(np.mean((np.sort(x) - np.sort(y)) ** 2))))
    yield result("1-D: assignment W2 = sorted-sample formula", "distance", 1, err, 1e-12, "float64 round-off")
    rng = row_rng("distances: LP")
    y2, b = rng.standard_normal(37), rng.uniform(0.1, 1.0, 37)
    q = D.wasserstein_1d(x, y2, 2, b=b)
    err = abs(D.wasserstein(x, y2, 2, b=b) - q) / q
    yield result("LP (unequal weights) = 1-D quantile formula", "distance", 1, err, 1e-8,
                 "LP solver feasibility tolerance ~1e-9")
    a, c = np.array([1.0, 4.0, 0.25]), np.array([9.0, 1.0, 0.25])
    expect = float(np.sqrt(((np.sqrt(a) - np.sqrt(c)) ** 2).sum() + 4.0))
    err = abs(D.bures_wasserstein([0, 0, 0], np.diag(a), [2, 0, 0], np.diag(c)) - expect) / expect
    yield result("Bures-Wasserstein, commuting covariances", "distance", 3, err, 1e-12, "float64 round-off")
    # BW against exact W2 of samples pushed by the optimal affine map (identity pairing is optimal)
    S1 = np.array([[2.0, 0.6], [0.6, 0.5]])
    S2 = np.array([[0.7, -0.3], [-0.3, 1.4]])
    w_, U = np.linalg.eigh(S1)
    r1 = U @ np.diag(np.sqrt(w_)) @ U.T
    m_, W = np.linalg.eigh(r1 @ S2 @ r1)
    T = np.linalg.inv(r1) @ (W @ np.diag(np.sqrt(m_)) @ W.T) @ np.linalg.inv(r1)
    Xs = row_rng("distances: BW samples").standard_normal((500, 2)) @ np.linalg.cholesky(S1).T
    Ys = Xs @ T.T + np.array([0.0, 1.0])
    costs = ((Ys - Xs) ** 2).sum(1)
    err = abs(D.w2(Xs, Ys) ** 2 - D.bures_wasserstein([0, 0], S1, [0, 1], S2) ** 2)
    yield result("BW² = exact W2² of transported samples", "distance", 2, err,
                 4 * costs.std(ddof=1) / np.sqrt(len(costs)), "Monte-Carlo: 4 standard errors of the mean cost")
    Z = row_rng("distances: entropic").standard_normal((120, 2)) + [1.0, 0.0]
    exact = D.w2(Xs[:150], Z) ** 2
    r = D.entropic_wasserstein(Xs[:150], Z, eps=0.05, debias=False)
    outside = max(0.0, r.lower - exact, exact - r.upper)
    yield result("entropic bracket [OT_ε - ε log n, cost+rounding] ∋ W2²", "distance", 2, outside, 1e-9,
                 "rigorous bracket; 1e-9 = round-off", passed=outside <= 1e-9 and r.converged)
    s = D.sliced_wasserstein(X, X + v, rng=row_rng("distances: sliced"), n_proj=300)
    yield result("sliced W2 of a translation = |v|/sqrt(d)", "distance", 3, abs(s.value - nv / np.sqrt(3)),
                 4 * s.stderr, "Monte-Carlo over directions: 4 standard errors")
    pos = np.repeat([0.0, 0.5, 1.0], [10, 20, 30])
    Xc = row_rng("distances: conditional").standard_normal((60, 2))
    Yc = Xc.copy()
    Yc[pos == 0.5] += [3.0, 4.0]
    err = abs(D.conditional_wasserstein(Xc, Yc, pos) - np.sqrt(25 * 20 / 60))
    yield result("W2^c of a translated position group", "distance", 2, err, 1e-12, "float64 round-off")


def checks(quick: bool = False):
    yield from _distance_rows()

    from ..experiments import masked as M
    from ..analysis import meanfield as MF
    from ..experiments import stability as S

    # mean-field rate: softmax particles vs the project's Gaussian moment ODE
    A, V = 0.5 * A0, np.eye(2)
    alpha0, Sigma0 = np.array([0.5, 0.0]), np.array([[0.5, 0.1], [0.1, 0.3]])
    ns = [64, 128, 256, 512] if quick else [64, 128, 256, 512, 1024]
    c = MF.moment_convergence(S.variant_weights("softmax", A, V), alpha0, Sigma0, 1.0, ns, 5 if quick else 6,
                              row_rng("meanfield: CLT"), steps=16)
    half = (c.fit.ci[1] - c.fit.ci[0]) / 2
    yield result(f"initial-sample CLT: moment error slope {c.fit.slope:.3f} vs -1/2", "softmax", 2,
                 abs(c.fit.slope + 0.5), half,
                 "95% OLS interval of log error vs log n over seeds (must also be < 0.3 wide)",
                 passed=c.fit.contains(-0.5) and half < 0.3)

    # propagation of chaos: interacting particles vs decoupled mean-field particles from the same sample
    from ..experiments import meanfield_chaos as MC

    ch = MC.chaos_convergence(S.variant_weights("softmax", A, V), alpha0, Sigma0, 1.0,
                              [64, 128, 256, 512, 1024], 6 if quick else 10, row_rng("meanfield: chaos"), steps=16)
    f = ch.chaos.fit
    half = (f.ci[1] - f.ci[0]) / 2
    yield result(f"propagation of chaos: coupling slope {f.slope:.3f} [{f.ci[0]:.3f}, {f.ci[1]:.3f}] vs -1/2",
                 "softmax", 2, abs(f.slope + 0.5), half,
                 "same-sample coupling ((1/n)Σ|x_i - x̄_i|²)^½ at T = 1: 95% Student-t interval of the OLS slope "
                 "over (n, seed) must contain -1/2 and be < 0.3 half-wide", passed=f.contains(-0.5) and half < 0.3)

    # stability: measured ratio below the rigorous identity-coupling bound (finite for R0 = 0.5, T = 0.5);
    # the ratio is a linear-response quantity (independent of the perturbation size δ)
    w = S.variant_weights("softmax", A0, V)
    X0 = MF.uniform_ball(100, 2, 0.5, row_rng("meanfield: stability"))
    cur = S.stability_curve(w, X0, 0.5, 10, row_rng("meanfield: stability", "perturbation"), n_save=5, ps=(2.0,))
    bound = S.softmax_dobrushin_bound(A0, V, cur.radius, 0.5)
    yield result("stability ratio W2(T)/W2(0) <= Dobrushin bound", "softmax", 2, cur.C_max, bound,
                 "rigorous a-priori bound exp∫(L_x + L_μ), R0 = 0.5, T = 0.5 (identity coupling optimal at t=0)",
                 passed=cur.C_max <= bound and cur.identity_optimal_at_0)
    X1 = MF.uniform_ball(100, 2, 1.5, row_rng("meanfield: C vs delta"))
    key = ("meanfield: C vs delta", "perturbation")      # the same directions for both δ
    c3 = S.stability_curve(w, X1, 1.0, 20, row_rng(*key), delta=1e-3, n_save=5, ps=(2.0,))
    c5 = S.stability_curve(w, X1, 1.0, 20, row_rng(*key), delta=1e-5, n_save=5, ps=(2.0,))
    yield result(f"ratio C(T=1, R0=1.5) = {c3.C_T:.3f} independent of δ", "softmax", 2,
                 abs(c3.C_T - c5.C_T) / c5.C_T, 1e-2,
                 "linear response: δ = 1e-3 vs 1e-5 differ by O(δ·|D²Γ|/|DΓ|) ~ 1e-3 relative")
    f = S.radius_dependence(w, 1.0, [0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0], 150, 1.0, 20, row_rng("meanfield: radius"), n_save=5)
    yield result(f"log C vs R0²: c = {f.c:.3f} [{f.fit.ci[0]:.3f}, {f.fit.ci[1]:.3f}]", "softmax", 2, 1 - f.r2, 0.2,
                 "e^{c‖A‖R²} form: OLS over 7 radii (n=150): slope CI > 0 and R² of the fit >= 0.8", passed=f.fit.ci[0] > 0 and f.r2 >= 0.8)

    # attention sink: early-position sensitivity with / without sink
    n = 128
    X0 = MF.uniform_ball(n, 2, 1.0, row_rng("meanfield: sink"))
    key = ("meanfield: sink", "perturbation")            # the same perturbation with and without the sink
    free = M.token_sensitivity(A0, V, X0, 1.0, 10, row_rng(*key))
    sink = M.token_sensitivity(A0, V, X0, 1.0, 10, row_rng(*key), sink_mass=0.2)
    yield result("sink effect: early sensitivity (sink / no sink)", "masked", 2,
                 sink.early_max() / free.early_max(), 0.25,
                 "flat-kernel theory ≈ 0.06 (n=128, m0=0.2); 0.25 leaves room for kernel factors e^{±2‖A‖R²}")

    # Gaussian data not preserved by masked attention with a sink; unmasked control stays Gaussian
    g = M.gaussian_witness(0.3 * A0, V, 1500 if quick else 2000, 1.0, 10, row_rng("meanfield: masked witness"), sink_mass=0.5, sink_x=[3.0, 0.0])
    yield result("masked+sink: Mardia skewness -log10 p > 6", "masked", 2, -np.log10(max(g.masked.skew_p, 1e-300)),
                 -np.log10(M.P_WITNESS), "Gaussian null: n b1/6 ~ χ²_4; pass if p < 1e-6 (error column = -log10 p)",
                 passed=g.masked.skew_p < M.P_WITNESS)
    yield result("unmasked control: Mardia skewness -log10 p <= 6", "softmax", 2,
                 -np.log10(max(g.control.skew_p, 1e-300)), -np.log10(M.P_WITNESS),
                 "Gaussian null: n b1/6 ~ χ²_4 (same tokens, same A, V, no mask)")
