"""Known-answer tests for symbolic_tpde.numerics.measures.distances.

Tolerances: exact solvers (assignment, LP, quantile formula) are compared at float64 round-off (1e-10
relative, with O(n) summation of O(1) costs); Monte-Carlo quantities at 4 standard errors estimated from the
same samples.
"""

import numpy as np
import pytest

from symbolic_tpde.errors import InputError
from symbolic_tpde.numerics.measures import distances as D

RT = 1e-10  # float64 round-off budget for exact solvers on O(1) data


def test_two_diracs_all_p():
    x, y = np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]])
    for p in (1.0, 1.5, 2.0, 3.0):
        assert D.wasserstein(x, y, p) == pytest.approx(5.0, rel=RT)
    assert D.bures_wasserstein([0, 0], np.zeros((2, 2)), [3, 4], np.zeros((2, 2))) == pytest.approx(5.0, rel=RT)


def test_mixture_of_diracs_unequal_weights_lp_vs_closed_form():
    # μ = δ_0, ν = ½δ_{-1} + ½δ_{2}: the only coupling gives W_p^p = ½·1 + ½·2^p
    x = np.array([[0.0]])
    y = np.array([[-1.0], [2.0]])
    for p in (1.0, 2.0):
        expect = (0.5 + 0.5 * 2 ** p) ** (1 / p)
        assert D.wasserstein(x, y, p) == pytest.approx(expect, rel=RT)
        assert D.wasserstein(x, y, p, method="linprog") == pytest.approx(expect, rel=RT)
        assert D.wasserstein_1d(x, y, p) == pytest.approx(expect, rel=RT)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
def test_translation(p):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((80, 3))
    v = np.array([0.3, -1.2, 2.0])
    # W_p(μ, μ + v) = |v|: the translation coupling costs |v|^p and Jensen gives W_p ≥ |E x - E y| = |v|
    assert D.wasserstein(X, X + v, p) == pytest.approx(np.linalg.norm(v), rel=1e-9)


def test_scaling_about_the_mean_1d_and_nd():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((120, 2))
    X -= X.mean(0)
    c = 1.7
    # dilation x -> c x is the gradient of a convex function, hence optimal: W_2 = |c-1| (E|x|²)^{1/2}
    expect = abs(c - 1) * np.sqrt((X ** 2).sum(1).mean())
    assert D.w2(X, c * X) == pytest.approx(expect, rel=1e-9)
    x = rng.standard_normal(500)
    assert D.wasserstein_1d(x, c * x, 1) == pytest.approx(abs(c - 1) * np.abs(x).mean(), rel=1e-9)


def test_1d_sorted_formula_agrees_with_assignment_and_lp():
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(60), rng.exponential(size=60)
    for p in (1.0, 2.0):
        exact = D.wasserstein(x, y, p)
        assert D.wasserstein_1d(x, y, p) == pytest.approx(exact, rel=RT)
        sorted_form = (np.abs(np.sort(x) - np.sort(y)) ** p).mean() ** (1 / p)
        assert exact == pytest.approx(sorted_form, rel=RT)
    # unequal sizes and weights: quantile formula vs the LP (both SciPy and POT routes)
    y2 = rng.standard_normal(37)
    b = rng.uniform(0.1, 1.0, 37)
    q = D.wasserstein_1d(x, y2, 2, b=b)
    assert D.wasserstein(x, y2, 2, b=b, method="linprog") == pytest.approx(q, rel=1e-8)
    if D.have_pot():
        assert D.wasserstein(x, y2, 2, b=b, method="lp") == pytest.approx(q, rel=1e-8)


def test_plan_is_a_coupling_and_metric_axioms():
    rng = np.random.default_rng(4)
    X, Y, Z = (rng.standard_normal((30, 2)) for _ in range(3))
    W, plan = D.wasserstein(X, Y, 2, return_plan=True)
    assert np.allclose(plan.sum(1), 1 / 30) and np.allclose(plan.sum(0), 1 / 30)
    assert D.w2(X, Y) == pytest.approx(D.w2(Y, X), rel=RT)
    assert D.w2(X, Z) <= D.w2(X, Y) + D.w2(Y, Z) + 1e-12
    assert D.w2(X, X[::-1]) < 1e-7  # permutation of the same cloud (sqrt of a round-off level cost)
    assert D.w1(X, Y) <= D.w2(X, Y) + 1e-12  # Jensen: W_1 ≤ W_2


