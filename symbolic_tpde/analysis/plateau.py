"""Slow plateaus: "metastable near rank r until t ≈ …, then …", with the evidence.

A covariance flow with a continuum of (near-)equilibria can sit for a long time near a rank-deficient state and
then leave it, e.g. softmax with ``V`` symmetric positive definite ``≠ I`` and a one-dimensional
``ker(A + Aᵀ) = span(k)``: every ``c·kkᵀ`` is an equilibrium (``kᵀAk = 0``), the transverse directions collapse
fast, and the direction ``u`` of a rank-one ``Σ = c·uuᵀ`` with ``u = k + εw`` drifts at the *quadratic* rate
``dε/dt ∝ -c ε² wᵀVk``: on one side of ``k`` it returns, on the other it escapes after a time ``∝ 1/|ε|``, and
``Σ`` then decays to 0.  The linearisation at the plateau has zero eigenvalues along the continuum and along the
drift (it is not hyperbolic and cannot decide); the trajectory does.

:func:`detect_plateau` reads the samples ``Σ(t_k)``, ``t_k = T/2ᵏ``, of the long-time classifier
(:mod:`.verdict`): a plateau is a stretch of at least :data:`MIN_DECADES` decade of ``t`` on which ``Σ`` stays
within :data:`PLATEAU_TOL` (relative, Frobenius) of its first sample, whose numerical rank ``r`` (eigenvalues
above :data:`RANK_FLOOR` times the largest) is below ``d`` (``Σ₀ ≻ 0`` has full rank, so the initial transient
never counts), and which the trajectory leaves by ``T`` (``Σ(T)`` differs from it by more than half its size).
Its evidence: the stretch, the state's eigenvalues (alignment ``λ₁/tr Σ``), what happens after it, and the
eigenvalues of the linearised flow at the plateau state (central differences of the inverse-free matrix form,
exact up to round-off for the quadratic moment equations) with the count of degenerate directions.
"""

from __future__ import annotations

import math

import numpy as np

from ..registry import layout

__all__ = ["detect_plateau", "PLATEAU_TOL", "RANK_FLOOR", "MIN_DECADES"]

#: Σ stays within this relative (Frobenius) distance of the plateau's first sample
PLATEAU_TOL = 0.1
#: eigenvalues below this fraction of the largest do not count towards the plateau's rank
RANK_FLOOR = 1e-6
#: a plateau lasts at least this many decades of t
MIN_DECADES = 1.0
#: eigenvalues of the linearisation within this fraction of its norm of 0 are slow (degenerate) directions
DEGENERATE = 1e-2


def _linearised(ode, S: np.ndarray):
    """Eigenvalues of the linearised covariance flow at ``S`` (packed coordinates, central differences of the
    matrix form :func:`symbolic_tpde.gaussian.matrix_form.covariance_velocity`; exact up to round-off for a
    quadratic right-hand side), and its norm; ``None`` without a matrix form."""
    from ..gaussian.matrix_form import covariance_velocity

    if not getattr(ode.schedule, "is_constant", False):
        return None
    w = ode.schedule(0.0)
    d = S.shape[0]
    if covariance_velocity(w, S) is None:
        return None
    m = d * (d + 1) // 2
    h = 1e-5 * max(float(np.linalg.norm(S)), 1e-300)
    J = np.zeros((m, m))
    for j in range(m):
        e = np.zeros(m)
        e[j] = h
        Ep = layout.unpack(np.concatenate([np.zeros(d), e]), d)[1]
        Fp = layout.pack(np.zeros(d), covariance_velocity(w, S + Ep))[d:]
        Fm = layout.pack(np.zeros(d), covariance_velocity(w, S - Ep))[d:]
        J[:, j] = (Fp - Fm) / (2 * h)
    ev = np.linalg.eigvals(J)
    return ev[np.argsort(-ev.real)], float(np.linalg.norm(J, 2))


