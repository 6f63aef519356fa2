"""One object per derivation step: the equation that is displayed is the equation that is checked.

An :class:`Equation` is immutable: ``lhs``, ``rel`` (``=``, ``⇔``, ``⇒``, ``≻ 0``), ``rhs``, the qualifier
``free_of`` (``= rhs + (terms free of y)``) and ``where`` (named blocks ``N := Σ⁻¹ - R - Rᵀ`` shown under the
equation and substituted by the check).  Sides are SymPy expressions (matrix expressions in ``MatrixSymbol``s
of general size ``d``, explicit matrices, scalars), the operators below (``E_{X~N(α,Σ)}[...]``, ``-∇²_y``,
``E_π[y | x]``, ``(...)|_{V = I}``) which are SymPy objects too, or a :class:`Notation` (a symbol written for a
quantity a procedure computes, e.g. ``T*``).

A :class:`Step` holds one equation, how it is checked (``how``: a procedure reading the equation, or the generic
:func:`.steps_check.check_equal` on its two sides with ``where`` substituted) and the :class:`Result` of the
check *with the equation it checked*.  ``Step.checked`` is true only when that equation is the step's own:
a step changed after its check (:meth:`Step.changed`, or ``dataclasses.replace``) is not checked.  The
renderers (:mod:`.steps_render`) print exactly ``step.eq``: :func:`tex` and :func:`text` print the expression
tree (parentheses from its structure).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import sympy as sp
from sympy.printing.latex import LatexPrinter
from sympy.printing.str import StrPrinter

from .check import check_equal

D = sp.Symbol("d", integer=True, positive=True)

#: relation -> (text, LaTeX)
RELATIONS = {"=": ("=", "="), "<=>": ("⇔", r"\iff"), "=>": ("⇒", r"\implies"), ">0": ("≻ 0", r"\succ 0")}


@dataclass(frozen=True)
class Notation:
    """A symbol written for a quantity that a procedure computes (``T*``, ``Σ(t)``, ``dα/dt``)."""

    text: str
    tex: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Equation:
    """``lhs rel rhs [+ (terms free of ...)]`` with ``where`` definitions (module docstring); ``instance``: for
    an equation written in general notation (:class:`Notation` sides), the explicit instance ``(lhs, rhs,
    words)`` that the check verifies, part of the object so that it is what the document says was checked."""

    lhs: Any
    rhs: Any = None
    rel: str = "="
    free_of: tuple = ()
    where: tuple = ()
    instance: tuple = ()

    def __post_init__(self):
        if self.rel not in RELATIONS:
            raise ValueError(f"unknown relation {self.rel!r}")

    def substituted(self, e):
        """``e`` with the ``where`` definitions put in (repeatedly: a definition may use an earlier one)."""
        reps = dict(self.where)
        for _ in range(len(reps) + 1):
            new = e.xreplace(reps) if isinstance(e, sp.Basic) else e
            if new == e:
                return e
            e = new
        return e


@dataclass(frozen=True)
class Result:
    """The outcome of checking ``eq``: ``ok``, ``method`` (how, or why not), ``scope`` (``"every d"``,
    ``"d = 2, 3"``, ``"n = 2, d = 2"``, ...)."""

    eq: Equation
    ok: bool
    method: str
    scope: str = ""


@dataclass(frozen=True)
class Step:
    """A titled :class:`Equation` with its check (module docstring)."""

    title: str
    eq: Equation
    note: str = ""
    how: Callable | None = field(default=None, repr=False, compare=False)
    kw: tuple = ()
    result: Result | None = None

    @property
    def lhs(self):
        return self.eq.lhs

    @property
    def rhs(self):
        return self.eq.rhs

    @property
    def current(self) -> bool:
        """The result belongs to this very equation."""
        return self.result is not None and (self.result.eq is self.eq or self.result.eq == self.eq)

    @property
    def checked(self) -> bool:
        return self.current and self.result.ok

    @property
    def method(self) -> str:
        if self.result is None:
            return "not checked"
        if not self.current:
            return "the equation was changed after its check: not checked"
        return self.result.method

    @property
    def scope(self) -> str:
        return self.result.scope if self.checked else ""

    def changed(self, **kw) -> "Step":
        """A new, unchecked step (``eq=``, ``title=``, ...)."""
        return replace(self, result=None, **kw)

    def check(self) -> "Step":
        """This step with the result of checking its own equation now (a check that raises is a failure)."""
        try:
            out = self.how(self.eq) if self.how is not None else generic_check(self.eq, **dict(self.kw))
            ok, method, scope = out if len(out) == 3 else (*out, "")
        except Exception as exc:   # noqa: BLE001 - a check that cannot run is reported as not checked
            ok, method, scope = False, f"check could not be carried out ({type(exc).__name__}: {str(exc)[:80]})", ""
        return replace(self, result=Result(self.eq, bool(ok), method, scope if ok else ""))

    def __reduce__(self):
        """Pickled with its equation and result; a check function that cannot travel (a local function)
        is replaced by :class:`_LocalCheck`, so a copy keeps the recorded result and a re-check says why
        it cannot be repeated there."""
        how = self.how
        fn = getattr(how, "func", how)                        # a functools.partial travels as its function
        name = getattr(fn, "__qualname__", "")
        if how is not None and ("<locals>" in name or "<lambda>" in name):
            how = _LocalCheck(name)
        return Step, (self.title, self.eq, self.note, how, self.kw, self.result)


@dataclass(frozen=True)
class _LocalCheck:
    """Stands for a step's local check function in a pickled copy: re-checking reports it as not repeated."""

    name: str

    def __call__(self, eq):
        return False, f"the check {self.name} is a local function that did not travel with the step", ""


