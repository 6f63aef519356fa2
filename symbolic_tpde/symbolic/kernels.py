"""Exponential-quadratic attention kernels.

A kernel of the class handled by the Gaussian-tilt engine has a logarithm that is a polynomial of degree two
in the query ``x`` and the key ``y`` (README, Mathematics §2-3)::

    log k(x, y) = xᵀ B y + xᵀ P x + yᵀ R y + pᵀ x + rᵀ y          (+ a constant, irrelevant after normalising)

The blocks of each kind are its registry entry's ``quadratic`` form (:mod:`symbolic_tpde.registry.kinds`, the one
description of such a kind); for the built-in softmax-normalised kinds:

* softmax, ``k = exp(<A x, y>) = exp(xᵀ Aᵀ y)``:  ``B = Aᵀ``, all other blocks zero;
* ℓ2, ``k = exp(-|Q x - K y|² / τ)``:  ``B = (2/τ) QᵀK``, ``P = -(1/τ) QᵀQ``, ``R = -(1/τ) KᵀK``;
* custom: ``B, P, R, p, r`` given (scenario keys ``"B","P","R","p","r"``).

The blocks are *not typed in* for ℓ2 in the entrywise form: :func:`kernel_from_log` reads them off any
log-kernel expression by differentiation (``B_ij = ∂²/∂x_i∂y_j``, ``P_ij = ½∂²/∂x_i∂x_j``, ...) and checks that
the expression is exactly quadratic.  The matrix (general-``d``) forms use the registry's blocks, and the tests
check them against the entrywise read-off of each kind's definition for ``d = 1, 2, 3``.

Two representations share one class: explicit :class:`sympy.Matrix` blocks (entrywise form, concrete ``d``)
and :class:`sympy.MatrixExpr` blocks built from ``MatrixSymbol``s (matrix form, general ``d``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import sympy as sp

from ..registry import kinds


@dataclass(frozen=True)
class ExpQuadKernel:
    """``log k(x, y) = xᵀBy + xᵀPx + yᵀRy + pᵀx + rᵀy``.  Blocks are explicit Matrices or matrix expressions;
    ``None`` stands for a zero block (kept out of the expressions instead of a ZeroMatrix)."""

    B: object
    P: object = None
    R: object = None
    p: object = None
    r: object = None
    name: str = "custom"

    @classmethod
    def from_form(cls, form: dict, name: str = "custom") -> "ExpQuadKernel":
        """The kernel of a registry quadratic form ``{"B", "R", "r"[, "P", "p"]}`` (:attr:`symbolic_tpde.registry.
        kinds.KindSpec.quadratic`, evaluated at SymPy parameters); missing keys are zero blocks."""
        return cls(B=form["B"], P=form.get("P"), R=form.get("R"), p=form.get("p"), r=form.get("r"), name=name)

    def log_kernel(self, x, y):
        """The log-kernel as a scalar (explicit) or 1x1 matrix expression (matrix form)."""
        terms = [x.T * self.B * y]
        if self.P is not None:
            terms.append(x.T * self.P * x)
        if self.R is not None:
            terms.append(y.T * self.R * y)
        if self.p is not None:
            terms.append(self.p.T * x)
        if self.r is not None:
            terms.append(self.r.T * y)
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        if isinstance(total, sp.MatrixBase):
            return total[0, 0]
        return total


def softmax_kernel(A) -> ExpQuadKernel:
    """``<A x, y> = yᵀ A x = xᵀ Aᵀ y``, hence ``B = Aᵀ`` (the registry's softmax form)."""
    return ExpQuadKernel.from_form(kinds.get("softmax").quadratic({"A": A}), "softmax")


def l2_kernel_matrix(Q, K, tau) -> ExpQuadKernel:
    """Matrix-form ℓ2 kernel, the registry's form: ``-|Qx - Ky|²/τ = (2/τ) xᵀQᵀK y - (1/τ) xᵀQᵀQ x -
    (1/τ) yᵀKᵀK y``.  Checked against :func:`kernel_from_log` applied to the entrywise ``-|Qx-Ky|²/τ`` in the
    tests."""
    return ExpQuadKernel.from_form(kinds.get("l2").quadratic({"Q": Q, "K": K, "tau": tau}), "l2")


def l2_log_kernel_explicit(Q: sp.Matrix, K: sp.Matrix, tau, x: sp.Matrix, y: sp.Matrix) -> sp.Expr:
    """The definition ``-|Q x - K y|² / τ`` as an explicit scalar expression (no expansion)."""
    v = Q * x - K * y
    return -sum((v[i] ** 2 for i in range(v.shape[0])), sp.S.Zero) / tau


class NotQuadraticError(ValueError):
    """The log-kernel is not a polynomial of degree <= 2 in (x, y)."""


def kernel_from_log(expr: sp.Expr, x: Sequence[sp.Symbol], y: Sequence[sp.Symbol], name: str = "custom",
                    check: bool = True) -> ExpQuadKernel:
    """Read ``B, P, R, p, r`` off an explicit log-kernel expression.

    The expression is turned into a polynomial in the entries of ``(x, y)`` (coefficients: expressions in the
    parameters) and the blocks are its coefficients: ``B_ij = [x_i y_j]``, ``P_ii = [x_i²]``,
    ``P_ij = ½[x_i x_j]`` (``i ≠ j``, the symmetric part -- the only part a quadratic form sees), likewise
    ``R``; ``p_i = [x_i]``, ``r_j = [y_j]``.  Equivalently ``B = ∂²ℓ/∂x∂y``, ``P = ½∂²ℓ/∂x²``, ... at 0; the
    polynomial route is ~2x faster at ``d = 4``.  Any monomial of total degree > 2 raises
    :class:`NotQuadraticError` (a kernel outside the exponential-quadratic class is refused, not mangled);
    ``check`` is kept for API compatibility (the test is always exact and cheap).
    """
    x = list(x)
    y = list(y)
    n, m = len(x), len(y)
    try:
        poly = sp.Poly(sp.expand(expr), *x, *y)
    except sp.PolynomialError as exc:
        raise NotQuadraticError(f"log-kernel is not polynomial in (x, y): {exc}") from None
    if poly.total_degree() > 2:
        raise NotQuadraticError(f"log-kernel has degree {poly.total_degree()} > 2 in (x, y)")
    coeffs = dict(poly.terms())
    zero = (0,) * (n + m)

    def c(*idx: int) -> sp.Expr:
        mon = list(zero)
        for i in idx:
            mon[i] += 1
        return coeffs.get(tuple(mon), sp.S.Zero)

    half = sp.Rational(1, 2)
    B = sp.Matrix(n, m, lambda i, j: c(i, n + j))
    P = sp.Matrix(n, n, lambda i, j: c(i, i) if i == j else half * c(i, j))
    R = sp.Matrix(m, m, lambda i, j: c(n + i, n + i) if i == j else half * c(n + i, n + j))
    p = sp.Matrix([c(i) for i in range(n)])
    r = sp.Matrix([c(n + j) for j in range(m)])
    return ExpQuadKernel(B=B, P=P, R=R, p=p, r=r, name=name)


@dataclass(frozen=True)
class TiltForm:
    """``log k(x, y) = c(x) + yᵀRy + (Bᵀx + r)ᵀy`` read off a log-kernel (``B`` is ``d×d``: ``xᵀBy``)."""

    B: sp.Matrix
    R: sp.Matrix
    r: sp.Matrix
    dropped: sp.Expr          # c(x): the part that cancels in the normalisation

    def kernel(self, name: str = "user") -> "ExpQuadKernel":
        return ExpQuadKernel(B=self.B, R=None if self.R.is_zero_matrix else self.R,
                             r=None if self.r.is_zero_matrix else self.r, name=name)


# -------------------------------------------------------------------------------------------- analysis
def analyse_log_kernel(log_kernel: sp.Expr, x: list, y: list) -> TiltForm | str:
    """:class:`TiltForm` when ``log k - log k(x, 0)`` is ``yᵀRy + (Bᵀx + r)ᵀy`` (``R`` free of ``x``), else a
    sentence saying why not."""
    at0 = {yi: 0 for yi in y}
    h = log_kernel - log_kernel.xreplace(at0)
    try:
        poly = sp.Poly(sp.expand(h), *y)
    except sp.PolynomialError:
        return "log k(x, y) - log k(x, 0) is not a polynomial in the key y"
    if poly.total_degree() > 2:
        return f"log k(x, y) has degree {poly.total_degree()} > 2 in the key y (the tilt is not Gaussian)"
    d = len(y)
    coeffs = dict(poly.terms())

    def c(*idx: int) -> sp.Expr:
        mon = [0] * d
        for i in idx:
            mon[i] += 1
        return coeffs.get(tuple(mon), sp.S.Zero)

    half = sp.Rational(1, 2)
    R = sp.Matrix(d, d, lambda i, j: c(i, i) if i == j else half * c(i, j))
    g = sp.Matrix([c(i) for i in range(d)])
    if any(e.has(*x) for e in R):
        return "the quadratic part of log k in the key y depends on the query x (the tilted covariance would " \
               "depend on x, so the tilted mean is not affine in x)"
    G = g.jacobian(x) if x else sp.zeros(d, 0)
    if any(e.has(*x) for e in G):
        return "the part of log k linear in the key y is not affine in the query x"
    r = g.xreplace({xi: 0 for xi in x})
    return TiltForm(B=G.T, R=R, r=r, dropped=log_kernel.xreplace(at0))