def test_bures_commuting_and_noncommuting():
    a, b = np.array([1.0, 4.0, 0.25]), np.array([9.0, 1.0, 0.25])
    expect = np.sqrt(((np.sqrt(a) - np.sqrt(b)) ** 2).sum() + 2.0 ** 2)
    got = D.bures_wasserstein([0, 0, 0], np.diag(a), [2, 0, 0], np.diag(b))
    assert got == pytest.approx(expect, rel=1e-12)
    # rotate both: BW is invariant under a common orthogonal change of basis
    Q, _ = np.linalg.qr(np.random.default_rng(5).standard_normal((3, 3)))
    got_r = D.bures_wasserstein([0, 0, 0], Q @ np.diag(a) @ Q.T, Q @ [2, 0, 0], Q @ np.diag(b) @ Q.T)
    assert got_r == pytest.approx(expect, rel=1e-10)
    # 1-D: |m1-m2|² + (s1 - s2)²
    assert D.bures_wasserstein([1.0], [[4.0]], [0.0], [[1.0]]) == pytest.approx(np.sqrt(2.0), rel=1e-12)


def test_bures_symmetric_and_stable_for_nearby_covariances():
    rng = np.random.default_rng(6)
    G = rng.standard_normal((4, 4))
    S = G @ G.T + 0.5 * np.eye(4)
    H = rng.standard_normal((4, 4))
    S2 = S + 1e-7 * (H + H.T)
    d12 = D.bures_wasserstein(np.zeros(4), S, np.zeros(4), S2)
    assert d12 == D.bures_wasserstein(np.zeros(4), S2, np.zeros(4), S)  # exact symmetry (averaged)
    # first order: BW(S, S + E) ≈ ‖E‖ in the metric tr(L E) / 2, L the Lyapunov solution S L + L S = E
    from scipy.linalg import solve_continuous_lyapunov

    E = S2 - S
    L = solve_continuous_lyapunov(S, E)
    # second-order expansion: BW²(S, S+E) = tr(L S L) + O(|E|³) with S L + L S = E (d = 1: e²/(4s));
    # tr(L S L) = ½ tr(L E) by the Lyapunov equation, two evaluations of the same quantity
    first = np.sqrt(0.5 * np.trace(L @ E))
    second = np.sqrt(np.trace(L @ S @ L))
    assert d12 == pytest.approx(second, rel=1e-5)  # O(|E|/|S|) = 1e-7 relative, far below 1e-5
    assert first == pytest.approx(second, rel=1e-6)  # same quantity: tr(LSL) = ½ tr(L E)
    # the naive trace formula would lose this: sqrt(eps·tr S) ~ 3e-8 is the size of its noise
    assert d12 > 1e-8


def test_bures_matches_exact_w2_of_transported_samples():
    """Independent route: samples X ~ N(m1,S1), Y = T(X - m1) + m2 with T the BW map (gradient of a convex
    function, so the identity pairing is optimal). Exact assignment W2 between the clouds must (a) find that
    pairing's cost and (b) agree with BW within 4 Monte-Carlo standard errors of the mean cost."""
    rng = np.random.default_rng(7)
    S1 = np.array([[2.0, 0.6], [0.6, 0.5]])
    S2 = np.array([[0.7, -0.3], [-0.3, 1.4]])
    m1, m2 = np.array([0.5, -1.0]), np.array([0.0, 1.0])
    from scipy.linalg import sqrtm

    r1 = np.real(sqrtm(S1))
    ir1 = np.linalg.inv(r1)
    T = ir1 @ np.real(sqrtm(r1 @ S2 @ r1)) @ ir1
    n = 800
    X = m1 + rng.standard_normal((n, 2)) @ np.linalg.cholesky(S1).T
    Y = (X - m1) @ T.T + m2
    costs = ((Y - X) ** 2).sum(1)
    w2 = D.w2(X, Y)
    assert w2 ** 2 == pytest.approx(costs.mean(), rel=1e-9)
    bw = D.bures_wasserstein(m1, S1, m2, S2)
    se = costs.std(ddof=1) / np.sqrt(n)
    assert abs(w2 ** 2 - bw ** 2) < 4 * se


