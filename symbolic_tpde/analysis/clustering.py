"""Trajectory identities, growth bounds and the covariance-only flow (README Mathematics §4).

The long-time verdict itself is :func:`symbolic_tpde.analysis.verdict.classify_long_time` (the one classifier);
this module holds what it and the ``tpde verify`` rows use along trajectories.  Every time loop here runs on the
package's one integrator (:func:`symbolic_tpde.numerics.ode.solve.integrate`, scipy's DOP853 stepper).

Identities checked along trajectories (README Mathematics §4; augmented quadrature, independent of the end state):

* volume: ``log det Σ(T) - log det Σ₀ = ∫₀ᵀ tr(Σ(AV + VᵀAᵀ)) dt`` (softmax, any ``V``);
* Lyapunov (``V`` SPD): ``tr(V⁻¹Σ(T)) - tr(V⁻¹Σ₀) = ∫₀ᵀ tr(Σ(A + Aᵀ)Σ) dt``, non-increasing if ``A + Aᵀ ⪯ 0``.

Growth bounds (no blow-up) are the ``growth`` theorem of :mod:`symbolic_tpde.analysis.theorems` (Sinkhorn
``L = ‖V‖``; ℓ2 with K of full column rank ``L = ‖V‖ cond(K) ‖K⁺Q‖``: the factor ``cond(K)`` is needed, the
bound without it fails on some d = 2 trajectories); :func:`growth_bound_ratio` checks one along a trajectory.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..gaussian import pack_state as _pack
from ..gaussian import unpack_state as _unpack
from ..gaussian.integrate import gaussian_rhs, integrate_moments
from ..numerics.ode.solve import Status, integrate


# ------------------------------------------------------------------------------ identities along trajectories
def _augmented(f: Callable, d: int, integrand: Callable) -> Callable:
    def g(t, z):
        y = z[:-1]
        _, S = _unpack(y, d)
        return np.concatenate([f(t, y), [integrand(S)]])

    return g


def volume_identity(f: Callable, alpha0, Sigma0, A, V, T: float, rtol: float = 1e-11) -> tuple[float, float]:
    """``(log det Σ(T) - log det Σ₀, ∫₀ᵀ tr(Σ(AV + VᵀAᵀ)) dt)`` along the trajectory of ``f`` (softmax)."""
    Sigma0 = np.asarray(Sigma0, float)
    d = Sigma0.shape[0]
    M = A @ V + V.T @ A.T
    g = _augmented(f, d, lambda S: float(np.sum(S * M.T)))
    z0 = np.concatenate([_pack(np.asarray(alpha0, float), Sigma0), [0.0]])
    sol = integrate(g, z0, (0, T), method="DOP853", rtol=rtol, atol=1e-14)
    _, ST = _unpack(sol.y_end[:-1], d)
    lhs = np.linalg.slogdet(ST)[1] - np.linalg.slogdet(Sigma0)[1]
    return float(lhs), float(sol.y_end[-1])


def lyapunov_identity(f: Callable, alpha0, Sigma0, A, V, T: float, rtol: float = 1e-11,
                      n_samples: int = 50) -> tuple[float, float, float]:
    """``(tr(V⁻¹Σ(T)) - tr(V⁻¹Σ₀), ∫₀ᵀ tr(Σ(A+Aᵀ)Σ) dt, max increase between samples)`` for SPD ``V``.

    The last value is ``max_k [L(t_{k+1}) - L(t_k)]`` over ``n_samples`` times, ``L = tr(V⁻¹Σ)``: ``≤ 0`` up to
    round-off when ``A + Aᵀ ⪯ 0``.
    """
    Sigma0 = np.asarray(Sigma0, float)
    d = Sigma0.shape[0]
    S = A + A.T
    Vi = np.linalg.inv(V)
    g = _augmented(f, d, lambda Sig: float(np.trace(Sig @ S @ Sig)))
    z0 = np.concatenate([_pack(np.asarray(alpha0, float), Sigma0), [0.0]])
    ts = np.linspace(0, T, n_samples)
    sol = integrate(g, z0, (0, T), method="DOP853", rtol=rtol, atol=1e-14, t_eval=ts)
    L = np.array([np.trace(Vi @ _unpack(sol.y[k, :-1], d)[1]) for k in range(len(ts))])
    return float(L[-1] - L[0]), float(sol.y_end[-1]), float(np.max(np.diff(L)))


def growth_bound_ratio(f: Callable, alpha0, Sigma0, rate: float, T: float, n_samples: int = 60,
                       rtol: float = 1e-10) -> float:
    """``max_t ‖Σ(t)‖₂ / (‖Σ₀‖₂ e^{rate·t})`` over ``n_samples`` times in ``[0, T]`` (≤ 1 if the bound holds)."""
    Sigma0 = np.asarray(Sigma0, float)
    d = Sigma0.shape[0]
    ts = np.linspace(0, T, n_samples)
    sol = integrate(f, _pack(np.asarray(alpha0, float), Sigma0), (0, T), method="DOP853", rtol=rtol,
                    atol=1e-14, t_eval=ts)
    if sol.status != Status.OK:
        return float("inf")
    n0 = np.linalg.norm(Sigma0, 2)
    return float(max(np.linalg.norm(_unpack(sol.y[k], d)[1], 2) / (n0 * np.exp(rate * t))
                     for k, t in enumerate(sol.t)))


def rate_slope(ts: np.ndarray, Sigmas: np.ndarray, Sigma_star: np.ndarray) -> float:
    """Least-squares slope of ``log ‖Σ(t) - Σ*‖_F`` against ``log t`` (``-1`` for the ``O(1/t)`` rate)."""
    e = np.linalg.norm(np.asarray(Sigmas) - Sigma_star, axis=(1, 2))
    return float(np.polyfit(np.log(ts), np.log(e), 1)[0])


# ------------------------------------------------------------------------- covariance-only flow, linearisation
def covariance_closed(ode) -> bool:
    """Whether ``dΣ/dt`` does not involve ``α`` for this :class:`~symbolic_tpde.gaussian.GaussianODE`.

    Decided from the derived system: no ``Σ`` row of ``ode.system.rhs`` has an ``α`` state among its free
    symbols (README Mathematics §3: softmax, ℓ2, multi-head, Sinkhorn and affine FFN terms give ``J`` independent
    of ``α``; linear attention's ``J = V(Σ + ααᵀ)A`` does not).  Heads evaluated by the numeric matrix closed form
    (Sinkhorn at ``d >= 3``, no entrywise system) are probed instead: ``dΣ/dt`` at three random means with the
    same ``Σ`` must agree to ``1e-12`` relative (the closed form is evaluated by the same float operations
    whatever ``α``, so a genuine dependence shows at ``O(1)``)."""
    d = ode.d
    sys = ode.system
    if sys is not None:
        alpha = set(sys.states[:d])
        if any(e.free_symbols & alpha for e in sys.rhs[d:]):
            return False
        if ode.backend != "numeric-matrix":
            return True
    rng = np.random.default_rng(0)
    G = rng.normal(size=(d, d))
    S = G @ G.T / d + np.eye(d)
    outs = [ode.rhs(0.0, _pack(rng.normal(size=d), S))[d:] for _ in range(3)]
    scale = max(1.0, float(np.abs(outs[0]).max()))
    return all(np.abs(o - outs[0]).max() <= 1e-12 * scale for o in outs[1:])


def covariance_rhs(ode, T: float) -> Callable:
    """``f(t, y)`` on the full Gaussian layout with ``α`` frozen at 0 (``dα/dt := 0``) and ``dΣ/dt`` the
    model's own.  Valid only when :func:`covariance_closed` holds: then ``Σ(t)`` is exactly the covariance of
    the full system from any ``α₀`` (its equation does not see ``α``), while the mean, which may grow like
    ``e^{t‖V‖}``, can no longer overflow a long run."""
    d = ode.d
    f = gaussian_rhs(ode, T)

    def g(t, y):
        z = np.array(y, dtype=float)
        z[:d] = 0.0
        out = np.array(f(t, z), dtype=float)
        out[:d] = 0.0
        return out

    return g


def integrate_covariance(ode, Sigma0, T: float, *, rtol: float = 1e-12, t_eval=None, method: str = "DOP853",
                         max_seconds=None):
    """The covariance equation alone (``α ≡ 0`` in the layout), on the package's one integrator with the
    Gaussian size monitor, the layer breakpoints and the tilt-existence conditions (as
    :func:`symbolic_tpde.gaussian.integrate.integrate_gaussian`; ``max_seconds`` its wall-clock cap).  Returns the
    :class:`~symbolic_tpde.numerics.ode.solve.Solution`, its status as the Gaussian layer reports it.  Refuses
    (:class:`InputError`) when ``dΣ/dt`` involves ``α``."""
    from ..errors import InputError

    if not covariance_closed(ode):
        raise InputError("covariance-only", "the derived covariance equation involves the mean alpha "
                         "(e.g. linear attention): integrate the full system")
    y0 = _pack(np.zeros(ode.d), np.asarray(Sigma0, float))
    return integrate_moments(ode, covariance_rhs(ode, T), y0, T, freeze_alpha=True, method=method, rtol=rtol,
                             t_eval=t_eval, max_seconds=max_seconds)


def linearised_covariance_flow(ode, Sigma_star, t: float = 0.0, alpha=None) -> tuple[np.ndarray, np.ndarray]:
    """Jacobian of ``Σ ↦ dΣ/dt`` at ``Σ*`` in the packed coordinates (upper triangle of ``Σ``) and its
    eigenvalues, sorted by real part (largest first).

    The packed coordinates are a basis of the symmetric matrices, so the eigenvalues are those of the linear
    operator ``δΣ ↦ D(dΣ/dt)[δΣ]`` on ``Sym(d)``.  Uses ``ode.jac`` (the generated symbolic Jacobian; central
    differences on the numeric-matrix path).  Example (README Mathematics §4): softmax with ``V = I``,
    ``dΣ/dt = Σ(A + Aᵀ)Σ``; at a limit ``Σ* = U(UᵀΣ₀⁻¹U)⁻¹Uᵀ`` with ``(A + Aᵀ)U = 0`` the operator
    ``δ ↦ δ(A + Aᵀ)Σ* + Σ*(A + Aᵀ)δ`` is zero: the limit is not hyperbolic, which is why the approach is
    algebraic (``O(1/t)``) rather than exponential."""
    S = 0.5 * (np.asarray(Sigma_star, float) + np.asarray(Sigma_star, float).T)
    d = S.shape[0]
    y = _pack(np.zeros(d) if alpha is None else np.asarray(alpha, float), S)
    Jf = np.asarray(ode.jac(t, y), float)[d:, d:]
    ev = np.linalg.eigvals(Jf)
    return Jf, ev[np.argsort(-ev.real, kind="stable")]
