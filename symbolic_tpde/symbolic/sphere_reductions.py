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
from functools import lru_cache
from typing import Callable

import sympy as sp

from ..registry.kinds import register
from ..documents.equation import Equation, Notation, Step

__all__ = ["Vec", "Model", "MODELS", "Step", "Reduction", "equiangular", "two_tokens", "causal_two_tokens",
           "circle_linearisation", "sphere_linearisation",
           "fastest_mode", "rates"]

beta = sp.Symbol("beta", positive=True)
n = sp.Symbol("n", integer=True, positive=True)
rho, r, t, alpha = sp.Symbol("rho", real=True), sp.Symbol("r", positive=True), sp.Symbol("t"), \
    sp.Symbol("alpha", positive=True)


_S_DEF = (Notation("S", "S"), Notation("Σ_k θ_k", r"\sum_k \theta_k"))
_RHO_DOT = Notation("ρ'", r"\dot\rho")
#: how each left side is displayed: its text, its LaTeX and the definitions it uses (``where name := value``),
#: so that no displayed side packs a definition and a claim (``<θ_i, S> = Σ_k <θ_i,θ_k>`` was one side)
_DISPLAY = {
    "<θ_i, S> = Σ_k <θ_i,θ_k>": ("⟨θ_i, S⟩", r"\langle\theta_i, S\rangle", (_S_DEF,)),
    "<S, S> = Σ_k <θ_k, S>": ("⟨S, S⟩", r"\langle S, S\rangle", (_S_DEF,)),
    "Z_i = Σ_k e^(β<θ_i,θ_k>)": ("Z_i", "Z_i", ((Notation("Z_i", "Z_i"), Notation(
        "Σ_k e^(β⟨θ_i, θ_k⟩)", r"\sum_k e^{\beta\langle\theta_i,\theta_k\rangle}")),)),
    "Z_i = n (unnormalised)": ("Z_i", "Z_i", ()),
    "coefficients of A_i on (θ_i, S)": ("(coefficients of A_i on θ_i and S)",
                                        r"\big(\text{coefficients of } A_i \text{ on } \theta_i \text{ and } S\big)",
                                        (_S_DEF, (Notation("A_i", "A_i"), Notation(
                                            "Σ_k w_ik θ_k", r"\sum_k w_{ik}\theta_k")))),
    "coefficients of v_i on (θ_i, θ_j, S)": ("(coefficients of v_i on θ_i, θ_j and S)", r"\big(\text{coefficients "
                                             r"of } v_i \text{ on } \theta_i, \theta_j \text{ and } S\big)", (_S_DEF,)),
    "coefficients of v_j on (θ_i, θ_j, S)": ("(coefficients of v_j on θ_i, θ_j and S)", r"\big(\text{coefficients "
                                             r"of } v_j \text{ on } \theta_i, \theta_j \text{ and } S\big)", (_S_DEF,)),
    "rho' = <v_i, θ_j> + <θ_i, v_j>": ("ρ'", r"\dot\rho", ((_RHO_DOT, Notation(
        "⟨v_i, θ_j⟩ + ⟨θ_i, v_j⟩", r"\langle v_i,\theta_j\rangle + \langle\theta_i, v_j\rangle")),)),
    "rho' = (d<x_i,x_j>/dt - 2 r r' rho)/r^2": ("ρ'", r"\dot\rho", ((_RHO_DOT, Notation(
        "(d⟨x_i, x_j⟩/dt - 2 r r' ρ)/r²", r"\big(\tfrac{d}{dt}\langle x_i, x_j\rangle - 2r\dot r\rho\big)/r^2")),)),
    "r'": ("r'", r"\dot r", ()),
    "r' = <v_i, x_i>/r": ("r'", r"\dot r", ((Notation("r'", r"\dot r"), Notation(
        "⟨v_i, x_i⟩/r", r"\langle v_i, x_i\rangle / r")),)),
    "n = 2: rho'": ("ρ'", r"\dot\rho", ()),
    "n = 2: r'": ("r'", r"\dot r", ()),
    "phi' = -rho'/sin(phi)": ("φ'", r"\dot\phi", ((Notation("φ'", r"\dot\phi"), Notation(
        "-ρ'/sin φ", r"-\dot\rho/\sin\phi")),)),
    "t = ∫_{rho0}^{rho} dσ/rho'(σ)": ("t", "t", ((Notation("t", "t"), Notation(
        "∫_{ρ₀}^{ρ} dσ/ρ'(σ)", r"\int_{\rho_0}^{\rho} d\sigma/\dot\rho(\sigma)")),)),
    "v_unif(x)": ("v_unif(x)", r"v_{\mathrm{unif}}(x)", ()),
    "e^{-ikx} N_1(x + u)": ("e^(-ikx) N_1(x + u)", r"e^{-\mathrm{i}kx} N_1(x + u)", ()),
    "Re(e^{-ikx} N_1(x + u))": ("Re(e^(-ikx) N_1(x + u))", r"\operatorname{Re}\big(e^{-\mathrm{i}kx} N_1(x + u)\big)", ()),
    "∫_0^{2π} e^{β cos u} sin u e^{iku} du": ("∫_0^{2π} e^(β cos u) sin u e^(iku) du",
                                             r"\int_0^{2\pi} e^{\beta\cos u}\sin u\, e^{\mathrm{i}ku}\, du", ()),
    "(1/2π)∫ e^{β cos u} du": ("(1/2π)∫ e^(β cos u) du", r"\tfrac{1}{2\pi}\int_0^{2\pi} e^{\beta\cos u}\, du", ()),
    "lambda_k": ("λ_k", r"\lambda_k", ()),
    "(d/dx_a e^{beta<x,y>})/y_a": ("(∂e^(β⟨x, y⟩)/∂x_a)/y_a", r"\frac{\partial e^{\beta\langle x,y\rangle}/"
                                   r"\partial x_a}{y_a}", ()),
    "mu": ("μ", r"\mu", ()),
    "c_ell": ("c_ℓ", r"c_\ell", ()),
    "lambda_ell": ("λ_ℓ", r"\lambda_\ell", ()),
}