def test_sliced_translation_and_bound():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((400, 3))
    v = np.array([1.0, -2.0, 0.5])
    r = D.sliced_wasserstein(X, X + v, rng=rng, n_proj=400)
    # SW_2² = E_θ <θ, v>² = |v|²/d exactly; the estimator's stderr is measured from the same directions
    assert abs(r.value - np.linalg.norm(v) / np.sqrt(3)) < 4 * r.stderr
    Y = rng.standard_normal((400, 3)) * [1.0, 2.0, 0.5]
    r2 = D.sliced_wasserstein(X, Y, rng=rng, n_proj=400)
    assert r2.lower_bound_w2 <= D.w2(X, Y) + 4 * np.sqrt(3) * r2.stderr


def test_entropic_bracket_contains_exact_and_shrinks():
    rng = np.random.default_rng(9)
    X = rng.standard_normal((150, 2))
    Y = rng.standard_normal((120, 2)) + [1.0, 0.0]
    exact = D.w2(X, Y) ** 2
    widths = []
    for eps in (0.2, 0.05):
        r = D.entropic_wasserstein(X, Y, eps=eps, debias=(eps == 0.05))
        assert r.converged
        assert r.lower - 1e-9 <= exact <= r.upper + 1e-9
        widths.append(r.upper - r.lower)
    assert widths[1] < widths[0]
    assert abs(r.divergence - exact) < abs(r.ot_eps - exact)  # debiasing helps


def test_entropic_blocked_equals_full_matrix(monkeypatch):
    rng = np.random.default_rng(10)
    X, Y = rng.standard_normal((90, 2)), rng.standard_normal((70, 2))
    full = D.entropic_wasserstein(X, Y, eps=0.1, debias=False)
    monkeypatch.setattr(D, "_FULL_COST_LIMIT", 0)
    blocked = D.entropic_wasserstein(X, Y, eps=0.1, debias=False, block=16)
    assert blocked.ot_eps == pytest.approx(full.ot_eps, rel=1e-9)


def test_conditional_wasserstein():
    rng = np.random.default_rng(11)
    s = np.repeat([0.0, 0.5, 1.0], [10, 20, 30])
    X = rng.standard_normal((60, 2))
    Y = X.copy()
    Y[s == 0.5] += [3.0, 4.0]  # translate one group: W_2^c² = λ(0.5)·25 = (20/60)·25
    assert D.conditional_wasserstein(X, Y, s) == pytest.approx(np.sqrt(25 * 20 / 60), rel=1e-9)
    # W^c ≥ W (conditioning restricts the couplings), and equality of groups by permutation inside groups
    Z = rng.standard_normal((60, 2))
    assert D.conditional_wasserstein(X, Z, s) >= D.w2(X, Z) - 1e-12
    perm = np.concatenate([np.flatnonzero(s == v)[::-1] for v in (0.0, 0.5, 1.0)])
    assert D.conditional_wasserstein(X, X[perm], s, positions_y=s[perm]) < 1e-7
    # one token per position: W^c_p^p = mean |x_i - y_i|^p
    t = np.linspace(0, 1, 60)
    assert D.conditional_wasserstein(X, Z, t, p=1) == pytest.approx(np.linalg.norm(X - Z, axis=1).mean())
    with pytest.raises(InputError, match="positions_y"):
        D.conditional_wasserstein(X, Z, s, positions_y=np.roll(t, 1))


def test_bad_input_names_field():
    with pytest.raises(InputError, match="^Y"):
        D.w2(np.zeros((3, 2)), np.zeros((3, 3)))
    with pytest.raises(InputError, match="^X"):
        D.w2([[np.nan, 0.0]], [[0.0, 0.0]])
    with pytest.raises(InputError, match="^p"):
        D.wasserstein([[0.0]], [[1.0]], p=0.5)
    with pytest.raises(InputError, match="^rng"):
        D.sliced_wasserstein([[0.0]], [[1.0]], rng=None)
    with pytest.raises(InputError, match="^S1"):
        D.bures_wasserstein([0, 0], [[1, 2], [0, 1]], [0, 0], np.eye(2))
    with pytest.raises(InputError, match="^b"):
        D.wasserstein([[0.0]], [[1.0], [2.0]], b=[1.0, -1.0])


def test_auto_route_for_large_n_agrees_with_assignment():
    # from n = 400 on, "auto" uses POT's network simplex when installed; both are exact solvers
    rng = np.random.default_rng(12)
    X, Y = rng.standard_normal((420, 2)), rng.standard_normal((420, 2)) + 0.3
    exact = D.wasserstein(X, Y, 2, method="assignment")
    assert D.wasserstein(X, Y, 2) == pytest.approx(exact, rel=1e-9)