class ChainedDisplay(ValueError):
    """A displayed relation that packs several claims (``a = b = c``) or a definition and a claim into one
    side (``E(μ_X), μ_X = ...``): the renderer refuses it; each link must be its own equation with its own
    check, and a definition goes into ``where`` (displayed ``where name := value``)."""


#: relations in a typeset side (LaTeX): a side holding one at the top level (outside every bracket, brace,
#: ``\langle..\rangle``, sub- or superscript) is a chain
_TEX_RELATIONS = re.compile(r":=|=|\\(?:sim|leq?|geq?|iff|implies|approx|equiv|neq?|succ|prec|Leftrightarrow|"
                            r"Rightarrow|coloneqq)(?![A-Za-z])|<|>")
_TEXT_RELATIONS = re.compile(r":=|=|≤|≥|∼|⇔|⇒|≠|≈|≡|≻")
_TEX_OPEN, _TEX_CLOSE = re.compile(r"\\langle(?![A-Za-z])|\\\{|[({\[]"), re.compile(r"\\rangle(?![A-Za-z])|\\\}|[)}\]]")
_TEXT_OPEN, _TEXT_CLOSE = "([{⟨", ")]}⟩"


def _top_level(s: str, latex: bool) -> str:
    """``s`` with every bracketed part removed: what is left is the top level of the side."""
    out, depth, k = [], 0, 0
    while k < len(s):
        if latex:
            m_o, m_c = _TEX_OPEN.match(s, k), _TEX_CLOSE.match(s, k)
            if s.startswith("\\left.", k) or s.startswith("\\right.", k):
                k += 6 if s[k + 1] == "l" else 7
                continue
            if m_o:
                depth, k = depth + 1, m_o.end()
                continue
            if m_c:
                depth, k = max(depth - 1, 0), m_c.end()
                continue
        else:
            if s[k] in _TEXT_OPEN:
                depth, k = depth + 1, k + 1
                continue
            if s[k] in _TEXT_CLOSE:
                depth, k = max(depth - 1, 0), k + 1
                continue
        if depth == 0:
            out.append(s[k])
        k += 1
    return "".join(out)


def side_chain(side, allowed: int = 0) -> str:
    """Why the displayed side ``side`` is a chain (more than ``allowed`` relations, or a comma, at its top
    level), or ``""``.  ``allowed = 1`` for the sides of ``⇔``/``⇒``, which are statements."""
    if side is None:
        return ""
    forms = [(side.tex, True), (side.text, False)] if isinstance(side, Notation) else [(tex(side), True)]
    for s, latex in forms:
        top = _top_level(re.sub(r"\\[,;:! ]", " ", s) if latex else s, latex)   # thin spaces are not commas
        rels = [m.group(0) for m in (_TEX_RELATIONS if latex else _TEXT_RELATIONS).finditer(top)]
        if len(rels) > allowed:
            return f"the side {s!r} holds the relation {rels[allowed]!r}"
        if "," in top:
            return f"the side {s!r} packs two items with a comma"
    return ""


