"""Certified (non-)convexity of the interaction energy: signs of ``Hess E(U, U)`` proved with ``mpmath.iv``.

Route (README Mathematics §5, "Non-convexity"):

1. the Riemannian Hessian of the n-particle energy is derived symbolically
   (:func:`symbolic_tpde.symbolic.hessian.particle_hessian`: Christoffel symbols of ``g_X``, no numerics);
2. a candidate configuration ``X`` and direction ``U`` are searched numerically (closed-form numpy Hessian,
   :func:`symbolic_tpde.numerics.particles.energy.min_hessian_ratio`, seeded ``Generator``), then rounded to rationals;
3. the *symbolic* expression ``Uᵀ H(X) U`` is evaluated at the rational point in interval arithmetic
   (:func:`iv_eval`: every rational input and every operation is enclosed, so the true value lies in the
   interval); the sign is certified when the interval excludes 0;
4. the same expression is evaluated at ``dps`` and ``dps + 20`` digits (``mpmath.workdps``): the finer value
   must lie in the interval (up to its own round-off) and the two must agree to ~``dps - 5`` digits.

Interval endpoints are reported as decimal *strings* (``mpmath.nstr`` at ``dps`` digits, rounded outward by
one unit of the last digit so the printed interval still contains the enclosure).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import sympy as sp

from ..errors import InputError

__all__ = ["iv_eval", "mp_eval", "certify_form", "search_direction", "certify_particles", "to_fraction_array",
           "certified_inputs"]


def _rational_iv(r: sp.Rational):
    return mpmath.iv.mpf(int(r.p)) / mpmath.iv.mpf(int(r.q))


def iv_eval(expr: sp.Expr, env: dict, cache: dict | None = None):
    """Enclose ``expr`` in an ``mpmath.iv`` interval; ``env`` maps symbols to intervals (current ``iv.dps``).

    Supported nodes: Add, Mul, Pow (integer or half-integer exponents), exp, log, sqrt, rationals.  Anything
    else raises ``TypeError`` (never a silent float evaluation).
    """
    iv = mpmath.iv
    cache = {} if cache is None else cache
    if expr in cache:
        return cache[expr]
    if expr.is_Symbol:
        out = env[expr]
    elif expr.is_Integer or expr.is_Rational:
        out = _rational_iv(sp.Rational(expr))
    elif expr.is_Add:
        out = iv.mpf(0)
        for a in expr.args:
            out = out + iv_eval(a, env, cache)
    elif expr.is_Mul:
        out = iv.mpf(1)
        for a in expr.args:
            out = out * iv_eval(a, env, cache)
    elif expr.is_Pow:
        base = iv_eval(expr.base, env, cache)
        ex = expr.exp
        if ex.is_Integer:
            k = int(ex)
            out = base ** k if k >= 0 else 1 / base ** (-k)
        elif ex.is_Rational and ex.q == 2:
            r = iv.sqrt(base)
            k = int(ex.p)
            out = r ** k if k >= 0 else 1 / r ** (-k)
        else:
            raise TypeError(f"iv_eval: unsupported exponent {ex}")
    elif isinstance(expr, sp.exp):
        out = iv.exp(iv_eval(expr.args[0], env, cache))
    elif isinstance(expr, sp.log):
        out = iv.log(iv_eval(expr.args[0], env, cache))
    else:
        raise TypeError(f"iv_eval: unsupported node {type(expr).__name__}")
    cache[expr] = out
    return out


def mp_eval(expr: sp.Expr, env: dict) -> mpmath.mpf:
    """Plain ``mpmath`` evaluation at the current precision (``env``: symbol -> mpf)."""
    return sp.lambdify(list(env), expr, modules="mpmath")(*env.values())


def to_fraction_array(M: Any, name: str, max_den: int = 64) -> list:
    """Round an array to nearby rationals (``Fraction.limit_denominator``), nested lists of ``Fraction``."""
    arr = np.asarray(M, dtype=float)
    if not np.all(np.isfinite(arr)):
        raise InputError(name, "contains NaN or Inf")
    return [[Fraction(float(v)).limit_denominator(max_den) for v in row] for row in arr]


def certify_form(H: sp.Matrix, coords, X, U, dps: int = 50) -> dict:
    """Interval and high-precision values of ``Uᵀ H(X) U`` at rational ``X`` (n × d) and ``U`` (n × d)."""
    xs = [v for row in X for v in row]
    us = [v for row in U for v in row]
    N = len(coords)
    iv = mpmath.iv
    old = iv.dps
    try:
        iv.dps = dps + 10  # guard digits for the enclosure; the certificate is valid at any width
        env = {c: iv.mpf(v.numerator) / iv.mpf(v.denominator) for c, v in zip(coords, xs)}
        cache: dict = {}
        u = [iv.mpf(v.numerator) / iv.mpf(v.denominator) for v in us]
        total = iv.mpf(0)
        for i in range(N):
            for j in range(N):
                if H[i, j] != 0 and us[i] != 0 and us[j] != 0:
                    total += u[i] * u[j] * iv_eval(H[i, j], env, cache)
        lo, hi = (mpmath.mp.make_mpf(e) for e in total._mpi_)  # exact binary endpoints
    finally:
        iv.dps = old
    form = (sp.Matrix(us).T * H * sp.Matrix(us))[0, 0]
    values = []
    for p in (dps, dps + 20):
        with mpmath.workdps(p):
            env_mp = {c: mpmath.mpf(v.numerator) / v.denominator for c, v in zip(coords, xs)}
            values.append(mp_eval(form, env_mp))
    with mpmath.workdps(dps + 20):
        # the (dps+20)-digit value is within its own round-off (~1e-(dps+15) relative) of the enclosure
        slack = mpmath.mpf(10) ** (-dps - 15) * max(1, abs(values[1]))
        inside = bool(lo - slack <= values[1] <= hi + slack)
        # dps-digit evaluation vs dps+20: agreement to ~dps - 5 digits (round-off of a few hundred operations)
        agree = abs(values[0] - values[1]) <= mpmath.mpf(10) ** (-dps + 5) * max(1, abs(values[1]))
        width = hi - lo
        lo_s = mpmath.nstr(lo - abs(lo) * mpmath.mpf(10) ** (-dps + 1), dps)
        hi_s = mpmath.nstr(hi + abs(hi) * mpmath.mpf(10) ** (-dps + 1), dps)
        val_s = mpmath.nstr(values[0], dps)
    sign = -1 if hi < 0 else (1 if lo > 0 else 0)
    return {"interval": [lo_s, hi_s], "value": val_s, "sign": sign, "width": float(width),
            "in_interval": bool(inside), "precisions_agree": bool(agree), "dps": dps}


def search_direction(A, V, n: int, rng: np.random.Generator, want: str = "negative", tries: int = 200,
                     scale: float = 1.0) -> tuple[np.ndarray, np.ndarray, float]:
    """Seeded random search for ``X`` and ``U`` with the most negative (or positive) ``Hess E(U,U)/g(U,U)``.

    Uses the closed-form numpy Hessian; returns ``(X, U, ratio)`` (``U`` normalised to max-entry 1).
    """
    from scipy.linalg import eigh

    from ..numerics.particles import energy as en

    A = np.asarray(A, float)
    d = A.shape[0]
    best = (None, None, np.inf if want == "negative" else -np.inf)
    for _ in range(tries):
        X = rng.normal(scale=scale, size=(n, d))
        try:
            lam, vec = eigh(en.hessian_matrix(X, A, V), en.metric_matrix(X, A, V))
        except Exception:  # overflow at an extreme draw: skip it
            continue
        k = 0 if want == "negative" else -1
        if (want == "negative" and lam[k] < best[2]) or (want == "positive" and lam[k] > best[2]):
            U = vec[:, k].reshape(n, d)
            best = (X, U / np.max(np.abs(U)), float(lam[k]))
    return best


def certify_particles(A, V, n: int = 2, dps: int = 50, seed: int = 0, want: str = "negative",
                      ph=None, X=None, U=None) -> dict:
    """Find (or take) ``X``, ``U`` and certify the sign of the symbolic ``Hess E(U, U)`` (see module doc)."""
    from ..numerics.particles import energy as en
    from ..symbolic.hessian import particle_hessian

    A = np.asarray(A, float)
    d = A.shape[0]
    if ph is None:
        ph = particle_hessian(n, d, A.tolist(), np.asarray(V, float).tolist())
    if X is None or U is None:
        X, U, ratio = search_direction(A, V, n, np.random.default_rng(seed), want=want)
    Xq = to_fraction_array(X, "X")
    Uq = to_fraction_array(U, "U")
    numeric = en.hessian_form(np.array(Xq, float), A, V, np.array(Uq, float))
    cert = certify_form(ph.H, ph.coords, Xq, Uq, dps=dps)
    ok = cert["sign"] == (-1 if want == "negative" else 1) and cert["in_interval"] and cert["precisions_agree"]
    return {"certified_" + want: bool(ok), **cert, "numeric_float64": numeric,
            "point": [[str(v) for v in row] for row in Xq], "direction": [[str(v) for v in row] for row in Uq],
            "n": n, "d": d}


def _rat(v: sp.Expr) -> str:
    return str(sp.Rational(v))


def certified_inputs(A, V) -> dict:
    """What a certificate is *about*, in words and exact rationals (README Mathematics §5, "Non-convexity").

    The symbolic Hessian is built from the exact rationals of the float entries of ``A``, ``V``
    (:func:`symbolic_tpde.symbolic.metric.exact_matrix`: a float is the binary rational it denotes, e.g.
    ``0.3 = 5404319552844595/18014398509481984``), so the certificate is for those values.  Returns
    ``{"A", "V", "G"}`` as lists of rational strings, ``"binary_rationals"``: one entry per float whose exact
    value is not the short decimal it prints as (``{"entry", "float", "rational"}``), and ``"statement"``:
    sentences naming ``A``, ``V``, ``G = -AV⁻¹``, the energy and its normalisation, the metric, the layout of the
    point and direction (rows are particles) and that ``U`` is not normalised."""
    from ..symbolic.metric import exact_matrix, twisted_G

    Aq = exact_matrix(np.asarray(A, float).tolist(), "A")
    Vq = exact_matrix(np.asarray(V, float).tolist(), "V", Aq.shape[0])
    Gq = twisted_G(Aq, Vq)
    binary = []
    for name, M in (("A", A), ("V", V)):
        for i, row in enumerate(np.asarray(M, float).tolist()):
            for j, f in enumerate(row):
                q = Fraction(f)
                if q != Fraction(repr(f)):   # the float is not the decimal it prints as
                    binary.append({"entry": f"{name}[{i}][{j}]", "float": repr(f), "rational": str(q)})
    mat = lambda M: [[_rat(v) for v in M.row(i)] for i in range(M.rows)]   # noqa: E731
    txt = lambda M: "[" + ", ".join("[" + ", ".join(r) + "]" for r in mat(M)) + "]"   # noqa: E731
    words = [f"A = {txt(Aq)} (symmetric), V = {txt(Vq)}, G = -A V⁻¹ = {txt(Gq)} (symmetric positive "
             "definite, checked exactly by Sylvester's criterion)",
             "energy E_n(X) = (1/(2n²)) Σ_i Σ_j exp(x_jᵀ A x_i), i.e. E(μ) = ½ ∬ exp(<Ax, y>) dμ dμ at the "
             "empirical measure μ = (1/n) Σ_i δ_{x_i} (normalised so that E(δ₀) = ½)",
             "metric g_X(U, W) = (1/n) Σ_i Z_i <u_i, G w_i>, Z_i = (1/n) Σ_j exp(x_jᵀ A x_i) (the twisted "
             "Wasserstein metric restricted to n particles)",
             "quantity Hess E(U, U) = D²E(U, U) - Γ^k_ij U^i U^j ∂_k E (Riemannian Hessian, Christoffel symbols of "
             "g_X, derived symbolically) at the point X in the direction U",
             "layout: X (point) and U (direction) are n × d matrices whose row i is particle i (x_i, resp. its "
             "velocity u_i); entries are exact rationals",
             "U is not normalised: the interval encloses Hess E(U, U) for this U, not the ratio Hess E(U, U) / "
             "g_X(U, U); only its sign is scale-invariant",
             "inputs: each float entry of A and V was certified as the binary rational it denotes; the "
             "certificate is for those exact values"
             + ("" if not binary else " (" + "; ".join(f"{b['entry']} = {b['float']} was certified as "
                                                       f"{b['rational']}" for b in binary) + ")")]
    return {"A": mat(Aq), "V": mat(Vq), "G": mat(Gq), "binary_rationals": binary, "statement": words}
