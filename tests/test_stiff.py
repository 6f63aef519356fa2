"""Issue 30 item 2, the stiff case: ``tpde gaussian`` goes on where an explicit run is stability-bound.

A softmax covariance collapsing onto rank one, ``Σ ≈ s·uuᵀ`` with ``uᵀAu → 0``, relaxes onto that manifold at
a rate ``~ s·|uᵀ(A + Aᵀ)Vu|`` (thousands) while the state itself moves at rates ``≪ 1``: an explicit step is
bounded by stability.  The references here are written independently of the package: the covariance equation
``dΣ/dt = VΣAΣ + ΣAᵀΣVᵀ`` on the full ``d × d`` matrix, integrated by scipy's DOP853 (explicit, so slow but
free of the package's stiff machinery).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from symbolic_tpde import make_head, make_weights
from symbolic_tpde.gaussian import GaussianODE

#: d = 2, V = I + 0.4·skew, A with indefinite symmetric part (drawn once, rounded to one decimal: seed 2, draw 7 of
#: a search over such cases): Σ collapses onto rank one by t ≈ 1.6, where the Jacobian's eigenvalue -2.5e3 stands
#: beside the state's rate 4e-9 (a fixed point on the rank-one manifold; fuzz seed 7301 case 14 drifts along it)
_V = [[1.0, 0.4], [-0.4, 1.0]]
_A = [[-0.1, -0.1], [-0.1, 0.3]]
_S0 = [[8.11, -2.04], [-2.04, 1.55]]


def _explicit_reference(V, A, S0, T, rtol=1e-11):
    from scipy.integrate import solve_ivp

    V, A, S0 = (np.asarray(x, float) for x in (V, A, S0))
    d = V.shape[0]

    def rhs(t, z):
        S = z.reshape(d, d)
        J = V @ S @ A
        return (J @ S + S @ J.T).ravel()

    sol = solve_ivp(rhs, (0, T), S0.ravel(), method="DOP853", rtol=rtol, atol=1e-14)
    assert sol.status == 0
    return sol.y[:, -1].reshape(d, d)


def _weights(seed):
    rng = np.random.default_rng(seed)
    d = 3
    return d, rng, make_weights([make_head("custom", B=rng.normal(size=(d, d)),
                                           R=-0.3 * np.eye(d) + 0.05 * rng.normal(size=(d, d)),
                                           r=rng.normal(size=d), V=rng.normal(size=(d, d))),
                                 make_head("softmax", A=rng.normal(size=(d, d)), V=rng.normal(size=(d, d)))],
                                ffn={"W": rng.normal(size=(d, d)), "c": rng.normal(size=d)})


@pytest.mark.parametrize("freeze_alpha", [False, True])
def test_matrix_jacobian_is_the_derivative_of_the_matrix_form(freeze_alpha):
    """The exact Jacobian (custom head with M ≠ 0 and r ≠ 0, softmax head, FFN; in the original coordinates and in
    a rotated frame) against central differences of the matrix form: agreement to 1e-7 of its size (the
    difference quotient's error, h² f''' ~ 1e-10 plus round-off eps·|f|/h ~ 1e-10, at h = 1e-5)."""
    from symbolic_tpde.gaussian.matrix_form import frozen_alpha, matrix_jacobian, matrix_rhs
    from symbolic_tpde.registry import layout

    d, rng, w = _weights(3)
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    G = rng.normal(size=(d, d))
    y = layout.pack(rng.normal(size=d), G @ G.T + 0.5 * np.eye(d))
    for frame in (None, Q):
        if frame is None:
            f = matrix_rhs(w, d)[0]
        else:                        # the rotated equation: y ↦ R f(Rᵀ y) with R the frame's action on the layout
            base = matrix_rhs(w, d)[0]

            def f(t, z, base=base):
                a, S = layout.unpack(z, d)
                fa, fS = layout.unpack(base(t, layout.pack(Q @ a, Q @ S @ Q.T)), d)
                return layout.pack(Q.T @ fa, Q.T @ fS @ Q)
        f = frozen_alpha(f, d) if freeze_alpha else f
        jac = matrix_jacobian(w, d, freeze_alpha=freeze_alpha, frame=frame)(0.0, y)
        fd = np.empty_like(jac)
        for j in range(y.size):
            e = np.zeros(y.size)
            e[j] = 1e-5
            fd[:, j] = (f(0.0, y + e) - f(0.0, y - e)) / 2e-5
        assert np.abs(jac - fd).max() <= 1e-7 * np.abs(fd).max(), np.abs(jac - fd).max()
        if freeze_alpha:
            assert not jac[:d].any() and not jac[:, :d].any()


def test_extended_form_is_the_matrix_form_and_rotates_covariantly():
    """The extended-precision form equals the matrix form at a well-conditioned state (1e-13 relative: two
    evaluations of one formula, one rounded at the end), its rotated version is ``Qᵀ f(QΣQᵀ) Q``, and heads with
    ``M ≠ 0`` have none (they need a solve)."""
    from symbolic_tpde.gaussian.matrix_form import extended_matrix_rhs, matrix_rhs
    from symbolic_tpde.registry import layout

    rng = np.random.default_rng(5)
    d = 3
    w = make_weights([make_head("softmax", A=rng.normal(size=(d, d)), V=rng.normal(size=(d, d)))],
                     ffn={"W": rng.normal(size=(d, d)), "c": rng.normal(size=d)})
    G = rng.normal(size=(d, d))
    a, S = rng.normal(size=d), G @ G.T + 0.5 * np.eye(d)
    ref = matrix_rhs(w, d)[0](0.0, layout.pack(a, S))
    assert np.allclose(extended_matrix_rhs(w, d)(0.0, layout.pack(a, S)), ref, rtol=1e-13,
                       atol=1e-13 * np.abs(ref).max())
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    fa, fS = layout.unpack(ref, d)
    got = extended_matrix_rhs(w, d, frame=Q)(0.0, layout.pack(Q.T @ a, Q.T @ S @ Q))
    assert np.allclose(got, layout.pack(Q.T @ fa, Q.T @ fS @ Q), rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    assert extended_matrix_rhs(_weights(3)[2], d) is None


def test_a_stiff_rank_one_collapse_goes_on_implicitly_and_agrees_with_an_explicit_run(monkeypatch):
    """The regression of the stiff switch, on a case of its own (module constants): ``gaussian`` leaves the
    explicit run where its steps are stability-bound and reaches T = 20 in ~1.1e4 evaluations (measured 11 326),
    where the explicit run alone needs 1.7e5 (measured 173 629) and, held to three times the switched run's
    evaluations, stalls short of T.  Σ(T) agrees with the independent explicit DOP853 reference to 1e-10 of ‖Σ‖
    (both rtol ≤ 1e-11 per step at a stable fixed point, whose contraction damps the step errors; measured
    3e-12 against the reference at rtol 1e-11, 8e-13 at 1e-13)."""
    from symbolic_tpde.gaussian import stiff

    T = 20.0
    ode = GaussianODE.from_weights(make_weights([make_head("softmax", A=np.array(_A), V=np.array(_V))]))
    sol = ode.integrate(np.zeros(2), _S0, T)
    assert str(sol.status) == "ok" and sol.t[-1] == T, sol.message
    assert "stability-bound" in sol.message and "LSODA" in sol.message and "eigenframe" in sol.message, sol.message
    assert sol.nfev < 30_000, sol.nfev
    ref = _explicit_reference(_V, _A, _S0, T)
    lam = np.linalg.eigvalsh(ref)
    assert lam[0] < 1e-12 * lam[1]                                  # the class: collapsed onto rank one
    assert np.abs(sol.Sigma[-1] - ref).max() <= 1e-10 * np.abs(ref).max(), (sol.Sigma[-1], ref)
    monkeypatch.setattr(stiff, "STIFF_STEPS", 10**9)                     # the former path: explicit throughout
    old = ode.integrate(np.zeros(2), _S0, T, blowup=False, max_nfev=3 * sol.nfev)
    assert str(old.status) == "stalled" and old.t[-1] < T, old.message


def test_stability_bound_needs_a_sustained_stretch_and_a_slow_state():
    """The detector (a stop condition, one call per accepted step): a fast decayed mode (λ = -1e4 beside a state
    rate 1e-2) with steps at h·|λ| = 1 (≥ STIFF_STEP = 0.1) fires after exactly ``steps`` such steps and stays
    fired from that time on;
    the same steps on a state moving as fast as its eigenvalue (a blow-up's regime) never fire, nor steps
    accuracy-bound at h·|λ| = 0.05."""
    from symbolic_tpde.gaussian.stiff import StabilityBound

    lam = np.array([-0.01, -1e4])

    def run(f, h, n):
        det = StabilityBound(f, lambda t, y: np.diag(lam), steps=50)
        y = np.array([1.0, 1e-9])
        vals = [float(det(k * h, y)[0]) for k in range(n)]
        return det, vals

    det, vals = run(lambda t, y: lam * y, 1e-4, 60)
    assert vals[:50] == [1.0] * 50 and vals[50:] == [-1.0] * 10 and det.fired == pytest.approx(50e-4)
    assert float(det(0.0, np.ones(2))[0]) == 1.0 and float(det(1.0, np.ones(2))[0]) == -1.0
    assert run(lambda t, y: 1e4 * y, 1e-4, 200)[0].fired is None
    assert run(lambda t, y: lam * y, 5e-6, 200)[0].fired is None


@pytest.mark.slow
def test_fuzz_seed_7301_case_14_reaches_T_where_it_stalled(tmp_path, capsys):
    """The fuzz case that stalled (``numerics/fuzz_verdict.py`` seed 7301, case 14: softmax, d = 3, V = I + skew,
    T = 1000): ``tpde gaussian --covariance-only`` stalled at t = 56.49 after 10⁶ evaluations; it now reaches T
    (measured 16 s CPU, 21 s wall at load ~1) with the switch named."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "numerics"))
    import fuzz_verdict

    from symbolic_tpde.cli import main

    rng = np.random.default_rng(7301)
    for _ in range(15):
        scn = fuzz_verdict.scenario(rng)
    assert scn["attention"] == "softmax" and len(scn["alpha0"]) == 3 and scn["T"] == 1000.0
    path = tmp_path / "c14.json"
    path.write_text(json.dumps(scn))
    rc = main(["gaussian", "--scenario", str(path), "--covariance-only", "--json", "--max-seconds", "120"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["status"] == "ok" and out["t"] == 1000.0, out["message"]
    assert "stability-bound" in out["message"], out["message"]