def chain_problem(eq: Equation) -> str:
    """Why ``eq`` cannot be displayed as one relation (:class:`ChainedDisplay`), or ``""``."""
    allowed = 1 if eq.rel in ("<=>", "=>") else 0
    for side in (eq.lhs, eq.rhs):
        why = side_chain(side, allowed)
        if why:
            return why
    for k, v in eq.where:
        why = side_chain(k) or side_chain(v)
        if why:
            return "in a definition: " + why
    return ""


def refuse_chained(dv) -> None:
    """Raise :class:`ChainedDisplay` naming the first step, exercise or boxed result that is a chain."""
    items = [(f"step {k} ({s.title})", s.eq) for k, s in enumerate(dv.steps, 1)]
    items += [(f"exercise {k}", s.eq) for k, s in enumerate(dv.exercises, 1)]
    items += [("the boxed result", Equation(b[0], b[1])) for b in dv.boxed]
    for name, eq in items:
        why = chain_problem(eq)
        if why:
            raise ChainedDisplay(f"{name}: {why}; display each link as its own checked equation and each "
                                 "definition in `where`")


def generic_check(eq: Equation, **kw):
    """``lhs = rhs`` (with ``where`` substituted, modulo ``free_of``) by :func:`.steps_check.check_equal`."""
    if eq.rel != "=":
        return False, f"no generic check for the relation {RELATIONS[eq.rel][0]}", ""
    if eq.instance:
        lhs, rhs = eq.instance[:2]
    else:
        if isinstance(eq.lhs, Notation) or isinstance(eq.rhs, Notation):
            return False, "a side written as notation has no generic check", ""
        lhs, rhs = eq.substituted(eq.lhs), eq.substituted(eq.rhs)
    return check_equal(lhs, rhs, modulo=eq.free_of, **kw)


def step(title: str, lhs, rhs=None, note: str = "", how: Callable | None = None, rel: str = "=",
         free_of: tuple = (), where: tuple = (), **kw) -> Step:
    """A :class:`Step` built and checked now."""
    eq = Equation(sym(lhs), sym(rhs), rel, tuple(free_of), tuple((k, sym(v)) for k, v in where))
    return Step(title, eq, note, how, tuple(sorted(kw.items()))).check()


def recheck(s: Step) -> Step:
    """``s`` checked again from its own equation."""
    return s.check()


@dataclass(frozen=True)
class Derivation:
    """An ordered derivation: ``steps``, ``assumptions``, ``conclusions``, ``notes``; ``statement``: the model
    and the result in words (set first), ``boxed``: the result as an :class:`Equation` (boxed at the end);
    ``data``: ``(name, value)`` pairs (SymPy symbol or string name, Matrix or number) displayed after the model;
    ``figure``: an image file included after them."""

    title: str
    steps: tuple
    assumptions: tuple = ()
    conclusions: tuple = ()
    notes: tuple = ()
    model: tuple = ()
    boxed: tuple = ()
    data: tuple = ()            # (name, value) of the numbers a document is about (a scenario's A, V, α₀, Σ₀, T)
    figure: str = ""            # an image file shown after the data (LaTeX documents)
    exercises: tuple = ()       # Steps whose title is a problem and whose equation is its checked solution

    @property
    def all_checked(self) -> bool:
        return bool(self.steps) and all(s.checked for s in self.steps)

    def summary(self) -> str:
        """What "checked" means for this document, computed from the steps' results."""
        n = len(self.steps)
        bad = [k for k, s in enumerate(self.steps, 1) if not s.checked]
        every = sum(1 for s in self.steps if s.checked and s.scope == "every d")
        if bad:
            return (f"{len(bad)} of the {n} steps below could NOT be checked (step{'s' if len(bad) > 1 else ''} "
                    f"{', '.join(map(str, bad))}, marked NOT checked); the others were checked by SymPy as stated "
                    "under each.")
        if not every:
            return ("The step below was checked, as stated under it." if n == 1 else
                    f"Every one of the {n} steps below was checked by SymPy, as stated under each.")
        return (f"Every one of the {n} steps below was checked by SymPy: {every} proved for every dimension $d$ in "
                "the free algebra of non-commuting matrix symbols, the others checked as stated under each (exactly "
                "at a stated $d$, at seeded random rational points, or at 60 digits).")


