"""Mean-field convergence and stability experiments (symbolic_tpde.analysis.meanfield / .stability).

Independent routes: the Gaussian moment ODE written here from README Mathematics §3 (softmax) and integrated with
scipy.integrate.solve_ivp; closed-form particle solutions for A = 0 (every particle moves with the mean).
"""

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from support import drop_seconds

from symbolic_tpde.analysis import meanfield as MF
from symbolic_tpde.experiments import stability as S

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


# ------------------------------------------------------------------ propagation of chaos (meanfield_chaos)
def _is_sample_se(w, Y):
    """Self-normalised importance-sampling estimate ``Σ w y / Σ w`` and its delta-method standard error."""
    w = w / w.sum()
    est = w @ Y
    return est, np.sqrt((w[:, None] ** 2 * (Y - est) ** 2).sum(0))


@pytest.mark.parametrize("variant", ["softmax", "l2", "linear", "multihead"])
def test_affine_field_matches_symbolic_moment_ode(variant):
    """b + Jα = dα/dt and JΣ + ΣJᵀ = dΣ/dt from the symbolically derived moment ODE (generated code,
    float64: agreement to round-off, 1e-10 relative)."""
    from symbolic_tpde.experiments import meanfield_chaos as MC
    from symbolic_tpde.gaussian import GaussianODE

    A, V = 0.5 * A0, np.array([[1.0, 0.2], [-0.1, 0.8]])
    alpha, Sigma = np.array([0.4, -0.3]), np.array([[0.6, 0.15], [0.15, 0.4]])
    w = S.variant_weights(variant, A, V)
    b, J = MC.affine_field(w, alpha, Sigma)
    da, dS = GaussianODE.from_weights(w).rhs_matrices(0.0, alpha, Sigma)
    assert np.allclose(b + J @ alpha, da, rtol=1e-10, atol=1e-12)
    assert np.allclose(J @ Sigma + Sigma @ J.T, dS, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("variant", ["softmax", "l2"])
def test_affine_field_matches_monte_carlo_field_of_the_gaussian(variant):
    """Γ_{N(α,Σ)}(x) by self-normalised importance sampling over 2·10⁵ Gaussian keys (kernels written here
    from README Mathematics §2) at three queries x: within 5 delta-method standard errors of b + Jx (the
    moment-ODE test above fixes only the symmetric part of JΣ; this fixes J itself)."""
    from symbolic_tpde.experiments import meanfield_chaos as MC

    rng = np.random.default_rng(11)
    A, V = 0.5 * A0, np.array([[1.0, 0.2], [-0.1, 0.8]])
    alpha, Sigma = np.array([0.4, -0.3]), np.array([[0.6, 0.15], [0.15, 0.4]])
    b, J = MC.affine_field(S.variant_weights(variant, A, V), alpha, Sigma)
    Y = alpha + rng.standard_normal((200_000, 2)) @ np.linalg.cholesky(Sigma).T
    for x in ([0.0, 0.0], [1.0, -0.5], [-0.7, 1.2]):
        x = np.asarray(x)
        if variant == "softmax":
            logw = Y @ (A @ x)
        else:  # variant_weights("l2"): Q = A, K = I, τ = 2
            logw = -((A @ x - Y) ** 2).sum(1) / 2.0
        est, se = _is_sample_se(np.exp(logw - logw.max()), Y)
        assert np.all(np.abs(V @ est - (b + J @ x)) <= 5 * np.abs(V) @ se + 1e-12), (x, V @ est, b + J @ x)


def test_characteristic_flow_pushes_the_gaussian_to_the_ode_solution():
    """(α(T), Σ(T)) of the flow against the scipy solve_ivp moment ODE above (both rtol ≤ 1e-10: 1e-7 leaves
    room), and the push-forward identities α(T) = Mα₀ + c, Σ(T) = MΣ₀Mᵀ (round-off of the integration)."""
    from symbolic_tpde.experiments import meanfield_chaos as MC

    A, V = 0.5 * A0, np.array([[1.0, 0.2], [0.0, 0.8]])
    alpha0, Sigma0 = np.array([0.5, -0.2]), np.array([[0.5, 0.1], [0.1, 0.3]])
    f = MC.characteristic_flow(S.variant_weights("softmax", A, V), alpha0, Sigma0, 1.0)
    a, Sg = softmax_moments(A, V, alpha0, Sigma0, 1.0)
    assert np.allclose(f.alpha, a, rtol=1e-7) and np.allclose(f.Sigma, Sg, rtol=1e-7)
    assert np.allclose(f.M @ alpha0 + f.c, f.alpha, rtol=1e-9)
    assert np.allclose(f.M @ Sigma0 @ f.M.T, f.Sigma, rtol=1e-9)


def test_coupling_error_closed_form_when_A_is_zero():
    """A = 0, V = I: interacting x_i(T) = x_i(0) + (e^T - 1) m_n(0), decoupled x̄_i(T) = x_i(0) + (e^T - 1) α₀,
    so e_n = (e^T - 1)|m_n(0) - α₀| exactly (RK4, 20 steps on e^t: relative error ~ h⁴/120 ≈ 5e-8)."""
    from symbolic_tpde.experiments import meanfield_chaos as MC

    rng = np.random.default_rng(12)
    alpha0, Sigma0 = np.array([0.5, 0.0]), np.array([[0.5, 0.1], [0.1, 0.3]])
    w = S.variant_weights("softmax", np.zeros((2, 2)), np.eye(2))
    flow = MC.characteristic_flow(w, alpha0, Sigma0, 1.0)
    X0 = alpha0 + rng.standard_normal((300, 2)) @ np.linalg.cholesky(Sigma0).T
    XT = MF.evolve(X0, w, 1.0, 20)[1][-1]
    expect = (np.e - 1) * np.linalg.norm(X0.mean(0) - alpha0)
    assert MC.coupling_error(XT, X0, flow) == pytest.approx(expect, rel=1e-6)


def test_propagation_of_chaos_rate_and_a_wrong_law_is_detected():
    from symbolic_tpde.experiments import meanfield_chaos as MC

    A, V = 0.5 * A0, np.eye(2)
    alpha0, Sigma0 = np.array([0.5, 0.0]), np.array([[0.5, 0.1], [0.1, 0.3]])
    w = S.variant_weights("softmax", A, V)
    ns = [64, 128, 256, 512]
    ch = MC.chaos_convergence(w, alpha0, Sigma0, 1.0, ns, 6, np.random.default_rng(13), steps=16)
    # n^{-1/2} must lie in the 95% t-interval, which must be informative (< 0.8 wide at 24 points)
    assert ch.chaos.fit.contains(-0.5), ch.chaos.fit
    assert ch.chaos.fit.ci[1] - ch.chaos.fit.ci[0] < 0.8
    assert ch.chaos.reference == "coupling" and ch.moments.reference == "gaussian"
    # negative control: decoupled particles driven by the flow of N(α₀, 2Σ₀) (a wrong law): the coupling error
    # then has an O(1) part that does not shrink with n, and the slope's interval excludes -1/2
    bad = MC.chaos_convergence(w, alpha0, Sigma0, 1.0, [128, 256, 512], 3, np.random.default_rng(14), steps=16,
                               law=(alpha0, 2.0 * Sigma0))
    assert not bad.chaos.fit.contains(-0.5), bad.chaos.fit


def test_coupling_route_refuses_non_affine_kinds():
    from symbolic_tpde.experiments import meanfield_chaos as MC
    from symbolic_tpde.errors import InputError

    alpha, Sigma = np.zeros(2), np.eye(2)
    with pytest.raises(InputError, match="sigmoid"):
        MC.affine_field(S.variant_weights("sigmoid", A0, np.eye(2)), alpha, Sigma)
    with pytest.raises(InputError, match="sink"):
        MC.affine_field(S.variant_weights("masked", A0, np.eye(2), sink_mass=0.2), alpha, Sigma)


# ------------------------------------------------------------------ `tpde meanfield` end to end, small sizes
TINY = {"stab_n": 24, "stab_steps": 10, "radii": [0.5, 1.0, 1.5], "radius_n": 24, "conv_ns": [32, 64],
        "conv_seeds": 2, "chaos_ns": [32, 64], "chaos_seeds": 2, "ref_ns": [16, 32], "ref_N": 64, "ref_seeds": 2,
        "mask_n": 32, "mask_seeds": 2, "gauss_n": 300}


def _tiny_run(monkeypatch, capsys, out, parts=()):
    import json

    from symbolic_tpde.cli import main
    from symbolic_tpde.commands import meanfield as cmd

    monkeypatch.setattr(cmd, "settings", lambda quick: dict(TINY))
    only = [a for p in parts for a in ("--only", p)]
    assert main(["meanfield", "--quick", "--seed", "5", "--json", "--out", str(out), *only]) == 0
    printed = json.loads(capsys.readouterr().out)  # --json: stdout is exactly one JSON document
    csvs = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix == ".csv"}
    return drop_seconds(printed), csvs, drop_seconds(json.loads((out / "summary.json").read_text()))


