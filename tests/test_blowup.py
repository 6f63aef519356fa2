"""Blow-up detection vs the symbolically derived closed forms (README Mathematics §4), and the `tpde gaussian` command."""

import json

import numpy as np
import pytest

from symbolic_tpde.analysis import closed_forms as cf
from symbolic_tpde.analysis.blowup import integrate_blowup
from symbolic_tpde.registry.layout import gaussian_size, trace_weights


def softmax_rhs(A, V):
    """Independent hand-written reference RHS (README Mathematics §3) in the packed Gaussian layout."""
    d = A.shape[0]
    iu = np.triu_indices(d)

    def f(t, y):
        a = y[:d]
        S = np.zeros((d, d))
        S[iu] = y[d:]
        S = S + S.T - np.diag(np.diag(S))
        M = V @ S @ A @ S
        return np.concatenate([V @ (a + S @ A @ a), (M + M.T)[iu]])

    return f


def pack(a, S):
    return np.concatenate([a, S[np.triu_indices(len(a))]])


def spd(rng, d):
    G = rng.normal(size=(d, d))
    return G @ G.T + 0.3 * np.eye(d)


@pytest.mark.parametrize("d", [1, 2])
def test_vi_closed_form_verified_symbolically(d):
    sol = cf.vi_solution(d)
    assert sol.verified_ode and sol.verified_initial and sol.verified_det


@pytest.mark.slow
def test_vi_closed_form_verified_symbolically_d3():
    sol = cf.vi_solution(3)
    assert sol.verified_ode and sol.verified_initial and sol.verified_det


def test_sigma_star_limit_symbolic_d2():
    assert cf.vi_limit_d2()


def test_d1_solution_symbolic_and_numeric():
    D = cf.d1_solution()
    assert D.verified
    v, a, s0, al0 = 0.7, 0.9, 1.3, 0.4
    T = cf.blowup_time_d1(v, a, s0)
    f = softmax_rhs(np.array([[a]]), np.array([[v]]))
    from scipy.integrate import solve_ivp

    t1 = 0.8 * T
    sol = solve_ivp(f, (0, t1), [al0, s0], method="DOP853", rtol=1e-12, atol=1e-14)
    # DOP853 at rtol 1e-12: relative error ~1e-11 at 80 % of the blow-up time
    assert abs(sol.y[1, -1] - D.s_num(t1, v, a, s0, al0)) < 1e-9 * abs(sol.y[1, -1])
    assert abs(sol.y[0, -1] - D.alpha_num(t1, v, a, s0, al0)) < 1e-9 * abs(sol.y[0, -1])
    assert cf.blowup_time_d1(v, -a, s0) == float("inf")


@pytest.mark.parametrize("d,seed", [(1, 1), (2, 2), (3, 3)])
def test_blowup_time_matches_closed_form_vi(d, seed):
    rng = np.random.default_rng(seed)
    S0 = spd(rng, d)
    A = rng.normal(size=(d, d)) + 0.5 * np.eye(d)
    # three routes to T*: derived polynomial (d <= 2), generalized eigenproblem, the paper's symmetric form
    w, Q = np.linalg.eigh(S0)
    R = Q @ np.diag(np.sqrt(w)) @ Q.T
    lam = np.linalg.eigvalsh(R @ (A + A.T) @ R).max()
    assert lam > 0
    T_math = 1 / lam
    T_eig = cf.blowup_time_vi(S0, A, use_polynomial=False)
    assert abs(T_eig - T_math) < 1e-12 * T_math
    if d <= 2:
        assert abs(cf.blowup_time_vi(S0, A) - T_math) < 1e-12 * T_math
    res = integrate_blowup(softmax_rhs(A, np.eye(d)), pack(rng.normal(size=d), S0), 10 * T_math,
                           gaussian_size(d))
    assert res.status == "blowup"
    err = abs(res.blowup_time - T_math)
    assert err < 1e-6 * T_math                       # the requirement
    assert err <= res.blowup_time_error + 1e-14 * T_math  # the reported bound holds
    assert abs(res.exponent - 1) < 1e-3              # Riccati growth law tr Σ ~ (T* - t)^-1


def test_blowup_time_matches_closed_form_d1_general_v():
    v, a, s0 = -0.6, -1.1, 0.8  # v a > 0: blows up
    res = integrate_blowup(softmax_rhs(np.array([[a]]), np.array([[v]])), np.array([0.5, s0]), 50.0,
                           trace_weights(1))
    T = cf.blowup_time_d1(v, a, s0)
    assert res.status == "blowup" and abs(res.blowup_time - T) < 1e-6 * T
    assert abs(res.blowup_time - T) <= res.blowup_time_error + 1e-14


