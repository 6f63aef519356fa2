"""Issue 30: solvers that go as far as the mathematics (the inverse-free matrix form in ``tpde gaussian``).

The reference is written here, independently of the package: the ℓ2 covariance equation in matrix form,
``dΣ/dt = JΣ + ΣJᵀ`` with ``J = V(Σ⁻¹ + (2/τ)KᵀK)⁻¹(2/τ)KᵀQ`` evaluated as ``V(I + (2/τ)ΣKᵀK)⁻¹Σ(2/τ)KᵀQ``
(README Mathematics §3, the tilt precision), integrated by scipy's DOP853.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from symbolic_tpde.gaussian import GaussianODE
from symbolic_tpde.inputs.scenario import load_scenario

#: ℓ2, K = I, τ = 2, Q and V drawn once (seed 1, draw 31: non-symmetric V, one positive eigenvalue of
#: VQ + QᵀVᵀ): Σ grows anisotropically, cond Σ ≈ 2e7 at t = 10; the generated entrywise right-hand side
#: stalled at t ≈ 7.6 after 10⁶ evaluations (about a minute) before the matrix form was used
_Q = [[-0.5312188305886745, 0.14362818031479327, -0.43893355025464736],
      [0.5363073602710031, 0.12729539442303117, 0.5595261204023441],
      [-0.3185689306312762, 0.04704260516808157, -0.5994684913876128]]
_V = [[2.430859830373869, 0.14375696153804893, -1.5056567151443172],
      [0.3188045206648587, 2.505812999256789, 0.5481405729780534],
      [0.703583768036969, 0.02884901347912266, -0.5771115889481466]]


def _reference(Q, V, K, tau, S0, T):
    from scipy.integrate import solve_ivp

    Q, V, K = (np.asarray(x, float) for x in (Q, V, K))
    d = Q.shape[0]
    N, Bt = (2 / tau) * K.T @ K, (2 / tau) * K.T @ Q

    def rhs(t, z):
        S = z.reshape(d, d)
        J = V @ np.linalg.solve(np.eye(d) + S @ N, S @ Bt)
        return (J @ S + S @ J.T).ravel()

    sol = solve_ivp(rhs, (0, T), np.asarray(S0, float).ravel(), method="DOP853", rtol=1e-12, atol=1e-14)
    assert sol.status == 0
    return sol.y[:, -1].reshape(d, d)


@pytest.mark.parametrize("covariance_only", [False, True])
def test_l2_anisotropic_growth_reaches_T_in_matrix_form(tmp_path, covariance_only):
    T = 10.0
    scn = {"attention": "l2", "Q": _Q, "K": np.eye(3).tolist(), "tau": 2.0, "V": _V, "alpha0": [0.0, 0.0, 0.0],
           "Sigma0": np.eye(3).tolist(), "T": T}
    p = tmp_path / "s.json"
    p.write_text(json.dumps(scn))
    s = load_scenario(str(p))
    ode = GaussianODE.from_scenario(s)
    if covariance_only:
        from symbolic_tpde.analysis.clustering import integrate_covariance
        from symbolic_tpde.gaussian import unpack_state

        sol = integrate_covariance(ode, s.Sigma0, T)
        t_end, S = float(sol.t_end), unpack_state(sol.y_end, 3)[1]
    else:
        sol = ode.integrate(s.alpha0, s.Sigma0, T)
        t_end, S = float(sol.t[-1]), sol.Sigma[-1]
    assert str(sol.status) == "ok" and t_end == T, sol.message
    assert "inverse-free matrix form" in sol.message          # the generated form was left where it loses precision
    ref = _reference(_Q, _V, np.eye(3), 2.0, np.eye(3), T)
    lam = np.linalg.eigvalsh(ref)
    assert lam[-1] / lam[0] > 1e6                             # the class: strongly anisotropic
    # both runs carry a global error ~ rtol·(number of steps, ~10³) = 1e-9 relative to ‖Σ‖ (measured 2.5e-11)
    assert np.abs(S - ref).max() <= 1e-9 * np.abs(ref).max()
