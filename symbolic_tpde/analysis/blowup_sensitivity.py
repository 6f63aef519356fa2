"""Derivative of the blow-up time ``T*`` with respect to parameters (and initial data), with an error estimate.

Route (the blow-up machinery of :mod:`symbolic_tpde.numerics.solve`; the regular form near ``T*`` of issue 20
does not exist yet, so nothing here integrates through ``T*``).  Let ``r = tr Σ + |α|²`` and ``t_L(θ)`` the
time where ``r`` crosses the level ``L`` (the levels ``r₀·10³ … r₀·10¹⁰`` of the blow-up monitor).  Implicit
differentiation of ``r(y(t_L, θ)) = L`` gives, with the forward sensitivities ``S = ∂y/∂θ``,

    E_L = dt_L/dθ = -(∇r · S) / (∇r · f)        at (t_L, y(t_L)).

Near a power-law singularity ``r = a(θ) (T*(θ) - t)^{-p}`` this is ``E_L = dT*/dθ - (a'/(a p)) τ_L`` with
``τ_L = T* - t_L``: the level derivatives converge *linearly* in ``τ_L``, so two levels give the Richardson
value ``R = (E_K τ_{K-1} - E_{K-1} τ_K)/(τ_{K-1} - τ_K)``.  Error estimate: ``|R_K - R_{K-1}|`` (the same
extrapolation one level lower, an over-estimate for an ``O(τ²)`` remainder) ``+ |R(rtol) - R(100 rtol)|``
(integration error, a second run at 100x looser tolerances).

Differentiability.  ``T*`` is differentiable where the blow-up is simple (``Σ/tr Σ`` tends to rank one:
``λ₂(Σ)/λ₁(Σ) = O(τ)``).  When the second eigenvalue of ``Σ`` at the top level is not small
(``λ₂/λ₁ > RANK_RATIO``) the top of the blow-up is repeated (or split by less than the run resolves): the
result says *not differentiable* and gives no number.  For softmax with ``V = I``, :func:`blowup_gradient_vi`
gives the closed form and, at a repeated top eigenvalue, the one-sided derivatives.

Closed form (``V = I``; Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322; README Mathematics §4):
``T* = 1/λ``, ``λ = λ_max(M)``, ``M = Σ₀^{1/2} B Σ₀^{1/2}``, ``B = A + Aᵀ``.  For a simple ``λ`` with unit
eigenvector ``u`` and ``w = Σ₀^{1/2} u``: ``dλ = wᵀ dB w``, ``dB = E_ij + E_ji`` for ``A_ij``, so

    ∂T*/∂A_ij = -2 w_i w_j / λ²,        ∂T*/∂Σ₀  from  dλ = uᵀ d(Σ₀^{1/2}) B Σ₀^{1/2} u + …  (not used here).

Equivalently ``λ`` is the largest generalised eigenvalue of ``(B, Σ₀⁻¹)``: the precision ``P = Σ⁻¹``
obeys ``dP/dt = -B`` exactly, and ``T*`` is the first zero of ``det(Σ₀⁻¹ - tB)``; ``B w = λ Σ₀⁻¹ w``.
At a top eigenvalue of multiplicity ``m`` (eigenvector basis ``U``, ``W = Σ₀^{1/2}U``) the perturbation theory
of a repeated eigenvalue gives one-sided derivatives ``dλ/dθ(±) = λ_max / λ_min(Wᵀ dB W)``, hence
``dT*/dθ`` from the right ``= -λ_max(Wᵀ dB W)/λ²`` and from the left ``= -λ_min(Wᵀ dB W)/λ²``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..registry import layout

#: ``λ₂(Σ)/λ₁(Σ)`` at the top level above which the blow-up is reported as not simple.  At the top level
#: ``τ_K/T* ≈ 10⁻¹⁰`` (levels up to ``10¹⁰ r₀``), so a simple blow-up has a ratio ``O(10⁻¹⁰)``; 10⁻⁶ leaves four
#: decades for the constant and resolves top-eigenvalue gaps down to about ``10⁻⁶`` relative.
RANK_RATIO = 1e-6
#: closed form: top eigenvalues closer than this (relative to ``‖M‖``) are treated as repeated (float64 eigh
#: is backward stable: eigenvalue errors ``~ eps ‖M‖``; 10⁻⁹ leaves a wide margin)
REPEATED_REL = 1e-9


@dataclass(frozen=True)
class BlowupGradient:
    """``blowup_time ± blowup_time_error``; per direction ``names[k]``: ``gradient[k] ± gradient_error[k]``
    (``None`` when ``differentiable`` is False); ``rank_ratio`` = ``λ₂/λ₁`` of Σ at the top level;
    ``levels``: ``(t_k, E_k)`` per level; ``method`` says what was used."""

    names: tuple[str, ...]
    blowup_time: float
    blowup_time_error: float
    differentiable: bool
    gradient: np.ndarray | None
    gradient_error: np.ndarray | None
    rank_ratio: float
    levels: tuple
    method: str


def _level_derivatives(ode, sol, d: int) -> list[tuple[float, np.ndarray]]:
    _, dsize = layout.gaussian_size(d)
    out = []
    for t, y, S in zip(sol.t, sol.y, sol.S):
        fy = ode.rhs(float(t), y)
        out.append((float(t), np.array([-dsize(y, s) / dsize(y, fy) for s in S])))
    return out


def _richardson(levels, Tst):
    (t1, E1), (t2, E2) = levels[-2], levels[-1]
    tau1, tau2 = Tst - t1, Tst - t2
    return (E2 * tau1 - E1 * tau2) / (tau1 - tau2)


def blowup_time_gradient(ode, alpha0, Sigma0, T_max: float, sensitivities, *, rtol: float = 1e-12,
                         max_seconds: float | None = None) -> BlowupGradient:
    """``dT*/dθ`` for the directions ``sensitivities`` (names as in :mod:`symbolic_tpde.gaussian.sensitivities`)
    of the moment ODE ``ode`` started at ``N(alpha0, Sigma0)``, blowing up before ``T_max`` (module docstring)."""
    from ..gaussian.sensitivities import integrate_sensitivities

    first = integrate_sensitivities(ode, alpha0, Sigma0, T_max, sensitivities, rtol=rtol, max_seconds=max_seconds)
    if first.status != "blowup":
        raise InputError("T_max", f"no finite-time blow-up detected on [0, {T_max}] (status {first.status}: "
                         f"{first.message}); dT*/dθ needs one")
    Tst, Terr = float(first.blowup_time), float(first.blowup_time_error)
    ts = [s[0] for s in first.run.samples]
    results = []
    for tol in (rtol, 100 * rtol):
        sol = integrate_sensitivities(ode, alpha0, Sigma0, ts[-1], sensitivities, rtol=tol, t_eval=ts,
                                      blowup=False, max_seconds=max_seconds)
        if sol.status != "ok" or len(sol.t) != len(ts):
            raise InputError("T_max", f"re-integration to the level times failed (status {sol.status})")
        results.append((sol, _level_derivatives(ode, sol, ode.d)))
    (sol, lev), (_, lev_loose) = results
    ev = np.linalg.eigvalsh(sol.Sigma[-1])
    ratio = float(ev[-2] / ev[-1]) if ode.d > 1 else 0.0
    names = sol.names
    how = ("level-crossing derivatives dt_L/dθ = -(∇r·S)/(∇r·f) from the forward sensitivities at the blow-up "
           "monitor's levels, Richardson-extrapolated in τ_L (no regular form through T* is used)")
    if ratio > RANK_RATIO:
        return BlowupGradient(names, Tst, Terr, False, None, None, ratio, tuple(lev),
                              how + f"; λ₂/λ₁ of Σ at the top level is {ratio:.3g} > {RANK_RATIO:g}: the top of "
                              "the blow-up is repeated (or split below the run's resolution): T* is not "
                              "differentiable there, only one-sided derivatives exist")
    R = _richardson(lev, Tst)
    err = np.abs(R - _richardson(lev[:-1], Tst)) + np.abs(R - _richardson(lev_loose, Tst))
    return BlowupGradient(names, Tst, Terr, True, R, err, ratio, tuple(lev), how)


@dataclass(frozen=True)
class ClosedFormGradient:
    """``T*`` and ``∂T*/∂A`` (``(d, d)``) for softmax, ``V = I``; at a repeated top eigenvalue ``gradient`` is
    ``None`` and ``right``/``left`` hold the one-sided derivatives (``∂T*/∂A_ij`` from above / below)."""

    blowup_time: float
    gradient: np.ndarray | None
    right: np.ndarray | None
    left: np.ndarray | None
    multiplicity: int


def blowup_gradient_vi(A, Sigma0) -> ClosedFormGradient:
    """Closed form of ``T*`` and ``∂T*/∂A`` for softmax with ``V = I`` (module docstring)."""
    A = np.asarray(A, float)
    Sigma0 = np.asarray(Sigma0, float)
    w0, U0 = np.linalg.eigh(Sigma0)
    R = (U0 * np.sqrt(w0)) @ U0.T
    B = A + A.T
    lam, U = np.linalg.eigh(R @ B @ R)
    if not lam[-1] > 0:
        raise InputError("A", "A + Aᵀ has no positive direction for Σ₀: no finite-time blow-up (V = I)")
    top = lam[-1]
    m = int(np.sum(lam >= top - REPEATED_REL * np.max(np.abs(lam))))
    W = R @ U[:, -m:]
    if m == 1:
        w = W[:, 0]
        return ClosedFormGradient(1 / top, -2 * np.outer(w, w) / top ** 2, None, None, 1)
    d = A.shape[0]
    right, left = np.empty((d, d)), np.empty((d, d))
    for i in range(d):
        for j in range(d):
            G = np.outer(W[i], W[j])
            ev = np.linalg.eigvalsh(G + G.T)        # Wᵀ (E_ij + E_ji) W
            right[i, j], left[i, j] = -ev[-1] / top ** 2, -ev[0] / top ** 2
    return ClosedFormGradient(1 / top, None, right, left, m)