def _step(title: str, lhs: str, expr, how=None) -> Step:
    """A step ``lhs = expr`` of the derivation machinery (:mod:`..documents.equation`): the displayed equation is
    the one the procedure ``how`` checks (``how`` reads ``eq.rhs``); without ``how`` the step is NOT checked.
    ``lhs`` is displayed as :data:`_DISPLAY` says (the key is kept as the step's plain name)."""
    txt, tx, defs = _DISPLAY.get(lhs, (lhs, lhs, ()))
    return Step(title, Equation(Notation(txt, tx), expr, where=tuple(defs)), how=how).check()


# ---------------------------------------------------------------- explicit tokens: an independent route
#: the point of the explicit checks: ``ρ, β, r, α`` (exact), ``n`` in :data:`_NS`; 50 digits
_PT = {"rho": sp.Rational(3, 10), "beta": sp.Rational(7, 10), "r": sp.Rational(6, 5), "alpha": sp.Rational(1, 2)}
_NS = (3, 4)
#: tolerances: exact quantities evaluated at 50 digits agree to round-off (1e-40); the finite-difference
#: rates (central difference, h = 1e-15) carry an O(h²) = 1e-30 truncation error (1e-20 leaves room)
_TOL, _TOL_FD, _H = 1e-40, 1e-20, "1e-15"


class _Num:
    """An explicit vector (mpmath numbers) with the operations :class:`Vec` offers to the velocities."""

    def __init__(self, v):
        self.v = list(v)

    def __add__(self, o):
        return _Num(a + b for a, b in zip(self.v, o.v))

    def __sub__(self, o):
        return _Num(a - b for a, b in zip(self.v, o.v))

    def __mul__(self, c):
        c = _mp(c)
        return _Num(a * c for a in self.v)

    __rmul__ = __mul__

    def __truediv__(self, c):
        return self * (1 / _mp(c))

    def dot(self, o):
        return sum((a * b for a, b in zip(self.v, o.v)), 0)

    def norm(self):
        import mpmath
        return mpmath.sqrt(self.dot(self))


def _mp(e, n0: int | None = None):
    """``e`` (SymPy, at the point :data:`_PT` and ``n = n0``) as an mpmath number."""
    import mpmath
    if not isinstance(e, sp.Basic):
        return e
    subs = {rho: _PT["rho"], beta: _PT["beta"], r: _PT["r"], alpha: _PT["alpha"]}
    if n0 is not None:
        subs[n] = n0
    return mpmath.mpf(str(sp.N(e.xreplace(subs), 60)))


