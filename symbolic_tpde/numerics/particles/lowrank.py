"""Softmax attention with low-rank heads at large ``d`` (trained models): particles and the matrix moment ODE.

A layer holds ``H`` heads, each given by its factors ``Q_h, K_h (k, d)``, ``Vv_h (v, d)``, ``WO_h (d, v)``:
``A_h = K_hᵀ Q_h / √k`` and the value ``V_h = WO_h Vv_h`` (README Mathematics §2; query ``x``, key ``y``,
kernel ``exp(<A_h x, y>) = (K_h y)·(Q_h x)/√k``).  Nothing here forms a ``d × d`` matrix per head: the
particle field is ``Σ_h WO_h Vv_h Σ_j softmax_j((Q_h x_i)·(K_h x_j)/√k) x_j`` through BLAS on ``(n, k)``
blocks (stable log-sum-exp per row), and the softmax moment ODE (arXiv 2501.18322, §3)

    dα/dt = Σ_h V_h(α + Σ A_h α),        dΣ/dt = Σ_h (V_h Σ A_h Σ + (V_h Σ A_h Σ)ᵀ)

is evaluated numerically in matrix form (products through the factors: ``O(d² k)`` per head) on the full
``Σ`` (state ``(α, vec Σ)``, ``d + d²`` numbers), since no entrywise symbolic form is needed.  Layers are
time-dependent weights: layer ``l`` acts on ``[l τ, (l+1) τ)``.  Integration: the package's integrator
(:func:`.solve.integrate`, fixed-step ``rk4`` by default, breakpoints at the layer ends, blow-up monitor on
``tr Σ + |α|²``); particles by the same integrator's fixed-step classical RK4 (the field is the costly part).
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np


def particle_field(X: np.ndarray, layer) -> np.ndarray:
    """``dX/dt`` of ``n`` tokens ``X (n, d)`` under one layer ``(Q, K, Vv, WO)`` with shapes
    ``(H, k, d), (H, k, d), (H, v, d), (H, d, v)``."""
    Q, K, Vv, WO = layer
    k = Q.shape[1]
    out = np.zeros_like(X)
    for h in range(Q.shape[0]):
        S = (X @ Q[h].T) @ (X @ K[h].T).T / np.sqrt(k)       # (n, n): <A x_i, x_j>
        S -= S.max(axis=1, keepdims=True)
        P = np.exp(S)
        P /= P.sum(axis=1, keepdims=True)
        out += (P @ (X @ Vv[h].T)) @ WO[h].T
    return out


def simulate_layers(X0, layers, tau: float = 1.0, steps_per_layer: int = 10, save: bool = True):
    """Fixed-step classical RK4 (:func:`.rk.rk_solve`, the :data:`.rk.RK4` tableau) with ``steps_per_layer``
    steps on each layer (``[l τ, (l+1) τ)``); returns the clouds at ``t = 0, τ, 2τ, …`` (``(L + 1, n, d)``)
    when ``save``, else the last one."""
    from ..ode.rk import rk_solve

    X = np.array(X0, dtype=float)
    shape = X.shape
    out = [X.copy()] if save else None
    for l, layer in enumerate(layers):
        def F(t, Y, layer=layer):
            return particle_field(Y.reshape(shape), layer).reshape(1, -1)

        X = rk_solve(F, l * tau, X.reshape(1, -1), (l + 1) * tau, method="rk4",
                     steps=steps_per_layer).y[0].reshape(shape)
        if save:
            out.append(X.copy())
    return np.array(out) if save else X


def moment_rhs(alpha: np.ndarray, Sigma: np.ndarray, layer) -> tuple[np.ndarray, np.ndarray]:
    """``(dα/dt, dΣ/dt)`` of the softmax moment ODE for one layer (module docstring), through the factors."""
    Q, K, Vv, WO = layer
    k = Q.shape[1]
    da = np.zeros_like(alpha)
    dS = np.zeros_like(Sigma)
    for h in range(Q.shape[0]):
        SK = Sigma @ K[h].T                                  # (d, k)
        QS = Q[h] @ Sigma                                     # (k, d)
        SAa = SK @ (Q[h] @ alpha) / np.sqrt(k)                # Σ A α
        da += WO[h] @ (Vv[h] @ (alpha + SAa))
        M = WO[h] @ ((Vv[h] @ SK) @ QS) / np.sqrt(k)          # V Σ A Σ
        dS += M + M.T
    return da, dS


def integrate_moments(alpha0, Sigma0, layers, tau: float = 1.0, *, method: str = "rk4",
                      steps_per_layer: int = 10, rtol: float = 1e-8, blowup: bool = True):
    """Integrate the matrix moment ODE over ``len(layers)`` layers; returns the
    :class:`~.solve.Solution` (state ``(α, vec Σ)``) evaluated at the layer ends ``t = 0, τ, …, Lτ``."""
    from ..ode.solve import BlowupMonitor, integrate

    alpha0 = np.asarray(alpha0, float)
    d = alpha0.size
    L = len(layers)
    ends = [tau * (l + 1) for l in range(L)]

    def f(t, y):
        l = min(bisect_right(ends, t), L - 1)     # the integrator evaluates a segment at its left limits
        da, dS = moment_rhs(y[:d], y[d:].reshape(d, d), layers[l])
        return np.concatenate([da, dS.reshape(-1)])

    diag = np.zeros(d + d * d)
    diag[d + np.arange(d) * (d + 1)] = 1.0
    mon = None
    if blowup:
        mon = BlowupMonitor(lambda y: float(diag @ y + y[:d] @ y[:d]),
                            lambda y, fy: float(diag @ fy + 2 * y[:d] @ fy[:d]), error_run=False)
    y0 = np.concatenate([alpha0, np.asarray(Sigma0, float).reshape(-1)])
    return integrate(f, y0, (0.0, tau * L), method=method, rtol=rtol, breakpoints=ends[:-1],
                     t_eval=[0.0] + ends, events=[mon] if mon else [], steps=steps_per_layer * L if method == "rk4" else None)