def test_closed_form_trajectory_matches_numeric_before_blowup():
    rng = np.random.default_rng(5)
    S0, A = spd(rng, 2), rng.normal(size=(2, 2)) + np.eye(2)
    T = cf.blowup_time_vi(S0, A)
    from scipy.integrate import solve_ivp

    sol = solve_ivp(softmax_rhs(A, np.eye(2)), (0, 0.9 * T), pack(np.zeros(2), S0), method="DOP853",
                    rtol=1e-12, atol=1e-14)
    ST = cf.sigma_vi(0.9 * T, S0, A)
    num = np.array([[sol.y[2, -1], sol.y[3, -1]], [sol.y[3, -1], sol.y[4, -1]]])
    assert np.abs(num - ST).max() < 1e-8 * np.abs(ST).max()


@pytest.mark.parametrize("p", [1.0, 0.5, 2.0])
def test_generic_power_law_blowup(p):
    """y' = p y^(1+1/p) is solved by y = (T* - t)^-p: blow-up at T* = y0^(-1/p) with exponent p."""
    y0 = 2.0
    f = lambda t, y: p * y ** (1 + 1 / p)
    res = integrate_blowup(f, np.array([y0]), 10.0, np.array([1.0]))
    T = y0 ** (-1 / p)
    assert res.status == "blowup"
    assert abs(res.blowup_time - T) < 1e-6 * T and abs(res.exponent - p) < 1e-3 * p


def test_exponential_growth_is_not_blowup():
    res = integrate_blowup(lambda t, y: 3.0 * y, np.array([1.0]), 12.0, np.array([1.0]))
    assert res.status == "ok" and res.blowup_time is None and np.isclose(res.y[0], np.exp(36), rtol=1e-8)
    res = integrate_blowup(lambda t, y: 3.0 * y, np.array([1.0]), 200.0, np.array([1.0]))
    assert res.status == "overflow" and res.blowup_time is None and np.isfinite(res.y).all()


@pytest.mark.parametrize("kind", ["l2", "sinkhorn"])
def test_l2_sinkhorn_never_blow_up_where_softmax_does(kind):
    from symbolic_tpde.gaussian import GaussianODE
    from symbolic_tpde.weights import make_head, make_weights

    A = np.array([[1.0, 0.3], [0.1, 0.8]])  # A + Aᵀ ≻ 0, V = I: softmax blows up
    S0 = np.array([[0.6, 0.2], [0.2, 0.5]])
    soft = GaussianODE.from_weights(make_weights([make_head("softmax", A=A, V=np.eye(2))]))
    Tsm = cf.blowup_time_vi(S0, A)
    rs = integrate_blowup(soft.rhs, pack(np.zeros(2), S0), 5.0, gaussian_size(2))
    assert rs.status == "blowup" and abs(rs.blowup_time - Tsm) < 1e-6 * Tsm
    kw = dict(Q=A, K=np.eye(2), tau=1.0) if kind == "l2" else dict(A=A)
    ode = GaussianODE.from_weights(make_weights([make_head(kind, V=np.eye(2), **kw)]))
    r = integrate_blowup(ode.rhs, pack(np.zeros(2), S0), 5.0, gaussian_size(2))
    assert r.status == "ok" and r.y[2] + r.y[4] > 0 and r.blowup_time is None


def test_cli_gaussian_json(tmp_path, capsys):
    from symbolic_tpde.cli import main

    A = [[0.5, 0.3], [-0.1, 0.2]]
    S0 = [[1.0, 0.3], [0.3, 0.6]]
    scn = {"attention": "softmax", "d": 2, "A": A, "V": [[1, 0], [0, 1]], "alpha0": [0.1, 0.2],
           "Sigma0": S0, "T": 10}
    p = tmp_path / "s.json"
    p.write_text(json.dumps(scn))
    assert main(["gaussian", "--scenario", str(p), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    T = cf.blowup_time_vi(np.array(S0), np.array(A))
    assert out["status"] == "blowup" and abs(out["blowup_time"] - T) < 1e-6 * T
    assert set(out) >= {"t", "alpha", "Sigma", "status", "blowup_time", "blowup_time_error"}
    assert main(["gaussian", "--scenario", str(p), "--T", "-1", "--json"]) == 2
    scn["T"] = 0.5
    p.write_text(json.dumps(scn))
    assert main(["gaussian", "--scenario", str(p), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ok" and out["t"] == 0.5 and out["blowup_time"] is None
    assert np.allclose(out["Sigma"], cf.sigma_vi(0.5, np.array(S0), np.array(A)), rtol=1e-9)


def test_stiff_problem_reports_stalled_instead_of_hanging():
    """An explicit method on y' = -1e7 (y - cos t) needs ~1e7 steps: the evaluation budget stops it."""
    res = integrate_blowup(lambda t, y: -1e7 * (y - np.cos(t)), np.array([1.0]), 10.0, np.array([1.0]),
                           max_nfev=20_000)
    assert res.status == "stalled" and 0 < res.t < 10.0 and res.blowup_time is None