# ------------------------------------------------------------------------------------- operators
class _Op(sp.MatrixExpr):
    """A matrix-valued operator of the derivations (shape of its first argument unless said otherwise)."""

    @property
    def shape(self):
        return self.args[0].shape

    def _free(self):       # seen by the free algebra as a letter of its own, unless it is a substitution
        return None


class GaussExpect(_Op):
    """``E_{X~N(α,Σ)}[expr(X)]`` for ``expr`` polynomial in the vector ``X`` (args: expr, X, α, Σ)."""

    def _latex(self, p):
        e, X, a, S = self.args
        return (r"\mathbb{E}_{" + p._print(X) + r"\sim\mathcal{N}(" + p._print(a) + "," + p._print(S) + r")}"
                r"\left[" + p._print(e) + r"\right]")

    def _sympystr(self, p):
        e, X, a, S = self.args
        return f"E_{{{p._print(X)}~N({p._print(a)}, {p._print(S)})}}[{p._print(e)}]"

    def explicit_value(self, env, dims, ev):
        from ..symbolic.moments import gaussian_expectation

        e, X, a, S = self.args
        n = int(X.shape[0].xreplace({D: dims["d"]})) if isinstance(X.shape[0], sp.Basic) else int(X.shape[0])
        Xs = sp.Matrix([sp.Symbol(f"_E{X.name}{i}", real=True) for i in range(n)])
        inner = ev(e, {**env, X.name: Xs}, dims)
        am, Sm = ev(a, env, dims), ev(S, env, dims)
        return inner.applyfunc(lambda v: gaussian_expectation(sp.expand(v), list(Xs), am, Sm))


class NegHessian(_Op):
    """``-∇²_y f`` of a scalar (``1×1``) expression ``f`` in the vector ``y`` (args: f, y)."""

    @property
    def shape(self):
        return (self.args[1].shape[0], self.args[1].shape[0])

    def _latex(self, p):
        return r"-\nabla_{" + p._print(self.args[1]) + r"}^{2}\left[" + p._print(self.args[0]) + r"\right]"

    def _sympystr(self, p):
        return f"-Hessian_{p._print(self.args[1])}[{p._print(self.args[0])}]"

    def explicit_value(self, env, dims, ev):
        f, y = self.args
        n = int(y.shape[0].xreplace({D: dims["d"]})) if isinstance(y.shape[0], sp.Basic) else int(y.shape[0])
        ys = sp.Matrix([sp.Symbol(f"_H{y.name}{i}", real=True) for i in range(n)])
        val = ev(f, {**env, y.name: ys}, dims)
        val = val[0, 0] if isinstance(val, sp.MatrixBase) else val
        return -sp.hessian(sp.expand(val), list(ys))


class PlanMean(_Op):
    """``E_π[y | x]`` for the Gaussian plan ``π`` with both marginals ``N(α, Σ)`` and cross-covariance ``C``
    (args: x, α, Σ, C); evaluated from the joint *precision* (an independent route from the covariance
    formula): ``α - Π_yy⁻¹ Π_yx (x - α)``."""

    def _latex(self, p):
        return r"\mathbb{E}_{\pi}\left[y \mid " + p._print(self.args[0]) + r"\right]"

    def _sympystr(self, p):
        return f"E_pi[y | {p._print(self.args[0])}]"

    def explicit_value(self, env, dims, ev):
        x, a, S, C = (ev(v, env, dims) for v in self.args)
        n = S.rows
        Pi = sp.Matrix(sp.BlockMatrix([[S, C], [C.T, S]])).inv(method="LU")
        return a - Pi[n:, n:].inv(method="LU") * Pi[n:, :n] * (x - a)


