"""Christoffel symbols and the Riemannian Hessian of the energy (second variation, README Mathematics §5).

For a metric ``g_ij(θ)`` and a function ``f(θ)``:

    Γ_{l,ij} = ½(∂_i g_jl + ∂_j g_il - ∂_l g_ij)        (first kind)
    Γ^k_ij  = g^{kl} Γ_{l,ij}                            (second kind)
    Hess f(U, U) = D²f(U, U) - Γ^k_ij U^i U^j ∂_k f = d²/ds² f(γ(s))|₀  along the geodesic γ with γ̇(0) = U.

At a critical point (``∂f = 0``) the Christoffel term vanishes: the second derivative along *any* curve
``c`` with ``ċ(0) = U`` is ``D²f(U, U) + ∂f·c̈(0) = D²f(U, U)``, intrinsic (:func:`curve_second_derivative`).

Two users:

* :func:`particle_hessian`: the n-particle restriction, fully explicit (``n ≤ 3``, ``d ≤ 2`` in the tests),
  with the block inverse ``g⁻¹ = n diag(1/Z_i) ⊗ G⁻¹``;
* :func:`gaussian_hessian`: the Gaussian manifold ``θ = (α, Σ_{i≤j})`` with the metric of
  :func:`.metric.gaussian_coordinate_metric`, ``d = 1, 2``.  The expressions are *staged*: the tilt
  quantities (``2E``, ``m̃``, ``Σ̃``) are named atoms with their own expressions, and derivatives go through them
  by the chain rule (:class:`Staged`), which keeps ``d = 2`` small (measured (README, Benchmarks): stage, don't expand).
  First-kind symbols are symbolic (in the coordinates and the named atoms); ``g⁻¹`` is applied by an mpmath
  linear solve at the evaluation point (any precision), in ``d = 1`` and ``d = 2`` alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import sympy as sp

from .energy import ParticleEnergy, particle_energy
from .gaussian_energy import gaussian_coords, gaussian_energy, gaussian_symbols, gaussian_tilt
from .metric import exact_matrix, twisted_G

__all__ = ["christoffel_first_kind", "christoffel_second_kind", "ParticleHessian", "particle_hessian",
           "curve_second_derivative", "Staged", "GaussianHessian", "gaussian_hessian"]

Diff = Callable[[sp.Expr, int], sp.Expr]


def christoffel_first_kind(g: sp.Matrix, coords, D: Diff | None = None) -> list:
    """``Γ1[l][i][j] = ½(∂_i g_jl + ∂_j g_il - ∂_l g_ij)``; ``D(expr, k)`` differentiates along ``coords[k]``."""
    N = len(coords)
    D = D or (lambda e, k: sp.diff(e, coords[k]))
    dg = [[[D(g[i, j], k) if g[i, j] != 0 else sp.Integer(0) for k in range(N)] for j in range(N)]
          for i in range(N)]  # dg[i][j][k] = ∂_k g_ij
    return [[[(dg[j][l][i] + dg[i][l][j] - dg[i][j][l]) / 2 for j in range(N)] for i in range(N)]
            for l in range(N)]


def christoffel_second_kind(gamma1: list, ginv: sp.Matrix) -> list:
    """``Γ2[k][i][j] = Σ_l g^{kl} Γ1[l][i][j]`` (zero entries of ``g⁻¹`` skipped)."""
    N = ginv.shape[0]
    return [[[sp.Add(*[ginv[k, l] * gamma1[l][i][j] for l in range(N) if ginv[k, l] != 0 and gamma1[l][i][j] != 0])
              for j in range(N)] for i in range(N)] for k in range(N)]


@dataclass(frozen=True)
class ParticleHessian:
    """Explicit ``Hess E`` of the n-particle restriction: ``H[i, j] = ∂_ij E - Γ^k_ij ∂_k E``."""

    pe: ParticleEnergy
    gamma: list          # second kind, gamma[k][i][j]
    dE: sp.Matrix        # Euclidean gradient ∂_k E (column, vec X order)
    D2E: sp.Matrix       # ∂_ij E
    H: sp.Matrix         # Riemannian Hessian matrix

    @property
    def coords(self) -> tuple[sp.Symbol, ...]:
        return self.pe.coords

    def form(self, U) -> sp.Expr:
        """``Hess E(U, U) = Uᵀ H U`` for an ``n × d`` direction (numbers or symbols)."""
        u = sp.Matrix(U).reshape(len(self.coords), 1)
        return (u.T * self.H * u)[0, 0]


def particle_hessian(n: int, d: int, A: Any, V: Any) -> ParticleHessian:
    """Christoffel symbols of ``g_X`` and the Riemannian Hessian of ``E_n`` (explicit, unsimplified)."""
    pe = particle_energy(n, d, A, V)
    c = pe.coords
    N = len(c)
    gamma = christoffel_second_kind(christoffel_first_kind(pe.g, c), pe.ginv)
    dE = sp.Matrix([sp.diff(pe.E, x) for x in c])
    D2E = sp.Matrix(N, N, lambda i, j: sp.diff(dE[i], c[j]))
    H = sp.Matrix(N, N, lambda i, j: D2E[i, j] - sp.Add(*[gamma[k][i][j] * dE[k] for k in range(N)
                                                           if gamma[k][i][j] != 0]))
    return ParticleHessian(pe, gamma, dE, D2E, H)


def curve_second_derivative(f: sp.Expr, coords, point: dict, U, W,
                            simplify: bool = True) -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """``d²/ds² f(p + sU + s²W/2)`` at ``s = 0``, split as ``(total, D²f(U,U), ∂f·W)`` at ``point``
    (``simplify=False``: unsimplified, for a caller that checks the result by cancellation itself).

    At a critical point ``∂f·W = 0`` for every acceleration ``W``: the second derivative is intrinsic.
    """
    s = sp.Dummy("s", real=True)
    sub = {x: point[x] + s * u + s ** 2 * w / 2 for x, u, w in zip(coords, U, W)}
    total = sp.diff(f.subs(sub, simultaneous=True), s, 2).subs(s, 0)
    grad = [sp.diff(f, x).subs(point) for x in coords]
    d2 = sum(sp.diff(f, x, y).subs(point) * ux * uy for x, ux in zip(coords, U) for y, uy in zip(coords, U))
    first = sum(gk * w for gk, w in zip(grad, W))
    if not simplify:
        return total, d2, first
    return sp.simplify(total), sp.simplify(d2), sp.simplify(first)


@dataclass
class Staged:
    """Expressions in ``coords`` and named atoms ``a_k = expr_k(coords, a_<k)``; derivatives by the chain rule."""

    coords: tuple[sp.Symbol, ...]
    atoms: list[tuple[sp.Symbol, sp.Expr]] = field(default_factory=list)
    _cache: dict = field(default_factory=dict)

    def add(self, name: str, expr: sp.Expr) -> sp.Symbol:
        sym = sp.Symbol(name, real=True)
        self.atoms.append((sym, expr))
        return sym

    def diff(self, expr: sp.Expr, k: int) -> sp.Expr:
        """Total derivative of ``expr`` along ``coords[k]``."""
        out = sp.diff(expr, self.coords[k])
        for sym, a_expr in self.atoms:
            if expr.has(sym):
                out += sp.diff(expr, sym) * self.atom_diff(sym, a_expr, k)
        return out

    def atom_diff(self, sym: sp.Symbol, a_expr: sp.Expr, k: int) -> sp.Expr:
        key = (sym, k)
        if key not in self._cache:
            # named derivative atoms keep nested chain rules small
            self._cache[key] = self.add(f"d_{sym.name}_{k}", self.diff(a_expr, k))
        return self._cache[key]

    def evaluator(self, exprs: list[sp.Expr], modules: Any = "math") -> Callable:
        """``f(*coords) -> list of values`` evaluating atoms in order (each atom lambdified on its own)."""
        names = list(self.coords)
        steps = [sp.lambdify(names + [s for s, _ in self.atoms[:k]], a_expr, modules=modules)
                 for k, (sym, a_expr) in enumerate(self.atoms)]
        atom_syms = [s for s, _ in self.atoms]
        final = sp.lambdify(names + atom_syms, exprs, modules=modules)

        def f(*theta):
            vals = list(theta)
            for step in steps:
                vals.append(step(*vals))
            return final(*vals)

        return f


@dataclass
class GaussianHessian:
    """Riemannian Hessian of ``E`` on the Gaussian manifold (``θ = (α, Σ_{i≤j})``), staged."""

    d: int
    coords: tuple[sp.Symbol, ...]
    staged: Staged
    E: sp.Expr
    g: sp.Matrix          # metric matrix (in coords and atoms)
    gamma1: list          # first-kind Christoffel symbols (coords and atoms)
    dE: list
    D2E: sp.Matrix
    _num: Callable | None = None

    def numeric(self, modules: Any = "math") -> Callable:
        """``h(theta, U) -> Hess E(U, U)`` (float, or mpmath with ``modules="mpmath"``)."""
        N = len(self.coords)
        flat = ([self.g[i, j] for i in range(N) for j in range(N)] + list(self.dE)
                + [self.D2E[i, j] for i in range(N) for j in range(N)]
                + [self.gamma1[l][i][j] for l in range(N) for i in range(N) for j in range(N)])
        ev = self.staged.evaluator(flat, modules=modules)

        def h(theta, U):
            import mpmath

            vals = ev(*theta)
            it = iter(vals)
            g = mpmath.matrix(N, N)
            for i in range(N):
                for j in range(N):
                    g[i, j] = next(it)
            dE = mpmath.matrix([next(it) for _ in range(N)])
            d2 = sum(next(it) * U[i] * U[j] for i in range(N) for j in range(N))
            S = mpmath.matrix([sum(next(it) * U[i] * U[j] for i in range(N) for j in range(N)) for _ in range(N)])
            w = mpmath.lu_solve(g, dE)  # w = g⁻¹ ∂E
            return d2 - sum(S[l] * w[l] for l in range(N))

        return h


def gaussian_hessian(A: Any, V: Any) -> GaussianHessian:
    """Staged Christoffel symbols and Hessian of ``E(N(α, Σ))`` for the cheapest-affine-field metric."""
    A = exact_matrix(A, "A")
    V = exact_matrix(V, "V", A.shape[0])
    d = A.shape[0]
    if d not in (1, 2):
        from ..errors import InputError

        raise InputError("A", f"the Gaussian-family Hessian is built for d = 1, 2 (got d = {d})")
    G = twisted_G(A, V)
    alpha, Sigma = gaussian_symbols(d)
    coords = gaussian_coords(alpha, Sigma)
    st = Staged(coords)
    # atoms: 2E, m̃, Σ̃ (their expressions are those of gaussian_energy / gaussian_tilt)
    ge = gaussian_energy(A, alpha, Sigma)
    _, mt_e, St_e = gaussian_tilt(A, alpha, Sigma)
    mt_e, St_e = mt_e.applyfunc(sp.factor), St_e.applyfunc(sp.factor)
    Kx = st.add("K", sp.factor(ge.exponent))          # E = ½ det(I - ΣAᵀΣA)^{-1/2} exp(K)
    Dx = st.add("detf", sp.expand(ge.det_factor))
    mass = st.add("mass", sp.exp(Kx) / sp.sqrt(Dx))
    mt = sp.Matrix([st.add(f"mt_{i}", mt_e[i]) for i in range(d)])
    St = sp.zeros(d, d)
    for i in range(d):
        for j in range(i, d):
            St[i, j] = St[j, i] = st.add(f"St_{i}_{j}", St_e[i, j])
    from .metric import _cheapest_field_form

    Sinv_e = Sigma.inv()
    Sinv = sp.zeros(d, d)
    for i in range(d):
        for j in range(i, d):
            Sinv[i, j] = Sinv[j, i] = st.add(f"Si_{i}_{j}", Sinv_e[i, j])
    M0, c1, a2 = _cheapest_field_form(G, alpha, Sigma, mt, St, Sinv=Sinv, parts=True)
    N = len(coords)
    if c1 is not None:  # the κ-minimisation pieces are atoms too
        a2 = st.add("a2", a2)
        c1 = sp.Matrix([st.add(f"c1_{p}", c1[p]) for p in range(N)])
    g = sp.zeros(N, N)
    for i in range(N):  # each metric entry is an atom: Christoffel symbols stay short combinations
        for j in range(i, N):
            entry = M0[i, j] - (c1[i] * c1[j] / a2 if c1 is not None else 0)
            g[i, j] = g[j, i] = st.add(f"g_{i}_{j}", mass * entry)
    E = mass / 2
    gamma1 = christoffel_first_kind(g, coords, D=st.diff)
    dE = [st.diff(E, k) for k in range(N)]
    D2E = sp.Matrix(N, N, lambda i, j: st.diff(dE[i], j))
    return GaussianHessian(d, coords, st, E, g, gamma1, dE, D2E)
