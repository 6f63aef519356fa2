"""Particle integrators: convergence orders, layers, callables, blow-up, dtype, and the Gaussian moment ODE."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.linalg import expm
from scipy.special import exp1

from symbolic_tpde.errors import BlowupError, InputError
from symbolic_tpde.weights import Schedule, make_head, make_weights
from symbolic_tpde.numerics.measures import estimators as E
from symbolic_tpde.numerics.particles.simulate import simulate


def _w(kind="softmax", **p):
    return make_weights([make_head(kind, **p)])


# ------------------------------------------------------------- exact solutions with A = 0 ----------------
# With A = 0 the softmax weights are uniform: dx_i/dt = V x̄ for every i, so x̄' = V x̄ and x_i - x̄ is constant:
# x_i(t) = x_i(0) - x̄(0) + Φ(t) x̄(0) with Φ the propagator of x̄' = V(t) x̄.  An exact, independent solution.

def _exact(X0, Phi):
    m = X0.mean(axis=0)
    return X0 - m + Phi @ m


def _slope(hs, errs):
    return float(np.polyfit(np.log(hs), np.log(errs), 1)[0])


def test_layers_are_integrated_piecewise_with_full_order():
    """Two layers with a breakpoint (t = 0.37) that no uniform grid hits: RK4 keeps order 4, Euler order 1.

    If a step straddled the breakpoint (or a stage at a segment end saw the next layer), the error would be
    O(h) for RK4; the fitted log-log slopes (expected 4 and 1, allowed ±0.35) exclude that.
    """
    rng = np.random.default_rng(10)
    X0 = rng.standard_normal((5, 2)) + 1.0
    Z = np.zeros((2, 2))
    V1, V2 = np.array([[0.5, 1.0], [-1.0, 0.2]]), np.array([[-0.3, 0.4], [0.1, 0.9]])
    sched = Schedule.layers([(0.37, _w(A=Z, V=V1)), (5.0, _w(A=Z, V=V2))])
    T = 1.0
    exact = _exact(X0, expm((T - 0.37) * V2) @ expm(0.37 * V1))
    for method, order, steps in (("rk4", 4, (8, 16, 32)), ("euler", 1, (50, 100, 200))):
        errs = [np.abs(simulate(X0, sched, T, steps=s, method=method).X - exact).max() for s in steps]
        assert abs(_slope([T / s for s in steps], errs) - order) < 0.35, (method, errs)
    run = simulate(X0, sched, T, method="ivp", rtol=1e-10, atol=1e-12)
    assert np.abs(run.X - exact).max() < 1e-8  # solve_ivp tolerances 1e-10/1e-12 over O(1) times


def test_euler_is_one_layer_per_step():
    rng = np.random.default_rng(11)
    X0 = rng.standard_normal((6, 2))
    A1, A2 = rng.standard_normal((2, 2)), rng.standard_normal((2, 2))
    V = np.eye(2)
    from symbolic_tpde.numerics.particles.fields import softmax_field

    sched = Schedule.layers([(0.5, _w(A=A1, V=V)), (1.0, _w(A=A2, V=V))])
    X1 = X0 + 0.5 * softmax_field(X0, A1, V)
    X2 = X1 + 0.5 * softmax_field(X1, A2, V)
    run = simulate(X0, sched, 1.0, steps=2, method="euler")
    np.testing.assert_allclose(run.X, X2, rtol=1e-14, atol=1e-14)
    assert run.steps == 2 and run.nfev == 2


def test_callable_schedule_rk4_order_and_adaptive():
    """V(t) = cos(t) V0, A = 0: Φ(t) = exp(sin(t) V0) (the V(t) commute).  RK4 slope 4 (±0.35)."""
    rng = np.random.default_rng(12)
    X0 = rng.standard_normal((4, 3))
    V0 = rng.standard_normal((3, 3))
    Z = np.zeros((3, 3))
    T = 1.5
    exact = _exact(X0, expm(math.sin(T) * V0))
    sched = lambda t: _w(A=Z, V=math.cos(t) * V0)  # noqa: E731
    steps = (6, 12, 24)
    errs = [np.abs(simulate(X0, sched, T, steps=s).X - exact).max() for s in steps]
    assert abs(_slope([T / s for s in steps], errs) - 4) < 0.35, errs
    run = simulate(X0, Schedule.from_callable(sched), T, method="ivp", rtol=1e-10, atol=1e-12)
    assert np.abs(run.X - exact).max() < 1e-8


def test_blowup_raises_with_time():
    """One token, d = 1, unnormalised softmax A = V = 1: x' = x e^{x²}, x(0) = 1.

    Exact blow-up time T* = ∫_1^∞ e^{-x²}/x dx = E1(1)/2 = 0.10969...  The run must raise, at a time no later
    than T* + h (fixed steps) and within 2% below T* (adaptive: the step size collapses only near T*).
    """
    Tstar = exp1(1.0) / 2
    X0 = np.array([[1.0]])
    w = _w("softmax_unnormalized", A=[[1.0]], V=[[1.0]])
    h = 0.5 / 200
    with pytest.raises(BlowupError) as ei:
        simulate(X0, w, 0.5, steps=200, method="rk4")
    assert 0.5 * Tstar < ei.value.t <= Tstar + h and "rk4 step" in ei.value.where
    with pytest.raises(BlowupError) as ei:
        simulate(X0, w, 0.5, method="ivp")
    assert 0.98 * Tstar < ei.value.t <= Tstar * (1 + 1e-6)


def test_sinkhorn_particle_mean_is_exactly_linear():
    """Sinkhorn: Σ_i P_ij = 1 (columns), so the particle mean obeys x̄' = V x̄ exactly at every n (README Mathematics §4:
    mean e^{tV} α0), and RK4 of the particles is RK4 of the mean.  Tolerance: Sinkhorn marginal error 1e-9 per
    stage x 80 stages x |V||x| ~ 1e-7, plus the RK4 error on x̄' = Vx̄ with h = 0.05, ~(h|V|)^5/120 x 20 < 1e-8.
    Exercises warm-started Sinkhorn inside the integrator."""
    rng = np.random.default_rng(15)
    X0 = rng.standard_normal((150, 2)) + [1.0, -0.5]
    A, V = np.array([[0.8, 0.3], [-0.2, 0.5]]), np.array([[0.3, 0.7], [-0.6, 0.1]])
    run = simulate(X0, _w("sinkhorn", A=A, V=V, epsilon=0.8), 1.0, steps=20)
    exact_mean = expm(V) @ X0.mean(axis=0)
    assert np.abs(run.X.mean(axis=0) - exact_mean).max() < 1e-7  # measured: 8e-9
    hV = 0.05 * V  # sharper: RK4 of the particles is exactly RK4 of the mean (propagator Σ_{k<=4} (hV)^k/k!)
    step = sum(np.linalg.matrix_power(hV, k) / math.factorial(k) for k in range(5))
    rk4_mean = np.linalg.matrix_power(step, 20) @ X0.mean(axis=0)
    assert np.abs(run.X.mean(axis=0) - rk4_mean).max() < 1e-8  # Sinkhorn tol 1e-9 x O(1) growth
    assert np.abs(run.X - X0).max() > 0.1  # the cloud really moved


def test_float32_run_and_saving():
    rng = np.random.default_rng(13)
    X0 = rng.standard_normal((300, 2))
    w = _w(A=[[-0.5, 0.2], [0.1, -0.4]], V=[[1.0, 0.3], [-0.2, 0.7]])
    r64 = simulate(X0, w, 1.0, steps=20, save_every=5)
    r32 = simulate(X0, w, 1.0, steps=20, dtype=np.float32)
    assert r32.X.dtype == np.float32 and r32.dtype == "float32"
    # float32 round-off per step ~ eps32·|x| (|x| <= ~10), accumulated over 20 steps (x4 stages), amplified by
    # the flow's Lipschitz constant e^{|V| T} < 4: 1e-4 leaves margin above ~20·4·4·1.2e-7·10
    assert np.abs(r32.X - r64.X).max() < 1e-4
    assert r64.trajectory.shape == (5, 300, 2) and np.allclose(r64.times, [0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(r64.trajectory[-1], r64.X)
    ra = simulate(X0, w, 1.0, method="ivp", steps=20, save_every=5, rtol=1e-9, atol=1e-11)
    assert np.allclose(ra.times, [0, 0.25, 0.5, 0.75, 1.0])
    # dense output of RK45 at rtol 1e-9 vs RK4 with h = 0.05 (error ~ h^4 ~ 1e-5 at most)
    assert np.abs(ra.trajectory - r64.trajectory).max() < 1e-4


def test_progress_bar_plain_text():
    import io

    from symbolic_tpde.numerics.particles.simulate import _Progress

    buf = io.StringIO()
    bar = _Progress(2.0, True, stream=buf)
    bar.update(1.0)
    bar.update(2.0)
    bar.close()
    text = buf.getvalue()
    assert "50.0%" in text and "100.0%" in text and text.endswith("\n")
    quiet = io.StringIO()
    bar = _Progress(2.0, None, stream=quiet)  # auto: a fast run shows nothing
    bar.update(2.0)
    bar.close()
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("kw", [dict(method="rk5"), dict(steps=0), dict(T=-1.0), dict(T=float("nan")),
                                dict(save_every=1.5)])
def test_bad_arguments(kw):
    X0 = np.zeros((3, 2))
    w = _w(A=np.eye(2), V=np.eye(2))
    T = kw.pop("T", 1.0)
    with pytest.raises(InputError):
        simulate(X0, w, T, **kw)


# ------------------------------------------------------------- Gaussian moment ODE (README Mathematics §3) -----------
A_REF = np.array([[-0.4, 0.3], [-0.2, -0.5]])
V_REF = np.array([[1.0, 0.3], [-0.4, 0.6]])
ALPHA0 = np.array([0.5, -0.2])
SIGMA0 = np.array([[1.0, 0.3], [0.3, 0.5]])


def reference_moments(T, alpha0=ALPHA0, Sigma0=SIGMA0):
    """Softmax Gaussian ODE written here from README Mathematics §3, integrated with solve_ivp (the independent route):
    dα/dt = V(α + ΣAα),  dΣ/dt = VΣAΣ + ΣAᵀΣVᵀ."""
    def rhs(t, y):
        a, S = y[:2], y[2:].reshape(2, 2)
        return np.concatenate([V_REF @ (a + S @ A_REF @ a), (V_REF @ S @ A_REF @ S + S @ A_REF.T @ S @ V_REF.T).ravel()])

    sol = solve_ivp(rhs, (0, T), np.concatenate([alpha0, Sigma0.ravel()]), rtol=1e-11, atol=1e-13)
    return sol.y[:2, -1], sol.y[2:, -1].reshape(2, 2)


IU = np.triu_indices(2)


def _flat(a, S):
    return np.concatenate([a, S[IU]])


def _runs(n, seeds, T=1.0, steps=20):
    """Per seed: particle moments at T, and the ODE solution started from that seed's *empirical* moments."""
    parts, odes = [], []
    for s in seeds:
        rng = np.random.default_rng(s)
        X0 = rng.multivariate_normal(ALPHA0, SIGMA0, size=n)
        X = simulate(X0, _w(A=A_REF, V=V_REF), T, steps=steps).X
        parts.append(_flat(*E.moments(X)))
        odes.append(_flat(*reference_moments(T, *E.moments(X0))))
    return np.array(parts), np.array(odes)


