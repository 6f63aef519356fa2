"""Derivatives of the blow-up time ``T*`` and of the tilt-ceasing time ``t_c`` with respect to parameters (and
initial data), with error estimates.

Route (the blow-up machinery of :mod:`symbolic_tpde.numerics.ode.solve`; the regular form near ``T*`` of issue 20
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

Tilt-ceasing time (:func:`tilt_time_gradient`).  The run stops where ``g = λ_min(N)``, ``N = Σ - ΣMΣ``,
``M = R + Rᵀ`` of a head, reaches 0 (the Gaussian tilt ceases to exist; status ``tilt-ceased``).  There the moment
ODE is singular (its right-hand side divides by the pivots of ``N``), ``g ≈ c (t_c - t)^{1/2}``, so the event is
differentiated at levels ``g = L`` before it: with ``u`` the unit eigenvector of the (simple) smallest eigenvalue,
``∂g/∂θ = uᵀ(dΣ - dΣ MΣ - ΣM dΣ - Σ dM Σ)u`` (``dΣ`` from the forward sensitivities, ``dM = ∂M/∂θ`` from the
system's symbolic ``existence`` matrix) and ``dg/dt`` the same with ``Σ̇``, and

    E_L = dt_L/dθ = -(∂g/∂θ)/(dg/dt),    t_c - t_L = a L² + O(L³)  ⇒  E_L = dt_c/dθ + O(L²).

Richardson in ``L²`` over two levels; error estimate ``|R - E_{L_min}|`` plus the change at 100x looser
tolerances.  When the two smallest eigenvalues of ``N`` at the finest level are closer than ``RANK_RATIO``
times its norm the crossing is not simple: reported as not differentiable, no number.

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
    ``levels``: ``(t_k, E_k)`` per level; ``method`` says what was used.  ``event``: which time ``blowup_time``
    is (``"blowup"``: ``T*``; ``"tilt-ceased"``: ``t_c``)."""

    names: tuple[str, ...]
    blowup_time: float
    blowup_time_error: float
    differentiable: bool
    gradient: np.ndarray | None
    gradient_error: np.ndarray | None
    rank_ratio: float
    levels: tuple
    method: str
    event: str = "blowup"


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


def _existence_derivatives(system, names, h):
    """``∂M_h/∂θ_k`` (numpy callables of ``(t, p)``) per direction, ``M_h = R + Rᵀ`` of the ``h``-th head with one;
    zero for initial-data directions."""
    import sympy as sp

    M = system.existence[h]
    out = []
    for nm in names:
        sym = next((s for s in system.params if s.name == nm), None)
        dM = sp.zeros(*M.shape) if sym is None else M.diff(sym)
        out.append(sp.lambdify([system.time, *system.params], dM, "numpy"))
    return out


def tilt_time_gradient(ode, alpha0, Sigma0, T_max: float, sensitivities, *, rtol: float = 1e-12,
                       levels: tuple = (1e-3, 1e-4), max_seconds: float | None = None) -> BlowupGradient:
    """``dt_c/dθ`` for the time ``t_c`` where the Gaussian tilt of a head ceases to exist (module docstring),
    ``levels``: the fractions of the initial condition value ``g(0)`` at which the event is differentiated."""
    from ..gaussian.integrate import TILT_CEASED
    from ..gaussian.sensitivities import integrate_sensitivities
    from ..numerics.ode.solve import StopCondition

    first = integrate_sensitivities(ode, alpha0, Sigma0, T_max, sensitivities, rtol=rtol, max_seconds=max_seconds)
    if first.status != TILT_CEASED:
        raise InputError("T_max", f"the tilt does not cease on [0, {T_max}] (status {first.status}: "
                         f"{first.message}); dt_c/dθ needs the event")
    d, n = ode.d, layout.state_size(ode.d)
    t_c = float(first.t[-1])
    h = int(np.argmin(ode.condition_values(t_c, first.y[-1])))
    g0 = float(ode.condition_values(0.0, first.y[0])[h])
    names = first.names
    dMs = _existence_derivatives(ode.system, names, h)
    mats = ode._existence_mats()

    def at_level(L, tol):
        stop = StopCondition(lambda t, y: np.array([ode.condition_values(t, y[:n])[h] - L]), "level")
        sol = integrate_sensitivities(ode, alpha0, Sigma0, T_max, sensitivities, rtol=tol, blowup=False,
                                      events=[stop], max_seconds=max_seconds)
        if sol.status != "level":
            raise InputError("T_max", f"the run to the level g = {L:.3g} ended with status {sol.status}")
        t, y = float(sol.t[-1]), sol.y[-1]
        p = ode.params(t)
        _, S = layout.unpack(y, d)
        M = np.asarray(mats(t, p)[h], float)
        lam, U = np.linalg.eigh(S - S @ M @ S)
        u = U[:, 0]

        def dg(dS, dM):
            return float(u @ (dS - dS @ M @ S - S @ M @ dS - S @ np.asarray(dM, float) @ S) @ u)

        _, Sdot = layout.unpack(ode.rhs(t, y), d)
        gt = dg(Sdot, np.zeros_like(M))
        _, dSig = layout.unpack(sol.S[-1], d)
        E = np.array([-dg(dSig[k], dMs[k](t, *p[:ode.system.n_params])) / gt for k in range(len(names))])
        gap = float(lam[1] - lam[0]) / max(float(np.abs(lam).max()), 1e-300) if d > 1 else np.inf
        return t, E, gap

    runs = []
    for tol in (rtol, 100 * rtol):
        runs.append([at_level(f * g0, tol) for f in levels])
    L2 = [(f * g0) ** 2 for f in levels]

    def rich(r):
        (_, E1, _), (_, E2, _) = r[-2], r[-1]
        return (E2 * L2[-2] - E1 * L2[-1]) / (L2[-2] - L2[-1])

    how = ("level derivatives dt_L/dθ = -(∂g/∂θ)/(dg/dt) of g = λ_min(Σ - Σ(R + Rᵀ)Σ) at g = L before the event, "
           "Richardson-extrapolated in L² (t_c - t_L = O(L²))")
    lev = tuple((t, E) for t, E, _ in runs[0])
    gap = runs[0][-1][2]
    if gap < RANK_RATIO:
        return BlowupGradient(names, t_c, float("nan"), False, None, None, gap, lev,
                              how + f"; the two smallest eigenvalues of N are within {gap:.2g} (relative): the "
                              "crossing is not simple, t_c is not differentiable there", TILT_CEASED)
    R = rich(runs[0])
    err = np.abs(R - runs[0][-1][1]) + np.abs(R - rich(runs[1]))
    loose = ode.integrate(alpha0, Sigma0, T_max, rtol=100 * rtol, max_seconds=max_seconds)
    t_err = abs(float(loose.t[-1]) - t_c) if loose.status == TILT_CEASED else float("nan")
    return BlowupGradient(names, t_c, t_err, True, R, err, gap, lev, how, TILT_CEASED)


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