class At(_Op):
    """``(expr)|_{structure}``: ``expr`` with the substitution ``reps`` (args: expr, Tuple of (old, new),
    words) put in."""

    def _latex(self, p):
        return (r"\left(" + p._print(self.args[0]) + r"\right)\Big|_{" + str(self.args[2]).replace("^T", r"^{\top}")
                .replace(" and ", r",\ ") + "}")

    def _sympystr(self, p):
        return f"({p._print(self.args[0])})|_({self.args[2]})"

    def substituted(self):
        return self.args[0].xreplace(dict(self.args[1]))

    def _free(self):
        return self.substituted()

    def explicit_value(self, env, dims, ev):
        return ev(self.substituted(), env, dims)


def named_roots(*exprs) -> tuple:
    """``(exprs, where)``: the inverses of sums holding a matrix square root (Sinkhorn's ``(I + X^{1/2})⁻¹``) named
    ``Y_1, Y_2, ...`` so that the equation fits the page; ``where`` defines the names (shown under the equation
    and put back by the check)."""
    exprs = [sym(e) for e in exprs]
    blocks: list = []
    for e in exprs:
        for inv in sorted(e.atoms(sp.Inverse), key=sp.default_sort_key):
            if any(p.exp == sp.Rational(1, 2) for p in inv.arg.atoms(sp.MatPow)) and inv not in blocks:
                blocks.append(inv)
    names = {b: sp.MatrixSymbol(f"Y_{k}", *b.shape) for k, b in enumerate(blocks, 1)}
    return [e.xreplace(names) for e in exprs], tuple((v, k) for k, v in names.items())


def at(expr, reps: dict, words: str) -> At:
    return At(expr, sp.Tuple(*[sp.Tuple(k, v) for k, v in reps.items()]), sp.Symbol(words))


# ---------------------------------------------------------------------------------------- printing
def sym(e):
    """``Σᵀ -> Σ`` (Σ is symmetric) in what is shown and checked (the checks take Σ symmetric)."""
    if not isinstance(e, sp.Basic):
        return e
    reps = {}
    for n in ("Sigma", "Sigma_0"):
        S = sp.MatrixSymbol(n, D, D)
        reps.update({S.T: S, sp.Inverse(S).T: S.I, sp.Inverse(S.T): S.I})
    return e.xreplace(reps)


_HEADED = re.compile(r"^([A-Za-z]+)\^\((\d+)\)_([\d,]+)$")
_TEX_GREEK = {"Sigma": r"\Sigma", "alpha": r"\alpha", "epsilon": r"\varepsilon", "tau": r"\tau",
              "lambda": r"\lambda", "Gamma": r"\Gamma"}


def _negative(a) -> bool:
    """A term printed with a minus: ``-X``, and ``-t X`` (a scalar factor with a minus sign)."""
    if a.could_extract_minus_sign():
        return True
    return isinstance(a, sp.MatMul) and not a.args[0].is_Matrix and a.args[0].could_extract_minus_sign()


def _ordered(args):
    """Terms of a sum, positive ones first (``y - Λ⁻¹n``, not ``-Λ⁻¹n + y``); the sum is the same."""
    return sorted(args, key=_negative)


class _SignedSum:
    """A matrix sum printed with its positive terms first and a true minus (one rule for both printers)."""

    def _print_MatAdd(self, e):
        out = ""
        for k, a in enumerate(_ordered(e.args)):
            if _negative(a):
                out += " - " + self._print(-a) if k else "-" + self._print(-a)
            else:
                out += (" + " if k else "") + self._print(a)
        return out


class _Tex(_SignedSum, LatexPrinter):

    def _print_Transpose(self, e):
        base = self._print(e.arg)
        if not isinstance(e.arg, sp.MatrixSymbol):
            base = r"\left(" + base + r"\right)"
        return base + r"^{\top}"

    def _print_Rational(self, e):
        if e.q != 1:
            return ("-" if e.p < 0 else "") + r"\tfrac{" + str(abs(e.p)) + "}{" + str(e.q) + "}"
        return super()._print_Rational(e)