def _check_against_ode(n, K, level=1e-3):
    """Particles vs the Gaussian ODE over K seeds, two ways; tolerances = t_{K-1} quantile (two-sided ``level``)
    x (sd across seeds)/sqrt(K): the Monte-Carlo n^{-1/2} fluctuation estimated from the runs themselves.

    1. mean over seeds of the particle moments vs the ODE from (α0, Σ0);
    2. (control variate) mean over seeds of [particle moments - ODE from the seed's empirical initial moments]
       vs 0: removes the propagated fluctuation of the initial moments, leaving the non-Gaussian part of the
       empirical measure, hence a much sharper test of the same limit.
    The finite-n bias is O(1/n) and the RK4 error with h = 0.05 is ~1e-6, both far below the tolerances.
    """
    from scipy.stats import t as student

    q = student.ppf(1 - level / 2, K - 1)
    ref = _flat(*reference_moments(1.0))
    parts, odes = _runs(n, range(100, 100 + K))
    se1 = parts.std(axis=0, ddof=1) / math.sqrt(K)
    assert np.all(np.abs(parts.mean(axis=0) - ref) < q * se1), (parts.mean(axis=0) - ref, q * se1)
    diff = parts - odes
    se2 = diff.std(axis=0, ddof=1) / math.sqrt(K)
    assert np.all(np.abs(diff.mean(axis=0)) < q * se2), (diff.mean(axis=0), q * se2)
    # non-vacuous: the sharp tolerance is far below how much every moment moved
    moved = np.abs(ref - _flat(ALPHA0, SIGMA0))
    assert np.all(q * se2 < 0.2 * moved), (q * se2, moved)
    return se2


