"""Glue: packing, engine-generated RHS vs the numeric tilt formulas, Sinkhorn closed form, blow-up time,
closed-form covariance, layers, and the ``tpde rhs`` command."""

import json
import zlib

import numpy as np
import pytest
from scipy.linalg import expm

from symbolic_tpde.cli import main as tpde_main
from symbolic_tpde.numerics.ode.numeric_matrix import sinkhorn_cross_cov
from symbolic_tpde.validate.oracles import affine_field
from symbolic_tpde.gaussian import (GaussianODE, pack_params, pack_state,
                                    unpack_state)
from symbolic_tpde.weights import Schedule, make_head, make_weights
from symbolic_tpde.symbolic.moments import param_vector


def rand_spd(rng, d):
    L = rng.normal(size=(d, d)) * 0.5
    return np.eye(d) + L @ L.T / d


def make(kind, d, rng, m=None, scale=0.4):
    g = lambda *s: rng.normal(size=s) * scale  # noqa: E731
    if kind == "l2":
        m = m or d
        return make_head("l2", Q=g(m, d), K=g(m, d), V=g(d, d), tau=float(rng.uniform(1, 2)))
    if kind == "custom":
        return make_head("custom", B=g(d, d), V=g(d, d), P=g(d, d), R=0.05 * g(d, d), p=g(d), r=g(d))
    if kind == "sinkhorn":
        return make_head("sinkhorn", A=g(d, d), V=g(d, d), epsilon=float(rng.uniform(0.5, 2)))
    return make_head(kind, A=g(d, d), V=g(d, d))


CASES = [("softmax",), ("l2",), ("linear",), ("custom",), ("softmax", "softmax"), ("sinkhorn",),
         ("l2", "linear", "ffn"), ("softmax", "ffn")]


def test_pack_unpack_roundtrip():
    rng = np.random.default_rng(0)
    a, S = rng.normal(size=3), rand_spd(rng, 3)
    y = pack_state(a, S)
    assert y.shape == (9,) and y[3] == S[0, 0] and y[4] == S[0, 1] and y[6] == S[1, 1]
    a2, S2 = unpack_state(y, 3)
    assert np.array_equal(a, a2) and np.array_equal(S, S2)
    A2, SS = unpack_state(np.stack([y, 2 * y]), 3)
    assert np.array_equal(SS[1], 2 * S)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("case", CASES, ids=["+".join(c) for c in CASES])
def test_generated_rhs_matches_numeric_tilt(case, d):
    """Independent route: numeric tilt formulas (numpy linear algebra) vs SymPy-derived generated code."""
    if case == ("sinkhorn",) and d == 3:
        pytest.skip("no entrywise Sinkhorn form at d = 3 (numeric-matrix path only)")
    rng = np.random.default_rng(zlib.crc32(repr((case, d)).encode()))
    heads = [make(k, d, rng, m=max(1, d - 1) if k == "l2" and "linear" in case else None)
             for k in case if k != "ffn"]
    ffn = {"W": rng.normal(size=(d, d)) * 0.3, "c": rng.normal(size=d)} if "ffn" in case else None
    w = make_weights(heads, ffn=ffn)
    ode = GaussianODE.from_weights(w, backend="numpy")
    assert np.array_equal(pack_params(ode.system, w), np.array(param_vector(ode.system, w)))
    for _ in range(3):
        a, S = rng.normal(size=d), rand_spd(rng, d)
        b, J = affine_field(w, a, S)
        ad_ref, Sd_ref = b + J @ a, J @ S + S @ J.T
        ad, Sd = ode.rhs_matrices(0.0, a, S)
        scale = 1 + np.max(np.abs(Sd_ref)) + np.max(np.abs(ad_ref))
        # two float64 evaluations of the same quantities by different routes (solves vs adjugates)
        assert np.max(np.abs(ad - ad_ref)) <= 1e-12 * scale
        assert np.max(np.abs(Sd - Sd_ref)) <= 1e-12 * scale


@pytest.mark.parametrize("d", [2, 3, 4])
def test_sinkhorn_cross_covariance_solves_first_order_condition(d):
    rng = np.random.default_rng(10 + d)
    for singular in (False, True):
        A = rng.normal(size=(d, d))
        if singular:
            A[:, 0] = 0.0  # A not invertible: the paper's A^{-T} form would fail, ours must not
        S, eps = rand_spd(rng, d), 0.7
        Ct = sinkhorn_cross_cov(A, S, eps)
        C = Ct.T
        resid = C - S @ (A / eps).T @ (S - Ct @ np.linalg.solve(S, C))
        assert np.max(np.abs(resid)) <= 1e-12 * (1 + np.max(np.abs(C)))
        # the plan covariance [[S, C], [Cᵀ, S]] must be positive semidefinite
        assert np.linalg.eigvalsh(np.block([[S, C], [Ct, S]])).min() > -1e-12