def _explicit(model: Model, n0: int, causal: bool = False) -> dict:
    """The particle system itself at ``n0`` explicit unit vectors ``θ_k`` with Gram matrix ``(1 - ρ)I + ρ11ᵀ``
    (Cholesky rows), ``x_k = rθ_k``: inner products, normaliser, attention vector and velocity of token
    ``i`` from the definition, and the rates ``ρ̇``, ``ṙ`` (and ``d arccos ρ/dt``) by central differences of
    one explicit step ``x_k ± h v_k`` (token ``j`` = index 0, ``i`` = index 1; ``causal``: token ``j`` sees
    only itself)."""
    import mpmath

    with mpmath.workdps(50):
        rh, be, rr = (_mp(_PT[k]) for k in ("rho", "beta", "r"))
        G = mpmath.matrix(n0, n0)
        for a in range(n0):
            for b in range(n0):
                G[a, b] = 1 if a == b else rh
        L = mpmath.cholesky(G)
        th = [_Num(L[k, c] for c in range(n0)) for k in range(n0)]
        rad = 1 if model.on_sphere else rr
        x = [t * rad for t in th]
        S = th[0]
        for t in th[1:]:
            S = S + t
        def attention(k):
            seen = [0] if causal and k == 0 else range(n0)
            w = [mpmath.exp(be * th[k].dot(th[m])) for m in seen]
            Z = sum(w) if model.normaliser == "softmax" else n0
            A = _Num([0] * n0)
            for wm, m in zip(w, seen):
                A = A + th[m] * (wm / Z)
            return Z, A
        v = [model.velocity(x[k], th[k], attention(k)[1]) for k in range(n0)]
        i, j = 1, 0
        h = mpmath.mpf(_H)
        def state(sgn):
            xi, xj = x[i] + v[i] * (sgn * h), x[j] + v[j] * (sgn * h)
            return xi.dot(xj) / (xi.norm() * xj.norm()), xi.norm()
        (rp, np_), (rm, nm) = state(1), state(-1)
        Z_i, A_i = attention(i)
        return {"row": th[i].dot(S), "SS": S.dot(S), "Z": Z_i, "A": A_i, "v": v[i], "v_j": v[j],
                "basis": {"ti": th[i], "tj": th[j], "S": S},
                "rho_dot": (rp - rm) / (2 * h), "r_dot": (np_ - nm) / (2 * h),
                "phi_dot": (mpmath.acos(rp) - mpmath.acos(rm)) / (2 * h)}


def _explicit_check(model: Model, key: str, ns=_NS, causal: bool = False, coords: tuple = ()):
    """A procedure for a step whose right side is ``key`` of :func:`_explicit` (a scalar, or with ``coords``
    the coefficients of a vector on the basis ``θ_i, θ_j, S``): evaluated at the point and compared with the
    explicit particle system at ``n`` in ``ns``."""
    def how(eq):
        import mpmath
        worst = 0
        fd = key.endswith("_dot")
        with mpmath.workdps(50):
            for n0 in ns:
                ex = _explicit(model, n0, causal)
                if coords:
                    got = _Num([0] * n0)
                    for b, c in zip(coords, eq.rhs):
                        got = got + ex["basis"][b] * _mp(c, n0)
                    err = (got - ex[key]).norm()
                else:
                    err = abs(_mp(eq.rhs, n0) - ex[key])
                worst = max(worst, float(err))
        tol = _TOL_FD if fd else _TOL
        where = (f"n = {', '.join(map(str, ns))} explicit unit vectors with Gram matrix (1 - rho)I + rho 11^T at "
                 f"rho = {_PT['rho']}, beta = {_PT['beta']}" + ("" if model.on_sphere else f", r = {_PT['r']}"))
        how_ = ("central difference of one explicit step x_k +- h v_k of the particle system, h = " + _H
                if fd else "the particle system's definition evaluated at 50 digits")
        ok = worst < tol
        return ok, (f"{where}: {how_}; |difference| = {worst:.1e} < {tol:.0e}" if ok else
                    f"{where}: differs from {how_} by {worst:.3g}"), f"n = {', '.join(map(str, ns))}"
    return how


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
        """Every step checked (:attr:`.steps_eq.Step.checked`)."""
        return all(s.checked for s in self.steps)


def _gram(steps, model):
    k = sp.Symbol("k", integer=True, positive=True)
    G = {("ti", "ti"): sp.Integer(1), ("tj", "tj"): sp.Integer(1), ("ti", "tj"): rho, ("tj", "ti"): rho}
    # <θ_i, S> = Σ_k <θ_i, θ_k> = <θ_i, θ_i> + Σ_{k ≠ i} ρ
    row = 1 + sp.Sum(rho, (k, 1, n - 1)).doit()
    G[("ti", "S")] = G[("S", "ti")] = G[("tj", "S")] = G[("S", "tj")] = row
    # <S, S> = Σ_k <θ_k, S>, every row alike
    G[("S", "S")] = sp.Sum(row, (k, 1, n)).doit()
    steps.append(_step("ansatz |θ_i| = 1, <θ_i,θ_j> = ρ (i ≠ j)", "<θ_i, S> = Σ_k <θ_i,θ_k>", row,
                       _explicit_check(model, "row")))
    steps.append(_step("the sum of the Gram matrix", "<S, S> = Σ_k <θ_k, S>", sp.factor(G[("S", "S")]),
                       _explicit_check(model, "SS")))
    return G