def test_softmax_particles_follow_gaussian_moment_ode():
    _check_against_ode(n=600, K=6)


@pytest.mark.slow
def test_softmax_particles_moment_ode_large_n_and_rate():
    """n = 600 and 4800, 8 seeds each (~1.5 min).  The control-variate fluctuation (non-Gaussian part of the
    empirical measure, propagated) shrinks like n^{-1/2}: ratio sqrt(8) = 2.83 expected; 1.6-5 allowed (an sd
    from 8 seeds has ~25% relative uncertainty; the median over 5 moments tightens it)."""
    se_small = _check_against_ode(n=600, K=8)
    se_large = _check_against_ode(n=4800, K=8)
    ratio = float(np.median(se_small / se_large))
    assert 1.6 < ratio < 5, ratio


def test_sigmoid_leaves_gaussian_family():
    """Gaussian start (the witness accepts it), T = 1: sigmoid particles fail the skewness/kurtosis witness
    (max |z| ~ 8 against a Bonferroni threshold ~ 3.8 at level 1e-3; 2x the threshold is required).

    No softmax "control" here on purpose: softmax preserves Gaussians only as n -> oo; at finite n its
    particle field is a self-normalised importance average whose variance grows like e^{|ΣA x|²}, so with a
    strong tilt its departure, although O(n^{-1/2}), shows up as |z| ~ 10 at every n (measured for
    n = 1000-8000), which a fixed-n witness cannot tell from non-Gaussianity.
    """
    rng = np.random.default_rng(14)
    X0 = rng.multivariate_normal([1.0, 0.0], [[1.0, 0.4], [0.4, 0.6]], size=2000)
    assert not E.gaussianity_witness(X0)["gaussian_rejected"]
    A = np.array([[1.5, 0.0], [0.5, 1.0]])
    # Euler with 8 layers: the time error is irrelevant here, the question is the family of the law
    sig = simulate(X0, _w("sigmoid", A=A, V=np.eye(2), b=-1.0), 1.0, steps=8, method="euler").X
    w_sig = E.gaussianity_witness(sig)
    assert w_sig["gaussian_rejected"] and w_sig["max_abs_z"] > 2 * w_sig["threshold"], w_sig["max_abs_z"]