def test_sinkhorn_d3_numeric_matrix_mean_is_expm():
    rng = np.random.default_rng(3)
    w = make_weights([make("sinkhorn", 3, rng)])
    ode = GaussianODE.from_weights(w)
    assert ode.backend == "numeric-matrix"
    a0, S0 = rng.normal(size=3), rand_spd(rng, 3)
    sol = ode.integrate(a0, S0, 1.0, method="DOP853", rtol=1e-11, atol=1e-13)
    assert sol.status == "ok" and sol.backend == "numeric-matrix"
    V = w.heads[0].params["V"]
    # README Mathematics §4: the Sinkhorn mean decouples, alpha(t) = e^{tV} alpha0 (DOP853 order 8 at rtol 1e-11)
    assert np.max(np.abs(sol.alpha[-1] - expm(V) @ a0)) <= 1e-9


def test_softmax_identity_value_closed_form_and_blowup():
    rng = np.random.default_rng(4)
    d = 3
    A = rng.normal(size=(d, d)) * 0.5 + 0.5 * np.eye(d)  # A + Aᵀ has a positive eigenvalue: blow-up
    S0 = rand_spd(rng, d)
    w = make_weights([make_head("softmax", A=A, V=np.eye(d))])
    ode = GaussianODE.from_weights(w)
    assert np.linalg.eigvalsh(A + A.T).max() > 0
    lam_max = np.linalg.eigvalsh(np.linalg.cholesky(S0).T @ (A + A.T) @ np.linalg.cholesky(S0)).max()
    Tstar = 1 / lam_max  # README Mathematics §4 (λ of S0^{1/2}(A+Aᵀ)S0^{1/2}, same spectrum as Lᵀ(A+Aᵀ)L)
    T = 0.5 * Tstar
    sol = ode.integrate(np.zeros(d), S0, T)
    S_exact = np.linalg.inv(np.linalg.inv(S0) - T * (A + A.T))
    assert sol.status == "ok"
    assert np.max(np.abs(sol.Sigma[-1] - S_exact)) <= 1e-7 * np.max(np.abs(S_exact))  # rtol 1e-10 x growth
    sol = ode.integrate(np.zeros(d), S0, 2 * Tstar)
    assert sol.status == "blowup"
    # extrapolated from the growth law (numerics/ode/solve.py); its reported bar must cover the closed form
    assert abs(sol.blowup_time - Tstar) <= 1e-6 * Tstar
    assert abs(sol.blowup_time - Tstar) <= sol.blowup_time_error + 1e-14 * Tstar  # + float spacing of T*
    assert abs(sol.exponent - 1) < 1e-3  # Riccati law tr Σ ~ (T* - t)^-1
    assert np.all(np.isfinite(sol.Sigma)) and sol.y.shape == (len(sol.t), d + d * (d + 1) // 2)


def test_cli_and_api_report_the_same_blowup_time(tmp_path, capsys):
    """`tpde gaussian` and GaussianODE.integrate are one call: the blow-up times agree to round-off (they are
    the same function on the same inputs, so relative 1e-12 is generous).  softmax, d = 2, V = I: the closed
    form T* = 1/λ_max(Σ₀^{1/2}(A+Aᵀ)Σ₀^{1/2}) lies within the reported error bar (+ the float spacing of T*)."""
    from symbolic_tpde.inputs.scenario import load_scenario

    A = np.array([[0.6, 0.4], [-0.2, 0.1]])
    S0 = np.array([[0.9, 0.2], [0.2, 0.5]])
    assert np.linalg.eigvalsh(A + A.T).max() > 0
    data = {"attention": "softmax", "d": 2, "A": A.tolist(), "V": np.eye(2).tolist(), "alpha0": [0.3, -0.1],
            "Sigma0": S0.tolist(), "T": 20.0}
    path = _write(tmp_path, "blowup.json", data)
    assert tpde_main(["gaussian", "--scenario", path, "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    scn = load_scenario(path)
    api = GaussianODE.from_scenario(scn).integrate(scn.alpha0, scn.Sigma0, scn.T)
    assert cli["status"] == "blowup" and api.status == "blowup"
    assert abs(cli["blowup_time"] - api.blowup_time) <= 1e-12 * api.blowup_time
    assert cli["blowup_time_error"] == api.blowup_time_error
    w, Q = np.linalg.eigh(S0)
    R = Q @ np.diag(np.sqrt(w)) @ Q.T
    Tstar = 1 / np.linalg.eigvalsh(R @ (A + A.T) @ R).max()
    assert abs(api.blowup_time - Tstar) <= api.blowup_time_error + 4e-16 * Tstar
    assert api.blowup_time_error < 1e-8 * Tstar  # the bar is informative, not vacuous


def test_layers_restart_at_breakpoints():
    rng = np.random.default_rng(6)
    d = 2
    w1 = make_weights([make("softmax", d, rng)])
    w2 = make_weights([make("softmax", d, rng)])
    a0, S0 = rng.normal(size=d), rand_spd(rng, d)
    layered = GaussianODE.from_schedule(Schedule.layers([(0.4, w1), (1.0, w2)]))
    sol = layered.integrate(a0, S0, 1.0, t_eval=[0.2, 0.4, 1.0])
    assert np.allclose(sol.t, [0.2, 0.4, 1.0])
    s1 = GaussianODE.from_weights(w1).integrate(a0, S0, 0.4)
    s2 = GaussianODE.from_weights(w2).integrate(s1.alpha[-1], s1.Sigma[-1], 0.6)
    assert np.max(np.abs(sol.Sigma[-1] - s2.Sigma[-1])) <= 1e-8  # rtol 1e-10 integrations, O(1) values
    assert np.max(np.abs(sol.alpha[-1] - s2.alpha[-1])) <= 1e-8
    only1 = GaussianODE.from_weights(w1).integrate(a0, S0, 1.0)
    assert np.max(np.abs(only1.Sigma[-1] - sol.Sigma[-1])) > 1e-4  # the layer change matters
    assert np.array_equal(layered.params(0.5), pack_params(layered.system, w2))


def _write(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return str(p)


@pytest.mark.parametrize("kind,d", [("softmax", 2), ("l2", 3), ("custom", 2), ("linear", 3), ("sinkhorn", 2),
                                    ("sinkhorn", 3)])
def test_tpde_rhs_json(tmp_path, capsys, kind, d):
    rng = np.random.default_rng(d * 7 + len(kind))
    h = make(kind, d, rng)
    a0, S0 = rng.normal(size=d), rand_spd(rng, d)
    data = {"attention": kind, "d": d, "alpha0": a0.tolist(), "Sigma0": S0.tolist()}
    data.update({k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in h.params.items()})
    path = _write(tmp_path, f"{kind}.json", data)
    assert tpde_main(["rhs", "--scenario", path, "--backend", "numpy", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    b, J = affine_field(make_weights([h]), a0, S0)
    ref_a, ref_S = b + J @ a0, J @ S0 + S0 @ J.T
    scale = 1 + np.max(np.abs(ref_S))
    assert np.max(np.abs(np.array(out["alpha_dot"]) - ref_a)) <= 1e-12 * scale
    assert np.max(np.abs(np.array(out["Sigma_dot"]) - ref_S)) <= 1e-12 * scale
    assert out["backend"] == ("numeric-matrix" if (kind, d) == ("sinkhorn", 3) else "numpy")


def test_tpde_rhs_not_gaussian_preserving(tmp_path, capsys):
    d = 2
    data = {"attention": "sigmoid", "d": d, "A": np.eye(d).tolist(), "V": np.eye(d).tolist(), "b": 0.0,
            "alpha0": [0, 0], "Sigma0": np.eye(d).tolist()}
    assert tpde_main(["rhs", "--scenario", _write(tmp_path, "s.json", data), "--json"]) == 2
    cap = capsys.readouterr()
    assert "not Gaussian-preserving" in cap.err and cap.out == ""


def test_d1_closed_form():
    """README Mathematics §4, d = 1: s(t) = s0/(1 - 2vas0 t), α(t) = α0 e^{vt} (1 - 2vas0 t)^{-1/2}."""
    a, v, s0, al0, T = 0.7, 0.9, 0.5, 0.3, 0.6
    ode = GaussianODE.from_weights(make_weights([make_head("softmax", A=[[a]], V=[[v]])]))
    sol = ode.integrate([al0], [[s0]], T, t_eval=[T])
    q = 1 - 2 * v * a * s0 * T
    assert abs(sol.Sigma[-1, 0, 0] - s0 / q) <= 1e-8 * s0 / q      # rtol 1e-10 plus dense-output error
    assert abs(sol.alpha[-1, 0] - al0 * np.exp(v * T) / np.sqrt(q)) <= 1e-8


def test_tpde_rhs_backend_c_without_compiler(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CC", str(tmp_path / "no-cc"))
    d = 3
    data = {"attention": "linear", "d": d, "A": (0.1 * np.eye(d)).tolist(), "V": np.eye(d).tolist(),
            "ffn": {"W": np.eye(d).tolist(), "c": [0.0, 1.0, 2.0]}, "alpha0": [0, 0, 1],
            "Sigma0": np.eye(d).tolist()}
    path = _write(tmp_path, "lin.json", data)
    assert tpde_main(["rhs", "--scenario", path, "--backend", "c", "--json"]) == 2
    assert "unavailable" in capsys.readouterr().err
