"""Gaussian (normal) moment closure for kinds that do not preserve Gaussians: an APPROXIMATION.

For any field ``Γ_μ(x)`` the mean and covariance of ``μ_t`` obey, exactly (differentiate ``E[X]`` and
``E[(X - α)(X - α)ᵀ]`` along ``dX/dt = Γ_μ(X)``),

    dα/dt = E_μ[Γ_μ(X)],        dΣ/dt = E_μ[Γ_μ(X)(X - α)ᵀ] + E_μ[(X - α)Γ_μ(X)ᵀ].

When the field is not affine ``μ_t`` leaves the Gaussian family (:mod:`.witness`) and these equations are not
closed: they need the whole law.  The **Gaussian closure** evaluates both expectations as if ``μ_t = N(α, Σ)``
(the normal closure of moment-closure methods); the result is an ODE in ``(α, Σ)`` that is *not* the law's true
moment evolution, only an approximation whose error is measured against particles (``tests/test_closures.py``,
``numerics/closure_error.py``, README table).  Every object built here carries :data:`LABEL`.

Derived here (SymPy, entrywise, any concrete ``d``): **unnormalised softmax**, ``Γ(x) = V ∫ y e^{<Ax,y>} dμ(y)``.
With the log moment generating function ``K(c) = cᵀα + ½cᵀΣc`` of ``N(α, Σ)``,
``∫ y e^{cᵀy} dN = ∇_c e^{K(c)} = ∇K(c) e^{K(c)}``, so at ``c = Ax``: ``Γ(x) = V p(x) e^{q(x)}`` with ``p``
polynomial and ``q`` quadratic in ``x``.  Every right-hand side entry is then ``E_x[P(x) e^{q(x)}]`` with ``P``
polynomial, computed by completing the square (:func:`exp_quadratic_expectation`): for
``q(x) = q₀ + bᵀx + ½xᵀMx`` and ``x = α + z``,

    E[P(x) e^{q(x)}] = Z · E_{N(m, C)}[P],   C = (I - ΣM)⁻¹Σ = (Σ⁻¹ - M)⁻¹,   g = b + Mα,   m = α + Cg,
    Z = det(I - ΣM)^{-1/2} exp(q₀ + bᵀα + ½αᵀMα + ½gᵀCg),

and the polynomial moments under ``N(m, C)`` from the moment generating function
(:func:`.moments.gaussian_expectation`).  Finite iff ``Σ⁻¹ - M ≻ 0``; for unnormalised softmax
``M = AᵀΣA``, i.e. ``‖Σ^{1/2}AΣ^{1/2}‖₂ < 1`` (the same bound as the finiteness of the interaction energy,
MATH.md §5).  The condition is kept as the ``LDLᵀ`` pivots of ``Σ - ΣMΣ`` (``system.conditions``).

Not here: **sigmoid** (``E[σ(u)]`` for Gaussian ``u`` has no closed form): its closure is evaluated by
Gauss–Hermite quadrature in :mod:`symbolic_tpde.gaussian.closure`.  **Masked with a sink**: no closure of
fixed size exists in this form: with a sink the law of a token depends on its position from ``t = 0⁺``
(:func:`.witness.masked_sink_witness`), so a Gaussian closure must be one Gaussian *per position*,
``(α(s), Σ(s))`` for ``s ∈ [0, 1]``, coupled through the causal average over ``s' ≤ s``: an integro-
differential system in ``s``, not an ODE in ``(α, Σ)``; not built.
"""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

from .moments import gaussian_expectation, gaussian_symbols, head_param_symbols
from .system import OdeSystem, ParamBlock
from .tilt import sym_vector

#: printed wherever a closure appears
LABEL = "closure (approximate)"
#: kinds with a symbolic Gaussian closure here (sigmoid: quadrature, gaussian.closure)
SYMBOLIC_CLOSURES = ("softmax_unnormalized",)


