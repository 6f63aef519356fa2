"""Interaction energy, twisted metric and Riemannian Hessian: numpy, any number of particles.

Conventions (README Mathematics §5; kernel ``exp(<A x, y>) = exp(yᵀ A x)``, ``x`` the query).  Particles are the rows of
``X`` (shape ``(n, d)``), tangent vectors ``U`` have the same shape.

* ``E_n(X) = (1/2n²) Σ_ij e_ij``,  ``e_ij = exp(m_ij)``,  ``m_ij = <A x_i, x_j> = x_jᵀ A x_i``;
* ``Z_i(X) = (1/n) Σ_j e_ij`` (first variation ``Z_μ`` at ``x_i``);
* twisted metric ``g_X(U, W) = (1/n) Σ_i Z_i <u_i, G w_i>`` with ``G = -A V⁻¹`` (symmetric positive definite);
* Euclidean gradient ``∂_k E = (1/2n²)[Σ_j e_kj Aᵀ x_j + Σ_i e_ik A x_i]``;
  Riemannian gradient ``grad E = g⁻¹ ∂E``: ``(grad E)_k = (n / Z_k) G⁻¹ ∂_k E``.  For symmetric ``A`` this is
  ``-Γ_k``, the softmax field (gradient-flow identity; proven symbolically in ``derivations/gradient_flow.py``);
* Riemannian Hessian, from the Koszul formula with ``w = grad E``::

      Hess E(U, U) = D²E(U, U) - Γ^k_ij U^i U^j ∂_k E
                   = D²E(U, U) - (D_U g)(U, w) + ½ (D_w g)(U, U),

  ``D²E(U, U) = (1/2n²) Σ_ij e_ij (m'_ij² + m''_ij)``, ``m'_ij = u_jᵀ A x_i + x_jᵀ A u_i``, ``m''_ij = 2 u_jᵀ A u_i``,
  ``(D_U g)(U, W) = (1/n) Σ_i (DZ_i·U) <u_i, G w_i>``, ``DZ_i·U = (1/n) Σ_j e_ij m'_ij``.
  This closed form is an independent route to the symbolic Christoffel computation in
  :mod:`symbolic_tpde.symbolic.hessian`;
* geodesic equations from the Lagrangian ``L = (1/2n) Σ_k Z_k <ẋ_k, G ẋ_k>`` (Euler-Lagrange, no Christoffel
  symbols): ``ẍ_i = (1/Z_i)[½ G⁻¹ Σ_k ∇_{x_i} Z_k q_k - (DZ_i·Ẋ) ẋ_i]``, ``q_k = <ẋ_k, G ẋ_k>``.

Gaussian family ``N(α, Σ)`` (closed forms derived in :mod:`symbolic_tpde.symbolic.gaussian_energy`):
``E = ½ det(I - BᵀB)^{-1/2} exp(...)`` with ``B = Σ^{1/2} A Σ^{1/2}``, finite iff ``‖B‖₂ < 1``; the metric on
affine fields ``v = b + J x`` is ``2E · [(b + J m̃)ᵀ G (b' + J' m̃) + tr(Jᵀ G J' Σ̃)]`` with the tilted Gaussian
``Σ̃ = (Σ⁻¹ - AᵀΣA)⁻¹``, ``m̃ = Σ̃ (Σ⁻¹ + Aᵀ) α``.

No SymPy here (numerics layer).
"""

from __future__ import annotations

import numpy as np

from ...errors import BlowupError, InputError
from ...registry import layout
from ..linalg import sqrtm_psd

__all__ = [
    "twisted_G", "check_gradient_structure", "pair_exponents", "energy", "first_variation", "metric",
    "metric_matrix", "euclidean_gradient", "riemannian_gradient", "softmax_field", "softmax_field_direct",
    "hessian_form", "hessian_matrix", "min_hessian_ratio", "geodesic_rhs", "geodesic", "hessian_along_geodesic",
    "dissipation", "rk4_energy_defect", "gaussian_energy", "gaussian_energy_condition", "gaussian_tilt",
    "gaussian_affine_metric", "gaussian_coordinate_metric", "gaussian_hessian_along_geodesic",
]