def detect_plateau(ts, Sigmas, ode, still_there: bool = False) -> dict | None:
    """The longest plateau of the samples ``Sigmas[k] = Σ(ts[k])`` (module docstring) that the trajectory
    leaves by ``ts[-1]`` (``still_there``: or one it has not left by then, reported as such), as a dict (``rank``, ``t_start``, ``t_end``, ``Sigma``, ``eigenvalues``, ``alignment``,
    ``then``, ``linearisation``, ``label``, ``evidence``), or ``None``."""
    ts = np.asarray(ts, float)
    S = np.asarray(Sigmas, float)
    S = 0.5 * (S + np.transpose(S, (0, 2, 1)))
    n, d = len(ts), S.shape[1]
    norms = np.linalg.norm(S, axis=(1, 2))
    best = None
    for a in range(n):
        if norms[a] <= 0:
            continue
        b = a
        while b + 1 < n and np.linalg.norm(S[b + 1] - S[a]) <= PLATEAU_TOL * norms[a]:
            b += 1
        if math.log10(ts[b] / ts[a]) < MIN_DECADES:
            continue
        if (b == n - 1 or np.linalg.norm(S[-1] - S[a]) <= 0.5 * norms[a]) and not still_there:
            continue
        lam = np.linalg.eigvalsh(S[a])
        r = int((lam > RANK_FLOOR * lam[-1]).sum())
        if r >= d:
            continue
        if best is None or ts[b] / ts[a] > ts[best[1]] / ts[best[0]]:
            best = (a, b, r)
    if best is None:
        return None
    a, b, r = best
    mid = (a + b) // 2
    Sp = S[mid]
    lam, U = np.linalg.eigh(Sp)
    align = float(lam[-1] / lam.sum()) if lam.sum() > 0 else float("nan")
    trp, trT = float(np.trace(Sp)), float(np.trace(S[-1]))
    lamT = np.linalg.eigvalsh(S[-1])
    rT = int((lamT > RANK_FLOOR * max(lamT[-1], 1e-300)).sum()) if lamT[-1] > 0 else 0
    if b == n - 1:
        then = f"still within {PLATEAU_TOL:g} of it at t = {ts[-1]:.3g} (a later escape is not excluded)"
    elif trT < 0.5 * trp:
        then = f"decays: tr Σ = {trT:.3g} at t = {ts[-1]:.3g}, a factor {trp / max(trT, 1e-300):.3g} below the plateau"
    elif trT > 2 * trp:
        then = f"grows: tr Σ = {trT:.3g} at t = {ts[-1]:.3g}, a factor {trT / trp:.3g} above the plateau"
    else:
        then = f"moves away: ‖Σ({ts[-1]:.3g}) - Σ_p‖ = {np.linalg.norm(S[-1] - Sp):.3g} (rank {rT} there)"
    shape = (f"{lam[-1]:.4g}·uuᵀ, u = {np.array2string(U[:, -1], precision=6)}, alignment λ₁/tr Σ = "
             f"{align:.7f}" if r == 1 else f"Σ_p = {np.array2string(Sp, precision=6)}")
    evidence = [f"plateau: Σ(t) stays within {PLATEAU_TOL:g} (relative) of {shape} for t ∈ [{ts[a]:.3g}, "
                f"{ts[b]:.3g}] (samples at T/2ᵏ; {math.log10(ts[b] / ts[a]):.2g} decades), rank {r} "
                f"(eigenvalues above {RANK_FLOOR:g} λ_max: {np.array2string(lam[::-1], precision=4)}); then it {then}"]
    lin = _linearised(ode, Sp)
    lin_d = None
    if lin is not None:
        ev, nJ = lin
        tol = DEGENERATE * nJ
        k = int((np.abs(ev.real) <= tol).sum())
        lin_d = {"eigenvalues_real": ev.real, "eigenvalues_imag": ev.imag, "degenerate": k, "tolerance": tol}
        evidence.append(f"linearised flow at the plateau state (central differences of the matrix form): "
                        f"eigenvalues {np.array2string(ev.real, precision=4)}; {k} within {tol:.2g} "
                        f"({DEGENERATE:g} ‖J‖) of 0: slow, degenerate directions (a continuum of near-equilibria "
                        "along which the drift is nonlinear, hence slow; the linearisation cannot decide the "
                        "escape, the trajectory does)")
    label = (f"near rank {r} from t ≈ {ts[a]:.3g} and {then}: a plateau or the limit" if b == n - 1 else
             f"metastable near rank {r} until t ≈ {ts[b]:.3g} (from t ≈ {ts[a]:.3g}), then {then}")
    return {"rank": r, "open": b == n - 1, "t_start": float(ts[a]), "t_end": float(ts[b]), "Sigma": Sp, "eigenvalues": lam[::-1],
            "alignment": align, "then": then, "linearisation": lin_d, "label": label, "evidence": evidence}