def _same_bits_with_one_thread(monkeypatch, capsys, tmp_path, parts):
    """Run twice: default threads, then BLAS/OpenMP and the package's kernels held to one thread.  Same seed →
    the same JSON values (floats compared exactly, ``seconds`` removed) and the same CSV bytes (issue 11)."""
    from threadpoolctl import threadpool_limits

    from symbolic_tpde.numerics.threads import limit_threads

    first = _tiny_run(monkeypatch, capsys, tmp_path / "a", parts)
    with threadpool_limits(1), limit_threads(1):
        second = _tiny_run(monkeypatch, capsys, tmp_path / "b", parts)
    assert first[1] and first == second
    assert first[0] == first[2]  # the --json document is the summary.json written
    return first[0]


def test_meanfield_convergence_bitwise_repeatable_and_thread_independent(monkeypatch, capsys, tmp_path):
    """The convergence part (propagation of chaos + moment errors) at the TINY sizes (~1 s of CPU per run; the
    whole command at TINY takes ~6 s per run, at --quick ~25 s: those comparisons are slow tests)."""
    printed = _same_bits_with_one_thread(monkeypatch, capsys, tmp_path, ["convergence"])
    assert set(printed["convergence"]["propagation_of_chaos"]) == {"softmax", "l2", "sigmoid"}
    chaos = printed["convergence"]["propagation_of_chaos"]["softmax"]
    assert chaos["reference"] == "coupling" and "Student-t" in chaos["ci_method"]
    assert printed["convergence"]["softmax"]["reference"] == "gaussian"
    assert "stability" not in printed and "masked" not in printed


