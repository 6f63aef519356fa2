"""Stiff continuation of rank-histogram draws the explicit batch left unresolved (README Mathematics §4).

With ``V = BᵀB`` ill-conditioned, the covariance flow ``dΣ/dt = VΣAΣ + ΣAᵀΣVᵀ`` (softmax; ℓ2 the analogous
tilted field) is stiff: the fast modes of the linearisation scale like ``‖V‖‖A‖‖Σ‖`` while the directions of
``range(A + Aᵀ)`` decay only like ``1/(λ_min(V) t)``.  The explicit Dormand-Prince batch of
:func:`.verdict.classify_many` then exhausts its step budget or stops at ``T`` before those directions reach
their ``O(1/t)`` regime (verdict ``"undetermined"``).  Here each such row is continued alone from where the batch
stopped, on the package's one integrator (:func:`symbolic_tpde.numerics.ode.solve.integrate`) with scipy's implicit
``Radau`` method and the generated Jacobian ``ode.jac`` (covariance block only: the mean is frozen at 0, exact
because ``dΣ/dt`` does not involve ``α`` for softmax and ℓ2, :func:`.clustering.covariance_closed`), to a longer
horizon ``T_ext`` with a budget of right-hand-side evaluations per row (deterministic; a wall-clock cap only as
a safety net).  The verdict is the classifier's own rule for the limit
(:func:`.verdict._limit_from_samples` on ``Σ(T_ext/2ᵏ)``: settled, or the ``t^-p`` law extrapolated, the theorems'
rank bound applied), as at ``T``.

Rule (nothing is forced): a row is settled only if the continuation reached ``T_ext`` and that rule gives
``"rank"`` (rank 0 is collapse) with rank ``≤ dim ker(A + Aᵀ)`` (the bound of README Mathematics §4); otherwise it stays
unresolved and ``reason`` says why (cap reached at time ``t``, still undetermined at ``T_ext``, or a persistence
rank above the bound, i.e. a direction whose decay time exceeds ``T_ext``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..gaussian import pack_state, unpack_state


@dataclass
class Resolution:
    result: object | None        # the Verdict at T_ext when settled, else None
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


#: the continuation samples Σ(T_ext/2ᵏ), k = DOUBLINGS … 0 (the classifier's limit rule reads the last four of
#: them; its own run keeps more, :data:`symbolic_tpde.analysis.verdict.K_DOUBLINGS`, for the plateau detector):
#: a start before T_ext/2¹⁰ is what a continuation needs, not one before T_ext/2²⁰
DOUBLINGS = 10


def continue_stiff(ode, Sigma_t, t0: float, T_ext: float, Sigma0, bound: int, *, rtol: float = 1e-6,
                   max_nfev: int = 40_000, max_seconds: float = 30.0, method: str = "Radau") -> Resolution:
    """Continue ``Σ`` from ``(t0, Sigma_t)`` to ``T_ext`` with an implicit method (module docstring); ``Sigma0``
    is the trajectory's initial covariance (the theorems and the classifier's floor refer to it)."""
    from ..numerics.ode.solve import Status, integrate
    from ..analysis.theorems import facts_for
    from ..analysis.verdict import _limit_from_samples

    d = ode.d
    S = 0.5 * (np.asarray(Sigma_t, float) + np.asarray(Sigma_t, float).T)
    y0 = pack_state(np.zeros(d), S)[d:]
    f, jac = covariance_flow(ode)
    ts = T_ext / 2.0 ** np.arange(DOUBLINGS, -1, -1)
    if t0 >= ts[0]:
        raise ValueError(f"continuation must start before T_ext/2^{DOUBLINGS} = {ts[0]:g}, got t0 = {t0:g}")
    # atol: 1e-13 tr Σ sits below the classifier's floor 1e-12 tr Σ₀ times the growth of tr Σ it allows
    sol = integrate(f, y0, (float(t0), float(T_ext)), method=method, rtol=rtol, atol=1e-13 * float(np.trace(S)),
                    jac=jac, t_eval=ts, max_nfev=max_nfev, max_seconds=max_seconds)

    def mat(y):
        return unpack_state(np.concatenate([np.zeros(d), y]), d)[1]

    if sol.status != Status.OK or len(sol.t) < len(ts):
        why = f"budget of {max_nfev} evaluations spent" if sol.status == Status.STALLED else str(sol.status)
        return Resolution(None, f"stiff {method} continuation stopped at t = {sol.t_end:.3g} ({why})",
                          float(sol.t_end), mat(sol.y_end if sol.y_end is not None else sol.y[-1]))
    Sig = np.array([mat(y) for y in sol.y])
    facts = facts_for(ode.schedule, Sigma0, T_ext)
    base = dict(source="numerical", horizon=T_ext, facts=facts.as_list(), covariance_only=True)
    v = _limit_from_samples(Sig, ode, np.asarray(Sigma0, float), T_ext, rtol, True, facts,
                            [f"stiff {method} continuation (rtol {rtol:g}) from t = {t0:g}"], base)
    if v.outcome == "rank" and v.rank <= bound:
        return Resolution(v, "", T_ext, Sig[-1])
    why = v.label if v.outcome != "rank" else f"rank {v.rank} > bound {bound}"
    return Resolution(None, f"{why} at T = {T_ext:g} (stiff {method})", T_ext, Sig[-1])