# ------------------------------------------------------------- error-controlled default (issue 12 item 2) ----------
def test_default_is_error_controlled_and_exact_on_A0():
    """steps=None: Dormand-Prince 5(4) at auto_tolerance(n); on the exact A = 0 solution (uniform weights,
    x_i(t) = x_i(0) - x̄(0) + e^{tV} x̄(0)) the error is below the tolerance times T (local errors <= tol per
    unit step, no expansion beyond e^{|V| T} < 3 here)."""
    from symbolic_tpde.numerics.particles.simulate import auto_tolerance

    rng = np.random.default_rng(21)
    X0 = rng.standard_normal((400, 2))
    V = np.array([[0.3, -0.8], [0.6, 0.2]])
    run = simulate(X0, _w(A=np.zeros((2, 2)), V=V), 1.0)
    assert run.method == "dopri5" and run.tolerance == auto_tolerance(400)
    assert run.error_estimate is not None and 0 < run.error_estimate < 10 * run.tolerance
    err = np.abs(run.X - _exact(X0, expm(V))).max()
    assert err < 3 * run.tolerance, err
    # fixed grid still available and forced by steps=
    fixed = simulate(X0, _w(A=np.zeros((2, 2)), V=V), 1.0, steps=7)
    assert fixed.method == "rk4" and fixed.steps == 7 and fixed.error_estimate is None


