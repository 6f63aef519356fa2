"""Derivations a student can follow: ordered, titled, machine-checked steps (README, Mathematics §3-4).

The chain for a softmax-normalised exponential-quadratic kernel (Castin, Ablin, Carrillo, Peyré,
arXiv 2501.18322, §3), in matrix form for general ``d`` (``MatrixSymbol``s):

1. ``log k(x, y) = c(x) + yᵀRy + (Bᵀx + r)ᵀy``  (the kernel as a quadratic in the key ``y``);
2. ``log k(x, y) + log N(y; α, Σ) = -½yᵀ(Σ⁻¹ - R - Rᵀ)y + (Σ⁻¹α + r + Bᵀx)ᵀy + (terms free of y)``;
3. the completed square ``-½yᵀNy + nᵀy = -½(y - N⁻¹n)ᵀN(y - N⁻¹n) + (free of y)``: the tilt is
   ``N(m(x), S)``, ``S = N⁻¹``, and exists iff ``N = Σ⁻¹ - R - Rᵀ ≻ 0``;
4. the tilted precision and 5. mean ``m(x) = m₀ + Mx``, compared with the independent matrix-calculus
   derivation of :func:`.tilt.tilt_matrix` (the ``y``-Hessian and gradient of the exponent);
6. ``Γ(x) = V m(x) = b + Jx``; 7. ``dα/dt = b + Jα``; 8. ``dΣ/dt = JΣ + ΣJᵀ``; then the specialised
   results (``V = I``: ``d(Σ⁻¹)/dt = -(A + Aᵀ)``, ``Σ(t) = (Σ₀⁻¹ - t(A + Aᵀ))⁻¹``, the blow-up time).

Linear attention and Sinkhorn get their own chains (MGF moment; Gaussian conditioning and the plan's
first-order condition), several heads and the FFN ``Wx + c`` add their fields.  Each kind's chain is named
by its registry entry (``SymbolicPart.steps`` in :mod:`.kinds`), so nothing here switches on kind names and
a new kind brings its own chain.  Sides are shown in the order a lecturer writes them (:class:`Shown`,
:func:`_lect`) while the checks run on the SymPy expressions.  With ``--d N``,
:func:`entrywise_display_steps` adds the entrywise equations in 1-based names (``Sigma_11``, ``alpha_1``)
while they stay readable (:data:`ENTRYWISE_MAX_NODES`).  **Decision**: the steps are
written in matrix form (readable at every ``d``) and checked on explicit instances (``d = 2`` with symbolic
entries, exact; ``d = 2, 3`` at random rational points; 50 digits where a square root appears), see
:mod:`.steps_check`; an entrywise system adds one step comparing its right-hand side with the matrix form.
Every :class:`~.system.Step` carries ``checked`` and ``method``; a failed or impossible check is reported as
not checked, never hidden.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Callable

import sympy as sp

from ..registry import kinds as spec_kinds
from ..registry.layout import symmetric_rows
from .steps_check import check_equal, explicit
from .system import Step

HALF = sp.Rational(1, 2)
D = sp.Symbol("d", integer=True, positive=True)


@dataclass(frozen=True)
class Shown:
    """A side of an equation that is shown, not computed with (``text`` for text/JSON, ``tex`` for LaTeX);
    a step with a ``Shown`` side needs its own check."""

    text: str
    tex: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Derivation:
    """An ordered derivation: ``steps`` (checked :class:`Step`s), ``assumptions`` and ``conclusions`` in
    words, ``title``, ``notes`` (one-line remarks on what is not shown and why); ``all_checked`` is True only
    when every step was verified."""

    title: str
    steps: tuple
    assumptions: tuple = ()
    conclusions: tuple = ()
    notes: tuple = ()

    @property
    def all_checked(self) -> bool:
        return bool(self.steps) and all(s.checked for s in self.steps)


def _sym(e):
    """``Σᵀ -> Σ`` (Σ is symmetric) for display; the checks use a symmetric Σ, so nothing is assumed twice."""
    if not isinstance(e, sp.Basic):
        return e
    reps = {}
    for n in ("Sigma", "Sigma_0"):
        S = sp.MatrixSymbol(n, D, D)
        reps.update({S.T: S, sp.Inverse(S).T: S.I, sp.Inverse(S.T): S.I})
    return e.xreplace(reps)


def step(title: str, lhs, rhs, note: str = "", check: Callable | None = None, **kw) -> Step:
    """A :class:`Step` whose equation is checked now: by ``check()`` (returning ``(ok, method)``) when given,
    else by :func:`.steps_check.check_equal` with ``kw``."""
    lhs, rhs = _sym(lhs), _sym(rhs)
    try:
        ok, method = check() if check is not None else check_equal(lhs, rhs, **kw)
    except Exception as exc:   # noqa: BLE001 - a check that cannot run is reported as not checked
        ok, method = False, f"check could not be carried out ({type(exc).__name__})"
    return Step(title, lhs, rhs, note, bool(ok), method)


def recheck(s: Step, **kw) -> Step:
    """``s`` checked again from its own two sides (used to show that a wrong step is caught)."""
    return step(s.title, s.lhs, s.rhs, s.note, **kw)


def _sum(terms):
    terms = [t for t in terms if t is not None]
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out


def _mexpand(e):
    from .moments import mexpand, symmetric_subs_all
    return mexpand(symmetric_subs_all(e, sp.MatrixSymbol("Sigma", D, D)))


# ------------------------------------------------------------------------------------ one normalised head
def _lect(*pieces) -> Shown:
    """A side written as a lecturer writes it: ``pieces`` are ``(text, tex)`` literals, SymPy expressions, or
    ``(expr, paren)`` with ``paren`` asking for parentheses around a sum; the step's check is made on the
    expressions themselves, this is only how the side is shown."""
    from .steps_render import tex, text_side

    txt, tx = [], []
    for p in pieces:
        if isinstance(p, tuple) and isinstance(p[0], str):
            txt.append(p[0])
            tx.append(p[1])
            continue
        e, paren = p if isinstance(p, tuple) else (p, False)
        e = _sym(e)
        wrap = paren and isinstance(e, (sp.MatAdd, sp.Add))
        txt.append(f"({text_side(e)})" if wrap else text_side(e))
        tx.append(r"\left(" + tex(e) + r"\right)" if wrap else tex(e))
    return Shown("".join(txt), "".join(tx))



def kernel_head_steps(kind: str, syms: dict, pre: str = "") -> tuple[list[Step], Any, Any]:
    """Steps 1-6 for one softmax-normalised head; returns ``(steps, b, J)``."""
    from .steps_render import readable
    from .tilt import tilt_matrix

    alpha, Sigma = sp.MatrixSymbol("alpha", D, 1), sp.MatrixSymbol("Sigma", D, D)
    x, y = sp.MatrixSymbol("x", D, 1), sp.MatrixSymbol("y", D, 1)
    K = spec_kinds.part(kind, "symbolic").matrix_kernel(syms)
    Bt = K.B.T
    R = K.R
    c = _sum([x.T * K.P * x if K.P is not None else None, K.p.T * x if K.p is not None else None]) \
        if (K.P is not None or K.p is not None) else None
    lin = _sum([Bt * x, K.r])
    blocks = _sum([c, y.T * R * y if R is not None else None, lin.T * y])
    shown = spec_kinds.part(kind, "symbolic").matrix_definition
    definition = shown(syms, x, y) if shown is not None else None
    lhs1 = definition if definition is not None else K.log_kernel(x, y)
    shown1 = _lect(*([c, (" + ", " + ")] if c is not None else []),
                   *([("y^T ", r"y^{\top}"), (R, True), (" y + ", r"\, y + ")] if R is not None else []),
                   ("(", r"\left("), lin, (")^T y", r"\right)^{\top} y"))
    out = [step(f"{pre}the log-kernel as a quadratic in the key y", lhs1, shown1,
                "c(x) = " + (sp.sstr(c) if c is not None else "0") + " collects the terms free of y; "
                f"R = {sp.sstr(R) if R is not None else '0'}, B^T x + r = {sp.sstr(lin)}",
                check=lambda: check_equal(lhs1, blocks, symmetric=("R",)))]
    Si = Sigma.I
    N = _sum([Si, -R if R is not None else None, -R.T if R is not None else None])
    n = _sum([Si * alpha, K.r, Bt * x])
    exponent = blocks - HALF * (y - alpha).T * Si * (y - alpha)
    quad = -HALF * y.T * N * y + n.T * y
    square = -HALF * (y - N.I * n).T * N * (y - N.I * n)
    # shown in the order a lecturer writes them (SymPy would reorder the sums); checked on the expressions
    half = ("-(1/2) ", r"-\tfrac{1}{2}\,")
    shown_exp = Shown(shown1.text + " - (1/2) (y - alpha)^T Sigma^-1 (y - alpha)",
                      shown1.tex + r" - \tfrac{1}{2}\,(y - \alpha)^{\top}\Sigma^{-1}(y - \alpha)")
    shown_quad = _lect(half, ("y^T ", r"y^{\top}"), (N, True), (" y + ", r"\, y + "), (n, True), ("^T y", r"^{\top} y"))
    shown_sq = _lect(half, ("(y - ", r"\bigl(y - "), (N.I, False), (n, True), (")^T ", r"\bigr)^{\top}"), (N, True),
                     (" (y - ", r"\bigl(y - "), (N.I, False), (n, True), (")", r"\bigr)"))
    out.append(step(f"{pre}exponent of the tilted measure k(x, y) N(y; alpha, Sigma), up to terms free of y",
                    shown_exp, shown_quad, "log N(y; alpha, Sigma) = -(y - alpha)^T Sigma^{-1} (y - alpha)/2 + "
                    "const; terms free of y cancel when the tilted measure is normalised",
                    check=lambda: check_equal(exponent, quad, modulo=("y",), exact_d=(), random_d=(2, 3), points=1)))
    out.append(step(f"{pre}completing the square", shown_quad, shown_sq,
                    "so the normalised tilt is the Gaussian N(m(x), S) with S = N^{-1}, m(x) = S n(x); it exists "
                    "iff N = Sigma^{-1} - R - R^T is positive definite",
                    check=lambda: check_equal(quad, square, modulo=("y",), exact_d=(), random_d=(2, 3), points=1)))
    tilt = tilt_matrix(K, alpha, Sigma)
    # shown as what it is (minus the y-Hessian of the exponent, by matrix calculus) = its value; checked
    # against N read off the completed square, so the step is not "X = X" when the two coincide (softmax)
    hess = Shown("-d^2/dy^2 [exponent]", r"-\nabla_y^2\,[\text{exponent}]")
    out.append(step(f"{pre}tilted precision S^-1 (y-Hessian of the exponent, by matrix calculus)", hess,
                    tilt.precision, "equals N = " + readable(sp.sstr(_sym(N))) + " read off the completed square",
                    check=lambda: check_equal(N, tilt.precision)))
    m = _mexpand(tilt.m0 + tilt.M * x)
    out.append(step(f"{pre}tilted mean m(x) = S (Sigma^-1 alpha + r + B^T x)", N.I * n, m))
    V = syms["V"]
    b, J = _mexpand(V * tilt.m0), _mexpand(V * tilt.M)
    out.append(step(f"{pre}affine field Gamma(x) = V m(x) = b + J x", V * N.I * n, b + J * x))
    return out, b, J


# --------------------------------------------------------------------------------- linear and Sinkhorn
def linear_head_steps(syms: dict, pre: str = "") -> tuple[list[Step], Any, Any]:
    """``Γ(x) = V ∫ <Ax, y> y dμ = V(Σ + ααᵀ)Ax``, checked against the Gaussian MGF (``d = 2``)."""
    from .moments import gaussian_expectation

    alpha, Sigma = sp.MatrixSymbol("alpha", D, 1), sp.MatrixSymbol("Sigma", D, D)
    x = sp.MatrixSymbol("x", D, 1)
    A, V = syms["A"], syms["V"]
    J = V * (Sigma + alpha * alpha.T) * A

    def mgf_check():
        dims = {"d": 2, "m": 2}
        env = {"A": sp.Matrix(2, 2, sp.symbols("a0:4")), "V": sp.Matrix(2, 2, sp.symbols("v0:4")),
               "alpha": sp.Matrix(sp.symbols("al0:2")), "x": sp.Matrix(sp.symbols("x0:2")),
               "Sigma": sp.Matrix([[sp.Symbol("s00"), sp.Symbol("s01")], [sp.Symbol("s01"), sp.Symbol("s11")]])}
        yv = sp.symbols("_y0:2")
        ker = (sp.Matrix(yv).T * env["A"] * env["x"])[0, 0]
        E = sp.Matrix([gaussian_expectation(sp.expand(ker * yi), list(yv), env["alpha"], env["Sigma"])
                       for yi in yv])
        diff = env["V"] * E - explicit(J * x, env, dims)
        ok = all(sp.expand(v) == 0 for v in diff)
        return ok, ("E[<Ax, y> y] from derivatives of the Gaussian moment generating function at d = 2, "
                    "symbolic entries, difference expanded to 0" if ok else "MGF moment differs")
    s1 = step(f"{pre}linear attention: Gamma(x) = V E[<A x, y> y] = V (Sigma + alpha alpha^T) A x",
              Shown("V E_{y~N(alpha,Sigma)}[<A x, y> y]", r"V\,\mathbb{E}_{y\sim\mathcal{N}(\alpha,\Sigma)}"
                    r"\bigl[\langle Ax, y\rangle\, y\bigr]"), J * x,
              "not normalised: b = 0 and J = V (Sigma + alpha alpha^T) A", check=mgf_check)
    return [s1], sp.ZeroMatrix(D, 1), J


def sinkhorn_head_steps(syms: dict, pre: str = "") -> tuple[list[Step], Any, Any]:
    """Sinkhorn: Gaussian conditioning, the plan's first-order condition (closed form, principal square
    root), the affine field."""
    from . import sinkhorn as sk

    alpha, Sigma = sp.MatrixSymbol("alpha", D, 1), sp.MatrixSymbol("Sigma", D, D)
    x = sp.MatrixSymbol("x", D, 1)
    C = sp.MatrixSymbol("C", D, D)
    A, V, eps = syms["A"], syms["V"], syms["epsilon"]
    out = []

    def conditioning(points: int = 3, seed: int = 2):
        import random as _r

        from .steps_check import _rand
        rng = _r.Random(seed)
        xv = sp.Matrix(sp.symbols("x0:2"))
        for _ in range(points):
            L = sp.Matrix(2, 2, lambda i, j: _rand(rng, True) if i == j else (_rand(rng) if i > j else 0))
            Sg, Cm = L * L.T, sp.Matrix(2, 2, lambda i, j: _rand(rng) / 4)
            al = sp.Matrix(2, 1, lambda i, j: _rand(rng))
            Pi = sp.Matrix(sp.BlockMatrix([[Sg, Cm], [Cm.T, Sg]])).inv(method="LU")
            cond = al - Pi[2:, 2:].inv(method="LU") * Pi[2:, :2] * (xv - al)   # mean of y | x from the precision
            if not all(sp.expand(v) == 0 for v in cond - (al + Cm.T * Sg.inv(method="LU") * (xv - al))):
                return False, "conditional mean differs"
        return True, (f"E[y | x] = alpha - Pi_yy^-1 Pi_yx (x - alpha) from the joint precision Pi, x symbolic, "
                      f"{points} seeded random rational (alpha, Sigma, C) at d = 2, exact")
    cm = alpha + C.T * Sigma.I * (x - alpha)
    out.append(step(f"{pre}Sinkhorn: the entropic plan pi between N(alpha, Sigma) and itself is Gaussian with "
                    "cross-covariance C; conditional mean", Shown("E_pi[y | x]", r"\mathbb{E}_\pi[y\mid x]"), cm,
                    "Gaussian conditioning (Schur complement of the joint covariance)", check=conditioning))
    Ct = sk.closed_form_matrix(D).xreplace({sp.MatrixSymbol("A", D, D): A / eps})
    cond = Sigma * (A / eps).T * (Sigma - Ct * Sigma.I * Ct.T)
    out.append(step(f"{pre}the plan's first-order condition C = Sigma (A/eps)^T (Sigma - C^T Sigma^-1 C), "
                    "solved in closed form", Ct.T, cond,
                    "C^T = 2 Sigma (A/eps) Sigma (I + X^{1/2})^{-1}, X = I + 4 (A/eps)^T Sigma (A/eps) Sigma; "
                    "X^{1/2} is the principal square root (X has eigenvalues >= 1 for SPD Sigma)",
                    exact_d=(), random_d=(1, 2), numeric=True))
    b, J = V * (alpha - C.T * Sigma.I * alpha), V * C.T * Sigma.I
    out.append(step(f"{pre}affine field Gamma(x) = V E_pi[y | x] = b + J x", V * cm, b + J * x))
    return out, b, J, (C, Ct.T)


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
    from .moments import _mat_symbols, matrix_form
    from .steps_special import assumptions_in_words, constant_precision_rate, specialise

    single = len(kinds_) == 1
    mf = matrix_form(tuple(kinds_), ffn=ffn)
    alpha, Sigma = mf.alpha, mf.Sigma
    x = sp.MatrixSymbol("x", D, 1)
    steps: list[Step] = []
    fields, subs_C = [], {}
    for h, kind in enumerate(kinds_):
        syms = _mat_symbols(kind, "" if single else f"_{h}", D, None)
        pre = "" if single else f"head {h + 1} ({kind}): "
        st, b, J, cc = _head_steps(kind, syms, pre)
        steps += st
        fields.append((b, J))
        if cc is not None:
            subs_C[cc[0]] = cc[1]
    b = _sum([f[0] for f in fields] + ([mf.symbols["c"]] if ffn else []))
    J = _sum([f[1] for f in fields] + ([mf.symbols["W"]] if ffn else []))
    if len(fields) > 1 or ffn:
        parts = [f[0] + f[1] * x for f in fields] + ([mf.symbols["W"] * x + mf.symbols["c"]] if ffn else [])
        steps.append(step("the layer's field: heads add" + (", and the feed-forward term W x + c" if ffn else ""),
                          _sum(parts), b + J * x, "fields add, so the layer's field is affine: Gamma = b + J x"))
    num = dict(numeric=True, exact_d=(), random_d=(1, 2)) if subs_C else {}
    a_dot = (b + J * alpha).xreplace(subs_C)
    S_dot = (J * Sigma + Sigma * J.T).xreplace(subs_C)
    # the "simplified" steps compare the chain's b + J alpha, J Sigma + Sigma J^T with the matrix form
    # (symbolic.moments); when the two are the same expression the step would read "X = X": it is merged
    # into the step before (a note says so) instead of shown
    same_a, same_S = _sym(a_dot) == _sym(mf.alpha_dot), _sym(S_dot) == _sym(mf.Sigma_dot)
    merged = "this is the moment ODE as symbolic.moments.matrix_form derives it (the same expression)"
    steps.append(step("mean equation: for an affine field the flow map is affine, d alpha/dt = E[Gamma(X)] = "
                      "b + J alpha", Shown("E_{X~N(alpha,Sigma)}[b + J X]", r"\mathbb{E}_{X\sim\mathcal{N}"
                                           r"(\alpha,\Sigma)}[b + JX]"), b + J * alpha,
                      merged if same_a else "", check=lambda: _moment_check(b, J, alpha, Sigma, "mean")))
    steps.append(step("covariance equation: d Sigma/dt = E[(X - alpha) Gamma(X)^T + Gamma(X) (X - alpha)^T] = "
                      "J Sigma + Sigma J^T", Shown("E[(X - alpha) Gamma(X)^T + Gamma(X) (X - alpha)^T]",
                                                   r"\mathbb{E}\bigl[(X-\alpha)\Gamma(X)^\top + \Gamma(X)"
                                                   r"(X-\alpha)^\top\bigr]"), J * Sigma + Sigma * J.T,
                      merged if same_S else "", check=lambda: _moment_check(b, J, alpha, Sigma, "cov")))
    if not same_a:
        steps.append(step("the moment ODE (mean), simplified", a_dot, mf.alpha_dot, **num))
    if not same_S:
        steps.append(step("the moment ODE (covariance), simplified", S_dot, mf.Sigma_dot, **num))
    if V_identity or A_symmetric:
        steps += specialise(mf, tuple(kinds_), V_identity, A_symmetric)
    title = f"Gaussian moment ODE of {' + '.join(kinds_)} attention" + (" with a feed-forward term" if ffn else "")
    rate = constant_precision_rate(mf, V_identity, A_symmetric)[3] if V_identity or A_symmetric else None
    ass, concl = assumptions_in_words(tuple(kinds_), V_identity, A_symmetric, rate)
    return Derivation(title, tuple(steps), ass, concl)


def _moment_check(b, J, alpha, Sigma, which: str):
    return _moment_identity(which)


@lru_cache(maxsize=None)
def _moment_identity(which: str):
    """``E[Γ(X)]`` or ``E[(X-α)Γᵀ + Γ(X-α)ᵀ]`` for ``Γ = b + JX``, ``X ~ N(α, Σ)``, from the Gaussian MGF at
    ``d = 2`` (``b``, ``J`` generic symbolic matrices, so the identity is checked for every affine field)."""
    from .moments import gaussian_expectation

    bm, Jm = sp.Matrix(sp.symbols("b0:2")), sp.Matrix(2, 2, sp.symbols("j0:4"))
    al = sp.Matrix(sp.symbols("al0:2"))
    Sg = sp.Matrix([[sp.Symbol("s00"), sp.Symbol("s01")], [sp.Symbol("s01"), sp.Symbol("s11")]])
    X = sp.symbols("_X0:2")
    G = bm + Jm * sp.Matrix(X)
    if which == "mean":
        E = sp.Matrix([gaussian_expectation(sp.expand(g), list(X), al, Sg) for g in G])
        want = bm + Jm * al
    else:
        dev = sp.Matrix(X) - al
        M = dev * G.T + G * dev.T
        E = M.applyfunc(lambda e: gaussian_expectation(sp.expand(e), list(X), al, Sg))
        want = Jm * Sg + Sg * Jm.T
    ok = all(sp.expand(v) == 0 for v in E - want)
    return ok, ("Gaussian moments from the moment generating function, d = 2, generic b and J (symbolic "
                "entries), difference expanded to 0" if ok else "moment identity fails")


# ------------------------------------------------------------------------------------ entrywise systems
def entrywise_kernel_steps(ell, form, V, x, y, alpha, Sigma, b, J, rhs) -> tuple:
    """Checked steps of a user kernel at concrete ``d`` (:func:`~.kernel.derive_kernel`): the read-off
    blocks (exact), the field by an independent matrix inverse ``(Σ⁻¹ - R - Rᵀ)⁻¹`` against the ``LDLᵀ``
    route of the derivation, and the moment ODE, at seeded random rational points (exact arithmetic)."""
    pts = dict(exact_d=(), random_d=(1,), points=3)
    R, Bt, r = form.R, form.B.T, form.r
    d = len(x)
    out = [step("log-kernel", ell,
                form.dropped + (y.T * R * y)[0, 0] + ((Bt * x + r).T * y)[0, 0],
                "read as c(x) + y^T R y + (B^T x + r)^T y", exact_d=(1,), random_d=())]
    Sm = sp.ImmutableMatrix(Sigma)
    S = Sm if R.is_zero_matrix else sp.Inverse(sp.ImmutableMatrix(sp.Inverse(Sm) - R - R.T))
    m = S * (sp.Inverse(Sm) * sp.ImmutableMatrix(alpha) + sp.ImmutableMatrix(r + Bt * x))
    out.append(step("tilted mean m(x) = (Sigma^-1 - R - R^T)^-1 (Sigma^-1 alpha + r + B^T x); "
                    "affine field Gamma(x) = V m(x) = b + J x", sp.ImmutableMatrix(V) * m,
                    sp.ImmutableMatrix(b + J * x), **pts))
    out.append(step("moment ODE (mean) d alpha/dt = b + J alpha", sp.ImmutableMatrix(b + J * alpha),
                    sp.ImmutableMatrix(rhs[:d]), **pts))
    JS = J * Sigma
    up = [JS[i, j] + JS[j, i] for i in range(d) for j in range(i, d)]
    out.append(step("moment ODE (covariance, upper triangle) d Sigma/dt = J Sigma + Sigma J^T",
                    sp.ImmutableMatrix(up), sp.ImmutableMatrix(rhs[d:]), **pts))
    return tuple(out)


def _compare_with_matrix_form(system) -> tuple[Step, Step]:
    """The entrywise right-hand side of a built-in ``system`` compared with the matrix form evaluated at the
    system's own symbols (mean; covariance upper triangle), at seeded random rational points (exact; 50
    digits where a square root appears)."""
    from .moments import effective_params, head_symbols, matrix_form
    from .tilt import sym_vector

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
    dims = {"d": d, "m": d}
    a_dot = explicit(mf.alpha_dot, env, dims)
    S_dot = explicit(mf.Sigma_dot, env, dims)
    up = sp.ImmutableMatrix([S_dot[i, j] for i in range(d) for j in range(i, d)])
    # a kind whose entrywise form needs a matrix square root (Sinkhorn) is compared at 50 digits
    num = any(spec_kinds.part(k, "symbolic").entrywise_max_d is not None for k in kinds_)
    kw = dict(exact_d=(), random_d=(1,), points=2, numeric=num)
    return (step(f"entrywise right-hand side at d = {d} (mean) equals the matrix form", sp.ImmutableMatrix(a_dot),
                 sp.ImmutableMatrix(system.rhs[:d]), "the entrywise system is derived by a different route "
                 "(explicit tilt, LDL^T pivots); this compares the two", **kw),
            step(f"entrywise right-hand side at d = {d} (covariance, upper triangle) equals the matrix form", up,
                 sp.ImmutableMatrix(system.rhs[d:]), **kw))


def entrywise_system_steps(system) -> tuple:
    """Steps of a built-in entrywise system: the matrix-form derivation of its kinds, then its right-hand side
    compared with the matrix form evaluated at the system's own symbols (random rational points, exact)."""
    st = system.origin["structure"]
    dv = kind_derivation(tuple(k for k, _ in st.heads), ffn=st.ffn)
    return (*dv.steps, *_compare_with_matrix_form(system))


