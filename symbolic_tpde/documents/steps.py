"""Derivations a student can follow: ordered, titled, machine-checked steps (README, Mathematics §3-4).

The chain for a softmax-normalised exponential-quadratic kernel (Castin, Ablin, Carrillo, Peyré,
arXiv 2501.18322, §3), in matrix form for general ``d`` (``MatrixSymbol``s):

1. ``log k(x, y) = c(x) + yᵀRy + (Bᵀx + r)ᵀy``  (the kernel as a quadratic in the key ``y``);
2. ``log k(x, y) - ½(y - α)ᵀΣ⁻¹(y - α) = -½yᵀNy + nᵀy + (terms free of y)``, ``N = Σ⁻¹ - R - Rᵀ``,
   ``n = Σ⁻¹α + r + Bᵀx``;
3. the completed square ``-½yᵀNy + nᵀy = -½(y - N⁻¹n)ᵀN(y - N⁻¹n) + (terms free of y)``: the tilt is
   ``N(m(x), S)``, ``S = N⁻¹``, and exists iff ``N ≻ 0``;
4. the tilted precision ``-∇²_y(exponent) = N``; 5. the mean ``N⁻¹n = m₀ + Mx`` against the independent
   matrix-calculus tilt of :func:`.tilt.tilt_matrix`;
6. ``Γ(x) = V m(x) = b + Jx``; 7. ``dα/dt = E[Γ(X)] = b + Jα``; 8. ``dΣ/dt = JΣ + ΣJᵀ``; then the specialised
   results (``V = I``: ``d(Σ⁻¹)/dt = -(A + Aᵀ)``, ``Σ(t) = (Σ₀⁻¹ - t(A + Aᵀ))⁻¹``, the blow-up time).

Linear attention and Sinkhorn get their own chains (the Gaussian moment; Gaussian conditioning and the plan's
first-order condition), several heads and the FFN ``Wx + c`` add their fields.  Each kind's chain is named
by its registry entry (``SymbolicPart.steps`` in :mod:`.kinds`), so nothing here switches on kind names.

Every step is one :class:`~.steps_eq.Equation` (named blocks ``R``, ``N``, ``n`` in its ``where``), displayed
and checked as that object (:mod:`.steps_eq`): first in the free algebra of matrix symbols (a proof for every
``d``, :mod:`.steps_free`), else at stated ``d`` (exact, random rational points, 60 digits where a square root
appears, :mod:`.steps_check`); the check line under each step says which.  With ``--d N``,
:func:`entrywise_display_steps` adds the entrywise equations in 1-based names while they stay readable
(:data:`ENTRYWISE_MAX_NODES`).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import sympy as sp

from ..registry import kinds as spec_kinds
from ..registry.layout import symmetric_rows
from ..symbolic.moments import mexpand, symmetric_subs_all
from .check import check_equal, explicit
from .equation import (
    D, Derivation, Equation, GaussExpect, NegHessian, Notation, PlanMean, Step, recheck, step, sym, tex
)

__all__ = ["D", "Derivation", "Equation", "Notation", "step", "recheck", "kind_derivation",
           "entrywise_system_steps", "user_kernel_derivation", "entrywise_display_steps"]

HALF = sp.Rational(1, 2)


def _sum(terms):
    terms = [t for t in terms if t is not None]
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out


def _mexpand(e):
    return mexpand(symmetric_subs_all(e, sp.MatrixSymbol("Sigma", D, D)))


def _mm(*factors):
    """A product kept as written (``-½ (y - N⁻¹n)ᵀ N (y - N⁻¹n)``), for display; SymPy would distribute it."""
    return sp.MatMul(*factors, evaluate=False)


def _ma(*terms):
    terms = [t for t in terms if t is not None]
    return sp.MatAdd(*terms, evaluate=False) if len(terms) > 1 else terms[0]


# ------------------------------------------------------------------------------------ one normalised head
def kernel_head_steps(kind: str, syms: dict, pre: str = "", kernel=None) -> tuple[list, Any, Any]:
    """Steps 1-6 for one softmax-normalised head; returns ``(steps, b, J)``.  The named blocks ``R``, ``N``,
    ``n`` are shown under the equations that use them and substituted by the checks.  ``kernel``: an
    :class:`~.kernels.ExpQuadKernel` of matrix symbols used instead of the kind's (a user kernel's blocks)."""
    from ..symbolic.tilt import tilt_matrix

    alpha, Sigma = sp.MatrixSymbol("alpha", D, 1), sp.MatrixSymbol("Sigma", D, D)
    x, y = sp.MatrixSymbol("x", D, 1), sp.MatrixSymbol("y", D, 1)
    K = kernel if kernel is not None else spec_kinds.part(kind, "symbolic").matrix_kernel(syms)
    Bt = K.B.T
    Rn, Nn, nn = sp.MatrixSymbol("R", D, D), sp.MatrixSymbol("Lambda", D, D), sp.MatrixSymbol("n", D, 1)
    c = _sum([x.T * K.P * x if K.P is not None else None, K.p.T * x if K.p is not None else None]) \
        if (K.P is not None or K.p is not None) else None
    lin = _sum([Bt * x, K.r])
    where_R = ((Rn, K.R),) if K.R is not None and K.R != Rn else ()
    blocks = _ma(c, _mm(y.T, Rn, y) if K.R is not None else None, _mm(sp.Transpose(lin), y))
    shown = spec_kinds.part(kind, "symbolic").matrix_definition if kernel is None else None
    definition = shown(syms, x, y) if shown is not None else None
    lhs1 = definition if definition is not None else K.log_kernel(x, y)
    out = [step(f"{pre}the log-kernel as a quadratic in the key $y$", lhs1, blocks,
                "the terms free of $y$ form $c(x)$" if c is not None else "", where=where_R)]
    N = _sum([Sigma.I, -Rn if K.R is not None else None, -Rn.T if K.R is not None else None])
    n = _sum([Sigma.I * alpha, K.r, Bt * x])
    where = where_R + ((Nn, N), (nn, n))
    exponent = _ma(blocks, _mm(-HALF, sp.Transpose(y - alpha), Sigma.I, y - alpha))
    quad = _ma(_mm(-HALF, y.T, Nn, y), _mm(nn.T, y))
    square = _mm(-HALF, sp.Transpose(y - Nn.I * nn), Nn, y - Nn.I * nn)
    out.append(step(rf"{pre}the exponent of the tilted measure $k(x, y)\,\mathcal{{N}}(y; \alpha, \Sigma)$", exponent,
                    quad, r"$\log \mathcal{N}(y; \alpha, \Sigma) = -\tfrac{1}{2}(y - \alpha)^{\top}\Sigma^{-1}(y - \alpha) + "
                    r"\text{const}$; terms free of $y$ cancel when the tilted measure is normalised", free_of=("y",), where=where,
                    exact_d=(), random_d=(2, 3), points=1))
    out.append(step(f"{pre}completing the square", quad, square,
                    r"so the normalised tilt is the Gaussian $\mathcal{N}(m(x), S)$ with covariance $S = \Lambda^{-1}$ "
                    r"and mean $m(x) = Sn$; it exists iff $\Lambda \succ 0$", free_of=("y",), where=where, exact_d=(), random_d=(2, 3), points=1))
    tilt = tilt_matrix(K, alpha, Sigma)
    out.append(step(f"{pre}the tilted precision $S^{{-1}}$: minus the $y$-Hessian of the exponent", NegHessian(exponent, y),
                    Nn, "the Hessian is taken entrywise", where=where))
    m = _mexpand(tilt.m0 + tilt.M * x)
    out.append(step(rf"{pre}the tilted mean $m(x) = \Lambda^{{-1}} n$", Nn.I * nn, m,
                    "the right side is the tilt computed by matrix calculus (the $y$-gradient and $y$-Hessian of "
                    "the exponent), an independent route", where=where))
    V = syms["V"]
    b, J = _mexpand(V * tilt.m0), _mexpand(V * tilt.M)
    out.append(step(rf"{pre}the affine field $\Gamma(x) = V m(x) = b + Jx$", V * Nn.I * nn, b + J * x, where=where))
    return out, b, J


# --------------------------------------------------------------------------------- linear and Sinkhorn
def linear_head_steps(syms: dict, pre: str = "") -> tuple[list, Any, Any]:
    """``Γ(x) = V E[y yᵀAx] = V(Σ + ααᵀ)Ax``, the expectation by the Gaussian moment generating function."""
    alpha, Sigma = sp.MatrixSymbol("alpha", D, 1), sp.MatrixSymbol("Sigma", D, D)
    x, y = sp.MatrixSymbol("x", D, 1), sp.MatrixSymbol("y", D, 1)
    A, V = syms["A"], syms["V"]
    J = V * (Sigma + alpha * alpha.T) * A
    s1 = step(rf"{pre}linear attention: $\Gamma(x) = V\,\mathbb{{E}}[\langle Ax, y\rangle y]$",
              V * GaussExpect(y * (y.T * A * x), y, alpha, Sigma), J * x,
              r"not normalised: $b = 0$ and $J = V(\Sigma + \alpha\alpha^{\top})A$")
    return [s1], sp.ZeroMatrix(D, 1), J


def sinkhorn_head_steps(syms: dict, pre: str = "") -> tuple[list, Any, Any, Any]:
    """Sinkhorn: Gaussian conditioning, the plan's first-order condition (closed form, principal square
    root), the affine field."""
    from ..symbolic import sinkhorn as sk

    alpha, Sigma = sp.MatrixSymbol("alpha", D, 1), sp.MatrixSymbol("Sigma", D, D)
    x = sp.MatrixSymbol("x", D, 1)
    C = sp.MatrixSymbol("C", D, D)
    A, V, eps = syms["A"], syms["V"], syms["epsilon"]
    cm = alpha + C.T * Sigma.I * (x - alpha)
    out = [step(rf"{pre}Sinkhorn: the entropic plan $\pi$ between $\mathcal{{N}}(\alpha, \Sigma)$ and itself is "
                "Gaussian with cross-covariance $C$; its conditional mean", PlanMean(x, alpha, Sigma, C), cm,
                "Gaussian conditioning (the left side is evaluated from the joint precision, the right side from "
                "the covariance)", exact_d=(), random_d=(2, 3), points=2)]
    Ct = sk.closed_form_matrix(D).xreplace({sp.MatrixSymbol("A", D, D): A / eps})
    cond = Sigma * (A / eps).T * (Sigma - Ct * Sigma.I * Ct.T)
    out.append(step(rf"{pre}the plan's first-order condition $C = \Sigma (A/\varepsilon)^{{\top}}(\Sigma - "
                    r"C^{\top}\Sigma^{-1}C)$, solved in closed form", Ct.T, cond,
                    r"$C^{\top} = 2\Sigma (A/\varepsilon)\Sigma (I + X^{1/2})^{-1}$, $X = I + 4(A/\varepsilon)^{\top}"
                    r"\Sigma (A/\varepsilon)\Sigma$; $X^{1/2}$ is the principal square root ($X$ has eigenvalues "
                    r"$\geq 1$ for $\Sigma \succ 0$)",
                    exact_d=(), random_d=(1, 2, 3), numeric=True))
    b, J = V * (alpha - C.T * Sigma.I * alpha), V * C.T * Sigma.I
    out.append(step(rf"{pre}the affine field $\Gamma(x) = V\,\mathbb{{E}}_{{\pi}}[y \mid x] = b + Jx$", V * cm,
                    b + J * x))
    return out, b, J, (C, Ct.T)


def moment_steps(alpha, Sigma) -> list:
    """The mean and covariance equations of an affine field ``Γ = b + Jx`` (``b``, ``J`` any vector and matrix)."""
    X = sp.MatrixSymbol("X", D, 1)
    Bn, Jn = sp.MatrixSymbol("b", D, 1), sp.MatrixSymbol("J", D, D)
    return [step(r"mean equation: for an affine field $\Gamma = b + Jx$ the flow map is affine and "
                 r"$\frac{d\alpha}{dt} = \mathbb{E}[\Gamma(X)]$", GaussExpect(Bn + Jn * X, X, alpha, Sigma),
                 Bn + Jn * alpha, "$b$, $J$: any vector and matrix (the identity holds for every affine field)"),
            step(r"covariance equation: $\frac{d\Sigma}{dt} = \mathbb{E}[(X - \alpha)\Gamma(X)^{\top} + "
                 r"\Gamma(X)(X - \alpha)^{\top}]$",
                 GaussExpect((X - alpha) * (Bn + Jn * X).T + (Bn + Jn * X) * (X - alpha).T, X, alpha, Sigma),
                 Jn * Sigma + Sigma * Jn.T, "$b$, $J$: any vector and matrix")]


# -------------------------------------------------------------------------------------------- assembly
def _head_steps(kind: str, syms: dict, pre: str):
    """The kind's own chain, named by its registry entry (``SymbolicPart.steps``); a normalised kernel
    without one gets the generic tilt chain."""
    sym = spec_kinds.part(kind, "symbolic")
    if sym.steps is not None:
        return sym.steps(kind, syms, pre)
    if sym.matrix_kernel is not None:
        return (*kernel_head_steps(kind, syms, pre), None)
    raise NotImplementedError(f"no step-by-step derivation for kind {kind!r} (its SymbolicPart has no steps)")


def kind_derivation(kinds_: tuple = ("softmax",), ffn: bool = False, V_identity: bool = False,
                    A_symmetric: bool = False) -> Derivation:
    """The matrix-form derivation of the moment ODE for heads of ``kinds_`` (summed) and an optional FFN,
    optionally specialised to ``V = I`` and/or symmetric ``A`` (module docstring)."""
    from ..symbolic.moments import _mat_symbols, matrix_form
    from .special_cases import assumptions_in_words, constant_precision_rate, model_statement, specialise

    single = len(kinds_) == 1
    mf = matrix_form(tuple(kinds_), ffn=ffn)
    alpha, Sigma = mf.alpha, mf.Sigma
    x = sp.MatrixSymbol("x", D, 1)
    steps: list = []
    fields, subs_C = [], {}
    for h, kind in enumerate(kinds_):
        syms = _mat_symbols(kind, "" if single else f"^({h + 1})", D, None)
        pre = "" if single else f"head {h + 1} ({kind}): "
        st, b, J, cc = _head_steps(kind, syms, pre)
        steps += st
        fields.append((b, J))
        if cc is not None:
            subs_C[cc[0]] = cc[1]
    if not single:      # the matrix form names head h's symbols A_h (0-based); the document A^(h+1)
        ren = {v: _mat_symbols(hd["kind"], f"^({h + 1})", D, None)[k]
               for h, hd in enumerate(mf.heads) for k, v in hd["symbols"].items()}
        mf = replace(mf, alpha_dot=mf.alpha_dot.xreplace(ren), Sigma_dot=mf.Sigma_dot.xreplace(ren),
                     heads=tuple({**hd, "symbols": {k: ren[v] for k, v in hd["symbols"].items()}} for hd in mf.heads))
    mf_a, mf_S = mf.alpha_dot, mf.Sigma_dot
    b = _sum([f[0] for f in fields] + ([mf.symbols["c"]] if ffn else []))
    J = _sum([f[1] for f in fields] + ([mf.symbols["W"]] if ffn else []))
    if len(fields) > 1 or ffn:
        parts = [f[0] + f[1] * x for f in fields] + ([mf.symbols["W"] * x + mf.symbols["c"]] if ffn else [])
        steps.append(step("the layer's field: heads add" + (", and the feed-forward term $Wx + c$" if ffn else ""),
                          _sum(parts), b + J * x, r"fields add, so the layer's field is affine: $\Gamma = b + Jx$"))
    num = dict(numeric=True, exact_d=(), random_d=(1, 2, 3)) if subs_C else {}
    steps += moment_steps(alpha, Sigma)
    a_dot = (b + J * alpha).xreplace(subs_C)
    S_dot = (J * Sigma + Sigma * J.T).xreplace(subs_C)
    # the layer's b + J alpha against the matrix form of symbolic.moments; shown only where the two are not the
    # same expression (a step "X = X" says nothing)
    if sym(a_dot) != sym(mf_a):
        steps.append(step(r"the moment ODE (mean): $b + J\alpha$ with this layer's $b$ and $J$", a_dot, mf_a, **num))
    if sym(S_dot) != sym(mf_S):
        steps.append(step(r"the moment ODE (covariance): $J\Sigma + \Sigma J^{\top}$ with this layer's $J$", S_dot, mf_S,
                          **num))
    special = specialise(mf, tuple(kinds_), V_identity, A_symmetric) if V_identity or A_symmetric else []
    steps += special
    title = f"Gaussian moment ODE of {' + '.join(kinds_)} attention" + (" with a feed-forward term" if ffn else "")
    rate = constant_precision_rate(mf, V_identity, A_symmetric)[3] if V_identity or A_symmetric else None
    ass, concl = assumptions_in_words(tuple(kinds_), V_identity, A_symmetric, rate)
    d_alpha, d_Sigma = Notation("d alpha/dt", r"\frac{d\alpha}{dt}"), Notation("d Sigma/dt", r"\frac{d\Sigma}{dt}")
    boxed = ((d_alpha, mf_a), (d_Sigma, mf_S))
    if special:         # the specialised equations, and the closed form and blow-up time if any
        boxed = ((d_alpha, special[0].rhs), (d_Sigma, special[1].rhs),
                 *((s.eq.lhs, s.eq.substituted(s.eq.rhs), "for constant weights" if "constant weights" in s.title
                    else "for time-dependent weights") for s in special[3:]))
    return Derivation(title, tuple(steps), ass, concl, model=model_statement(tuple(kinds_), ffn), boxed=boxed)


def _tidy(M) -> sp.ImmutableMatrix:
    """A read-off block for display, each entry as one factored fraction (``-e^t(a₀₀u₀ + a₀₁u₁)/(t + 2)``, not
    the expanded sum); the displayed block is the one the check substitutes."""
    return sp.ImmutableMatrix(M.applyfunc(lambda e: sp.factor(sp.cancel(sp.together(e)))))


# ------------------------------------------------------------------------------------ entrywise systems
def user_kernel_derivation(ell, form, V, x, y, system) -> Derivation:
    """The derivation of a user kernel (:func:`~.user_kernel.derive_kernel`) in the same matrix form as the
    built-in kinds: the kernel as given read as ``c(x) + yᵀRy + (Bᵀx + r)ᵀy`` (exact, at the user's ``d``), the
    existence condition ``Σ⁻¹ - ∇²_y log k ≻ 0`` from the quadratic form in ``y`` (checked against the pivot
    conditions of ``system`` at random rational points), the general-``d`` tilt chain for matrix symbols
    ``R``, ``B``, ``r``, ``V`` (:func:`kernel_head_steps`, proved for every ``d``), the moment equations, and
    the result with the user's blocks against ``system``'s right-hand side (random rational points, exact)."""
    from ..symbolic.kernels import ExpQuadKernel
    from .special_cases import EXACT_WORDS, LAW_ASSUMPTION, TILT_ASSUMPTION, model_statement

    d = len(x)
    xm, ym = sp.MatrixSymbol("x", d, 1), sp.MatrixSymbol("y", d, 1)
    Rd, Bd, rd, Vd = (sp.MatrixSymbol(n, d, k) for n, k in (("R", d), ("B", d), ("r", 1), ("V", d)))
    zero_R, zero_r, eye_V = form.R.is_zero_matrix, form.r.is_zero_matrix, V == sp.eye(d)
    blocks = ((Bd, _tidy(form.B)),) + (() if zero_R else ((Rd, _tidy(form.R)),)) \
        + (() if zero_r else ((rd, _tidy(form.r)),))
    lin = _ma(Bd.T * xm, None if zero_r else rd)
    cx = sp.MatrixSymbol("c(x)", 1, 1)      # the terms free of y, shown by name
    read = _ma(None if form.dropped.is_zero else cx, None if zero_R else _mm(ym.T, Rd, ym), _mm(sp.Transpose(lin), ym))
    xs, ys = sp.Matrix(x), sp.Matrix(y)

    def read_off(eq):       # the user's kernel against the read-off blocks, c(x) its terms free of y
        env = {"x": xs, "y": ys, cx.name: sp.zeros(1, 1), **{k.name: v for k, v in eq.where}}
        rhs = explicit(eq.rhs, env, {"d": d})
        rest = eq.lhs - rhs[0, 0]
        # free of y: every y-derivative of the difference brought to one fraction (cancel after together), so
        # that time-dependent coefficients written differently (1 + 1/(1+t) and (t+2)/(t+1)) cancel
        bad = [yi for yi in y if sp.cancel(sp.together(sp.expand(sp.diff(rest, yi)))) != 0]
        ok = not bad
        return ok, ("every $y$-derivative of $\\log k(x, y)$ minus the right side without $c(x)$ cancels exactly "
                    "to $0$: the difference is free of $y$ (it is $c(x)$)" if ok else
                    "the difference depends on $y$ (its derivative in " + ", ".join(f"${tex(v)}$" for v in bad)
                    + " does not cancel)"), f"d = {d}"
    steps = [Step(rf"the kernel as given, read as a quadratic in the key $y$ ($d = {d}$)",
                  Equation(ell, read, where=blocks), "the terms free of $y$ form $c(x)$; they cancel when the tilted "
                  "measure is normalised", how=read_off).check()]
    # the existence condition from the quadratic form in y: Λ = Σ⁻¹ - ∇²_y log k (Hessian constant in y)
    H = sp.hessian(sp.expand(ell), list(y)).applyfunc(sp.simplify)
    Sd = sp.MatrixSymbol("Sigma", d, d)
    c0 = H[0, 0]
    Lam = (Sd.I if H.is_zero_matrix else sp.MatAdd(Sd.I, -c0 * sp.Identity(d), evaluate=False)
           if H == c0 * sp.eye(d) else sp.MatAdd(Sd.I, -sp.ImmutableMatrix(H), evaluate=False))
    steps.append(Step(r"the tilt exists iff its precision $\Lambda = \Sigma^{-1} - \nabla_y^{2} \log k$ is positive "
                      "definite (the quadratic form in $y$ of the exponent)", Equation(Lam, None, ">0"),
                      r"$\nabla_y^{2} \log k = R + R^{\top}$ is computed from the kernel as given",
                      how=partial(_existence_check, system, d)).check())
    K = ExpQuadKernel(B=sp.MatrixSymbol("B", D, D), R=None if zero_R else sp.MatrixSymbol("R", D, D),
                      r=None if zero_r else sp.MatrixSymbol("r", D, 1), name="user")
    Vg = sp.Identity(D) if eye_V else sp.MatrixSymbol("V", D, D)
    head, b, J = kernel_head_steps("user", {"V": Vg}, kernel=K)
    steps += head[1:]
    alpha, Sigma = sp.MatrixSymbol("alpha", D, 1), sp.MatrixSymbol("Sigma", D, D)
    steps += moment_steps(alpha, Sigma)
    named = blocks + (() if eye_V else ((Vd, sp.ImmutableMatrix(V)),))
    d_alpha, d_Sigma = Notation("d alpha/dt", r"\frac{d\alpha}{dt}"), Notation("d Sigma/dt", r"\frac{d\Sigma}{dt}")
    res = [(d_alpha, sym(b + J * alpha)), (d_Sigma, sym(J * Sigma + Sigma * J.T))]
    for (lhs, rhs), which in zip(res, ("mean", "cov")):
        steps.append(Step(rf"the moment ODE ({'mean' if which == 'mean' else 'covariance'}) with this kernel's blocks",
                          Equation(lhs, rhs, where=named), "the right side evaluated with the blocks above is compared "
                          r"with the entrywise system derived for this kernel (explicit tilt, $LDL^{\top}$ pivots)",
                          how=partial(_user_result_check, system, which)).check())
    model = (model_statement(("softmax",))[0],
             r"Softmax-normalised attention with the user's kernel: $\Gamma_\mu(x) = V \int y\, k(x, y)\, d\mu(y) "
             r"/ \int k(x, y)\, d\mu(y)$ with $\log k(x, y) = " + tex(ell) + "$"
             + (", and $V = I$ (the default value matrix, so $V$ does not appear below)" if eye_V
                else ", and $V = " + tex(sp.ImmutableMatrix(V)) + "$") + ".")
    ass = (LAW_ASSUMPTION, TILT_ASSUMPTION, rf"For this kernel the condition reads ${tex(Lam)} \succ 0$.")
    return Derivation(f"Gaussian moment ODE of a user kernel, d = {d}", tuple(steps), ass, (EXACT_WORDS,),
                      model=model, boxed=tuple(res))


def _sigma_states(d: int) -> sp.Matrix:
    return sp.Matrix(d, d, lambda i, j: sp.Symbol(f"Sigma_{min(i, j)}_{max(i, j)}", real=True))


def _random_point(system, rng, d: int) -> dict:
    """Seeded random rationals for the states (``Σ = LLᵀ + I/4`` positive definite) and parameters (positive
    where declared so), as ``{symbol: value}``."""
    L = sp.Matrix(d, d, lambda i, j: sp.Rational(rng.randint(-6, 6), 4) if i >= j else 0)
    S = L * L.T + sp.eye(d) / 4
    vals = {sp.Symbol(f"alpha_{i}", real=True): sp.Rational(rng.randint(-6, 6), 3) for i in range(d)}
    vals.update({sp.Symbol(f"Sigma_{i}_{j}", real=True): S[i, j] for i in range(d) for j in range(i, d)})
    for p in (*system.params, system.time):
        v = sp.Rational(rng.randint(-12, 12), 8)
        vals[p] = abs(v) + sp.Rational(1, 8) if p.is_positive else v
    return vals


def _existence_check(system, d, eq, points: int = 24):
    """The displayed ``Λ ≻ 0`` against the system's pivot conditions at seeded random rational points:
    positive definiteness of the displayed matrix decided exactly (SymPy, rational entries)."""
    import random

    rng = random.Random(0)
    inside = 0
    for _ in range(points):
        vals = _random_point(system, rng, d)
        env = {"Sigma": _sigma_states(d).xreplace(vals)}
        M = sp.Matrix(explicit(eq.lhs, env, {"d": d})).xreplace(vals)
        shown = M.is_positive_definite
        pivots = all(bool(c.xreplace(vals)) for c in system.conditions)
        if shown != pivots:
            return False, "the displayed condition and the pivot conditions disagree at a random rational point", ""
        inside += bool(shown)
    return True, (f"at {points} seeded random rational points ({inside} where the tilt exists, {points - inside} "
                  "where it does not) the displayed matrix is positive definite (decided exactly) exactly where all "
                  r"$LDL^{\top}$ pivot conditions of the derived system hold"), f"d = {d}"


def _user_result_check(system, which, eq, points: int = 3):
    """The displayed matrix-form right side, with the user's blocks, against ``system``'s right-hand side at
    seeded random rational points (both evaluated in exact rational arithmetic)."""
    import random

    d = len([s for s in system.states if s.name.startswith("alpha_")])
    rng = random.Random(1)
    for _ in range(points):
        vals = _random_point(system, rng, d)
        env = {k.name: sp.Matrix(v).xreplace(vals) for k, v in eq.where}
        env.update(alpha=sp.Matrix([vals[sp.Symbol(f"alpha_{i}", real=True)] for i in range(d)]),
                   Sigma=_sigma_states(d).xreplace(vals))
        env.setdefault("V", sp.eye(d))
        shown = sp.Matrix(explicit(eq.rhs, env, {"d": d}))
        rhs = [e.xreplace(vals) for e in system.rhs]
        want = sp.Matrix(rhs[:d]) if which == "mean" else sp.Matrix(symmetric_rows(rhs[d:], d))
        if any(v != 0 if v.is_Rational else abs(sp.N(v, 60)) > 1e-40 for v in shown - want):   # 60 digits if
            # the kernel holds transcendental values (cos t): 1e-40 leaves 20 digits for round-off
            return False, "the displayed right side differs from the derived system at a random rational point", ""
    return True, (f"{points} seeded random rational points (all states and parameters; $\\Sigma$ positive definite; "
                  "both sides in exact rational arithmetic, or 60 digits where the kernel holds a transcendental "
                  "value)"), f"d = {d}"


def _matrix_form_env(system):
    """The matrix form of ``system``'s kinds and the environment evaluating it at the system's own symbols."""
    from ..symbolic.moments import effective_params, head_symbols, matrix_form
    from ..symbolic.tilt import sym_vector

    st = system.origin["structure"]
    d, heads, has_ffn = st.d, st.heads, st.ffn
    kinds_ = tuple(k for k, _ in heads)
    mf = matrix_form(kinds_, ffn=has_ffn)
    alpha, Sigma = sym_vector("alpha", d), sp.Matrix(d, d, lambda i, j: sp.Symbol(
        f"Sigma_{min(i, j)}_{max(i, j)}", real=True))
    env = {"alpha": alpha, "Sigma": Sigma}
    for h, (kind, form) in enumerate(heads):
        eff = effective_params(kind, head_symbols(h, kind, form))
        sfx = "" if len(heads) == 1 else f"_{h}"
        env.update({k + sfx: v for k, v in eff.items()})
    if has_ffn:
        env["W"] = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"ffn_W_{i}_{j}", real=True))
        env["c"] = sym_vector("ffn_c", d)
    num = any(spec_kinds.part(k, "symbolic").entrywise_max_d is not None for k in kinds_)
    return mf, env, {"d": d, "m": d}, num


def _entrywise_check(system, which: str, back: dict):
    """A procedure for the step ``dα/dt = <entrywise rhs>`` (or ``dΣ/dt``): the displayed right side, with the
    display names ``back`` mapped to the system's symbols, against the matrix form evaluated at the system's
    symbols, at seeded random rational points (exact; 60 digits where a square root appears)."""
    def how(eq):
        mf, env, dims, num = _matrix_form_env(system)
        d = dims["d"]
        shown = sp.Matrix(eq.rhs).xreplace(back)
        if which == "mean":
            want = sp.Matrix(explicit(mf.alpha_dot, env, dims))
        else:
            want = sp.Matrix(explicit(mf.Sigma_dot, env, dims))
        ok, method, _ = check_equal(sp.ImmutableMatrix(shown), sp.ImmutableMatrix(want), exact_d=(), random_d=(1,),
                                    points=2, numeric=num, free=False)
        return ok, (r"the entrywise system (explicit tilt, $LDL^{\top}$ pivots) equals the matrix form evaluated at the "
                    f"same symbols: {method}" if ok else method), f"d = {d}"
    return how


def entrywise_system_steps(system) -> tuple:
    """Steps of a built-in entrywise system: the matrix-form derivation of its kinds, then its right-hand side
    compared with the matrix form evaluated at the system's own symbols (random rational points, exact)."""
    st = system.origin["structure"]
    dv = kind_derivation(tuple(k for k, _ in st.heads), ffn=st.ffn)
    return (*dv.steps, *_entrywise_steps(system, {}))


def _entrywise_steps(system, names: dict) -> list:
    d = system.origin["structure"].d
    back = {v: k for k, v in names.items()}
    rhs = [e.xreplace(names) for e in system.rhs]
    S = sp.ImmutableMatrix(symmetric_rows(rhs[d:], d))
    note = "1-based indices as in the paper" if names else ""
    return [step(f"entrywise at d = {d}: the mean equation", Notation("d alpha/dt", r"\frac{d\alpha}{dt}"),
                 sp.ImmutableMatrix(rhs[:d]), note, how=_entrywise_check(system, "mean", back)),
            step(f"entrywise at d = {d}: the covariance equation", Notation("d Sigma/dt", r"\frac{d\Sigma}{dt}"),
                 S, note, how=_entrywise_check(system, "cov", back))]


#: an entrywise step is shown only while it stays readable: at most this many nodes per equation written
#: out as a tree (softmax: ~55 at d = 2, ~160 at d = 3; linear d = 2: ~90; l2 d = 2: ~6000)
ENTRYWISE_MAX_NODES = 120


def one_based(symbols, several_heads: bool) -> dict:
    """Display names with 1-based indices as in the paper (arXiv 2501.18322): ``alpha_0 -> alpha_1``,
    ``Sigma_0_1 -> Sigma_12``, ``h0_A_0_1 -> A_12`` (several heads: ``A^(1)_12``)
    (:func:`.printing.paper_name`).  Returns ``{symbol: display symbol}``."""
    from .printing import paper_name

    out = {}
    for s in symbols:
        name = paper_name(s.name, several_heads)
        if name is not None and name != s.name:
            out[s] = sp.Symbol(name, **s.assumptions0)
    return out


def entrywise_display_steps(system, max_nodes: int = ENTRYWISE_MAX_NODES) -> tuple[list, list[str]]:
    """``(steps, notes)``: the entrywise moment ODE of ``system`` at its ``d`` in 1-based names, each step
    checked on what it displays; when the written-out right-hand side exceeds ``max_nodes`` nodes per
    equation, no step and a one-line note."""
    from .printing import tree_size

    d = system.origin["structure"].d
    size = tree_size(system.rhs)
    if size > max_nodes * len(system.rhs):
        return [], [f"The entrywise form at d = {d} has {size} nodes written out ({size // len(system.rhs)} per "
                    f"equation, more than {max_nodes}): not shown, the matrix form above is the result "
                    f"(tpde derive --d {d} prints it with named sub-expressions u_k)."]
    names = one_based(system.states + system.params, len(system.origin["structure"].heads) > 1)
    return _entrywise_steps(system, names), []