def exp_quadratic_expectation(polys, exponent, x: list, alpha: sp.Matrix, Sigma: sp.Matrix):
    """``[E[P(x) e^{q(x)}] for P in polys]`` under ``x ~ N(α, Σ)`` (``q`` = ``exponent``, quadratic in ``x``),
    by completing the square (module docstring), and the matrix ``Σ - ΣMΣ`` that must stay positive definite.
    ``P`` must be polynomial in ``x`` and ``q`` at most quadratic (checked: an error otherwise)."""
    d = len(x)
    at0 = {xi: 0 for xi in x}
    Mx = sp.hessian(exponent, x)
    if any(e.has(*x) for e in Mx):
        raise ValueError("the exponent is not quadratic in x")
    # the algebra runs on placeholder symbols for M, b, q₀ (substituted at the end): products of the
    # expressions themselves trigger SymPy's expanding matrix simplification (minutes at d = 3)
    M = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"_cM_{min(i, j)}_{max(i, j)}"))
    b, q0 = sym_vector("_cb", d), sp.Symbol("_cq0")
    back = {q0: exponent.xreplace(at0), **{b[i]: sp.diff(exponent, x[i]).xreplace(at0) for i in range(d)},
            **{M[i, j]: Mx[i, j] for i in range(d) for j in range(i, d)}}
    g = b + M * alpha
    I_SM = sp.eye(d) - Sigma * M
    det = I_SM.det(method="berkowitz")
    C = I_SM.adjugate(method="berkowitz") * Sigma / det
    C = (C + C.T) / 2     # (Σ⁻¹ - M)⁻¹ is symmetric; the adjugate form need not be written so
    m = alpha + C * g
    Z = det ** sp.Rational(-1, 2) * sp.exp(q0 + (b.T * alpha)[0, 0] + (alpha.T * M * alpha)[0, 0] / 2
                                          + (g.T * C * g)[0, 0] / 2)
    # polynomial moments with placeholder mean/covariance symbols, then substituted (keeps the MGF small)
    mu, K = sym_vector("_cm", d), sp.Matrix(d, d, lambda i, j: sp.Symbol(f"_cK_{min(i, j)}_{max(i, j)}"))
    sub = {**{mu[i]: m[i] for i in range(d)}, **{K[i, j]: C[i, j] for i in range(d) for j in range(i, d)}}
    out = [(Z * gaussian_expectation(sp.expand(P), x, mu, K).xreplace(sub)).xreplace(back) for P in polys]
    return out, (Sigma - Sigma * M * Sigma).xreplace(back)


def _softmax_unnormalized_field(prm, alpha, Sigma, x):
    """``Γ(x) = V p(x) e^{q(x)}`` (module docstring): ``p = ∇K(Ax)``, ``q = K(Ax)``."""
    d = len(x)
    c = sym_vector("_c", d)
    K = (c.T * alpha)[0, 0] + (c.T * Sigma * c)[0, 0] / 2
    Ax = prm["A"] * sp.Matrix(x)
    at = {c[i]: Ax[i] for i in range(d)}
    p = sp.Matrix([sp.diff(K, ci).xreplace(at) for ci in c])
    return prm["V"], p, K.xreplace(at)


_FIELDS = {"softmax_unnormalized": _softmax_unnormalized_field}


@lru_cache(maxsize=16)
def closure_system(kind: str, d: int) -> OdeSystem:
    """The Gaussian-closure moment ODE of one head of ``kind`` (:data:`SYMBOLIC_CLOSURES`) in dimension ``d``, as
    an :class:`~.system.OdeSystem` (states and parameter names as :func:`.moments.derive_gaussian_system`:
    ``alpha_i``, ``Sigma_i_j``; ``h0_A_i_j``, ``h0_V_i_j``), generated and integrated like the exact systems.
    ``origin["form"]`` is :data:`LABEL`; ``conditions``: the pivots that keep the expectations finite."""
    if kind not in _FIELDS:
        raise KeyError(f"no symbolic Gaussian closure for {kind!r} (have: {', '.join(_FIELDS)}; sigmoid: "
                       f"quadrature in symbolic_tpde.gaussian.closure)")
    alpha, Sigma = gaussian_symbols(d)
    prm = head_param_symbols(0, kind, d, d)
    x = list(sym_vector("_x", d))
    V, p, q = _FIELDS[kind](prm, alpha, Sigma, x)
    polys = list(p) + [p[i] * (x[j] - alpha[j]) for i in range(d) for j in range(d)]
    E, N = exp_quadratic_expectation(polys, q, x, alpha, Sigma)
    Ep = sp.Matrix(E[:d])
    Epx = sp.Matrix(d, d, E[d:])
    drift = V * Ep
    G = V * Epx
    rhs = list(drift) + [G[i, j] + G[j, i] for i in range(d) for j in range(i, d)]
    states = tuple(list(alpha) + [Sigma[i, j] for i in range(d) for j in range(i, d)])
    params, layout = [], []
    for name in ("A", "V"):
        layout.append(ParamBlock(("heads", 0, name), (d, d), len(params)))
        params.extend(list(prm[name]))
    conds = tuple(sp.StrictGreaterThan(pv, 0, evaluate=False) for pv in _ldl_pivots(N))
    origin = {"variant": kind, "d": d, "form": LABEL, "closure": "Gaussian (normal) closure",
              "assumptions": (f"{LABEL}: the law is replaced by N(alpha, Sigma) inside the exact moment "
                              "equations; the result is NOT the true moment evolution (error measured against "
                              "particles)", "expectations finite iff Sigma^-1 - A^T Sigma A > 0")}
    return OdeSystem(states=states, params=tuple(params), rhs=tuple(rhs), param_layout=tuple(layout),
                     origin=origin, conditions=conds)


def _ldl_pivots(N: sp.Matrix):
    """Pivots of ``N = L D Lᵀ`` (no pivoting), kept unexpanded: ``N`` is positive definite iff all are > 0."""
    d = N.shape[0]
    W = sp.Matrix(N)
    D = []
    for k in range(d):
        D.append(W[k, k])
        for i in range(k + 1, d):
            for j in range(k + 1, d):
                W[i, j] = W[i, j] - W[i, k] * W[k, j] / W[k, k]
    return D