def _attention(G, model, steps, b=beta):
    normaliser = model.normaliser
    k = sp.Symbol("k", integer=True, positive=True)
    diag, off = sp.exp(b * G[("ti", "ti")]), sp.exp(b * G[("ti", "tj")])
    Z = diag + sp.Sum(off, (k, 1, n - 1)).doit() if normaliser == "softmax" else n
    steps.append(_step(f"normaliser ({normaliser})", "Z_i = Σ_k e^(β<θ_i,θ_k>)" if normaliser == "softmax"
                       else "Z_i = n (unnormalised)", Z, _explicit_check(model, "Z")))
    th_i, S = Vec(G, ti=1), Vec(G, S=1)
    A = th_i * (diag / Z) + (S - th_i) * (off / Z)
    steps.append(_step("attention vector A_i = Σ_k w_ik θ_k = w_ii θ_i + w_io (S - θ_i)",
                       "coefficients of A_i on (θ_i, S)", sp.Tuple(sp.simplify(A.c["ti"]), sp.simplify(A.c["S"])),
                       _explicit_check(model, "A", coords=("ti", "S"))))
    return A


def equiangular(model: Model) -> Reduction:
    """The closed ODE for ``ρ`` (and ``r``) of ``model`` under the equiangular ansatz (module docstring)."""
    steps: list[Step] = []
    G = _gram(steps, model)
    A_i = _attention(G, model, steps)
    th_i, th_j = Vec(G, ti=1), Vec(G, tj=1)
    rr = sp.Integer(1) if model.on_sphere else r
    v_i = model.velocity(th_i * rr, th_i, A_i)
    v_j = v_i.swap()
    # the velocity of token j is the definition applied to j's own data: check that the swap is that
    A_j = A_i.swap()
    chk = model.velocity(th_j * rr, th_j, A_j)
    same = all(sp.simplify(chk.c[b] - v_j.c[b]) == 0 for b in Vec.basis)
    if not same:
        raise AssertionError("the velocity of token j is not the exchange of token i's")
    steps.append(_step("velocity v_i of the definition (v_j by exchanging i and j)",
                       "coefficients of v_i on (θ_i, θ_j, S)", sp.Tuple(*[sp.simplify(v_i.c[b]) for b in Vec.basis]),
                       _explicit_check(model, "v", coords=Vec.basis)))
    r_dot = sp.simplify(v_i.dot(th_i * rr) / rr)          # d|x_i|²/dt = 2 r ṙ = 2 <v_i, x_i>
    if not model.on_sphere:
        steps.append(_step("the radius", "r' = <v_i, x_i>/r", r_dot, _explicit_check(model, "r_dot")))
    gram_dot = v_i.dot(th_j * rr) + (th_i * rr).dot(v_j)   # d<x_i, x_j>/dt
    if model.on_sphere:     # the state is θ itself: ρ = <θ_i, θ_j> is the Gram entry
        rho_dot = sp.factor(sp.simplify(gram_dot))
        steps.append(_step("the cosine", "rho' = <v_i, θ_j> + <θ_i, v_j>", rho_dot, _explicit_check(model, "rho_dot")))
    else:                   # ρ = <x_i, x_j>/r²
        rho_dot = sp.factor(sp.simplify((gram_dot - 2 * rr * r_dot * rho) / rr ** 2))
        steps.append(_step("the cosine", "rho' = (d<x_i,x_j>/dt - 2 r r' rho)/r^2", rho_dot,
                           _explicit_check(model, "rho_dot")))
    rhs = {"rho": rho_dot}
    if model.on_sphere:
        steps.append(_step("on the sphere: |θ_i| is conserved by the definition", "r'", sp.Integer(0),
                           _explicit_check(model, "r_dot")))
    else:
        rhs["r"] = r_dot
    return Reduction(model.name, model.normaliser, rhs, steps)