@pytest.mark.slow
def test_meanfield_all_parts_thread_independent(monkeypatch, capsys, tmp_path):
    printed = _same_bits_with_one_thread(monkeypatch, capsys, tmp_path, [])
    assert {"stability", "convergence", "masked"} <= set(printed)


def test_larger_system_route_agrees_with_the_exact_coupling():
    """Route (b) against route (a) on the same points: per seed and n, Minkowski in ℓ²(labels in the block B) gives
    |e_b·(1 - n/N)^{1/2} - e_a| ≤ ((1/n) Σ_{i∈B} |x^N_i(T) - x̄_i(T)|²)^{1/2} (the reference's own coupling
    error on the block B): fails if the routes pair different particles or run different dynamics.
    The draws are reproduced as documented (per seed: N points α₀ + Z Lᵀ, consecutive disjoint blocks)."""
    from symbolic_tpde.experiments import meanfield_chaos as MC
    from symbolic_tpde.errors import InputError

    alpha0, Sigma0 = np.array([0.5, 0.0]), np.array([[0.5, 0.1], [0.1, 0.3]])
    w = S.variant_weights("softmax", 0.5 * A0, np.eye(2))
    ns, N = [32, 64, 128], 512
    ref = MC.reference_convergence(w, alpha0, Sigma0, 1.0, ns, 3, np.random.default_rng(15), N=N, steps=16)
    assert ref.reference == "larger_system" and ref.extra["N"] == N
    with pytest.raises(InputError, match="disjoint"):
        MC.reference_convergence(w, alpha0, Sigma0, 1.0, [200, 400], 2, np.random.default_rng(0), N=512)
    flow = MC.characteristic_flow(w, alpha0, Sigma0, 1.0)
    rng, L = np.random.default_rng(15), np.linalg.cholesky(Sigma0)
    for s in range(3):
        X0 = alpha0 + rng.standard_normal((N, 2)) @ L.T
        XN = MF.evolve(X0, w, 1.0, 16)[1][-1]
        for k, (n, o) in enumerate(zip(ns, [0, 32, 96])):
            B = slice(o, o + n)
            e_a = MC.coupling_error(MF.evolve(X0[B], w, 1.0, 16)[1][-1], X0[B], flow)
            e_N = MC.coupling_error(XN[B], X0[B], flow)
            assert abs(ref.errors[k][s] * np.sqrt(1 - n / N) - e_a) <= e_N * (1 + 1e-9) + 1e-12


@pytest.mark.slow
def test_sigmoid_propagation_of_chaos_rate_against_a_larger_system():
    from symbolic_tpde.experiments import meanfield_chaos as MC

    alpha0, Sigma0 = np.array([0.5, 0.0]), np.array([[0.5, 0.1], [0.1, 0.3]])
    w = S.variant_weights("sigmoid", 0.5 * A0, np.eye(2))
    c = MC.reference_convergence(w, alpha0, Sigma0, 1.0, [64, 128, 256, 512, 1024], 8, np.random.default_rng(16),
                                 N=4096, steps=16)
    assert c.fit.contains(-0.5) and c.fit.ci[1] - c.fit.ci[0] < 0.6, c.fit


def test_cli_meanfield_negative_seed_is_an_input_error(tmp_path, capsys):
    from symbolic_tpde.cli import main

    assert main(["meanfield", "--seed", "-1", "--out", str(tmp_path)]) == 2
    assert "seed" in capsys.readouterr().err
