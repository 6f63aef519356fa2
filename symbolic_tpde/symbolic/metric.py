"""The twisted Wasserstein metric ``g_μ(v, w) = ∫ Z_μ <v, G w> dμ``, ``G = -A V⁻¹`` (README Mathematics §5), symbolically.

* :func:`exact_matrix` turns user matrices (numbers, nested lists, numpy arrays, SymPy matrices) into exact
  SymPy matrices: integers stay integers, a float becomes an exact rational by one of the two rules of
  :data:`RATIONAL_RULES` (no guessing, no ``sympify`` of strings): ``mode="binary"`` (default, what ``tpde
  convexity`` certifies) the binary rational the double denotes, ``mode="decimal"`` (what ``tpde derive
  --scenario`` uses) the shortest decimal that reads back to the double, rationalised (``0.1 -> 1/10``).
  :func:`exact_array` does the same for scalars, vectors and rectangular matrices.
* :func:`twisted_G` builds ``G`` and checks it symmetric positive definite (``InputError`` naming ``A/V``).
* :func:`particle_metric`: the n-particle restriction ``g_X = (1/n) diag(Z_1, .., Z_n) ⊗ G`` in the coordinates
  ``vec X`` (row-major), and its block inverse ``n diag(1/Z_i) ⊗ G⁻¹``.
* :func:`gaussian_affine_metric`: ``∫ Z_μ <b + Jx, G(b' + J'x)> dμ = 2E[(b + Jm̃)ᵀG(b' + J'm̃) + tr(JᵀGJ'Σ̃)]``
  on ``μ = N(α, Σ)``, using the tilt of :mod:`.gaussian_energy`.
* :func:`gaussian_coordinate_metric`: the metric of the Gaussian manifold in ``θ = (α, Σ_{i≤j})``: the cheapest
  affine field realising ``θ̇`` (``b + Jα = α̇``, ``JΣ + ΣJᵀ = Σ̇``).  In ``d = 1`` the field is unique
  (``J = Σ̇/2Σ``); in ``d = 2`` ``J = (½Σ̇ + κK)Σ⁻¹`` with ``K = [[0, 1], [-1, 0]]`` and the quadratic
  ``a₀ + 2a₁κ + a₂κ²`` is minimised in closed form (``a₀ - a₁²/a₂``).
"""

from __future__ import annotations

import numbers
from fractions import Fraction
from typing import Any

import sympy as sp

from ..errors import InputError
from ..registry.layout import symmetric_rows
from .gaussian_energy import gaussian_coords, gaussian_energy, gaussian_tilt

__all__ = ["RATIONAL_RULES", "exact_array", "exact_matrix", "twisted_G", "particle_symbols", "particle_metric", "gaussian_affine_metric",
           "gaussian_coordinate_metric"]


#: the two documented rules for turning a float into an exact rational, in words (printed with the results)
RATIONAL_RULES = {
    "binary": "each float is the binary rational it denotes (e.g. 0.3 = 5404319552844595/18014398509481984)",
    "decimal": "each float is the shortest decimal that reads back to it, rationalised (the decimal as written "
               "in JSON, e.g. 0.1 -> 1/10, not the binary value of the double)",
}


def _exact(v: Any, name: str, mode: str = "binary") -> sp.Expr:
    """One number as an exact SymPy number; a float by the rule ``RATIONAL_RULES[mode]`` (``repr`` of a float
    is the shortest decimal that reads back to it, so no user string is parsed)."""
    if isinstance(v, sp.Basic):
        return v
    if isinstance(v, bool):
        raise InputError(name, "booleans are not numbers")
    if isinstance(v, numbers.Integral):
        return sp.Integer(int(v))
    if isinstance(v, Fraction):
        return sp.Rational(v.numerator, v.denominator)
    if isinstance(v, numbers.Real):
        f = float(v)
        if f != f or f in (float("inf"), float("-inf")):
            raise InputError(name, "contains NaN or Inf")
        if mode == "decimal":
            q = Fraction(repr(f))
            return sp.Rational(q.numerator, q.denominator)
        if mode != "binary":
            raise ValueError(f"unknown rational mode {mode!r} (one of {sorted(RATIONAL_RULES)})")
        return sp.Rational(f)  # the exact binary rational of the float
    raise InputError(name, f"entries must be numbers, got {type(v).__name__}")


