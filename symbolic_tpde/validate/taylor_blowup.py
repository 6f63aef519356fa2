"""High-precision blow-up time of the softmax covariance equation by Taylor series in ``t`` (mpmath): the
independent reference for the numerical ``T*`` of ``tpde gaussian`` and ``tpde classify``.

The equation ``Σ' = Σ_h (V_h Σ A_h Σ + Σ A_hᵀ Σ V_hᵀ)`` (softmax heads, arXiv 2501.18322, the Gaussian moment
ODEs; closed in ``Σ``) is quadratic, so the Taylor coefficients of ``Σ`` at ``t_n`` follow from the Cauchy
product ``Σ_{k+1} = (Z_k + Z_kᵀ)/(k + 1)``, ``Z_k = Σ_h Σ_{i+j=k} (V_h Σ_i)(A_h Σ_j)``, exactly, in ``dps``
digits.  Step: ``h = θ ρ`` with ``ρ`` the radius of convergence estimated from the last two coefficients
(``(|Σ_0|/|Σ_k|)^{1/k}``), so the truncation error of a step is about ``θ^K |Σ|`` (``θ = 0.3``, ``K = 60``:
``1e-31``).  Near the singularity ``r = tr Σ ≈ c(T* - t)^{-p}`` with ``c``, ``p`` slowly varying, the local
estimate ``T_n = t_n - q/q'`` with ``q = r/r'`` (exact for a pure power law; ``r``, ``r'``, ``r''`` from the
coefficients) converges as the steps approach ``T*``; the run stops where ``0 < T_n - t_n < tau_stop``.

Error: the last change of ``T_n`` (the sequence converges geometrically, its ratio ≈ 0.7 measured) plus the
truncation error, checked by agreement between two settings of ``(dps, K, θ)``.  Measured on fuzz case 213 of
``numerics/fuzz_verdict.py --seed 8302`` (softmax, d = 3, V = I + skew): ``(40, 60, 0.3)`` and ``(35, 45, 0.2)``
agree to 4e-22 at equal ``T_n - t_n``, ``T* = 1.69410981149523905348``; the steps there shrink to ``ρ ≈ 2e-5``
near ``t = 1.6905``, where ``tr Σ ≈ 4e6`` grows slowly (complex singularities near the real axis), then
approach ``T*`` geometrically.  Cost: ~0.25 s per step at ``K = 60`` (pure-Python mpmath), 150-230 steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TaylorBlowup", "taylor_blowup_time"]


@dataclass(frozen=True)
class TaylorBlowup:
    """``blowup_time`` (an ``mpmath.mpf`` of ``dps`` digits), ``last_change`` (``|T_n - T_{n-1}|`` at the
    stop), ``steps``, ``t_end`` (the last step's time) and the settings."""

    blowup_time: object
    last_change: float
    steps: int
    t_end: object
    dps: int
    order: int
    theta: float


def taylor_blowup_time(pairs, Sigma0, *, dps: int = 30, order: int = 60, theta: float = 0.3,
                       tau_stop: float = 1e-16, max_steps: int = 5000) -> TaylorBlowup:
    """``T*`` of ``Σ' = Σ_h V_hΣA_hΣ + ΣA_hᵀΣV_hᵀ`` from ``Σ(0) = Sigma0`` (module docstring); ``pairs``: the
    heads' ``(V_h, A_h)``.  Raises ``RuntimeError`` when ``max_steps`` steps do not reach the stop."""
    import mpmath

    with mpmath.workdps(dps):
        mpf = mpmath.mpf
        d = len(Sigma0)

        def M(X):
            return np.array([[mpf(float(x)) for x in row] for row in np.asarray(X, float)], dtype=object)

        heads = [(M(V), M(A)) for V, A in pairs]
        zero = np.full((d, d), mpf(0), dtype=object)
        S, t = M(Sigma0), mpf(0)
        prev = None
        for n in range(max_steps):
            c = [S]
            left = [[V.dot(S)] for V, _ in heads]
            right = [[A.dot(S)] for _, A in heads]
            for k in range(order):
                Z = zero
                for L, R in zip(left, right):
                    for i in range(k + 1):
                        Z = Z + L[i].dot(R[k - i])
                nxt = (Z + Z.T) / (k + 1)
                c.append(nxt)
                for (V, A), L, R in zip(heads, left, right):
                    L.append(V.dot(nxt))
                    R.append(A.dot(nxt))
            norm = [max(abs(x) for x in ci.ravel()) for ci in c]
            rho = min((norm[0] / norm[k]) ** (mpf(1) / k) for k in (order - 1, order))
            r, r1, r2 = (sum(c[k][j, j] for j in range(d)) for k in (0, 1, 2))
            q, dq = r / r1, 1 - r * 2 * r2 / r1 ** 2       # q = r/r', q' = 1 - r r''/r'^2
            Tn = t - q / dq
            change = abs(Tn - prev) if prev is not None else mpmath.inf
            prev = Tn
            if 0 < Tn - t < tau_stop:
                return TaylorBlowup(Tn, float(change), n + 1, t, dps, order, theta)
            h = theta * rho
            new = c[order]
            for k in range(order - 1, -1, -1):       # Horner
                new = c[k] + h * new
            S, t = (new + new.T) / 2, t + h
    raise RuntimeError(f"taylor_blowup_time: no blow-up reached in {max_steps} steps (t = {float(t):.6g})")
