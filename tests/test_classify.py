"""`tpde classify` and the linearised flow at Σ* (README Mathematics §4; issue 13 items 5-6)."""

import json

import numpy as np

from symbolic_tpde import make_head, make_weights
from symbolic_tpde.analysis.closed_forms import blowup_time_vi, sigma_star_vi
from symbolic_tpde.analysis.clustering import covariance_closed, linearised_covariance_flow
from symbolic_tpde.cli import main
from symbolic_tpde.gaussian import GaussianODE

A_RANK1 = np.array([[-0.5, 0.3], [-0.3, 0.0]])
S0 = np.array([[1.0, 0.2], [0.2, 0.5]])


def _scenario(tmp_path, A, V=((1, 0), (0, 1))):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"attention": "softmax", "A": np.asarray(A).tolist(), "V": [list(r) for r in V],
                             "alpha0": [0.3, -0.2], "Sigma0": S0.tolist(), "T": 1.0}))
    return str(p)


def test_classify_rank_one_limit_against_closed_form(tmp_path, capsys):
    assert main(["classify", "--scenario", _scenario(tmp_path, A_RANK1), "--json", "--T", "1e4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "rank" and out["rank"] == 1 and out["covariance_only"] and out["source"] == "theorem"
    # V = I: the limit itself (closed form), not Σ(T) projected; reference by the explicit formula
    U = np.array([[0.0], [1.0]])                                   # ker(A + Aᵀ) = span(e₁)
    ref = U @ np.linalg.inv(U.T @ np.linalg.inv(S0) @ U) @ U.T
    assert np.abs(np.array(out["Sigma_star"]) - ref).max() < 1e-14
    assert out["rate"]["exponent"] == -1.0
    assert out["linearisation"]["hyperbolic"] is False


def test_classify_blowup_time_matches_closed_form(tmp_path, capsys):
    A = np.array([[0.3, 0.1], [0.0, 0.2]])
    assert main(["classify", "--scenario", _scenario(tmp_path, A), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "blowup"
    assert abs(out["blowup_time"] - blowup_time_vi(S0, A)) <= out["blowup_time_error"] + 1e-12


def test_classify_refuses_token_options_for_a_scenario_in_rd(tmp_path, capsys):
    """--n/--seed draw tokens for sphere scenarios; a scenario in R^d is classified from its moment ODE, so they
    were silently ignored (found by fuzz_cli --stream new --seed 4242, case 548: --n 0 accepted)."""
    for opt in (["--n", "0"], ["--seed", "3"]):
        assert main(["classify", "--scenario", _scenario(tmp_path, A_RANK1), *opt]) == 2
        assert capsys.readouterr().err.startswith(f"tpde classify: error: {opt[0][2:]}")


def test_linearisation_at_the_vi_limit_is_zero_and_elsewhere_not():
    """V = I: dΣ/dt = Σ(A + Aᵀ)Σ, linearisation δ ↦ δSΣ* + Σ*Sδ with SΣ* = 0 at the closed-form limit, so the
    operator vanishes (round-off: float64 products of O(1) entries, 1e-14).  At a non-limit point it is
    2 Σ-scaled and not zero."""
    ode = GaussianODE.from_weights(make_weights([make_head("softmax", A=A_RANK1, V=np.eye(2))]))
    S_star, _ = sigma_star_vi(S0, A_RANK1)
    J, ev = linearised_covariance_flow(ode, S_star)
    assert np.abs(J).max() < 1e-14 and np.abs(ev).max() < 1e-14
    J1, ev1 = linearised_covariance_flow(ode, S0)
    S = A_RANK1 + A_RANK1.T
    # independent check: the operator δ ↦ δSΣ₀ + Σ₀Sδ applied to E₀₀ gives its first packed column
    E = np.array([[1.0, 0.0], [0.0, 0.0]])
    M = E @ S @ S0 + S0 @ S @ E
    assert np.allclose(J1[:, 0], [M[0, 0], M[0, 1], M[1, 1]], atol=1e-13)


def test_covariance_closed_is_read_from_the_derived_system():
    soft = GaussianODE.from_weights(make_weights([make_head("softmax", A=A_RANK1, V=np.eye(2))]))
    lin = GaussianODE.from_weights(make_weights([make_head("linear", A=A_RANK1, V=np.eye(2))]))
    assert covariance_closed(soft) and not covariance_closed(lin)    # linear: J = V(Σ + ααᵀ)A (README Math §3)