def exact_array(value: Any, name: str, mode: str = "binary"):
    """A number, vector (``d × 1`` matrix) or rectangular matrix of numbers (nested lists / numpy) as exact
    SymPy objects by the rule ``RATIONAL_RULES[mode]`` (InputError naming ``name``)."""
    rows = value.tolist() if hasattr(value, "tolist") else value
    if not isinstance(rows, (list, tuple)):
        return _exact(rows, name, mode)
    if all(not isinstance(r, (list, tuple)) for r in rows):
        return sp.Matrix([[_exact(v, name, mode)] for v in rows])
    if len({len(r) if isinstance(r, (list, tuple)) else -1 for r in rows}) > 1:
        raise InputError(name, "rows have different lengths")
    return sp.Matrix([[_exact(v, name, mode) for v in r] for r in rows])


def exact_matrix(M: Any, name: str, d: int | None = None, mode: str = "binary") -> sp.Matrix:
    """Exact square SymPy matrix from numbers / nested lists / numpy / SymPy (InputError naming ``name``);
    floats by the rule ``RATIONAL_RULES[mode]``."""
    if isinstance(M, sp.MatrixBase):
        out = sp.Matrix(M)
    else:
        rows = M.tolist() if hasattr(M, "tolist") else M
        if not isinstance(rows, (list, tuple)) or not all(isinstance(r, (list, tuple)) for r in rows):
            raise InputError(name, "expected a square matrix given as a list of rows")
        if len({len(r) for r in rows}) > 1:
            raise InputError(name, "rows have different lengths")
        out = sp.Matrix([[_exact(v, name, mode) for v in r] for r in rows])
    if out.shape[0] != out.shape[1] or out.shape[0] == 0:
        raise InputError(name, f"expected a non-empty square matrix, got shape {out.shape}")
    if d is not None and out.shape != (d, d):
        raise InputError(name, f"expected shape {(d, d)}, got {out.shape}")
    return out


def _is_number_matrix(M: sp.Matrix) -> bool:
    return all(e.is_number for e in M)


def twisted_G(A: Any, V: Any) -> sp.Matrix:
    """``G = -A V⁻¹``; InputError (field ``V`` or ``A/V``) unless ``V`` is invertible and ``G`` is symmetric
    positive definite.  With symbolic entries the checks are done where SymPy can decide them."""
    A = exact_matrix(A, "A")
    V = exact_matrix(V, "V", A.shape[0])
    detV = sp.simplify(V.det())
    if detV == 0:
        raise InputError("V", "singular (G = -A V⁻¹ needs V invertible)")
    G = (-A * V.inv()).applyfunc(sp.simplify)
    if not (G - G.T).applyfunc(sp.simplify).is_zero_matrix:
        raise InputError("A/V", "G = -A V⁻¹ is not symmetric; the twisted metric needs G symmetric positive "
                         "definite")
    if _is_number_matrix(G):
        for k in range(1, G.shape[0] + 1):  # Sylvester's criterion, exact
            if not sp.simplify(G[:k, :k].det()) > 0:
                raise InputError("A/V", f"G = -A V⁻¹ is not positive definite (leading minor {k} is not > 0)")
    return G


def particle_symbols(n: int, d: int, name: str = "x") -> sp.Matrix:
    """``n × d`` matrix of real symbols ``{name}_{i}_{a}`` (particle ``i``, component ``a``)."""
    return sp.Matrix(n, d, lambda i, a: sp.Symbol(f"{name}_{i}_{a}", real=True))


def particle_metric(Z: list[sp.Expr], G: sp.Matrix) -> tuple[sp.Matrix, sp.Matrix]:
    """``(g, g⁻¹)`` of ``g_X(U, W) = (1/n) Σ_i Z_i <u_i, G w_i>`` in ``vec X`` coordinates (block diagonal)."""
    n, d = len(Z), G.shape[0]
    Ginv = G.inv()
    g = sp.zeros(n * d, n * d)
    gi = sp.zeros(n * d, n * d)
    for i in range(n):
        g[i * d:(i + 1) * d, i * d:(i + 1) * d] = G * (Z[i] / n)
        gi[i * d:(i + 1) * d, i * d:(i + 1) * d] = Ginv * (n / Z[i])
    return g, gi