#: an entrywise step is shown only while it stays readable: at most this many nodes per equation written
#: out as a tree (softmax: ~55 at d = 2, ~160 at d = 3; linear d = 2: ~90; l2 d = 2: ~6000)
ENTRYWISE_MAX_NODES = 120


def one_based(symbols, several_heads: bool) -> dict:
    """Display names with 1-based indices as in the paper (arXiv 2501.18322): ``alpha_0 -> alpha_1``,
    ``Sigma_0_1 -> Sigma_12``, ``h0_A_0_1 -> A_12`` (several heads: ``A^(1)_12``); indices are joined by
    commas when one exceeds 9 (:func:`.printing.paper_name`, shared with the LaTeX entrywise systems).
    Returns ``{symbol: display symbol}`` (for display only; checks use the system's own symbols)."""
    from .printing import paper_name

    out = {}
    for s in symbols:
        name = paper_name(s.name, several_heads)
        if name is not None and name != s.name:
            out[s] = sp.Symbol(name, **s.assumptions0)
    return out


def entrywise_display_steps(system, max_nodes: int = ENTRYWISE_MAX_NODES) -> tuple[list[Step], list[str]]:
    """``(steps, notes)``: the entrywise moment ODE of ``system`` at its ``d`` in 1-based names, each step
    carrying the check of :func:`_compare_with_matrix_form` (done on the system's own expressions); when the
    written-out right-hand side exceeds ``max_nodes`` nodes per equation, no step and a one-line note."""
    from .printing import tree_size

    d = system.origin["structure"].d
    size = tree_size(system.rhs)
    if size > max_nodes * len(system.rhs):
        return [], [f"The entrywise form at d = {d} has {size} nodes written out ({size // len(system.rhs)} per "
                    f"equation, more than {max_nodes}): not shown, the matrix form above is the result "
                    f"(tpde derive --d {d} prints it with named sub-expressions u_k)."]
    mean, cov = _compare_with_matrix_form(system)
    names = one_based(system.states + system.params, len(system.origin["structure"].heads) > 1)
    rhs = [e.xreplace(names) for e in system.rhs]
    S = sp.Matrix(symmetric_rows(rhs[d:], d))
    note = "1-based indices as in the paper; the check compares the entrywise system with the matrix form"
    return [replace(mean, title=f"entrywise at d = {d}: the mean equation", note=note,
                    lhs=Shown("d alpha/dt", r"\frac{d\alpha}{dt}"), rhs=sp.ImmutableMatrix(rhs[:d])),
            replace(cov, title=f"entrywise at d = {d}: the covariance equation", note=note,
                    lhs=Shown("d Sigma/dt", r"\frac{d\Sigma}{dt}"), rhs=sp.ImmutableMatrix(S))], []
