"""Exact reductions of the sphere models, derived with SymPy from the particle system (README "Sphere").

Nothing here is typed in: each reduction is obtained by substituting an ansatz into a *definition* of the
particle system, and each step carries the check SymPy made (:class:`Step`).  A definition is a
:class:`Model`: the weight normaliser (``"softmax"``: ``Z_i = Σ_k e^{β<θ_i,θ_k>}``; ``"n"``: ``Z_i = n``) and
the velocity ``v(x, θ, A)`` of a token built from the vector operations of :class:`Vec` (``x = rθ`` the
state, ``A`` the attention vector); Q = K = V = I throughout (weights ``e^{β<θ_i, θ_j>}``).  Built in
(:data:`MODELS`): ``post`` ``v = A - <θ,A>θ``, ``pre`` ``v = A``, ``peri`` ``v = A/|A|``, ``ngpt``
``v = α(A/|A| - <θ, A/|A|>θ)``.

**Equiangular ansatz** (:func:`equiangular`).  ``|x_i| = r``, ``<θ_i, θ_j> = ρ`` (``i ≠ j``), ``n`` symbolic.
Every vector met is a combination of ``θ_i``, ``θ_j`` and ``S = Σ_k θ_k``; their inner products follow
from the ansatz by summing the Gram row (``<θ_i, S> = Σ_k <θ_i, θ_k>``, SymPy ``Sum(...).doit()``).  Then
``A_i = Σ_k w_ik θ_k = w_ii θ_i + w_io (S - θ_i)`` with ``w_ik = e^{β<θ_i,θ_k>}/Z_i``; the velocity of the
definition gives ``d|x_i|²/dt = 2<v_i, x_i>`` (so ``ṙ``; checked to vanish for the sphere models) and
``d<x_i,x_j>/dt = <v_i, x_j> + <x_i, v_j>``, which is ``ρ̇`` for the sphere models (state ``θ``) and gives
``ρ̇ = (d<x_i,x_j>/dt - 2 r ṙ ρ)/r²`` for the others.  By the symmetry of the ansatz under permutations, ``ρ̇`` is the
same for every pair: the ansatz is invariant, and ``(ρ, r)`` obey a closed system.  Consequences: the rate
``λ = -∂ρ̇/∂ρ|_{ρ=1}`` of the final approach (Post-LN: ``1 - ρ ~ e^{-λt}``), and for Pre-LN, where ``ṙ → ṙ₁``
(its value at ``ρ = 1``) and ``ρ̇ ≈ -λ(1 - ρ)/r``, the power ``1 - ρ ~ C t^{-λ/ṙ₁}``.

**Two tokens** (:func:`two_tokens`): ``n = 2`` is always equiangular; the angle ``φ = arccos ρ`` obeys
``φ̇ = -ρ̇/sin φ``; at ``β = 0`` the separable solution ``t = ∫_{ρ₀}^{ρ} dσ/ρ̇(σ)`` (SymPy ``integrate``,
checked by differentiation), so ``φ = arccos ρ``.

**Circle** (:func:`circle_linearisation`): ``d = 2``, mean field ``∂_t μ + ∂_x(μ v_μ) = 0`` with the tangent
velocity ``v_μ(x) = ∫ e^{β cos(y-x)} sin(y - x) dμ(y) / Z``, ``Z = 1`` (USA) or ``∫ e^{β cos(y-x)} dμ(y)``
(SA).  At ``μ = 1/(2π) + ε e^{ikx}`` the ``O(ε)`` part is derived symbolically; the remaining integral is
reduced by parts (SymPy checks ``∂_u e^{β cos u} = -β sin u e^{β cos u}``) to ``∫_0^{2π} e^{β cos u} cos(ku) du
= 2π I_k(β)`` (DLMF 10.32.3, checked by mpmath quadrature), giving the growth rate
``λ_k = k² I_k(β)/β`` (USA) and ``k² I_k(β)/(β I_0(β))`` (SA).  :func:`fastest_mode` maximises it over k.
On ``S^{d-1}`` (:func:`sphere_linearisation`): spherical harmonics of degree ℓ, ``λ_ℓ = ℓ(ℓ+d-2) c_ℓ/β``
(÷ ``c_0`` for SA) with the Funk-Hecke coefficient ``c_ℓ = Γ(d/2)(2/β)^{d/2-1} I_{ℓ+d/2-1}(β)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import sympy as sp

from ..registry.kinds import register

__all__ = ["Vec", "Model", "MODELS", "Step", "Reduction", "equiangular", "two_tokens", "causal_two_tokens",
           "circle_linearisation", "sphere_linearisation",
           "fastest_mode", "rates"]

beta = sp.Symbol("beta", positive=True)
n = sp.Symbol("n", integer=True, positive=True)
rho, r, t, alpha = sp.Symbol("rho", real=True), sp.Symbol("r", positive=True), sp.Symbol("t"), \
    sp.Symbol("alpha", positive=True)


@dataclass(frozen=True)
class Step:
    """One derivation step: what was done, the result, and the check SymPy made (``ok`` its outcome)."""

    title: str
    expr: sp.Basic
    check: str = ""
    ok: bool = True


class Vec:
    """A formal combination of the basis ``(θ_i, θ_j, S)`` with the inner products of the ansatz."""

    basis = ("ti", "tj", "S")

    def __init__(self, gram: dict, **c):
        self.gram = gram
        self.c = {b: sp.sympify(c.get(b, 0)) for b in self.basis}

    def __add__(self, o):
        return Vec(self.gram, **{b: self.c[b] + o.c[b] for b in self.basis})

    def __sub__(self, o):
        return self + o * -1

    def __mul__(self, s):
        return Vec(self.gram, **{b: self.c[b] * s for b in self.basis})

    __rmul__ = __mul__

    def __truediv__(self, s):
        return self * (1 / sp.sympify(s))

    def dot(self, o) -> sp.Expr:
        return sp.Add(*[self.c[a] * o.c[b] * self.gram[a, b] for a in self.basis for b in self.basis])

    def norm(self) -> sp.Expr:
        return sp.sqrt(self.dot(self))

    def swap(self):
        """The same combination with ``i`` and ``j`` exchanged (the velocity of the other token)."""
        return Vec(self.gram, ti=self.c["tj"], tj=self.c["ti"], S=self.c["S"])


@dataclass(frozen=True)
class Model:
    """A particle system: ``normaliser`` (``"softmax"`` | ``"n"``) and ``velocity(x, θ, A) -> Vec``;
    ``on_sphere``: the tokens have unit norm (``r = 1``, no radius equation)."""

    name: str
    normaliser: str
    velocity: Callable
    on_sphere: bool = True


def _proj(th, y):
    return y - th * th.dot(y)


def _unit(y):
    return y / y.norm()


MODELS = {
    "post": lambda z: Model("post", z, lambda x, th, A: _proj(th, A)),
    "pre": lambda z: Model("pre", z, lambda x, th, A: A, on_sphere=False),
    "peri": lambda z: Model("peri", z, lambda x, th, A: _unit(A), on_sphere=False),
    "ngpt": lambda z: Model("ngpt", z, lambda x, th, A: _proj(th, _unit(A)) * alpha),
}


@dataclass
class Reduction:
    """``rhs``: ``{"rho": ρ̇}`` (and ``"r": ṙ`` off the sphere) as SymPy expressions; ``steps``: the derivation."""

    model: str
    normaliser: str
    rhs: dict
    steps: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.steps)


def _gram(steps):
    k = sp.Symbol("k", integer=True, positive=True)
    G = {("ti", "ti"): sp.Integer(1), ("tj", "tj"): sp.Integer(1), ("ti", "tj"): rho, ("tj", "ti"): rho}
    # <θ_i, S> = Σ_k <θ_i, θ_k> = <θ_i, θ_i> + Σ_{k ≠ i} ρ
    row = 1 + sp.Sum(rho, (k, 1, n - 1)).doit()
    G[("ti", "S")] = G[("S", "ti")] = G[("tj", "S")] = G[("S", "tj")] = row
    # <S, S> = Σ_k <θ_k, S>, every row alike
    G[("S", "S")] = sp.Sum(row, (k, 1, n)).doit()
    steps.append(Step("ansatz |θ_i| = 1, <θ_i,θ_j> = ρ (i ≠ j): <θ_i, S> = Σ_k <θ_i,θ_k>", row))
    steps.append(Step("<S, S> = Σ_k <θ_k, S>", sp.factor(G[("S", "S")])))
    return G


def _attention(G, normaliser, steps, b=beta):
    k = sp.Symbol("k", integer=True, positive=True)
    diag, off = sp.exp(b * G[("ti", "ti")]), sp.exp(b * G[("ti", "tj")])
    Z = diag + sp.Sum(off, (k, 1, n - 1)).doit() if normaliser == "softmax" else n
    steps.append(Step(f"normaliser Z_i ({normaliser}) = Σ_k e^(β<θ_i,θ_k>)" if normaliser == "softmax"
                      else "normaliser Z_i = n (unnormalised)", Z))
    th_i, S = Vec(G, ti=1), Vec(G, S=1)
    A = th_i * (diag / Z) + (S - th_i) * (off / Z)
    steps.append(Step("A_i = Σ_k w_ik θ_k = w_ii θ_i + w_io (S - θ_i); coefficients of (θ_i, S)",
                      sp.Tuple(sp.simplify(A.c["ti"]), sp.simplify(A.c["S"]))))
    return A


def equiangular(model: Model) -> Reduction:
    """The closed ODE for ``ρ`` (and ``r``) of ``model`` under the equiangular ansatz (module docstring)."""
    steps: list[Step] = []
    G = _gram(steps)
    A_i = _attention(G, model.normaliser, steps)
    th_i, th_j = Vec(G, ti=1), Vec(G, tj=1)
    rr = sp.Integer(1) if model.on_sphere else r
    v_i = model.velocity(th_i * rr, th_i, A_i)
    v_j = v_i.swap()
    # the velocity of token j is the definition applied to j's own data: check that the swap is that
    A_j = A_i.swap()
    chk = model.velocity(th_j * rr, th_j, A_j)
    same = all(sp.simplify(chk.c[b] - v_j.c[b]) == 0 for b in Vec.basis)
    steps.append(Step("velocity v_i of the definition; v_j by exchanging i and j (checked against the "
                      "definition at token j)", sp.Tuple(*[sp.simplify(v_i.c[b]) for b in Vec.basis]),
                      "v_j(definition) - swap(v_i) == 0", same))
    r_dot = sp.simplify(v_i.dot(th_i * rr) / rr)          # d|x_i|²/dt = 2 r ṙ = 2 <v_i, x_i>
    steps.append(Step("r' = <v_i, x_i>/r", r_dot))
    gram_dot = v_i.dot(th_j * rr) + (th_i * rr).dot(v_j)   # d<x_i, x_j>/dt
    if model.on_sphere:     # the state is θ itself: ρ = <θ_i, θ_j> is the Gram entry
        rho_dot = sp.factor(sp.simplify(gram_dot))
        steps.append(Step("rho' = <v_i, θ_j> + <θ_i, v_j>", rho_dot))
    else:                   # ρ = <x_i, x_j>/r²
        rho_dot = sp.factor(sp.simplify((gram_dot - 2 * rr * r_dot * rho) / rr ** 2))
        steps.append(Step("rho' = (d<x_i,x_j>/dt - 2 r r' rho)/r^2", rho_dot))
    rhs = {"rho": rho_dot}
    if model.on_sphere:
        steps.append(Step("on the sphere: |θ_i| is conserved by the definition", r_dot, "r' == 0",
                          sp.simplify(r_dot) == 0))
    else:
        rhs["r"] = r_dot
    return Reduction(model.name, model.normaliser, rhs, steps)


def causal_two_tokens(model: Model) -> Reduction:
    """Causal mask, two tokens on the sphere: token ``j`` (first) sees only itself (``A_j = θ_j``), token ``i``
    sees both with the softmax weights at ``n = 2``; ``ρ̇ = <v_i, θ_j> + <θ_i, v_j>``."""
    if not model.on_sphere:
        raise ValueError("the causal two-token reduction is derived for tokens on the sphere (post, ngpt)")
    steps: list[Step] = []
    G = {key: val.subs(n, 2) for key, val in _gram(steps).items()}
    A_i = _attention(G, "softmax", steps)
    A_i = Vec(G, **{b: sp.simplify(c.subs(n, 2)) for b, c in A_i.c.items()})
    th_i, th_j = Vec(G, ti=1), Vec(G, tj=1)
    v_i, v_j = model.velocity(th_i, th_i, A_i), model.velocity(th_j, th_j, th_j)
    steps.append(Step("first token: A_j = θ_j, v_j", sp.Tuple(*[sp.simplify(v_j.c[b]) for b in Vec.basis])))
    rho_dot = sp.simplify(v_i.dot(th_j) + th_i.dot(v_j))
    steps.append(Step("rho' = <v_i, θ_j> + <θ_i, v_j>", rho_dot))
    return Reduction(model.name + " causal", "softmax", {"rho": rho_dot}, steps)


def rates(red: Reduction) -> dict:
    """Near ``ρ = 1``: ``λ = -∂ρ̇/∂ρ`` at ``ρ = 1`` (at ``r = 1`` for Post-LN), and off the sphere
    ``ṙ₁ = ṙ|_{ρ=1}`` and the power ``p = λ r/ṙ₁`` of ``1 - ρ ~ C t^{-p}`` (``r ~ ṙ₁ t``)."""
    f = red.rhs["rho"]
    out = {"fixed_point": sp.simplify(f.subs(rho, 1))}
    lam = sp.simplify(-sp.diff(f, rho).subs(rho, 1))
    out["lambda"] = lam
    if "r" in red.rhs:
        r1 = sp.simplify(red.rhs["r"].subs(rho, 1))
        out["r_dot_at_1"] = r1
        out["power"] = sp.simplify(lam * r / r1)
    return out


def two_tokens(model: Model) -> dict:
    """``n = 2``: ``ρ̇``, the angle ODE ``φ̇ = -ρ̇/sin φ`` at ``ρ = cos φ``, and at ``β = 0`` the solution."""
    red = equiangular(model)
    phi = sp.Symbol("phi", positive=True)
    rho2 = sp.simplify(red.rhs["rho"].subs(n, 2))
    phidot = sp.simplify(-rho2.subs(rho, sp.cos(phi)) / sp.sin(phi))
    out = {"rho_dot": rho2, "phi_dot": phidot, "steps": red.steps + [Step("n = 2: rho'", rho2),
                                                                         Step("phi' = -rho'/sin(phi)", phidot)]}
    if "r" in red.rhs:
        out["r_dot"] = sp.simplify(red.rhs["r"].subs(n, 2))
        out["steps"].append(Step("n = 2: r'", out["r_dot"]))
    else:                    # separable: t = ∫_{ρ0}^{ρ} dσ / ρ'(σ), checked by differentiation
        F0 = sp.simplify(rho2.subs(beta, 0))
        rho0, sig = sp.Symbol("rho0", real=True), sp.Symbol("sigma", real=True)
        G = sp.integrate(1 / F0.subs(rho, sig), (sig, rho0, rho))
        ok = sp.simplify(sp.diff(G, rho) * F0 - 1) == 0 and sp.simplify(G.subs(rho, rho0)) == 0
        out["solution_beta0"] = sp.Eq(t, G)
        out["steps"].append(Step("beta = 0, separable: t = ∫_{rho0}^{rho} dσ/rho'(σ) (then phi = arccos rho)",
                                 out["solution_beta0"], "d/drho(rhs) * rho' == 1 and rhs(rho0) == 0", ok))
    return out


def circle_linearisation(normaliser: str) -> dict:
    """Growth rate of Fourier mode ``k`` at the uniform measure on the circle (module docstring)."""
    x, y, u, eps = sp.symbols("x y u epsilon", real=True)
    k = sp.Symbol("k", integer=True, positive=True)
    steps: list[Step] = []
    mu = 1 / (2 * sp.pi) + eps * sp.exp(sp.I * k * y)
    ker = sp.exp(beta * sp.cos(y - x))
    # numerator and normaliser as functionals of μ: v = N/Z, N[unif] = 0, so v = (N1 ε)/Z0 + O(ε²)
    N_unif_integrand = ker * sp.sin(y - x) / (2 * sp.pi)
    odd = sp.simplify(N_unif_integrand.subs(y, x - u) + N_unif_integrand.subs(y, x + u)) == 0
    steps.append(Step("v at the uniform measure: the integrand is odd in y - x, so v = 0", sp.Integer(0),
                      "f(x-u) + f(x+u) == 0", odd))
    N1 = sp.diff(ker * sp.sin(y - x) * mu, eps).subs(eps, 0)               # O(ε) integrand of the numerator
    N1u = sp.simplify(N1.subs(y, x + u) * sp.exp(-sp.I * k * x))           # = e^{βcos u} sin u e^{iku}
    steps.append(Step("O(eps) velocity: e^{ikx} ∫ e^{β cos u} sin u e^{iku} du", N1u))
    # e^{iku} = cos ku + i sin ku; the cos part is odd in u and integrates to 0
    cos_part = sp.expand(N1u.rewrite(sp.cos)).subs(sp.I, 0)
    odd_cos = sp.simplify(cos_part.subs(u, -u) + cos_part) == 0
    steps.append(Step("the real part e^{β cos u} sin u cos ku is odd in u: it integrates to 0", cos_part,
                      "f(-u) + f(u) == 0", odd_cos))
    by_parts = sp.simplify(sp.diff(sp.exp(beta * sp.cos(u)), u) + beta * sp.sin(u) * sp.exp(beta * sp.cos(u))) == 0
    # ∫ e^{β cos u} sin u sin ku du = (k/β) ∫ e^{β cos u} cos ku du = (k/β) 2π I_k(β)
    vel = sp.I * (k / beta) * 2 * sp.pi * sp.besseli(k, beta)
    steps.append(Step("by parts (d/du e^{β cos u} = -β sin u e^{β cos u}) and ∫_0^{2π} e^{β cos u} cos ku du "
                      "= 2π I_k(β): O(eps) velocity coefficient", vel, "derivative identity", by_parts))
    Z0 = sp.Integer(1) if normaliser == "n" else sp.besseli(0, beta)
    if normaliser != "n":
        steps.append(Step("SA: normaliser at the uniform measure (1/2π)∫ e^{β cos u} du = I_0(β); its O(eps) "
                          "part multiplies v = 0", Z0))
    # ∂_t δμ = -∂_x(μ₀ δv) with μ₀ = 1/(2π), δv = ε e^{ikx} vel / Z0
    dv = sp.exp(sp.I * k * x) * vel / Z0
    growth = sp.simplify(-sp.diff(dv / (2 * sp.pi), x) / sp.exp(sp.I * k * x))
    steps.append(Step("linearised continuity equation: d/dt of mode k = lambda_k times it", growth,
                      "lambda_k real", sp.simplify(sp.im(growth)) == 0))
    return {"rate": growth, "k": k, "steps": steps}


def sphere_linearisation(normaliser: str, d: int) -> dict:
    """Growth rate of the degree-ℓ spherical harmonics at the uniform measure ``σ`` on ``S^{d-1}`` (``d >= 2``).

    Steps: (1) with ``Q = K = V = I`` the USA velocity is a spherical gradient, ``v = ∇_S Φ``,
    ``Φ(x) = (1/β) ∫ e^{β<x,y>} dμ(y)`` (the Euclidean gradient of ``e^{β<x,y>}`` is ``β y e^{β<x,y>}``, checked in
    coordinates; its tangential part is ``P⊥_x``); (2) at ``μ = σ(1 + ε Y_ℓ)`` the linearised equation is
    ``∂_t δ = -(1/β) Δ_S (K Y_ℓ)`` with ``K f(x) = ∫ e^{β<x,y>} f(y) dσ(y)``; (3) ``Δ_S Y_ℓ = -ℓ(ℓ+d-2) Y_ℓ``
    (from ``Δ(r^ℓ Y) = 0``, solved by SymPy; harmonicity of ``Re (x₀ + i x₁)^ℓ`` checked for ℓ <= 4);
    (4) Funk-Hecke: ``K Y_ℓ = c_ℓ Y_ℓ``, ``c_ℓ = Γ(d/2) (2/β)^{d/2-1} I_{ℓ+d/2-1}(β)`` (Funk-Hecke formula with the
    Bessel integral DLMF 10.32.2; checked by mpmath quadrature of ``(ω_{d-2}/ω_{d-1}) ∫ e^{βt} P_ℓ(t)
    (1-t²)^{(d-3)/2} dt``, ``P_ℓ`` the Gegenbauer polynomial normalised to 1 at t = 1, at ℓ <= 3, β ∈ {1, 5}
    when ``d >= 3``); SA divides by ``Z = c_0`` (its ``O(ε)`` part multiplies ``v = 0``).  At ``d = 2`` the
    result is checked to equal :func:`circle_linearisation`.
    """
    import mpmath

    ell = sp.Symbol("ell", integer=True, nonnegative=True)
    steps: list[Step] = []
    xs, ys = sp.symbols(f"x0:{d}", real=True), sp.symbols(f"y0:{d}", real=True)
    e = sp.exp(beta * sum(a * b for a, b in zip(xs, ys)))
    ok = all(sp.simplify(sp.diff(e, a) - beta * b * e) == 0 for a, b in zip(xs, ys))
    steps.append(Step("USA velocity = grad_S of (1/beta) ∫ e^{beta<x,y>} dmu(y): Euclidean gradient", beta * e,
                      "d/dx_a e^{beta<x,y>} == beta y_a e^{beta<x,y>}", ok))
    mu_, dd, rr = sp.Symbol("mu"), sp.Symbol("d", positive=True), sp.Symbol("r", positive=True)
    f = rr ** ell
    eig = sp.solve(sp.Eq(sp.diff(f, rr, 2) + (dd - 1) / rr * sp.diff(f, rr) - mu_ * f / rr ** 2, 0), mu_)[0]
    eig = sp.factor(eig.subs(dd, d))
    harm = all(sp.expand(sum(sp.diff(sp.re(sp.expand((xs[0] + sp.I * xs[1]) ** L)), a, 2) for a in xs)) == 0
               for L in range(1, 5))
    steps.append(Step("Delta_S Y_ell = -mu Y_ell with Delta(r^ell Y) = 0 (radial part of the Laplacian)", eig,
                      "Re (x0 + i x1)^ell harmonic for ell <= 4", harm))
    half = sp.Rational(d, 2)
    c = sp.gamma(half) * (2 / beta) ** (half - 1) * sp.besseli(ell + half - 1, beta)
    qok = True
    if d >= 3:
        tt = sp.Symbol("t")
        w = mpmath.gamma(mpmath.mpf(d) / 2) / (mpmath.sqrt(mpmath.pi) * mpmath.gamma(mpmath.mpf(d - 1) / 2))
        cf = sp.lambdify((ell, beta), c, modules="mpmath")
        for L in range(4):
            P = sp.lambdify(tt, sp.expand(sp.gegenbauer(L, sp.Rational(d - 2, 2), tt)
                                          / sp.gegenbauer(L, sp.Rational(d - 2, 2), 1)), modules="mpmath")
            for b in (1, 5):
                q = w * mpmath.quad(lambda x: mpmath.exp(b * x) * P(x) * (1 - x * x) ** (mpmath.mpf(d - 3) / 2),
                                    [-1, 0, 1])
                qok &= abs(q / cf(L, b) - 1) < 1e-12
    steps.append(Step("Funk-Hecke coefficient of e^{beta t} (DLMF 10.32.2)", c,
                      "mpmath quadrature, ell <= 3, beta in {1, 5}" if d >= 3 else "", qok))
    rate = eig * c / beta / (1 if normaliser == "n" else c.subs(ell, 0))
    steps.append(Step("lambda_ell = ell(ell + d - 2) c_ell / beta" + ("" if normaliser == "n" else " / c_0"), rate))
    if d == 2:
        lin = circle_linearisation(normaliser)
        same = sp.simplify(rate.subs(ell, lin["k"]) - lin["rate"]) == 0
        steps.append(Step("d = 2: equals the circle's Fourier derivation", rate, "difference == 0", same))
    return {"rate": rate, "ell": ell, "steps": steps}


def fastest_mode(normaliser: str, beta_value: float, kmax: int | None = None, d: int = 2) -> tuple[int, list[float]]:
    """``k* = argmax_k λ_k(β)`` (mpmath Bessel values of the derived rate: Fourier modes on the circle for
    ``d = 2``, spherical-harmonic degrees on ``S^{d-1}`` otherwise); ``λ_k`` for ``k = 1..kmax``."""
    import mpmath

    lin = circle_linearisation(normaliser) if d == 2 else sphere_linearisation(normaliser, d)
    f = sp.lambdify((lin["k"] if d == 2 else lin["ell"], beta), lin["rate"], modules="mpmath")
    kmax = kmax or int(4 * (2 * beta_value) ** 0.5) + 4
    vals = [float(f(kk, mpmath.mpf(beta_value))) for kk in range(1, kmax + 1)]
    return 1 + max(range(kmax), key=vals.__getitem__), vals


def _parts(normaliser):
    def reduction(norm: str = "post") -> Reduction:
        return equiangular(MODELS[norm](normaliser))
    return reduction


register("sphere_sa", "reduction")(_parts("softmax"))
register("sphere_usa", "reduction")(_parts("n"))
register("sphere_causal", "reduction")(lambda norm="post": causal_two_tokens(MODELS[norm]("softmax")))