def causal_two_tokens(model: Model) -> Reduction:
    """Causal mask, two tokens on the sphere: token ``j`` (first) sees only itself (``A_j = θ_j``), token ``i``
    sees both with the softmax weights at ``n = 2``; ``ρ̇ = <v_i, θ_j> + <θ_i, v_j>``."""
    if not model.on_sphere:
        raise ValueError("the causal two-token reduction is derived for tokens on the sphere (post, ngpt)")
    steps: list[Step] = []
    G = {key: val.subs(n, 2) for key, val in _gram(steps, model).items()}
    A_i = _attention(G, model, steps)
    A_i = Vec(G, **{b: sp.simplify(c.subs(n, 2)) for b, c in A_i.c.items()})
    th_i, th_j = Vec(G, ti=1), Vec(G, tj=1)
    v_i, v_j = model.velocity(th_i, th_i, A_i), model.velocity(th_j, th_j, th_j)
    steps.append(_step("first token: A_j = θ_j", "coefficients of v_j on (θ_i, θ_j, S)",
                       sp.Tuple(*[sp.simplify(v_j.c[b]) for b in Vec.basis]),
                       _explicit_check(model, "v_j", (2,), True, coords=Vec.basis)))
    rho_dot = sp.simplify(v_i.dot(th_j) + th_i.dot(v_j))
    steps.append(_step("the cosine", "rho' = <v_i, θ_j> + <θ_i, v_j>", rho_dot,
                       _explicit_check(model, "rho_dot", (2,), True)))
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
    phi_pt = sp.acos(_PT["rho"])

    def phi_check(eq):          # the displayed φ' at φ = arccos ρ, against the explicit system at n = 2
        return _explicit_check(model, "phi_dot", (2,))(Equation(eq.lhs, eq.rhs.subs(phi, phi_pt)))
    out = {"rho_dot": rho2, "phi_dot": phidot,
           "steps": red.steps + [_step("two tokens", "n = 2: rho'", rho2, _explicit_check(model, "rho_dot", (2,))),
                                 _step("the angle phi = arccos rho", "phi' = -rho'/sin(phi)", phidot, phi_check)]}
    if "r" in red.rhs:
        out["r_dot"] = sp.simplify(red.rhs["r"].subs(n, 2))
        out["steps"].append(_step("two tokens", "n = 2: r'", out["r_dot"], _explicit_check(model, "r_dot", (2,))))
    else:                    # separable: t = ∫_{ρ0}^{ρ} dσ / ρ'(σ), checked by differentiation
        F0 = sp.simplify(rho2.subs(beta, 0))
        rho0, sig = sp.Symbol("rho0", real=True), sp.Symbol("sigma", real=True)
        # the real form: SymPy's integral is written with log(rho - 1), real only because i*pi cancels between the
        # two ends; artanh is real on (-1, 1) and is checked by the same substitution as the integral
        G = sp.atanh(rho) - sp.atanh(rho0) if sp.simplify(F0 - (1 - rho ** 2)) == 0 else \
            sp.integrate(1 / F0.subs(rho, sig), (sig, rho0, rho))
        out["solution_beta0"] = sp.Eq(t, G)

        def solves(eq):
            ok = sp.simplify(sp.diff(eq.rhs, rho) * F0 - 1) == 0 and sp.simplify(eq.rhs.subs(rho, rho0)) == 0
            return ok, ("substituted back: d/drho of the right side times rho'(beta = 0) simplifies to 1 and the "
                        "right side vanishes at rho = rho0" if ok else "the right side does not solve the ODE"), "n = 2"
        out["steps"].append(_step("beta = 0, separable (then phi = arccos rho)", "t = ∫_{rho0}^{rho} dσ/rho'(σ)", G,
                                  solves))
    return out


def _numeric_check(pairs, what: str, tol: float = 1e-20, scope: str = "at the stated points"):
    """A procedure comparing the displayed right side, evaluated by ``shown(eq.rhs, point)``, with an
    independent number ``want(point)`` (mpmath, 30 digits; quadrature error ~1e-28 for these smooth periodic
    integrands, hence ``tol``) at each point of ``pairs = (points, shown, want)``."""
    points, shown, want = pairs

    def how(eq):
        import mpmath
        with mpmath.workdps(30):
            err = max(float(abs(mpmath.mpmathify(shown(eq.rhs, p)) - want(p))) for p in points)
        ok = err < tol
        return ok, (f"{what}; |difference| = {err:.1e} < {tol:.0e}" if ok else f"{what}: differs by {err:.3g}"), \
            scope
    return how


def _num(e, vals: dict):
    """``e`` at ``vals`` as an mpmath number (40 digits, complex when it has an imaginary part)."""
    import mpmath
    re_, im_ = sp.N(sp.sympify(e).xreplace(vals), 40).as_real_imag()
    return mpmath.mpc(str(sp.N(re_, 40)), str(sp.N(im_, 40))) if im_ != 0 else mpmath.mpf(str(sp.N(re_, 40)))


def circle_linearisation(normaliser: str) -> dict:
    """Growth rate of Fourier mode ``k`` at the uniform measure on the circle (module docstring); derived once
    per normaliser (the checked steps take seconds), a fresh dict each call."""
    rate, k, steps = _circle_linearisation(normaliser)
    return {"rate": rate, "k": k, "steps": list(steps)}