def gaussian_affine_metric(A: sp.Matrix, V: sp.Matrix, alpha: sp.Matrix, Sigma: sp.Matrix, b: sp.Matrix,
                           J: sp.Matrix, b2: sp.Matrix | None = None, J2: sp.Matrix | None = None,
                           G: sp.Matrix | None = None) -> sp.Expr:
    """``g_μ(b + Jx, b' + J'x) = 2E · [(b + Jm̃)ᵀ G (b' + J'm̃) + tr(Jᵀ G J' Σ̃)]`` for ``μ = N(α, Σ)``."""
    G = twisted_G(A, V) if G is None else G
    b2 = b if b2 is None else b2
    J2 = J if J2 is None else J2
    log_mass, mt, St = gaussian_tilt(A, alpha, Sigma)
    mass = 2 * gaussian_energy(A, alpha, Sigma).E
    u, w = b + J * mt, b2 + J2 * mt
    return mass * ((u.T * G * w)[0, 0] + (J.T * G * J2 * St).trace())


def gaussian_coordinate_metric(A: Any, V: Any, alpha: sp.Matrix, Sigma: sp.Matrix) -> sp.Matrix:
    """Metric matrix of the Gaussian manifold in ``θ = (α, Σ_{i≤j})`` (cheapest affine field, d = 1 or 2)."""
    A = exact_matrix(A, "A")
    V = exact_matrix(V, "V", A.shape[0])
    G = twisted_G(A, V)
    d = A.shape[0]
    if d not in (1, 2):
        raise InputError("d", f"the symbolic Gaussian coordinate metric is built for d = 1, 2, got {d}")
    log_mass, mt, St = gaussian_tilt(A, alpha, Sigma)
    mass = 2 * gaussian_energy(A, alpha, Sigma).E
    return _cheapest_field_form(G, alpha, Sigma, mt, St) * mass


def _cheapest_field_form(G: sp.Matrix, alpha: sp.Matrix, Sigma: sp.Matrix, mt: sp.Matrix, St: sp.Matrix,
                         Sinv: sp.Matrix | None = None, parts: bool = False):
    """``ĝ`` with ``g = 2E · ĝ``: the minimum over affine fields realising ``θ̇`` of ``(b+Jm̃)ᵀG(b+Jm̃) + tr(JᵀGJΣ̃)``.

    ``m̃``, ``Σ̃``, ``Σ⁻¹`` may be expressions or placeholder symbols (staged derivation in :mod:`.hessian`).
    With ``parts=True`` returns ``(M0, c1, a2)`` with ``ĝ = M0 - c1 c1ᵀ / a2`` (``d = 2``) or ``ĝ = M0``.
    """
    d = alpha.shape[0]
    coords = gaussian_coords(alpha, Sigma)
    dot = sp.Matrix([sp.Dummy(f"v{k}", real=True) for k in range(len(coords))])
    adot = dot[:d, 0]
    Sdot = sp.Matrix(symmetric_rows(dot[d:, 0], d))
    Sinv = Sigma.inv() if Sinv is None else Sinv
    kappa = sp.Dummy("kappa", real=True)
    K = sp.zeros(d, d) if d == 1 else sp.Matrix([[0, 1], [-1, 0]])
    J = (Sdot / 2 + kappa * K) * Sinv
    b = adot - J * alpha
    u = b + J * mt
    hat = (u.T * G * u)[0, 0] + (J.T * G * J * St).trace()  # quadratic form in (θ̇, κ)
    N = len(coords)
    at0 = {kappa: 0}
    M = sp.Matrix(N, N, lambda p, q: sp.diff(hat, dot[p], dot[q]).subs(at0) / 2)
    if d == 1:
        return (M, None, None) if parts else M
    a2 = sp.diff(hat, kappa, 2) / 2  # > 0: the κ-direction has a positive cost
    c1 = sp.Matrix([sp.diff(hat, dot[p], kappa).subs(at0) / 2 for p in range(N)])
    return (M, c1, a2) if parts else M - c1 * c1.T / a2
