"""Stiff continuation of rank-histogram draws the explicit batch left unresolved (README Mathematics §4).

With ``V = BᵀB`` ill-conditioned, the covariance flow ``dΣ/dt = VΣAΣ + ΣAᵀΣVᵀ`` (softmax; ℓ2 the analogous
tilted field) is stiff: the fast modes of the linearisation scale like ``‖V‖‖A‖‖Σ‖`` while the directions of
``range(A + Aᵀ)`` decay only like ``1/(λ_min(V) t)``.  The explicit Dormand-Prince batch of
:func:`.clustering.classify_batch` then exhausts its step budget or stops at ``T`` before those directions reach
their ``O(1/t)`` regime (verdict ``"undetermined"``).  Here each such row is continued alone from where the batch
stopped, on the package's one integrator (:func:`symbolic_tpde.numerics.solve.integrate`) with scipy's implicit
``Radau`` method and the generated Jacobian ``ode.jac`` (covariance block only: the mean is frozen at 0, exact
because ``dΣ/dt`` does not involve ``α`` for softmax and ℓ2, :func:`.clustering.covariance_closed`), to a longer
horizon ``T_ext`` with a budget of right-hand-side evaluations per row (deterministic; a wall-clock cap only as
a safety net).  The verdict is :func:`.clustering.classify_pair` on
``(Σ(T_ext/10), Σ(T_ext))``, the same persistence rule as at ``T``.

Rule (nothing is forced): a row is settled only if the continuation reached ``T_ext`` and ``classify_pair`` gives
``"rank"``/``"collapse"`` with rank ``≤ dim ker(A + Aᵀ)`` (the bound of README Mathematics §4); otherwise it stays
unresolved and ``reason`` says why (cap reached at time ``t``, still undetermined at ``T_ext``, or a persistence
rank above the bound, i.e. a direction whose decay time exceeds ``T_ext``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..gaussian import pack_state, unpack_state


@dataclass
class Resolution:
    result: object | None        # ClusteringResult at T_ext when settled, else None
    reason: str                  # "" when settled; otherwise why the row stays unresolved
    t_reached: float             # time the continuation reached
    Sigma: np.ndarray            # Σ at t_reached (or at T_ext)


def covariance_flow(ode):
    """``(f, jac)`` of the covariance block alone, ``α`` frozen at 0 (packed upper triangle of ``Σ``)."""
    d = ode.d
    z0 = np.zeros(d)

    def f(t, y):
        return np.asarray(ode.rhs(t, np.concatenate([z0, y])), float)[d:]

    def jac(t, y):
        return np.asarray(ode.jac(t, np.concatenate([z0, y])), float)[d:, d:]

    return f, jac


def continue_stiff(ode, Sigma_t, t0: float, T_ext: float, tr0: float, bound: int, *, rtol: float = 1e-6,
                   max_nfev: int = 40_000, max_seconds: float = 30.0, method: str = "Radau") -> Resolution:
    """Continue ``Σ`` from ``(t0, Sigma_t)`` to ``T_ext`` with an implicit method (module docstring)."""
    from ..numerics.solve import Status, integrate
    from ..analysis.clustering import classify_pair

    d = ode.d
    S = 0.5 * (np.asarray(Sigma_t, float) + np.asarray(Sigma_t, float).T)
    y0 = pack_state(np.zeros(d), S)[d:]
    f, jac = covariance_flow(ode)
    t_mid = T_ext / 10
    if t0 >= t_mid:
        raise ValueError(f"continuation must start before T_ext/10 = {t_mid:g}, got t0 = {t0:g}")
    # atol: 1e-13 tr Σ sits four decades below the classifier's floor 1e-9 max(tr Σ0, tr Σ(T)), so
    # absolute errors cannot create or remove a persistent direction
    sol = integrate(f, y0, (float(t0), float(T_ext)), method=method, rtol=rtol, atol=1e-13 * float(np.trace(S)),
                    jac=jac, t_eval=[t_mid, T_ext], max_nfev=max_nfev, max_seconds=max_seconds)

    def mat(y):
        return unpack_state(np.concatenate([np.zeros(d), y]), d)[1]

    if sol.status != Status.OK or len(sol.t) < 2:
        why = f"budget of {max_nfev} evaluations spent" if sol.status == Status.STALLED else str(sol.status)
        return Resolution(None, f"stiff {method} continuation stopped at t = {sol.t_end:.3g} ({why})",
                          float(sol.t_end), mat(sol.y_end if sol.y_end is not None else sol.y[-1]))
    S_mid, S_end = mat(sol.y[0]), mat(sol.y[1])
    r = classify_pair(S_mid, S_end, t_mid, T_ext, tr0)
    if r.kind in ("rank", "collapse") and (r.rank or 0) <= bound:
        return Resolution(r, "", T_ext, S_end)
    why = r.label() if r.kind != "rank" else f"persistence rank {r.rank} > bound {bound}"
    return Resolution(None, f"{why} at T = {T_ext:g} (stiff {method})", T_ext, S_end)
