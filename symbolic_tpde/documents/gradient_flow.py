"""The softmax gradient-flow structure as ordered, SymPy-checked steps (README Mathematics §5; MATH.md §5).

Castin, Ablin, Carrillo, Peyré (arXiv 2501.18322): with ``A`` symmetric and ``G = -A V⁻¹`` symmetric positive
definite, softmax attention ``Ẋ = Γ`` is the gradient descent of the interaction energy for a twisted
Wasserstein metric.  The chain, for the n-particle restriction (exact for the particle system; rows of ``X``,
``U``, ``W`` are particles, ``vec X`` row-major):

1. ``E(μ_X) = ½ ∬ e^{<Ax,y>} dμ_X dμ_X`` with ``μ_X = (1/n) Σ_i δ_{x_i}`` equals
   ``E_n(X) = (1/2n²) Σ_ij exp(x_jᵀ A x_i)`` (:func:`.energy.particle_energy`);
2. normalisation ``E(δ₀) = ½`` (a probability measure at the origin has energy one half); on Gaussians
   (``d = 1``) the two square completions of :mod:`.gaussian_energy` agree and ``E(N(α, s)) → ½ exp(aα²)``;
3. first variation ``δE/δμ(x_k) = Z_μ(x_k) = (1/n) Σ_j e_kj`` (derivative in the particle weights);
4. Euclidean gradient ``∂_{x_k} E_n = (1/n²) Σ_j e_kj A x_j`` (``A = Aᵀ``);
5. ``G = -A V⁻¹`` and ``Gᵀ = G`` (:func:`.metric.twisted_G`);
6. twisted metric ``g_X(U, W) = (1/n) Σ_i Z_i <u_i, G w_i>`` (:func:`.metric.particle_metric`), and
7. its inverse ``g_X⁻¹ = n diag(1/Z_i) ⊗ G⁻¹``;
8. gradient identity ``grad_g E_n = g_X⁻¹ ∂E_n = -Γ``, ``Γ_i = Σ_j e_ij V x_j / Σ_j e_ij``;
9. dissipation ``d/dt E_n(X(t)) = -g_X(Γ, Γ)`` along ``Ẋ = Γ``;
10. second variation at a point: ``Hess E(U, U) = D²E(U, U) - Γ^k_ij U^i U^j ∂_k E`` (Christoffel symbols,
    :func:`.hessian.particle_hessian`) equals ``D²E(U, U) + ∂E · a`` with the geodesic acceleration ``a``
    from the Euler-Lagrange equation of ``½ ẋᵀ g(x) ẋ`` (an independent route);
11. at the critical point ``X = 0``: ``Hess E(U, U) = (1/n²)(Σ_i u_i)ᵀ A (Σ_i u_i)``, intrinsic
    (:func:`.hessian.curve_second_derivative`).

**Decision**: the equations are *shown* in general-``n``, ``d`` notation (:class:`.steps.Shown`) and *checked*
on the explicit instance ``n``, ``d`` of the options, with symbolic particle coordinates, directions and (by
default) symbolic entries of ``A``: exponent arguments are brought to canonical form, then every entry of
``lhs - rhs`` must be reduced to 0 by ``sympy.cancel`` (:func:`.steps_check.check_equal`): a proof for that
``n``, ``d`` (the rational-point Hessian step, with a symbolic ``A``, at :data:`SAMPLE_A`).  Wherever possible one side is the package's function and the other an independent construction.  A failed check is
reported as not checked, never hidden.  General ``n``, ``d``: ``derivations/gradient_flow.py``.
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from ..errors import InputError
from ..symbolic.energy import particle_energy, softmax_field
from ..symbolic.hessian import curve_second_derivative, particle_hessian
from ..symbolic.metric import _exact, exact_matrix, particle_symbols
from .check import check_equal
from .equation import Derivation, Equation, Step, tex
from .equation import inline_matrix as _fmt
from .equation import Notation as Shown

__all__ = ["energy_derivation", "checked_step"]

HALF = sp.Rational(1, 2)


def _canon(e):
    """Bring the argument of every ``exp`` to the canonical form of ``sympy.cancel`` (expanded numerator over
    expanded denominator: ``exp(x_jᵀAx_i)`` and ``exp(x_iᵀAx_j)`` become one atom when ``A = Aᵀ``),
    entrywise for matrices."""
    f = (lambda v: sp.sympify(v).replace(lambda a: isinstance(a, sp.exp), lambda a: sp.exp(sp.cancel(a.args[0]))))
    return e.applyfunc(f) if isinstance(e, sp.MatrixBase) else f(e)


#: words (titles, notes, assumptions, conclusions) in the ASCII notation of :func:`.steps_render.words_tex`
#: (``A^T``, ``V^-1``, Greek names spelled out), so that the LaTeX renderings compile with pdflatex; the
#: displayed equations carry their own LaTeX (:class:`.steps.Shown`)
_ASCII = [("‖Σ^½AΣ^½‖", "norm(Sigma^{1/2} A Sigma^{1/2})"), ("|a|", "abs(a)"), ("|v|²", "norm(v)^2"), ("dμ", "d mu"), ("Σ_i", "sum_i"), ("Σ_j", "sum_j"), ("ᵀ", "^T"), ("⁻¹", "^-1"),
          ("∬", "double integral of"), ("∫", "integral of"), ("½", "1/2"), ("μ", "mu"), ("δ₀", "delta_0"), ("δ", "delta"),
          ("Γ", "Gamma"), ("α", "alpha"), ("≤", "is at most"), ("≠", "!="), ("²", "^2"), ("⁰", "^0"), ("∂", "d"),
          ("Ẋ", "dX/dt"), ("ẋᵀ", "(dx/ds)^T"), ("ẋ", "(dx/ds)"), ("D²", "D^2"), ("×", "x"), ("§", "Sec. "), ("→", "->"),
          ("∇", "grad")]


def _ascii(text: str) -> str:
    if "$" in text:          # formulas already marked as LaTeX (printing.words_tex)
        return text
    for u, a in _ASCII:
        text = text.replace(u, a)
    return text


def checked_step(title: str, shown_lhs: Shown, shown_rhs: Shown, lhs, rhs, note: str = "",
                 where: str = "", defs: tuple = ()) -> Step:
    """A :class:`Step` displaying ``shown_lhs = shown_rhs`` and checked on the explicit instance ``lhs = rhs``
    (exponents in canonical form, then :func:`.steps_check.check_equal`: exact cancellation); ``where`` names the
    instance in the method; ``defs``: ``(name, value)`` notation pairs displayed ``where name := value`` (the
    instance has them put in already)."""
    eq = Equation(shown_lhs, shown_rhs, where=tuple(defs), instance=(lhs, rhs, _ascii(where)))
    return Step(_ascii(title), eq, _ascii(note), how=_instance_check).check()


def _instance_check(eq):
    """The explicit instance carried by the equation, exponents in canonical form, by exact cancellation."""
    lhs, rhs, where = eq.instance
    ok, method, _ = check_equal(_canon(lhs), _canon(rhs), free=False)
    pre = f"{where}: " if where else ""
    plain = where.replace("$", "")
    return ok, _ascii(pre + ("exponents in canonical form; " if ok else "") + method), \
        (plain.split(",")[0] + ", " + plain.split(",")[1].strip() if plain.count(",") else plain)


def _symmetric_A(d: int) -> sp.Matrix:
    return sp.Matrix(d, d, lambda p, q: sp.Symbol(f"a_{min(p, q)}{max(p, q)}", real=True))


def energy_derivation(n: int = 2, d: int = 2, A: Any = None, V: Any = None, point: Any = None) -> Derivation:
    """The checked chain of the module docstring for ``n`` particles in dimension ``d``.

    ``A``: symmetric matrix (default: symbolic entries ``a_pq``, so the steps are proved for every symmetric
    ``A``); ``V``: value matrix (default ``I``, so ``G = -A``); ``point``: the rational ``n × d`` configuration
    of the second-variation step (default ``x_i = ((i+1)/2, -1/3, ..)``).  ``n ≤ 3``, ``d ≤ 2`` (explicit
    symbolic cost).  Float entries are taken as the exact binary rationals they encode."""
    if not isinstance(n, int) or not 1 <= n <= 3 or not isinstance(d, int) or not 1 <= d <= 2:
        raise InputError("n/d", f"the explicit energy derivation is built for n in 1..3, d in 1..2, got {n}, {d}")
    A = _symmetric_A(d) if A is None else exact_matrix(A, "A", d)
    # default V: general (neither I nor symmetric), V = -G0^-1 A, so that G = -A V^-1 = G0 is symmetric positive
    # definite for every invertible symmetric A
    V = -sp.Matrix(G0_DEFAULT[d]).inv() * A if V is None else exact_matrix(V, "V", d)
    if not (A - A.T).is_zero_matrix:
        raise InputError("A", "must be symmetric (the gradient-flow structure needs A = Aᵀ)")
    pe = particle_energy(n, d, A, V)          # the package's construction (module route)
    X, N = pe.X, n * d
    where = (f"explicit $n = {n}$, $d = {d}$, symbolic coordinates $x_{{i,a}}$"
             + (", symbolic symmetric $A$" if any(not e.is_number for e in A) else f", $A = {_fmt(A)}$")
             + (", $V = I$" if V == sp.eye(d) else f", $V = -G^{{-1}}A$, $G = {_fmt(sp.Matrix(G0_DEFAULT[d]))}$"
                if any(not e.is_number for e in V) else f", $V = {_fmt(V)}$"))
    e = [[sp.exp((X[j, :] * A * X[i, :].T)[0, 0]) for j in range(n)] for i in range(n)]   # e_ij = e^{<Ax_i,x_j>}
    steps: list[Step] = []
    mu_X = (Shown("μ_X", r"\mu_X"), Shown("(1/n) Σ_i δ_{x_i}", r"\tfrac1n \sum_i \delta_{x_i}"))
    e_kj = (Shown("e_kj", r"e_{kj}"), Shown("exp(x_jᵀ A x_k)", r"e^{x_j^\top A x_k}"))
    Z_def = (Shown("Z_i", r"Z_i"), Shown("(1/n) Σ_j e_ij", r"\tfrac1n \sum_j e_{ij}"))
    Gam_def = (Shown("Γ_i(X)", r"\Gamma_i(X)"), Shown("Σ_j e_ij V x_j / Σ_j e_ij",
                                                       r"\frac{\sum_j e_{ij} V x_j}{\sum_j e_{ij}}"))

    # 1-2. the energy of the empirical measure and its normalisation
    w = [sp.Symbol(f"w_{i}", positive=True) for i in range(n)]
    E_w = HALF * sp.Add(*[w[i] * w[j] * e[i][j] for i in range(n) for j in range(n)])   # ½∬k dμdμ, μ = Σ w_i δ
    at = {wi: sp.Rational(1, n) for wi in w}
    steps.append(checked_step(
        "The interaction energy of the empirical measure",
        Shown("E(μ_X)", r"E(\mu_X)"),
        Shown("(1/(2n²)) Σ_i Σ_j exp(x_jᵀ A x_i)", r"\frac{1}{2n^2}\sum_{i,j} e^{x_j^\top A x_i}"),
        E_w.subs(at), pe.E, r"$E(\mu) = \tfrac{1}{2}\iint e^{\langle Ax, y\rangle}\, d\mu(x)\, d\mu(y)$ with "
        r"$\langle Ax, y\rangle = y^{\top}Ax$; the left side is computed here from the weighted measure "
        r"$\sum_i w_i\delta_{x_i}$ at $w_i = 1/n$, the right side is the particle energy $E_n(X)$ the simulations "
        "use", where, defs=(mu_X,)))
    zero = {x: 0 for x in pe.coords}
    steps.append(checked_step(
        "Normalisation: all particles at the origin",
        Shown("E_n(0)", r"E_n(0)"), Shown("1/2", r"\tfrac12"), pe.E.subs(zero), HALF,
        r"with every particle at the origin $\mu_X = \delta_0$: the factor $\tfrac{1}{2}$ and the probability "
        r"weights $1/n$ give $E(\delta_0) = \tfrac{1}{2}e^{0}$", where))

    steps += _gaussian_steps()

    # 3-4. first variation and Euclidean gradient
    dEw = sp.Matrix([sp.diff(E_w, wk).subs(at) for wk in w])
    steps.append(checked_step(
        "First variation: the derivative of E in the particle weights",
        Shown("∂_{w_k} E(Σ_i w_i δ_{x_i})|_{w=1/n}", r"\frac{\partial}{\partial w_k} E\Big(\sum_i w_i"
              r"\delta_{x_i}\Big)\Big|_{w=1/n}"),
        Shown("Z_k", r"Z_k"),
        dEw, sp.Matrix(pe.Z), r"the left side is the first variation $\frac{\delta E}{\delta\mu}(x_k)$ of $E$ "
        r"at $\mu_X$; for $A = A^{\top}$ the two slots of the kernel contribute equally; the right side is the "
        "softmax normaliser as implemented", where, defs=(Z_def, e_kj)))
    dE = sp.Matrix([sp.diff(pe.E, c) for c in pe.coords])          # ∂E in vec X order (SymPy diff)
    hand = sp.Matrix.vstack(*[sum((e[k][j] * (A * X[j, :].T) for j in range(n)), sp.zeros(d, 1)) / n ** 2
                              for k in range(n)])
    steps.append(checked_step(
        "Euclidean gradient along particle $k$",
        Shown("∂E_n/∂x_k", r"\frac{\partial E_n}{\partial x_k}"),
        Shown("(1/n²) Σ_j e_kj A x_j", r"\frac{1}{n^2}\sum_j e_{kj} A x_j"),
        dE, hand, r"SymPy's derivative of $E_n$ against the hand formula; both kernel slots give $A^{\top}x_j = Ax_j$",
        where, defs=(e_kj,)))

    # 5-7. the twisted metric
    G_hand = -A * V.inv()
    steps.append(checked_step(
        "The twisted matrix", Shown("G", "G"), Shown("-A V⁻¹", r"-A V^{-1}"), pe.G, G_hand,
        r"$G$ as the implementation builds it (refusing a non-symmetric or, for numbers, non-positive-definite "
        r"$G$) against $-AV^{-1}$ computed here", where))
    steps.append(checked_step(
        "$G$ is symmetric", Shown("Gᵀ", r"G^\top"), Shown("G", "G"), pe.G.T, pe.G,
        r"needed for $g_X$ to be a metric; positive definiteness is an assumption (checked by the implementation "
        r"for numeric $A$, $V$)", where))
    U, W = particle_symbols(n, d, "u"), particle_symbols(n, d, "w")
    vU, vW = U.reshape(N, 1), W.reshape(N, 1)
    g_form = sum(((pe.Z[i] / n) * (U[i, :] * G_hand * W[i, :].T)[0, 0] for i in range(n)), sp.S.Zero)
    steps.append(checked_step(
        "The twisted Wasserstein metric on particles (the rows of $U$, $W$ are particles)",
        Shown("vec(U)ᵀ g_X vec(W)", r"\operatorname{vec}(U)^\top g_X \operatorname{vec}(W)"),
        Shown("(1/n) Σ_i Z_i ⟨u_i, G w_i⟩", r"\frac1n \sum_i Z_i \langle u_i, G w_i\rangle"),
        (vU.T * pe.g * vW)[0, 0], g_form, r"the $n$-particle restriction of $g_{\mu}(v, w) = \int Z_{\mu} \langle v, "
        r"Gw\rangle\, d\mu$; the left side is the particle metric as implemented, in $\operatorname{vec} X$ "
        "(row-major) coordinates", where))
    steps.append(checked_step(
        "The inverse metric",
        Shown("(n diag(1/Z_i) ⊗ G⁻¹) g_X", r"\big(n\,\mathrm{diag}(1/Z_i)\otimes G^{-1}\big)\, g_X"),
        Shown("I", "I"), pe.ginv * pe.g, sp.eye(N), r"so $g_X^{-1} = n\,\mathrm{diag}(1/Z_i)\otimes G^{-1}$, the "
        "block inverse used for the metric gradient (the left factor is the inverse as implemented)", where))

    # 8-9. gradient identity and dissipation
    grad = (pe.ginv * dE).reshape(n, d)
    Gam = sp.Matrix.vstack(*[(sum((e[i][j] * (V * X[j, :].T) for j in range(n)), sp.zeros(d, 1))
                              / sp.Add(*e[i])).T for i in range(n)])
    steps.append(checked_step(
        "Gradient identity: the softmax velocity is minus the metric gradient",
        Shown("g_X⁻¹ ∂E_n", r"g_X^{-1}\partial E_n"), Shown("-Γ(X)", r"-\Gamma(X)"),
        grad, -Gam, r"the left side is $\operatorname{grad}_g E_n$; $G^{-1}A = -V$ cancels $A$: "
        r"$\frac{n}{Z_k}(-VA^{-1})\frac{1}{n^{2}}\sum_j e_{kj} Ax_j = -\Gamma_k$", where, defs=(Gam_def,)))
    vG = Gam.reshape(N, 1)
    steps.append(checked_step(
        "Energy dissipation along the softmax flow",
        Shown("∂E_n(X) · Γ(X)", r"\partial E_n(X)\cdot\Gamma(X)"),
        Shown("-(1/n) Σ_i Z_i ⟨Γ_i, G Γ_i⟩", r"-\frac1n\sum_i Z_i\langle\Gamma_i, G\Gamma_i\rangle"),
        (dE.T * vG)[0, 0], -(vG.T * pe.g * vG)[0, 0], r"along the flow $\dot X = \Gamma(X)$ the left side is "
        r"$\frac{d}{dt}E_n(X(t))$ and the right side is $-g_X(\Gamma, \Gamma)$, at most $0$ when $G$ is positive "
        "definite: $E_n$ is a Lyapunov function of the particle system", where))
    steps.append(checked_step(
        r"The field the simulations integrate is the softmax field $\Gamma$",
        Shown("F_i(X)", r"F_i(X)"), Shown("Γ_i(X)", r"\Gamma_i(X)"), softmax_field(pe), Gam,
        r"$F$ is the softmax velocity field as implemented; $\Gamma$ is written out in the gradient identity above",
        where, defs=(Gam_def,)))

    # 10-11. second variation
    steps += _second_variation_steps(n, d, A, V, point, where)
    ass = (f"${n}$ particles in dimension $d = {d}$: $X$ is the $n \\times d$ matrix whose rows $x_i$ are the "
           r"particles; directions $U$, $W$ are $n \times d$ with rows $u_i$, $w_i$ (one per particle); "
           r"$\operatorname{vec} X$ is row-major",
           r"kernel $e^{\langle Ax, y\rangle} = e^{y^{\top}Ax}$, $A$ symmetric" + (
               f" with symbolic entries $a_{{pq}}$ (the checks hold for every symmetric $A$; the rational-point "
               f"Hessian step at $A = {_fmt(sp.Matrix(SAMPLE_A[d]))}$)" if "symbolic symmetric" in where
               else f", $A = {_fmt(A)}$"),
           ("$V = I$" if V == sp.eye(d) else (f"$V = -G^{{-1}}A$ with $G = {_fmt(sp.Matrix(G0_DEFAULT[d]))}$: a "
                                             + ("general $V$ (not $I$, not symmetric)" if d > 1 else
                                                "general $V$ (not $1$)") if any(not e.is_number for e in V)
                                             else f"$V = {_fmt(V)}$"))
           + r"; $G = -AV^{-1}$ symmetric positive definite",
           r"energy $E(\mu) = \tfrac{1}{2}\iint e^{\langle Ax, y\rangle}\, d\mu\, d\mu$ on probability measures; "
           r"particles carry weight $1/n$",
           r"each equation is shown for general $n$, $d$ and checked on this explicit instance: exponent arguments "
           r"brought to canonical form, every entry of $\text{lhs} - \text{rhs}$ reduced to $0$ by exact "
           r"cancellation (a proof for this $n$, $d$); general $n$, $d$ by matrix calculus in the repository's "
           r"derivations (gradient flow)")
    concl = (r"Softmax attention $\dot X = \Gamma(X)$ is the gradient flow $\dot X = -\operatorname{grad}_g E_n$ of "
             r"the interaction energy for the twisted metric $g_X(U, W) = \frac{1}{n}\sum_i Z_i \langle u_i, "
             r"Gw_i\rangle$, $G = -AV^{-1}$ (Castin et al., arXiv 2501.18322, Section 5)",
             r"$dE_n/dt = -g_X(\Gamma, \Gamma) \leq 0$: the energy decreases along the particle flow",
             r"$\operatorname{Hess} E(U, U) = D^{2}E(U, U) - K^{k}_{ij} U^{i} U^{j} \partial_k E$ is the second "
             r"variation along geodesics; at the critical point $X = 0$ it equals $\frac{1}{n^{2}}(\sum_i u_i)^{\top}"
             r"A(\sum_i u_i)$, negative for $A$ negative definite and $\sum_i u_i \neq 0$: $E$ is not geodesically "
             "convex (the convexity command certifies such signs at other points)")
    model = (r"$n$ particles $x_1, \dots, x_n$ in $\mathbb{R}^d$ (the rows of $X$) move by softmax self-attention, "
             r"$\dot x_i = \Gamma_i(X) = \sum_j e_{ij} V x_j / \sum_j e_{ij}$ with $e_{ij} = e^{x_j^{\top} A x_i}$. "
             r"The result: for $A$ symmetric and $G = -AV^{-1}$ symmetric positive definite this flow is the "
             r"gradient flow of the interaction energy $E_n(X) = \frac{1}{2n^2}\sum_{i,j} e_{ij}$ for the twisted "
             r"Wasserstein metric $g_X$, so $E_n$ decreases along it; its second variation at $X = 0$ has the sign of "
             r"$A$ (Castin et al., arXiv 2501.18322, Section 5).",)
    boxed = ((Shown("Γ(X)", r"\Gamma(X)"), Shown("-g_X⁻¹ ∂E_n(X)", r"-g_X^{-1}\,\partial E_n(X)")),)
    return Derivation(f"Softmax attention as the gradient flow of the interaction energy ($n = {n}$, $d = {d}$)",
                      tuple(steps), tuple(map(_ascii, ass)), tuple(map(_ascii, concl)), model=model, boxed=boxed)


#: the symmetric ``A`` of the rational-point Hessian step when ``A`` is symbolic (negative definite, not
#: diagonal): with symbolic ``a_pq`` that one cancellation takes ~10 s at ``d = 2``, the rest of the chain ~2 s
SAMPLE_A = {1: [[-1]], 2: [[-1, sp.Rational(1, 4)], [sp.Rational(1, 4), -sp.Rational(1, 2)]]}
#: the twisted matrix G of the default (general) value matrix V = -G0^-1 A
G0_DEFAULT = {1: [[2]], 2: [[2, sp.Rational(1, 2)], [sp.Rational(1, 2), 1]]}


def _gaussian_steps() -> list[Step]:
    """The energy on the Gaussian family, ``d = 1`` with symbolic ``a``, ``α``, ``s`` (MATH.md §5): the two
    square completions of :mod:`.gaussian_energy` agree, and ``E(N(α, s)) → E(δ_α) = ½ exp(aα²)`` as ``s → 0``
    (``sympy.limit``), the normalisation seen from the Gaussians."""
    from ..symbolic.gaussian_energy import gaussian_energy, gaussian_energy_joint

    a, al, sv = sp.Symbol("a", real=True), sp.Symbol("alpha", real=True), sp.Symbol("s", positive=True)
    A1, alpha, Sigma = sp.Matrix([[a]]), sp.Matrix([al]), sp.Matrix([[sv]])
    E1 = gaussian_energy(A1, alpha, Sigma).E
    closed = HALF * (1 - a ** 2 * sv ** 2) ** sp.Rational(-1, 2) * sp.exp(a * al ** 2 / (1 - a * sv))
    where = r"$d = 1$, symbolic $a$, $\alpha$, $s$"
    E_N = Shown("E(N(α, s))", r"E(\mathcal N(\alpha, s))")
    closed_shown = Shown("½ (1 - a²s²)^(-1/2) exp(a α² / (1 - a s))",
                         r"\tfrac12\,(1 - a^2 s^2)^{-1/2}\, e^{a\alpha^2/(1 - a s)}")
    out = [checked_step(
        "The energy of a Gaussian in closed form: integrating $y$, then $x$",
        E_N, closed_shown, E1, closed, r"$E(\mathcal N(\alpha, s)) = \tfrac12\,\mathbb E\, e^{a x y}$ for "
        r"independent $x, y$ of law $\mathcal N(\alpha, s)$; the left side is the Gaussian energy as implemented "
        r"(the inner Gaussian integral in $y$ first), for $|a|s < 1$", where),
        checked_step(
        "The energy of a Gaussian, the same closed form by the joint square completion in $(x, y)$",
        E_N, closed_shown, gaussian_energy_joint(A1, alpha, Sigma).E, closed,
        r"an independent route: one Gaussian integral over the pair $(x, y)$, for $|a|s < 1$", where),
        Step("When the energy of a Gaussian is finite",
             Equation(Shown("E(N(α, s)) < ∞", r"E(\mathcal N(\alpha, s)) < \infty"),
                      Shown("|a| s < 1", r"|a|\, s < 1"), rel="<=>"),
             r"the integrand of $\iint e^{axy}\,d\mathcal N(\alpha, s)(x)\,d\mathcal N(\alpha, s)(y)$ is "
             r"$e^{-\frac12 (z - m)^{\top} P (z - m) + \text{(affine in } z)}$ with $z = (x, y)$ and "
             r"$P = \left(\begin{smallmatrix} 1/s & -a \\ -a & 1/s\end{smallmatrix}\right)$: finite iff $P$ is "
             r"positive definite ($\|\Sigma^{1/2}A\Sigma^{1/2}\| < 1$ in general)",
             how=lambda eq: _finite_check(a, sv)).check()]
    out.append(checked_step(
        "Normalisation on Gaussians: the point-mass limit",
        Shown("lim_{s → 0+} E(N(α, s))", r"\lim_{s\to 0^+} E(\mathcal N(\alpha, s))"),
        Shown("½ exp(a α²)", r"\tfrac12 e^{a\alpha^2}"),
        sp.limit(E1, sv, 0, "+"), HALF * sp.exp(a * al ** 2), r"SymPy's limit of the closed form; the right side is "
        r"$E(\delta_\alpha)$, the same $\tfrac{1}{2}$ as $E_n(0) = \tfrac{1}{2}$ above", where))
    return out


def _finite_check(a, s, bound=1):
    """``E(N(α, s)) < ∞ ⇔ |a| s < 1``: the quadratic form of the exponent in ``(x, y)`` is ``-½ zᵀPz`` with
    ``P = [[1/s, -a], [-a, 1/s]]`` (read off here from the exponent by SymPy's Hessian, not written by hand);
    ``tr P = 2/s > 0``, so ``P ≻ 0`` iff ``det P > 0``; SymPy solves ``det P > 0`` and ``|a| s < 1`` in ``a``
    and the two solution sets must be the same interval."""
    x, y, al = sp.symbols("x y alpha", real=True)
    expo = a * x * y - (x - al) ** 2 / (2 * s) - (y - al) ** 2 / (2 * s)
    P = -sp.hessian(expo, (x, y))
    tr, det = sp.simplify(P.trace()), sp.factor(P.det())
    if not tr.is_positive:
        return False, "the trace of P is not positive", ""
    if sp.expand(det * s ** 2 - (1 - a ** 2 * s ** 2)) != 0:
        return False, "the determinant of P is not (1 - a^2 s^2)/s^2", ""
    sol_det = sp.solve_univariate_inequality(det > 0, a, relational=False)
    sol_abs = sp.solve_univariate_inequality(sp.Abs(a) * s < bound, a, relational=False)
    ok = sol_det == sol_abs
    return ok, (r"$P = -\nabla^2_{(x,y)}$ of the exponent has trace $2/s > 0$ and determinant "
                r"$(1 - a^2s^2)/s^2$, so $P \succ 0$ iff the determinant is positive; SymPy solves it and "
                r"$|a|\,s < 1$ in $a$ to the same interval $-1/s < a < 1/s$" if ok else
                "the two solution sets in $a$ differ"), "symbolic a, s"


def _second_variation_steps(n: int, d: int, A, V, point, where: str) -> list[Step]:
    """The last three steps: the Christoffel route (:func:`.hessian.particle_hessian`) against the
    Euler-Lagrange geodesic acceleration at a rational point (for a symbolic ``A`` at :data:`SAMPLE_A`), and
    the closed form at the critical point ``X = 0`` (symbolic ``A`` kept)."""
    ph = particle_hessian(n, d, A, V)
    symbolic_A = any(not e.is_number for e in A)
    A_pt = sp.Matrix(SAMPLE_A[d]) if symbolic_A else A
    V_pt = V.xreplace(dict(zip(A, A_pt))) if symbolic_A else V
    ph_pt = particle_hessian(n, d, A_pt, V_pt) if symbolic_A else ph
    pe, N = ph_pt.pe, n * d
    if point is None:
        point = [[sp.Rational(i + 1, 2)] + [sp.Rational(-1, 3)] * (d - 1) for i in range(n)]
    if not isinstance(point, (list, tuple)) or not all(isinstance(r, (list, tuple)) for r in point):
        raise InputError("point", "expected an n × d configuration given as a list of rows")
    P = sp.Matrix([[_exact(v, "point") for v in row] for row in point])
    if P.shape != (n, d):
        raise InputError("point", f"expected an n × d = {n} × {d} configuration, got shape {P.shape}")
    at = {c: P[i, a] for c, (i, a) in zip(pe.coords, [(i, a) for i in range(n) for a in range(d)])}
    U = particle_symbols(n, d, "u")
    u = list(U.reshape(N, 1))
    c = pe.coords
    # Euler-Lagrange of L = ½ ẋᵀ g(x) ẋ at velocity u: g a = ½ ∇_x(uᵀ g u) - (Dg[u]) u (no Christoffel symbols)
    quad = (U.reshape(N, 1).T * pe.g * U.reshape(N, 1))[0, 0]
    Dg_u = sum((sp.diff(pe.g, c[k]) * u[k] for k in range(N)), sp.zeros(N, N))
    rhs_el = sp.Matrix([sp.diff(quad, ck) / 2 for ck in c]) - Dg_u * sp.Matrix(u)
    acc = (pe.ginv * rhs_el).subs(at)
    dE = ph_pt.dE.subs(at)
    uc = sp.Matrix(u)
    D2 = (uc.T * ph_pt.D2E.subs(at) * uc)[0, 0]
    hess_pt = (uc.T * ph_pt.H.subs(at) * uc)[0, 0]       # = ph_pt.form(U) at the point, substituted first
    pt = f"$X = {_fmt(P)}$" + (f", $A = {_fmt(A_pt)}$" if symbolic_A else "")
    hess_def = (Shown("Hess E(U, U)", r"\operatorname{Hess}E(U,U)"),
                Shown("D²E(U, U) - K^k_ij U^i U^j ∂_k E", r"D^2E(U,U) - K^k_{ij}U^iU^j\partial_k E"))
    out = [checked_step(
        "Second variation at a point: Christoffel symbols against the geodesic equation",
        Shown("Hess E(U, U)", r"\operatorname{Hess}E(U,U)"),
        Shown("D²E(U, U) + ∂E · a", r"D^2E(U,U) + \partial E\cdot a"),
        hess_pt, D2 + (dE.T * acc)[0, 0],
        r"$K^k_{ij}$ are the Christoffel symbols of $g_X$ (the left side is the particle Hessian as implemented "
        r"from them, with $U$ as symbols); $a$ is the acceleration of the geodesic with velocity $U$, from the "
        r"Euler-Lagrange equation of $\tfrac{1}{2}\dot x^{\top} g \dot x$ with no Christoffel symbol",
        where.replace(", symbolic symmetric $A$", "") + f", at the rational point {pt}",
        defs=(hess_def, (Shown("a", "a"), Shown("g⁻¹ (½ ∇(Uᵀ g U) - (Dg[U]) U)",
                                                 r"g^{-1}\big(\tfrac12\nabla(U^\top g U) - (Dg[U])\,U\big)"))))]
    pe = ph.pe
    zero = {x: 0 for x in c}
    hess_0 = (uc.T * ph.H.subs(zero) * uc)[0, 0]
    s_sum = sum((U[i, :].T for i in range(n)), sp.zeros(d, 1))
    closed = (s_sum.T * A * s_sum)[0, 0] / n ** 2
    out.append(checked_step(
        "Second variation at the critical point $X = 0$",
        Shown("Hess E(U, U)|_{X=0}", r"\operatorname{Hess}E(U,U)\big|_{X=0}"),
        Shown("(1/n²) (Σ_i u_i)ᵀ A (Σ_i u_i)", r"\frac{1}{n^2}\Big(\sum_i u_i\Big)^\top A\Big(\sum_i u_i\Big)"),
        hess_0, closed, r"$\partial E = 0$ at $X = 0$, so the Christoffel term vanishes", where))
    total, _, _ = curve_second_derivative(pe.E, c, zero, u, [0] * N, simplify=False)
    out.append(checked_step(
        "At a critical point the second variation is intrinsic",
        Shown("d²/ds² E_n(sU)|_{s=0}", r"\frac{d^2}{ds^2}E_n(sU)\big|_{s=0}"),
        Shown("Hess E(U, U)|_{X=0}", r"\operatorname{Hess}E(U,U)\big|_{X=0}"), total, hess_0,
        r"along the straight line, not a geodesic (the curve second derivative as implemented); for $A = -I$ and "
        r"$u_i = v$: $-|v|^{2}$, $E(\delta_{sv}) = \tfrac{1}{2}e^{-s^{2}|v|^{2}}$", where))
    return out