def tex(e) -> str:
    """LaTeX of one side: the expression tree printed (house notation ``^{\\top}``, ``\\varepsilon``,
    ``\\tfrac``; 1-based head superscripts ``A^{(1)}``)."""
    if isinstance(e, Notation):
        return e.tex
    names = {sp.Symbol("lambda_max", positive=True): r"\lambda_{\max}"}
    if isinstance(e, sp.Basic):
        for a in e.free_symbols | set(e.atoms(sp.MatrixSymbol)):
            nm = getattr(a, "name", "")
            m = _HEADED.match(nm)
            if m:
                names[a] = f"{{{_TEX_GREEK.get(m.group(1), m.group(1))}^{{({m.group(2)})}}_{{{m.group(3)}}}}}"
            m = re.fullmatch(r"([A-Za-z]+)\^\((\d+)\)", nm)
            if m:
                names[a] = f"{{{_TEX_GREEK.get(m.group(1), m.group(1))}^{{({m.group(2)})}}}}"   # braced: A^(1) T
    s = _Tex({"symbol_names": names}).doprint(e)
    s = s.replace("^{T}", "^{\\top}").replace("\\epsilon", "\\varepsilon")
    s = re.sub(r"\\left\(\\tfrac\{(\d+)\}\{(\d+)\}\\right\)", r"\\tfrac{\1}{\2}", s)
    s = s.replace(r"\mathbb{I}", "I").replace("+ -", "-")
    return s


_UNI = [("Sigma_0", "Σ₀"), ("Sigma", "Σ"), ("Lambda", "Λ"), ("alpha", "α"), ("epsilon", "ε"), ("Gamma", "Γ"), ("lambda_max", "λ_max"),
        ("tau", "τ"), ("mu", "μ"), ("pi", "π"), ("rho0", "ρ₀"), ("rho", "ρ"), ("beta", "β"), ("phi", "φ")]


class _Text(_SignedSum, StrPrinter):

    def _print_besseli(self, e):          # Bessel's I_k, never confused with the imaginary unit (printed i)
        return f"I_{self._print(e.args[0])}({self._print(e.args[1])})"

    def _print_ImaginaryUnit(self, e):
        return "i"

    def _print_Transpose(self, e):
        base = self._print(e.arg)
        return (base if isinstance(e.arg, sp.MatrixSymbol) else f"({base})") + "ᵀ"

    def _print_Inverse(self, e):
        base = self._print(e.arg)
        return (base if isinstance(e.arg, sp.MatrixSymbol) else f"({base})") + "⁻¹"

    def _print_MatMul(self, e):
        out = []
        for a in e.args:
            s = self._print(a)
            if isinstance(a, (sp.MatAdd, sp.Add)):
                s = f"({s})"
            out.append(s)
        txt = " ".join(out)
        return txt.replace("-1 ", "-", 1) if txt.startswith("-1 ") else txt


def text(e) -> str:
    """One line in math notation (``Σ⁻¹``, ``Aᵀ``, juxtaposed products): the expression tree printed; an
    explicit matrix as its rows."""
    if isinstance(e, Notation):
        return e.text
    if isinstance(e, sp.MatrixBase):
        return "[" + ", ".join("[" + ", ".join(text(v) for v in row) + "]" for row in e.tolist()) + "]"
    s = _Text({"order": None}).doprint(e)
    s = s.replace("**", "^")
    for a, b in _UNI:
        s = re.sub(r"(?<![A-Za-z_])" + a + r"(?![A-Za-z_])", b, s)
    return s


def inline_matrix(M) -> str:
    """A matrix inside a sentence's math (``$...$``): a ``smallmatrix`` in parentheses, exact entries in LaTeX
    (read as ``(a, b; c, d)`` in text); a ``1×1`` matrix or a scalar as its entry."""
    if not isinstance(M, sp.MatrixBase):
        return tex(M)
    if M.shape == (1, 1):
        return tex(M[0, 0])
    return (r"\left(\begin{smallmatrix}" + r"\\ ".join(" & ".join(tex(v) for v in row) for row in M.tolist())
            + r"\end{smallmatrix}\right)")


def json_side(e) -> str:
    """SymPy ``str`` of a side (``parse_expr`` reads it back given the symbol names); notation as written."""
    if isinstance(e, Notation):
        return e.text
    return sp.sstr(e.tolist()) if isinstance(e, sp.MatrixBase) else sp.sstr(e)
