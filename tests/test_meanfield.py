"""Mean-field convergence and stability experiments (symbolic_tpde.analysis.meanfield / .stability).

Independent routes: the Gaussian moment ODE written here from README Mathematics §3 (softmax) and integrated with
scipy.integrate.solve_ivp; closed-form particle solutions for A = 0 (every particle moves with the mean).
"""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from symbolic_tpde.analysis import meanfield as MF
from symbolic_tpde.analysis import stability as S

A0 = np.array([[1.0, 0.5], [-0.5, 0.6]]) / np.linalg.norm([[1.0, 0.5], [-0.5, 0.6]], 2)


def softmax_moments(A, V, alpha0, Sigma0, T):
    """README Mathematics §3: dα/dt = V(α + ΣAα), dΣ/dt = VΣAΣ + ΣAᵀΣVᵀ (rtol 1e-11)."""
    d = len(alpha0)

    def rhs(t, y):
        a, S_ = y[:d], y[d:].reshape(d, d)
        return np.concatenate([V @ (a + S_ @ A @ a), (V @ S_ @ A @ S_ + S_ @ A.T @ S_ @ V.T).ravel()])

    sol = solve_ivp(rhs, (0, T), np.concatenate([alpha0, Sigma0.ravel()]), rtol=1e-11, atol=1e-13)
    return sol.y[:d, -1], sol.y[d:, -1].reshape(d, d)


def test_ols_and_bootstrap_recover_a_known_slope():
    rng = np.random.default_rng(0)
    ns = [50, 100, 200, 400, 800]
    errors = [list(3.0 * n ** -0.5 * np.abs(rng.standard_normal(20))) for n in ns]
    x = np.concatenate([[np.log(n)] * 20 for n in ns])
    fit = MF.ols(x, np.log(np.concatenate(errors)))
    assert fit.contains(-0.5) and fit.ci[1] - fit.ci[0] < 0.5
    b, (lo, hi) = MF.bootstrap_slope(ns, errors, rng, reps=500)
    assert lo <= -0.5 <= hi
    # exact line: zero residuals, zero standard error
    line = MF.ols([1, 2, 3, 4], [1.0, 3.0, 5.0, 7.0])
    assert line.slope == pytest.approx(2.0) and line.slope_se == pytest.approx(0.0, abs=1e-12)


def test_uniform_ball_radial_law_and_mardia_calibration():
    from scipy import stats

    rng = np.random.default_rng(1)
    X = MF.uniform_ball(4000, 3, 2.0, rng)
    r = np.linalg.norm(X, axis=1)
    assert r.max() <= 2.0
    # P(|x| ≤ ρ) = (ρ/R)^d: KS test (p-value threshold 1e-3: fails with probability 1e-3 under the law)
    assert stats.kstest((r / 2.0) ** 3, "uniform").pvalue > 1e-3
    g = MF.mardia(rng.standard_normal((3000, 2)))
    assert abs(g.kurt_z) < 4 and g.skew_p > 1e-4  # Gaussian null: z ~ N(0,1), 4σ
    u = MF.mardia(rng.uniform(-1, 1, (3000, 2)))
    # uniform square: b2 = 2·(9/5) + 2 = 5.6 vs 8 for a Gaussian → z ≈ -2.4/sqrt(64/3000) ≈ -16
    assert u.kurt_z < -8


def test_moment_convergence_rate_softmax_against_independent_ode():
    rng = np.random.default_rng(2)
    A, V = 0.5 * A0, np.eye(2)
    alpha0, Sigma0 = np.array([0.5, 0.0]), np.array([[0.5, 0.1], [0.1, 0.3]])
    limit = softmax_moments(A, V, alpha0, Sigma0, 1.0)
    w = S.variant_weights("softmax", A, V)
    c = MF.moment_convergence(w, alpha0, Sigma0, 1.0, [64, 128, 256, 512], 6, rng, steps=16, limit=limit)
    # the CLT rate n^{-1/2} must lie in the 95% OLS interval; the interval must be informative (< 0.6 wide)
    assert c.fit.contains(-0.5), c.fit
    assert c.fit.ci[1] - c.fit.ci[0] < 0.6
    # a wrong limit (Σ(T) off by 50%: the errors at these n are ~0.2-0.4) must be detected: the error then
    # plateaus and the slope flattens (a 20% offset is not resolved with n ≤ 512 and 4 seeds)
    bad = (limit[0], 1.5 * limit[1])
    cb = MF.moment_convergence(w, alpha0, Sigma0, 1.0, [64, 128, 256, 512], 4, rng, steps=16, limit=bad)
    assert not cb.fit.contains(-0.5), cb.fit