@lru_cache(maxsize=None)
def _circle_linearisation(normaliser: str) -> tuple:
    x, y, u, eps = sp.symbols("x y u epsilon", real=True)
    k = sp.Symbol("k", integer=True, positive=True)
    steps: list[Step] = []
    mu = 1 / (2 * sp.pi) + eps * sp.exp(sp.I * k * y)
    ker = sp.exp(beta * sp.cos(y - x))
    # numerator and normaliser as functionals of μ: v = N/Z, N[unif] = 0, so v = (N1 ε)/Z0 + O(ε²)
    N_unif_integrand = ker * sp.sin(y - x) / (2 * sp.pi)
    odd = sp.simplify(N_unif_integrand.subs(y, x - u) + N_unif_integrand.subs(y, x + u)) == 0
    import mpmath

    if not odd:
        raise AssertionError("the velocity integrand at the uniform measure is not odd")
    pts = [(kk, bb) for kk in (1, 2, 3) for bb in (sp.Rational(7, 10), 5)]
    x_pt = sp.Rational(3, 10)
    steps.append(_step("v at the uniform measure: the integrand is odd in y - x", "v_unif(x)", sp.Integer(0),
                       _numeric_check((pts, lambda e, p: _num(e, {beta: p[1]}), lambda p: mpmath.quad(
                           lambda yy: mpmath.exp(p[1] * mpmath.cos(yy - x_pt)) * mpmath.sin(yy - x_pt),
                           [0, mpmath.pi, 2 * mpmath.pi]) / (2 * mpmath.pi)),
                           "quadrature of (1/2pi) int e^{beta cos(y - x)} sin(y - x) dy at x = 3/10, beta = 7/10, 5")))
    N1 = sp.diff(ker * sp.sin(y - x) * mu, eps).subs(eps, 0)               # O(ε) integrand of the numerator
    N1u = sp.simplify(N1.subs(y, x + u) * sp.exp(-sp.I * k * x))           # = e^{βcos u} sin u e^{iku}
    upts = [(kk, bb, uu) for kk in (1, 2) for bb in (sp.Rational(7, 10), 5) for uu in (sp.Rational(11, 10), -2)]

    def from_definition(p):        # the numerator integrand at eps = 1 minus eps = 0 (it is linear in eps)
        vals = {k: p[0], beta: p[1], x: x_pt, y: x_pt + p[2]}
        f = ker * sp.sin(y - x) * mu * sp.exp(-sp.I * k * x)
        return _num(f.subs(eps, 1), vals) - _num(f.subs(eps, 0), vals)
    steps.append(_step("the O(eps) part of the velocity numerator, y = x + u", "e^{-ikx} N_1(x + u)", N1u,
                       _numeric_check((upts, lambda e, p: _num(e, {k: p[0], beta: p[1], u: p[2]}), from_definition),
                                      "the definition's integrand at eps = 1 minus eps = 0, at x = 3/10, "
                                      "u = 11/10, -2, k = 1, 2, beta = 7/10, 5")))
    # e^{iku} = cos ku + i sin ku; the cos part is odd in u and integrates to 0
    cos_part = sp.simplify(sp.re(sp.expand_complex(N1u)))     # (u, k, beta real)
    odd_cos = sp.simplify(cos_part.subs(u, -u) + cos_part) == 0
    if not odd_cos:
        raise AssertionError("the real part is not odd in u")
    at_u = lambda e, p: _num(e, {k: p[0], beta: p[1], u: p[2]})                 # noqa: E731
    real = _numeric_check((upts, at_u, lambda p: mpmath.re(mpmath.exp(p[1] * mpmath.cos(p[2])) * mpmath.sin(p[2])
                                                              * mpmath.expj(p[0] * p[2]))),
                          "the real part of e^{beta cos u} sin u e^{iku} at u = 11/10, -2, k = 1, 2, beta = 7/10, 5")
    odd_at = _numeric_check((upts, lambda e, p: at_u(e, p) + at_u(e, (p[0], p[1], -p[2])), lambda p: 0),
                            "odd: f(u) + f(-u) = 0 at the same points")

    def real_and_odd(eq):
        (ok1, m1, sc), (ok2, m2, _) = real(eq), odd_at(eq)
        return ok1 and ok2, f"{m1}; {m2}", sc
    steps.append(_step("the real part is odd in u: it integrates to 0", "Re(e^{-ikx} N_1(x + u))", cos_part,
                       real_and_odd))
    by_parts = sp.simplify(sp.diff(sp.exp(beta * sp.cos(u)), u) + beta * sp.sin(u) * sp.exp(beta * sp.cos(u))) == 0
    # ∫ e^{β cos u} sin u sin ku du = (k/β) ∫ e^{β cos u} cos ku du = (k/β) 2π I_k(β)
    vel = sp.I * (k / beta) * 2 * sp.pi * sp.besseli(k, beta)
    if not by_parts:
        raise AssertionError("d/du e^{beta cos u} != -beta sin u e^{beta cos u}")
    steps.append(_step("by parts and ∫_0^{2π} e^{β cos u} cos ku du = 2π I_k(β)", "∫_0^{2π} e^{β cos u} sin u e^{iku} du",
                       vel, _numeric_check((pts, lambda e, p: _num(e, {k: p[0], beta: p[1]}), lambda p: mpmath.quad(
                           lambda uu: mpmath.exp(p[1] * mpmath.cos(uu)) * mpmath.sin(uu) * mpmath.expj(p[0] * uu),
                           [0, mpmath.pi, 2 * mpmath.pi])), "quadrature of the integral, k = 1, 2, 3, beta = 7/10, 5")))
    Z0 = sp.Integer(1) if normaliser == "n" else sp.besseli(0, beta)
    if normaliser != "n":
        steps.append(_step("SA: the normaliser at the uniform measure; its O(eps) part multiplies v = 0",
                           "(1/2π)∫ e^{β cos u} du", Z0, _numeric_check(
                               (pts, lambda e, p: _num(e, {beta: p[1]}), lambda p: mpmath.quad(
                                   lambda uu: mpmath.exp(p[1] * mpmath.cos(uu)), [0, mpmath.pi, 2 * mpmath.pi])
                                / (2 * mpmath.pi)), "quadrature, beta = 7/10, 5")))
    # ∂_t δμ = -∂_x(μ₀ δv) with μ₀ = 1/(2π), δv = ε e^{ikx} vel / Z0
    dv = sp.exp(sp.I * k * x) * vel / Z0
    growth = sp.simplify(-sp.diff(dv / (2 * sp.pi), x) / sp.exp(sp.I * k * x))
    eps_fd = mpmath.mpf("1e-20")

    def nonlinear(p):      # d/dt mu at x for mu = 1/(2pi) + eps cos(k y), divided by eps cos(kx): the PDE itself
        kk, bb, xx = p[0], mpmath.mpf(p[1]), mpmath.mpf("0.2")
        with mpmath.workdps(60):
            m = lambda yy: 1 / (2 * mpmath.pi) + eps_fd * mpmath.cos(kk * yy)            # noqa: E731
            def flux(z):
                num = mpmath.quad(lambda yy: mpmath.exp(bb * mpmath.cos(yy - z)) * mpmath.sin(yy - z) * m(yy),
                                  [0, mpmath.pi, 2 * mpmath.pi])
                den = 1 if normaliser == "n" else mpmath.quad(lambda yy: mpmath.exp(bb * mpmath.cos(yy - z)) * m(yy),
                                                              [0, mpmath.pi, 2 * mpmath.pi])
                return m(z) * num / den
            return -mpmath.diff(flux, xx) / (eps_fd * mpmath.cos(kk * xx))
    steps.append(_step("linearised continuity equation: d/dt of mode k is lambda_k times it", "lambda_k", growth,
                       _numeric_check(([(2, sp.Rational(7, 10)), (3, 2)], lambda e, p: _num(e, {k: p[0], beta: p[1]}),
                                       nonlinear), "the nonlinear equation d mu/dt = -d/dx(mu v_mu) at mu = 1/(2pi) + "
                                       "eps cos(kx), eps = 1e-20 (quadrature, numerical x-derivative, 60 digits), "
                                       "k = 2, 3, divided by eps cos(kx)", tol=1e-15)))
    return growth, k, tuple(steps)