def test_default_moments_match_fine_fixed_run_far_below_mc_error():
    """Softmax, n = 500: moments of the default run vs RK4 with 200 steps (error ~h⁴ ~ 1e-10) differ by far
    less than the Monte-Carlo standard error n^{-1/2}·σ ≈ 0.04: the tolerance is 10⁻³ n^{-1/2}, so 1e-3 of the
    s.e. is the design; we assert 1e-2 (the error estimate sums local errors, a loose bound)."""
    rng = np.random.default_rng(5)
    X0 = rng.multivariate_normal([0.5, -0.3], [[1.0, 0.3], [0.3, 0.6]], size=500)
    w = _w(A=[[-0.6, 0.2], [0.1, -0.4]], V=[[1.0, 0.3], [-0.2, 0.8]])
    auto = simulate(X0, w, 0.8)
    fine = simulate(X0, w, 0.8, steps=200)
    se = np.sqrt(np.diag(E.covariance(fine.X)) / 500)
    assert np.abs(E.mean(auto.X) - E.mean(fine.X)).max() < 1e-2 * se.min()
    assert np.abs(E.covariance(auto.X) - E.covariance(fine.X)).max() < 1e-2 * se.min()
    assert auto.nfev < fine.nfev / 5  # the point of the default: far fewer field evaluations


def test_default_with_layers_saving_and_float32():
    """Layers: the controlled run restarts at the breakpoint and matches the fixed-step run to 3x its
    tolerance (7e-5 at n = 200: RMS local error per step; the flow is O(1) over T = 1, RK4 with h = 0.01 is
    exact to ~1e-8); save_every samples the nominal grid by dense output (4th-order Shampine interpolant, same
    bound); float32 stays float32 (its own tolerance is smaller: floor 100 ε₃₂ ≈ 1.2e-5)."""
    rng = np.random.default_rng(8)
    X0 = rng.standard_normal((200, 2))
    w1 = _w(A=[[-0.5, 0.2], [0.1, -0.4]], V=np.eye(2))
    w2 = _w(A=[[0.3, 0.0], [0.0, -0.2]], V=[[0.5, 0.4], [-0.4, 0.5]])
    sched = Schedule.layers([(0.4, w1), (1.0, w2)])
    auto = simulate(X0, sched, 1.0, save_every=10)
    fine = simulate(X0, sched, 1.0, steps=100, save_every=10)
    tol = auto.tolerance
    assert np.abs(auto.X - fine.X).max() < 3 * tol
    np.testing.assert_allclose(auto.times, fine.times)
    assert np.abs(auto.trajectory - fine.trajectory).max() < 3 * tol
    r32 = simulate(X0, sched, 1.0, dtype=np.float32)
    assert r32.X.dtype == np.float32 and np.abs(r32.X - fine.X).max() < 3 * tol
