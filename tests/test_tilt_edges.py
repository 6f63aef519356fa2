"""Tilt existence at its edges (issue 11: "the same for every kind with conditions, ℓ2 and FFN edge cases
included"); ``GaussianODE.condition_values`` / ``check_tilt`` (symbolic_tpde/gaussian.py), ``OdeSystem.existence``.

The Gaussian tilt of a head with key-quadratic block ``R`` (``log k = xᵀBy + yᵀRy + …``) exists iff
``Σ⁻¹ - R - Rᵀ ≻ 0``; the package monitors ``λ_min(Σ - Σ(R + Rᵀ)Σ)`` (same sign, finite at ``Σ → 0``).

* ℓ2, ``exp(-‖Qx - Ky‖²/τ)``: ``R = -KᵀK/τ`` (MATH.md §3), so for the admissible ``τ > 0`` the tilted
  precision ``Σ⁻¹ + (2/τ)KᵀK`` is always positive definite: an ℓ2 head whose tilt fails at ``Σ₀`` does not
  exist.  What is tested: the condition is reported per ℓ2 head and equals the closed form
  ``λ_min(Σ + (2/τ)ΣKᵀKΣ) > 0`` (even for a nearly singular ``Σ``), and the only way out, ``τ <= 0``, is
  refused naming ``tau``.  The ℓ2 kernel continued to ``τ < 0`` is written as the equivalent custom head
  (``B = (2/τ)QᵀK``, ``R = -KᵀK/τ``, ``P`` cancels): first checked to reproduce the ℓ2 ODE at ``τ > 0``, then
  at ``τ < 0`` refused at ``Σ₀`` (exit 2, naming the condition and its smallest eigenvalue) and stopped with
  ``tilt-ceased`` at the crossing time of the closed form.
* FFN (``W x + c``): no condition of its own (it adds ``WΣ + ΣWᵀ`` to ``dΣ/dt``); the heads' conditions are
  unchanged and still enforced, the crossing time (now without closed form) checked against a quadrature of
  ``dt/dΣ`` of the hand-derived scalar ODE.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from symbolic_tpde.cli import main
from symbolic_tpde.gaussian import GaussianODE, pack_state
from symbolic_tpde.inputs.scenario import load_scenario


def _ode(tmp_path, scn, name="s.json"):
    f = tmp_path / name
    f.write_text(json.dumps(scn))
    return f, GaussianODE.from_scenario(load_scenario(str(f), need_T=False), backend="numpy")


def _spd(rng, d, cond=10.0):
    Qm, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return Qm @ np.diag(np.geomspace(1.0, 1.0 / cond, d)) @ Qm.T


def _l2_as_custom(Q, K, V, tau):
    """The custom head of the ℓ2 exponent -‖Qx - Ky‖²/τ = xᵀ(2QᵀK/τ)y - yᵀ(KᵀK/τ)y - xᵀQᵀQx/τ (the query
    term cancels in the softmax normalisation)."""
    Q, K = np.asarray(Q, float), np.asarray(K, float)
    return {"B": (2 / tau * Q.T @ K).tolist(), "R": (-K.T @ K / tau).tolist(), "V": np.asarray(V).tolist()}


L2 = {"Q": [[0.8, -0.3], [0.2, 0.5]], "K": [[0.6, 0.1], [-0.4, 0.9]], "V": [[1.0, 0.2], [-0.1, 0.7]], "tau": 1.5}


# ---------------------------------------------------------------------------------------------- ℓ2 (τ > 0)
def test_l2_condition_is_reported_and_matches_the_closed_form(tmp_path):
    """One condition per ℓ2 head, = λ_min(Σ + (2/τ)ΣKᵀKΣ) (numpy, not the derived system) to 1e-12 relative
    (a 2x2 symmetric eigenvalue: a few ulps of the entries, which are O(1)), positive for Σ of condition 1e8."""
    rng = np.random.default_rng(11)
    _, ode = _ode(tmp_path, {"attention": "l2", **L2, "alpha0": [0.1, -0.2], "Sigma0": [[1.0, 0.0], [0.0, 1.0]]})
    K, tau = np.array(L2["K"]), L2["tau"]
    for cond in (1.0, 1e3, 1e8):
        for _ in range(3):
            S = _spd(rng, 2, cond) * rng.uniform(0.1, 10)
            vals = ode.condition_values(0.0, pack_state(np.zeros(2), S))
            ref = np.linalg.eigvalsh(S + 2 / tau * S @ K.T @ K @ S)[0]
            assert vals.shape == (1,) and vals[0] > 0
            assert vals[0] == pytest.approx(ref, rel=1e-12, abs=1e-15 * np.abs(S).max())


def test_l2_is_the_custom_head_with_b_and_r_of_its_exponent(tmp_path):
    """Independent route for both derivations: the ℓ2 ODE and that of the custom head with the same exponent
    agree (rhs and condition) at random states, to 1e-12 relative (round-off of two generated codes)."""
    _, ode_l2 = _ode(tmp_path, {"attention": "l2", **L2, "alpha0": [0.0, 0.0], "Sigma0": np.eye(2).tolist()})
    custom = _l2_as_custom(L2["Q"], L2["K"], L2["V"], L2["tau"])
    _, ode_c = _ode(tmp_path, {"attention": "custom", **custom, "alpha0": [0.0, 0.0],
                               "Sigma0": np.eye(2).tolist()}, "c.json")
    rng = np.random.default_rng(5)
    for _ in range(4):
        a, S = rng.normal(size=2), _spd(rng, 2, 20.0)
        y = pack_state(a, S)
        assert np.allclose(ode_l2.rhs(0.0, y), ode_c.rhs(0.0, y), rtol=1e-12, atol=1e-13)
        assert np.allclose(ode_l2.condition_values(0.0, y), ode_c.condition_values(0.0, y), rtol=1e-12)


@pytest.mark.parametrize("cmd", ["rhs", "gaussian"])
@pytest.mark.parametrize("tau", [0.0, -1.0])
def test_l2_with_non_positive_tau_is_refused_naming_tau(tmp_path, capsys, cmd, tau):
    f = tmp_path / "l2.json"
    f.write_text(json.dumps({"attention": "l2", **dict(L2, tau=tau), "alpha0": [0, 0], "Sigma0": [[1, 0], [0, 1]],
                             "T": 1.0}))
    assert main([cmd, "--scenario", str(f), "--backend", "numpy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.match(rf"tpde {cmd}: error: tau: must be .*> 0", err[0]), err


# ------------------------------------------------------------------- the ℓ2 kernel at τ < 0 (custom form)
#: 2-d ℓ2 exponent at τ = -1: R = KᵀK with K = diag(1, 0.2); the tilt exists iff Σ⁻¹ ≻ 2KᵀK
NEG = _l2_as_custom([[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 0.2]], [[1.0, 0.0], [0.0, 1.0]], -1.0)
SIGMA_BAD = [[1.0, 0.3], [0.3, 0.8]]


def _smallest_in_message(err: str) -> float:
    m = re.search(r"smallest eigenvalue of Σ - Σ\(R \+ Rᵀ\)Σ: (-?[0-9.e+-]+)\)", err)
    assert m, err
    return float(m.group(1))


@pytest.mark.parametrize("cmd", ["rhs", "gaussian"])
@pytest.mark.parametrize("ffn", [False, True])
def test_tilt_missing_at_sigma0_is_refused_with_its_smallest_eigenvalue(tmp_path, capsys, cmd, ffn):
    """Exit 2, one line naming ``Sigma0`` and the condition; the eigenvalue printed (3 significant digits)
    is that of Σ₀ - 2Σ₀RΣ₀ computed here with numpy.  With an FFN added, the same refusal (it has no
    condition) and an ℓ2 head beside it changes nothing (its condition is positive)."""
    scn = {"attention": "custom", "heads": [dict(NEG)], "alpha0": [0.1, 0.0], "Sigma0": SIGMA_BAD, "T": 1.0}
    if ffn:
        scn["heads"].append({"attention": "l2", **L2})
        scn["ffn"] = {"W": [[-0.3, 0.1], [0.0, 0.2]], "c": [0.1, -0.1]}
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(scn))
    assert main([cmd, "--scenario", str(f), "--backend", "numpy", "--json"]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert cap.out == "" and len(err) == 1
    assert err[0].startswith(f"tpde {cmd}: error: Sigma0: the Gaussian tilt does not exist")
    assert "Σ⁻¹ - R - Rᵀ is not positive definite" in err[0]
    S, R = np.array(SIGMA_BAD), np.array(NEG["R"])
    ref = np.linalg.eigvalsh(S - S @ (R + R.T) @ S)[0]
    assert ref < 0
    assert _smallest_in_message(err[0]) == pytest.approx(ref, rel=5e-3)   # printed with 3 significant digits


def _crossing_closed_form(b, r, v, s0):
    """d = 1 custom head, α-free covariance ODE dΣ/dt = 2vbΣ²/(1 - 2rΣ) (the tilted covariance
    Σ/(1 - 2rΣ) gives J = vbΣ/(1 - 2rΣ), dΣ/dt = 2JΣ); separating, d(-1/Σ - 2r ln Σ) = 2vb dt, so Σ reaches
    the boundary Σ* = 1/(2r) at t* = (1/s0 - 2r + 2r ln(2r s0)) / (2vb)."""
    return (1 / s0 - 2 * r + 2 * r * math.log(2 * r * s0)) / (2 * v * b)


def test_scalar_tilt_ode_is_the_derived_one(tmp_path):
    """The hand formula behind the closed form is the generated ODE (d = 1, at several Σ; 1e-12 relative)."""
    q, k, tau = 1.0, 1.0, -2.0     # ℓ2 exponent at τ = -2: b = 2qk/τ = -1, r = -k²/τ = 0.5
    c = _l2_as_custom([[q]], [[k]], [[-1.0]], tau)
    _, ode = _ode(tmp_path, {"attention": "custom", **c, "alpha0": [0.0], "Sigma0": [[0.5]]})
    b, r, v = c["B"][0][0], c["R"][0][0], -1.0
    for s in (0.1, 0.5, 0.9):
        _, Sd = ode.rhs_matrices(0.0, np.zeros(1), np.array([[s]]))
        assert Sd[0, 0] == pytest.approx(2 * v * b * s * s / (1 - 2 * r * s), rel=1e-12)


@pytest.mark.parametrize("method,rtol", [("DOP853", 1e-12), ("dopri5", 1e-10), ("LSODA", 1e-12)])
def test_crossing_mid_run_reports_tilt_ceased_at_the_closed_form_time(tmp_path, method, rtol):
    """ℓ2 exponent at τ = -2 (q = k = 1, V = -1: vb = 1 > 0, Σ grows), Σ₀ = 0.5, boundary Σ* = 1: t* from
    the closed form.  Tolerance: the run stops at the root of the condition or where the step size collapses
    with the condition ≤ 1e-3 of its scale; near Σ*, Σ* - Σ ∝ (t* - t)^{1/2}, so the gap in t is quadratic in
    the remaining condition (< 1e-12 here), and the integration error of t is ≲ 1000·rtol·t* (a generous
    multiple of the tolerance; measured: 1e-14 for DOP853, 7e-11 for dopri5 at 1e-10, 2e-11 for LSODA)."""
    c = _l2_as_custom([[1.0]], [[1.0]], [[-1.0]], -2.0)
    b, r, v, s0 = c["B"][0][0], c["R"][0][0], -1.0, 0.5
    tstar = _crossing_closed_form(b, r, v, s0)
    assert 0 < tstar < 1
    _, ode = _ode(tmp_path, {"attention": "custom", **c, "alpha0": [0.0], "Sigma0": [[s0]]})
    sol = ode.integrate([0.0], [[s0]], 2.0, method=method, rtol=rtol)
    assert sol.status == "tilt-ceased"
    assert abs(sol.t[-1] - tstar) <= 1000 * rtol * tstar
    assert [e.kind for e in sol.events][-1] == "tilt-ceased"
    assert sol.Sigma[-1][0, 0] == pytest.approx(1 / (2 * r), rel=1e-5)   # at the boundary (sqrt approach)


def test_crossing_with_ffn_matches_a_quadrature_of_dt_dsigma(tmp_path, capsys):
    """FFN ``W = w``: dΣ/dt = f(Σ) = 2vbΣ²/(1 - 2rΣ) + 2wΣ (hand-derived; checked against the generated rhs),
    no closed form: t* = ∫_{s0}^{Σ*} dΣ / f(Σ), whose integrand (1 - 2rΣ)/(2vbΣ² + 2wΣ(1 - 2rΣ)) is smooth
    up to Σ* (scipy quad, error < 1e-12).  The run through ``tpde gaussian`` reports tilt-ceased there (same
    tolerance argument as above, DOP853 at rtol 1e-12), exit 0; the condition is the head's alone."""
    from scipy.integrate import quad

    c = _l2_as_custom([[1.0]], [[1.0]], [[-1.0]], -2.0)
    b, r, v, w, s0 = c["B"][0][0], c["R"][0][0], -1.0, -0.4, 0.5
    scn = {"attention": "custom", "heads": [c], "ffn": {"W": [[w]], "c": [0.2]}, "alpha0": [0.3],
           "Sigma0": [[s0]], "T": 3.0}
    f, ode = _ode(tmp_path, scn)
    _, ode_nf = _ode(tmp_path, {k: x for k, x in scn.items() if k != "ffn"}, "nf.json")   # the head alone

    def fS(s):
        return 2 * v * b * s * s / (1 - 2 * r * s) + 2 * w * s

    for s in (0.3, 0.6, 0.95):
        y = pack_state(np.array([0.3]), np.array([[s]]))
        assert ode.rhs_matrices(0.0, np.array([0.3]), np.array([[s]]))[1][0, 0] == pytest.approx(fS(s), rel=1e-12)
        assert np.array_equal(ode.condition_values(0.0, y), ode_nf.condition_values(0.0, y))   # FFN: none
        assert ode.condition_values(0.0, y).shape == (1,)
    sstar = 1 / (2 * r)
    assert all(fS(s) > 0 for s in np.linspace(s0, sstar * (1 - 1e-9), 50))   # Σ increases all the way
    tstar, qerr = quad(lambda s: (1 - 2 * r * s) / (2 * v * b * s * s + 2 * w * s * (1 - 2 * r * s)), s0, sstar,
                       epsabs=1e-14, epsrel=1e-13)
    assert qerr < 1e-12 and 0 < tstar < 3.0
    rc = main(["gaussian", "--scenario", str(f), "--backend", "numpy", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["status"] == "tilt-ceased"
    assert abs(res["t"] - tstar) <= 1000 * 1e-12 * tstar + 1e-12