def test_gaussian_reference_matches_independent_ode():
    pytest.importorskip("symbolic_tpde.gaussian")
    A, V = 0.5 * A0, np.array([[1.0, 0.2], [0.0, 0.8]])
    alpha0, Sigma0 = np.array([0.5, -0.2]), np.array([[0.5, 0.1], [0.1, 0.3]])
    ref = MF.gaussian_reference(S.variant_weights("softmax", A, V), alpha0, Sigma0, 1.0)
    mine = softmax_moments(A, V, alpha0, Sigma0, 1.0)
    assert np.allclose(ref[0], mine[0], rtol=1e-7) and np.allclose(ref[1], mine[1], rtol=1e-7)  # both rtol≤1e-10


def test_stability_closed_form_when_A_is_zero():
    """A = 0, V = I: dx_i/dt = x̄, so x_i(t) = x_i(0) + (e^t - 1) x̄(0) exactly and the difference of the two
    systems is δξ_i + (e^t - 1) δξ̄; W₂ is that identity-coupling cost (δ ≪ spacing)."""
    rng = np.random.default_rng(3)
    X0 = MF.uniform_ball(50, 2, 1.0, rng)
    w = S.variant_weights("softmax", np.zeros((2, 2)), np.eye(2))
    rng_copy = np.random.default_rng(33)
    c = S.stability_curve(w, X0, 1.0, 20, rng_copy, delta=1e-4, n_save=4)
    xi = 1e-4 * np.random.default_rng(33).standard_normal(X0.shape)
    expect = [np.sqrt(((xi + (np.exp(t) - 1) * xi.mean(0)) ** 2).sum(1).mean()) for t in c.times]
    assert c.identity_optimal_at_0
    # RK4 with h = 0.05 on e^t: relative error ~ h⁴/120 ≈ 5e-8
    assert np.allclose(c.w[2.0], expect, rtol=1e-6)


def test_softmax_ratio_below_rigorous_bound_and_grows_with_radius():
    rng = np.random.default_rng(4)
    A, V = A0, np.eye(2)
    w = S.variant_weights("softmax", A, V)
    for R in (0.5, 1.5):
        c = S.stability_curve(w, MF.uniform_ball(60, 2, R, rng), 1.0, 20, rng, n_save=5, ps=(2.0,))
        assert c.identity_optimal_at_0
        assert c.C_max <= S.softmax_dobrushin_bound(A, V, c.radius, 1.0)
    f = S.radius_dependence(w, 1.0, [0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0], 150, 1.0, 20, rng, n_save=5)
    assert f.fit.ci[0] > 0  # log C increases with R₀² (slope's 95% interval excludes 0)
    assert f.r2 > 0.8       # and the e^{c R²} form explains most of the variation


def test_step_halving_leaves_stability_ratio_unchanged():
    rng = np.random.default_rng(5)
    X0 = MF.uniform_ball(40, 2, 1.5, rng)
    w = S.variant_weights("softmax", A0, np.eye(2))
    r1 = S.stability_curve(w, X0, 1.0, 20, np.random.default_rng(7), n_save=5).C_T
    r2 = S.stability_curve(w, X0, 1.0, 40, np.random.default_rng(7), n_save=5).C_T
    assert abs(r1 - r2) < 1e-5 * r2  # RK4: h⁴ ~ 6e-6 at h = 0.05 (times the field's derivatives ~ 1)


def test_every_variant_runs_and_linear_blowup_is_reported():
    rng = np.random.default_rng(6)
    X0 = MF.uniform_ball(30, 2, 1.0, rng)
    for var in S.VARIANTS:
        c = S.stability_curve(S.variant_weights(var, A0, np.eye(2), sink_mass=0.2 if var == "masked" else None),
                              X0, 0.5, 10, rng, n_save=5, ps=(2.0,))
        assert np.all(np.isfinite(c.ratio[2.0])) and c.conditional == (var == "masked")
    f = S.radius_dependence(S.variant_weights("linear", A0, np.eye(2)), 1.0, [0.5, 0.75, 1.0, 3.0], 30, 1.0, 20,
                            rng, n_save=5)
    assert f.blowups and f.blowups[0]["radius"] == 3.0 and 0 < f.blowups[0]["t"] < 1.0


def test_cli_registers_meanfield():
    from symbolic_tpde.cli import build_parser

    args = build_parser().parse_args(["meanfield", "--quick", "--out", "x", "--only", "masked"])
    assert args.quick and args.only == ["masked"] and callable(args.func)


@pytest.mark.slow
def test_cli_meanfield_quick_writes_plots_and_summary(tmp_path):
    import json

    from symbolic_tpde.cli import main

    assert main(["meanfield", "--quick", "--out", str(tmp_path)]) == 0
    for name in ("stability_curves.png", "stability_radius.png", "meanfield_convergence.png",
                 "masked_sensitivity.png", "masked_gaussianity.png", "summary.json", "stability_curves.csv"):
        assert (tmp_path / name).stat().st_size > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["convergence"]["softmax"]["fit"]["ci"][0] <= -0.5 <= summary["convergence"]["softmax"]["fit"]["ci"][1]
    assert summary["masked"]["gaussian_witness"]["0.5 at [3.0, 0.0]"]["witnessed"]