def _mat(M, name: str, d: int | None = None) -> np.ndarray:
    try:
        arr = np.array(M, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(name, f"not a numeric matrix ({exc})") from None
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise InputError(name, f"expected a square matrix, got shape {arr.shape}")
    if d is not None and arr.shape != (d, d):
        raise InputError(name, f"expected shape {(d, d)}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InputError(name, "contains NaN or Inf")
    return arr


def twisted_G(A, V) -> np.ndarray:
    """``G = -A V⁻¹``, checked symmetric positive definite (InputError naming ``A/V`` otherwise).

    Symmetry tolerance: ``1e-10 · max(1, |G|_max)`` (round-off of one solve is ~1e-15 relative; anything
    larger is a genuine asymmetry).  Definiteness: Cholesky of the symmetrised ``G``.
    """
    A = _mat(A, "A")
    V = _mat(V, "V", A.shape[0])
    if abs(np.linalg.det(V)) < 1e-300 or np.linalg.cond(V) > 1e14:
        raise InputError("V", "singular (G = -A V⁻¹ needs V invertible)")
    G = -np.linalg.solve(V.T, A.T).T  # -A V⁻¹
    asym = float(np.max(np.abs(G - G.T)))
    if asym > 1e-10 * max(1.0, float(np.max(np.abs(G)))):
        raise InputError("A/V", f"G = -A V⁻¹ is not symmetric (max |G - Gᵀ| = {asym:.3g}); the twisted "
                         "metric needs G symmetric positive definite")
    G = 0.5 * (G + G.T)
    try:
        np.linalg.cholesky(G)
    except np.linalg.LinAlgError:
        lam = float(np.linalg.eigvalsh(G).min())
        raise InputError("A/V", f"G = -A V⁻¹ is not positive definite (smallest eigenvalue {lam:.3g})") from None
    return G


def check_gradient_structure(A, V) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate the hypotheses of the gradient-flow structure: ``A`` symmetric and ``G = -AV⁻¹`` SPD.

    Returns ``(A, V, G)`` as float arrays.
    """
    A = _mat(A, "A")
    V = _mat(V, "V", A.shape[0])
    asym = float(np.max(np.abs(A - A.T)))
    if asym > 1e-12 * max(1.0, float(np.max(np.abs(A)))):
        raise InputError("A", f"not symmetric (max |A - Aᵀ| = {asym:.3g}); softmax attention is a gradient "
                         "flow of E only for symmetric A (README Mathematics §5)")
    return A, V, twisted_G(A, V)


def _X(X) -> np.ndarray:
    arr = np.array(X, dtype=float)
    if arr.ndim != 2:
        raise InputError("X", f"expected an (n, d) array of particles, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InputError("X", "contains NaN or Inf")
    return arr


def pair_exponents(X, A) -> np.ndarray:
    """``m_ij = <A x_i, x_j> = x_jᵀ A x_i``, i.e. ``M = X Aᵀ Xᵀ``."""
    X = np.asarray(X, dtype=float)
    return X @ np.asarray(A, dtype=float).T @ X.T


def _exp_pairs(X, A) -> np.ndarray:
    M = pair_exponents(X, A)
    with np.errstate(over="ignore"):
        e = np.exp(M)
    if not np.all(np.isfinite(e)):
        raise BlowupError(0.0, "energy", f"exp(<A x_i, x_j>) overflows float64 (max exponent {M.max():.4g})")
    return e


def energy(X, A) -> float:
    """``E_n(X) = (1/2n²) Σ_ij exp(<A x_i, x_j>)``."""
    X = _X(X)
    n = X.shape[0]
    return float(_exp_pairs(X, A).sum() / (2.0 * n * n))


def first_variation(X, A) -> np.ndarray:
    """``Z_i = (1/n) Σ_j exp(<A x_i, x_j>)`` for every particle (shape ``(n,)``)."""
    X = _X(X)
    return _exp_pairs(X, A).mean(axis=1)


def metric(X, A, V, U, W) -> float:
    """``g_X(U, W) = (1/n) Σ_i Z_i(X) <u_i, G w_i>``."""
    G = twisted_G(A, V)
    Z = first_variation(X, A)
    U, W = np.asarray(U, float), np.asarray(W, float)
    return float(np.einsum("i,ia,ab,ib->", Z, U, G, W) / len(Z))


def metric_matrix(X, A, V) -> np.ndarray:
    """The ``nd × nd`` matrix of ``g_X`` in the coordinates ``vec(X)`` (row-major): ``(1/n) diag(Z) ⊗ G``."""
    G = twisted_G(A, V)
    Z = first_variation(X, A)
    return np.kron(np.diag(Z / len(Z)), G)


def euclidean_gradient(X, A) -> np.ndarray:
    """``∂_k E = (1/2n²)[Σ_j e_kj Aᵀ x_j + Σ_i e_ik A x_i]`` as rows (any ``A``)."""
    X = _X(X)
    A = np.asarray(A, float)
    n = X.shape[0]
    e = _exp_pairs(X, A)
    return (e @ X @ A + e.T @ X @ A.T) / (2.0 * n * n)


def riemannian_gradient(X, A, V) -> np.ndarray:
    """``(grad E)_k = (n / Z_k) G⁻¹ ∂_k E``: the metric gradient of ``E`` for ``g_X``."""
    G = twisted_G(A, V)
    X = _X(X)
    Z = first_variation(X, A)
    return np.linalg.solve(G, euclidean_gradient(X, A).T).T * (X.shape[0] / Z)[:, None]


def softmax_field(X, A, V) -> np.ndarray:
    """Softmax attention ``Γ_i = Σ_j softmax_j(<A x_i, x_j>) V x_j`` (rows): the particle simulator's field
    :func:`symbolic_tpde.numerics.particles.fields.softmax_field` when available, else :func:`softmax_field_direct`."""
    try:
        from .fields import softmax_field as simulator_field
    except ImportError:  # pragma: no cover - the simulator module is part of the package
        return softmax_field_direct(X, A, V)
    return simulator_field(_X(X), np.asarray(A, float), np.asarray(V, float))


def softmax_field_direct(X, A, V) -> np.ndarray:
    """Direct numpy formula for the softmax field (full ``n × n`` logits, stable log-sum-exp), rows."""
    X = _X(X)
    M = pair_exponents(X, A)
    P = np.exp(M - M.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    return P @ X @ np.asarray(V, float).T


def _dZ(e: np.ndarray, X: np.ndarray, A: np.ndarray, U: np.ndarray) -> np.ndarray:
    """``DZ_i·U = (1/n) Σ_j e_ij (u_jᵀ A x_i + x_jᵀ A u_i)``."""
    mp = U @ A @ X.T  # mp[j, i] = u_jᵀ A x_i
    mq = X @ A @ U.T  # mq[j, i] = x_jᵀ A u_i
    return (e * (mp + mq).T).mean(axis=1)


def _hess_parts(X, A, V):
    X = _X(X)
    A = np.asarray(A, float)
    G = twisted_G(A, V)
    e = _exp_pairs(X, A)
    n = X.shape[0]
    Z = e.mean(axis=1)
    dE = (e @ X @ A + e.T @ X @ A.T) / (2.0 * n * n)
    w = np.linalg.solve(G, dE.T).T * (n / Z)[:, None]  # grad E
    return X, A, G, e, w, _dZ(e, X, A, w)


def _hess_form(parts, U) -> float:
    X, A, G, e, w, dZw = parts
    n = X.shape[0]
    m1 = (U @ A @ X.T + X @ A @ U.T).T  # m1[i, j] = u_jᵀ A x_i + x_jᵀ A u_i
    m2 = 2.0 * (U @ A @ U.T).T          # m2[i, j] = 2 u_jᵀ A u_i
    d2E = float(np.sum(e * (m1 * m1 + m2)) / (2.0 * n * n))
    dZU = (e * m1).mean(axis=1)
    DUg = float(np.sum(dZU * np.einsum("ia,ab,ib->i", U, G, w)) / n)
    Dwg = float(np.sum(dZw * np.einsum("ia,ab,ib->i", U, G, U)) / n)
    return d2E - DUg + 0.5 * Dwg


def hessian_form(X, A, V, U) -> float:
    """Riemannian Hessian ``Hess E(U, U) = D²E(U, U) - (D_U g)(U, w) + ½ (D_w g)(U, U)``, ``w = grad E``."""
    return _hess_form(_hess_parts(X, A, V), np.asarray(U, float))


def hessian_matrix(X, A, V) -> np.ndarray:
    """Matrix of ``Hess E`` in ``vec(X)`` coordinates, by polarisation of :func:`hessian_form` (small ``nd``)."""
    parts = _hess_parts(X, A, V)
    X = parts[0]
    N = X.size
    basis = np.eye(N).reshape(N, *X.shape)
    diag = np.array([_hess_form(parts, b) for b in basis])
    H = np.diag(diag)
    for a in range(N):
        for b in range(a + 1, N):
            H[a, b] = H[b, a] = 0.5 * (_hess_form(parts, basis[a] + basis[b]) - diag[a] - diag[b])
    return H


def min_hessian_ratio(X, A, V) -> tuple[float, np.ndarray]:
    """``min_U Hess E(U,U) / g(U,U)`` (smallest eigenvalue of ``g⁻¹ Hess``) and a minimising ``U``."""
    from scipy.linalg import eigh

    X = _X(X)
    G = twisted_G(A, V)
    g = np.kron(np.diag(first_variation(X, A) / X.shape[0]), G)
    lam, vec = eigh(hessian_matrix(X, A, V), g)
    return float(lam[0]), vec[:, 0].reshape(X.shape)


def geodesic_rhs(A, V, n: int, d: int):
    """Right-hand side ``f(s, y)`` of the geodesic equations, state ``y = (vec X, vec Ẋ)``, Lagrangian form."""
    A = np.asarray(A, float)
    G = twisted_G(A, V)
    Ginv = np.linalg.inv(G)

    def f(s, y):
        X = y[: n * d].reshape(n, d)
        P = y[n * d:].reshape(n, d)
        e = _exp_pairs(X, A)
        Z = e.mean(axis=1)
        q = np.einsum("ia,ab,ib->i", P, G, P)
        force = (q[:, None] * (e @ X @ A) + e.T @ (q[:, None] * X) @ A.T) / n  # Σ_k ∇_{x_i} Z_k q_k
        acc = (0.5 * force @ Ginv.T - _dZ(e, X, A, P)[:, None] * P) / Z[:, None]
        return np.concatenate([P.ravel(), acc.ravel()])

    return f


def _both_ways(f, y0, s_eval, rtol, atol, where):
    """States at ``s_eval`` (either sign) of ``y' = f(s, y)``, ``y(0) = y0``: the package's one integrator
    (:func:`.solve.integrate`, scipy's DOP853 stepper) forward, and on ``g(σ, y) = -f(-σ, y)`` for ``s < 0``."""
    from ..ode.solve import Status, integrate

    s_eval = np.asarray(s_eval, float)
    out = np.empty((len(s_eval), len(y0)))
    out[s_eval == 0] = y0
    for sign in (1.0, -1.0):
        mask = (s_eval * sign) > 0
        if not mask.any():
            continue
        ss = np.abs(s_eval[mask])
        order = np.argsort(ss)
        sol = integrate(lambda s, y: sign * f(sign * s, y), y0, (0.0, float(ss.max())), method="DOP853",
                        rtol=rtol, atol=atol, t_eval=ss[order])
        if sol.status != Status.OK:
            raise BlowupError(sign * sol.t_end, where, sol.message)
        res = np.empty((len(ss), len(y0)))
        res[order] = sol.y
        out[mask] = res
    return out


def geodesic(X, U, A, V, s_eval, rtol: float = 1e-13, atol: float = 1e-14):
    """Integrate the geodesic from ``X`` with velocity ``U`` (DOP853); returns positions at ``s_eval``."""
    X, U = _X(X), np.asarray(U, float)
    n, d = X.shape
    ys = _both_ways(geodesic_rhs(A, V, n, d), np.concatenate([X.ravel(), U.ravel()]), s_eval, rtol, atol,
                    "geodesic")
    return ys[:, : n * d].reshape(-1, n, d)


def hessian_along_geodesic(X, U, A, V, h: float = 2e-2) -> tuple[float, float]:
    """``d²/ds² E(γ(s))`` at ``s = 0`` along the integrated geodesic, by Richardson-extrapolated central
    differences (6th order in ``h``); returns ``(value, error_estimate)``.

    Error budget: geodesic integration at ``rtol 1e-13`` gives ``E`` to ~1e-13·|E| ; the 7-point stencil
    amplifies that by ~(49/18)/h², plus truncation ``O(h⁶)``.  The estimate returned is the difference between
    the 4th- and 6th-order extrapolants plus the propagated integration error.
    """
    s = np.array([-3, -2, -1, 0, 1, 2, 3], float) * h
    Es = np.array([energy(Y, A) for Y in geodesic(X, U, A, V, s)])
    em3, em2, em1, e0, e1, e2, e3 = Es
    d4 = (-e2 + 16 * e1 - 30 * e0 + 16 * em1 - em2) / (12 * h * h)
    d6 = (2 * e3 - 27 * e2 + 270 * e1 - 490 * e0 + 270 * em1 - 27 * em2 + 2 * em3) / (180 * h * h)
    noise = 1e-13 * float(np.max(np.abs(Es))) * 1088.0 / (180 * h * h)
    return float(d6), float(abs(d6 - d4) + noise)


def dissipation(X, A, V) -> float:
    """``g_X(Γ, Γ)``: the energy-dissipation rate along the softmax flow (``dE/dt = -g(Γ, Γ)``)."""
    F = softmax_field(X, A, V)
    return metric(X, A, V, F, F)


def rk4_energy_defect(X0, A, V, T: float, steps: int) -> float:
    """Integrate ``(X, q)`` with ``dX/dt = Γ(X)``, ``dq/dt = g_X(Γ, Γ)`` by fixed-step classical RK4 (the
    :data:`.rk.RK4` tableau) and return the defect ``E(X_T) - E(X_0) + q_T`` of the dissipation identity
    (exactly 0 for the true flow; ``O(h⁴)`` for RK4)."""
    from ..ode.rk import rk_solve

    X0 = _X(X0)
    n, d = X0.shape
    A = np.asarray(A, float)
    V = np.asarray(V, float)
    G = twisted_G(A, V)

    def f(t, Y):
        X = Y[0, :-1].reshape(n, d)
        F = softmax_field(X, A, V)
        Z = first_variation(X, A)
        return np.append(F.ravel(), np.einsum("i,ia,ab,ib->", Z, F, G, F) / n)[None]

    Y = rk_solve(f, 0.0, np.append(X0.ravel(), 0.0)[None], T, method="rk4", steps=steps).y[0]
    return energy(Y[:-1].reshape(n, d), A) - energy(X0, A) + Y[-1]


# ---------------------------------------------------------------- Gaussian family


def gaussian_energy_condition(Sigma, A) -> float:
    """``‖Σ^{1/2} A Σ^{1/2}‖₂``: the Gaussian energy is finite iff this is ``< 1``."""
    R = sqrtm_psd(np.asarray(Sigma, float))
    return float(np.linalg.norm(R @ np.asarray(A, float) @ R, 2))


def gaussian_tilt(alpha, Sigma, A) -> tuple[float, np.ndarray, np.ndarray]:
    """``(2E, m̃, Σ̃)``: ``Z_μ(x) N(x; α, Σ) = 2E · N(x; m̃, Σ̃)`` with ``Σ̃ = (Σ⁻¹ - AᵀΣA)⁻¹``,
    ``m̃ = Σ̃(Σ⁻¹ + Aᵀ)α`` (``Z_μ(x) = exp(αᵀAx + ½ xᵀAᵀΣAx)``).  InputError if ``‖Σ^{1/2}AΣ^{1/2}‖ ≥ 1``."""
    a = np.asarray(alpha, float)
    S = np.asarray(Sigma, float)
    A = np.asarray(A, float)
    nb = gaussian_energy_condition(S, A)
    if not nb < 1.0:
        raise InputError("Sigma", f"E(N(alpha, Sigma)) is infinite: ‖Σ^½AΣ^½‖ = {nb:.6g} ≥ 1")
    Si = np.linalg.inv(S)
    P = Si - A.T @ S @ A
    St = np.linalg.inv(P)
    St = 0.5 * (St + St.T)
    h = Si @ a + A.T @ a
    mt = St @ h
    # ∫ exp(αᵀAx + ½xᵀAᵀΣAx) N(x; α, Σ) dx = det(Σ P)^{-1/2} exp(½ hᵀ P⁻¹ h - ½ αᵀ Σ⁻¹ α)
    sign, logdet = np.linalg.slogdet(S @ P)
    mass = float(np.exp(-0.5 * logdet + 0.5 * h @ mt - 0.5 * a @ Si @ a))
    return mass, mt, St


def gaussian_energy(alpha, Sigma, A) -> float:
    """``E(N(α, Σ)) = ½ ∬ e^{<Ax,y>} dμ dμ`` in closed form (``= ½ · mass`` of :func:`gaussian_tilt`)."""
    return 0.5 * gaussian_tilt(alpha, Sigma, A)[0]


def gaussian_affine_metric(alpha, Sigma, A, V, b, J, b2=None, J2=None) -> float:
    """``g_μ(v, v') = ∫ Z_μ <b + Jx, G(b' + J'x)> dμ = 2E[(b + Jm̃)ᵀG(b' + J'm̃) + tr(JᵀGJ'Σ̃)]``."""
    G = twisted_G(A, V)
    b2 = b if b2 is None else b2
    J2 = J if J2 is None else J2
    mass, mt, St = gaussian_tilt(alpha, Sigma, A)
    b, J, b2, J2 = (np.asarray(z, float) for z in (b, J, b2, J2))
    u, w = b + J @ mt, b2 + J2 @ mt
    return float(mass * (u @ G @ w + np.trace(J.T @ G @ J2 @ St)))


def gaussian_coordinate_metric(alpha, Sigma, A, V) -> np.ndarray:
    """Metric of the Gaussian manifold in coordinates ``θ = (α, upper triangle of Σ)``: the twisted metric of
    the *cheapest affine field* realising ``θ̇`` (``b + Jα = α̇``, ``JΣ + ΣJᵀ = Σ̇``).

    With ``M`` the matrix of :func:`gaussian_affine_metric` on ``(b, vec J)`` and ``C`` the linear map
    ``(b, J) ↦ θ̇``, the minimum of ``ξᵀMξ`` subject to ``Cξ = θ̇`` is ``θ̇ᵀ (C M⁻¹ Cᵀ)⁻¹ θ̇``.  (The symbolic
    layer minimises over the rotational freedom of ``J`` explicitly: an independent route.)
    """
    a = np.asarray(alpha, float)
    S = np.asarray(Sigma, float)
    G = twisted_G(A, V)
    d = len(a)
    mass, mt, St = gaussian_tilt(a, S, A)
    # ξ = (b, vec J) row-major: u = b + J m̃ = L ξ;  tr(JᵀGJ'Σ̃) = vec(J)ᵀ (G ⊗ Σ̃) vec(J')
    L = np.hstack([np.eye(d), np.kron(np.eye(d), mt[None, :])])
    M = L.T @ G @ L
    M[d:, d:] += np.kron(G, St)
    M *= mass
    iu = np.triu_indices(d)
    N = d + d * d
    C = np.zeros((d + len(iu[0]), N))
    for p in range(d * d):
        Jp = np.zeros(d * d)
        Jp[p] = 1.0
        Jp = Jp.reshape(d, d)
        C[:d, d + p] = Jp @ a
        C[d:, d + p] = (Jp @ S + S @ Jp.T)[iu]
    C[:d, :d] = np.eye(d)
    return np.linalg.inv(C @ np.linalg.solve(M, C.T))


def _theta_to_gaussian(theta, d: int) -> tuple[np.ndarray, np.ndarray]:
    return layout.unpack(theta, d)


def gaussian_hessian_along_geodesic(alpha, Sigma, A, V, U, h: float = 2e-2, delta: float = 1e-5):
    """``d²/ds² E(N(γ(s)))`` at 0 along a geodesic of :func:`gaussian_coordinate_metric` (``θ = (α, Σ_{i≤j})``).

    Geodesic equations in Lagrangian form, ``g θ̈ = ½ ∇(θ̇ᵀ g θ̇) - (Σ_k θ̇_k ∂_k g) θ̇``, with ``∂_k g`` by central
    differences of step ``delta`` (error ``O(delta²) ≈ 1e-10`` relative); integrated by DOP853 at rtol 1e-12
    (:func:`.solve.integrate`);
    ``E`` from :func:`gaussian_energy`; the second derivative by the 7-point stencil of
    :func:`hessian_along_geodesic`.  Returns ``(value, error_estimate)``.
    """
    a = np.asarray(alpha, float)
    S = np.asarray(Sigma, float)
    d = len(a)
    th0 = layout.pack(a, S)
    N = len(th0)

    def gm(th):
        return gaussian_coordinate_metric(*_theta_to_gaussian(th, d), A, V)

    def f(s, y):
        th, v = y[:N], y[N:]
        g = gm(th)
        dg = np.empty((N, N, N))
        for k in range(N):
            e = np.zeros(N)
            e[k] = delta
            dg[k] = (gm(th + e) - gm(th - e)) / (2 * delta)
        rhs = 0.5 * np.einsum("kij,i,j->k", dg, v, v) - np.einsum("k,kij,j->i", v, dg, v)
        return np.concatenate([v, np.linalg.solve(g, rhs)])

    s_pts = np.array([1, 2, 3], float) * h
    vals = {0: gaussian_energy(a, S, A)}
    ys = _both_ways(f, np.concatenate([th0, np.asarray(U, float)]), np.concatenate([s_pts, -s_pts]), 1e-12, 1e-13,
                    "gaussian geodesic")
    for k, y in enumerate(ys):
        vals[(k % 3 + 1) * (1 if k < 3 else -1)] = gaussian_energy(*_theta_to_gaussian(y[:N], d), A)
    e = [vals[k] for k in (-3, -2, -1, 0, 1, 2, 3)]
    d4 = (-e[5] + 16 * e[4] - 30 * e[3] + 16 * e[2] - e[1]) / (12 * h * h)
    d6 = (2 * e[6] - 27 * e[5] + 270 * e[4] - 490 * e[3] + 270 * e[2] - 27 * e[1] + 2 * e[0]) / (180 * h * h)
    noise = 1e-11 * max(abs(x) for x in e) * 1088.0 / (180 * h * h)
    return float(d6), float(abs(d6 - d4) + noise)


def gaussian_energy_quadrature(alpha, Sigma, A, nodes: int = 24) -> float:
    """``½ E[exp(yᵀAx)]``, ``x, y`` iid ``N(α, Σ)``, by tensor Gauss-Hermite quadrature in all ``2d``
    variables (no completing the square): an independent check of :func:`gaussian_energy`.

    Exact for polynomials of degree ``< 2·nodes`` per variable; for an entire integrand the error decays
    faster than geometrically in ``nodes`` (use small ``‖Σ^½AΣ^½‖`` and ``d ≤ 2``).
    """
    a = np.asarray(alpha, float)
    S = np.asarray(Sigma, float)
    A = np.asarray(A, float)
    d = len(a)
    t, w = np.polynomial.hermite.hermgauss(nodes)
    L = np.linalg.cholesky(S)
    grids = np.meshgrid(*([t] * (2 * d)), indexing="ij")
    T = np.stack([g.ravel() for g in grids], axis=1)              # (nodes^{2d}, 2d)
    W = np.prod(np.meshgrid(*([w] * (2 * d)), indexing="ij"), axis=0).ravel() / np.pi ** d
    x = a + np.sqrt(2.0) * T[:, :d] @ L.T
    y = a + np.sqrt(2.0) * T[:, d:] @ L.T
    vals = np.exp(np.einsum("ka,ab,kb->k", y, A, x))
    return 0.5 * float(W @ vals)