def sphere_linearisation(normaliser: str, d: int) -> dict:
    """:func:`_sphere_linearisation`, derived once per (normaliser, d), a fresh dict each call."""
    rate, ell, steps = _sphere_linearisation(normaliser, d)
    return {"rate": rate, "ell": ell, "steps": list(steps)}


@lru_cache(maxsize=None)
def _sphere_linearisation(normaliser: str, d: int) -> tuple:
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
    def gradient(eq):
        ok = all(sp.simplify(sp.diff(e, a) - b * eq.rhs) == 0 for a, b in zip(xs, ys))
        return ok, "exact (SymPy): d/dx_a e^{beta<x,y>} - y_a (right side) simplifies to 0 for every a", f"d = {d}"
    steps.append(_step("USA velocity = grad_S of (1/beta) ∫ e^{beta<x,y>} dmu(y): Euclidean gradient",
                       "(d/dx_a e^{beta<x,y>})/y_a", beta * e, gradient))
    mu_, dd, rr = sp.Symbol("mu"), sp.Symbol("d", positive=True), sp.Symbol("r", positive=True)
    f = rr ** ell
    eig = sp.solve(sp.Eq(sp.diff(f, rr, 2) + (dd - 1) / rr * sp.diff(f, rr) - mu_ * f / rr ** 2, 0), mu_)[0]
    eig = sp.factor(eig.subs(dd, d))
    def laplacian(eq):         # Δ of the degree-0 extension Y(x/|x|) at |x| = 1 is Δ_S Y
        pt = {a: 0 for a in xs}
        pt.update({xs[0]: sp.Rational(3, 5), xs[1]: sp.Rational(4, 5)})
        rad = sp.sqrt(sum(a ** 2 for a in xs))
        for L in range(1, 4):
            F = sp.re(sp.expand((xs[0] + sp.I * xs[1]) ** L)) / rad ** L
            lap = sum(sp.diff(F, a, 2) for a in xs).xreplace(pt)
            if sp.simplify(lap + eq.rhs.subs(ell, L) * F.xreplace(pt)) != 0:
                return False, f"Delta_S Y != -mu Y for Y = Re (x0 + i x1)^{L} on S^{d - 1}", ""
        return True, (f"exact (SymPy): the Laplacian in R^{d} of Re (x0 + i x1)^l / |x|^l at x = (3/5, 4/5, 0, ...) "
                      "equals -(right side) times it, l = 1, 2, 3"), f"d = {d}"
    steps.append(_step("Delta_S Y_ell = -mu Y_ell with Delta(r^ell Y) = 0 (radial part of the Laplacian)", "mu", eig,
                       laplacian))
    half = sp.Rational(d, 2)
    c = sp.gamma(half) * (2 / beta) ** (half - 1) * sp.besseli(ell + half - 1, beta)
    def funk_hecke(eq):
        cf = sp.lambdify((ell, beta), eq.rhs, modules="mpmath")
        worst = 0.0
        for L in range(4):
            for b in (1, 5):
                if d >= 3:
                    tt = sp.Symbol("t")
                    w = mpmath.gamma(mpmath.mpf(d) / 2) / (mpmath.sqrt(mpmath.pi) * mpmath.gamma(mpmath.mpf(d - 1) / 2))
                    P = sp.lambdify(tt, sp.expand(sp.gegenbauer(L, sp.Rational(d - 2, 2), tt)
                                                  / sp.gegenbauer(L, sp.Rational(d - 2, 2), 1)), modules="mpmath")
                    q = w * mpmath.quad(lambda x: mpmath.exp(b * x) * P(x) * (1 - x * x) ** (mpmath.mpf(d - 3) / 2),
                                        [-1, 0, 1])
                else:               # the circle: (1/2pi) ∫ e^{b cos u} cos(Lu) du
                    q = mpmath.quad(lambda u_: mpmath.exp(b * mpmath.cos(u_)) * mpmath.cos(L * u_),
                                    [0, mpmath.pi, 2 * mpmath.pi]) / (2 * mpmath.pi)
                worst = max(worst, float(abs(q / cf(L, b) - 1)))
        ok = worst < 1e-12
        return ok, (f"mpmath quadrature of the Funk-Hecke integral (15 digits), ell = 0..3, beta = 1, 5: relative "
                    f"difference {worst:.1e} < 1e-12" if ok else f"quadrature differs by {worst:.3g}"), f"d = {d}"
    steps.append(_step("Funk-Hecke coefficient of e^{beta t} (DLMF 10.32.2)", "c_ell", c, funk_hecke))
    rate = eig * c / beta / (1 if normaliser == "n" else c.subs(ell, 0))
    mu_shown, c_shown = steps[1].rhs, steps[2].rhs

    def assembled(eq):
        want = mu_shown * c_shown / beta / (1 if normaliser == "n" else c_shown.subs(ell, 0))
        ok = sp.simplify(eq.rhs - want) == 0
        return ok, ("exact (SymPy): the right side is mu times c_ell / beta" + ("" if normaliser == "n" else
                    " / c_0") + " with mu and c_ell as displayed in the two steps above"), f"d = {d}"
    steps.append(_step("the growth rate: -(1/beta) Delta_S (c_ell Y_ell)" + ("" if normaliser == "n" else ", divided "
                       "by the normaliser c_0"), "lambda_ell", rate, assembled))
    if d == 2:
        lin = circle_linearisation(normaliser)

        def same_as_circle(eq):
            ok = sp.simplify(eq.rhs.subs(ell, lin["k"]) - lin["rate"]) == 0
            return ok, "exact (SymPy): the difference with the circle's Fourier derivation simplifies to 0", "d = 2"
        steps.append(_step("d = 2: equals the circle's Fourier derivation", "lambda_ell", rate, same_as_circle))
    return rate, ell, tuple(steps)


@lru_cache(maxsize=None)
def _rate_function(normaliser: str, d: int) -> Callable:
    """``λ(k, β)`` as an mpmath function, derived once per (normaliser, d): the derivation and its checked steps
    take seconds, and a figure or a β grid asks for the rates at many β."""
    lin = circle_linearisation(normaliser) if d == 2 else sphere_linearisation(normaliser, d)
    return sp.lambdify((lin["k"] if d == 2 else lin["ell"], beta), lin["rate"], modules="mpmath")


def fastest_mode(normaliser: str, beta_value: float, kmax: int | None = None, d: int = 2) -> tuple[int, list[float]]:
    """``k* = argmax_k λ_k(β)`` (mpmath Bessel values of the derived rate: Fourier modes on the circle for
    ``d = 2``, spherical-harmonic degrees on ``S^{d-1}`` otherwise); ``λ_k`` for ``k = 1..kmax``."""
    import mpmath

    f = _rate_function(normaliser, d)
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
