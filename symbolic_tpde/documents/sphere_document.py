"""The sphere reductions (:mod:`..symbolic.sphere_reductions`) as documents of the one engine: the same
:class:`~.equation.Derivation`, so the same text, LaTeX and Beamer renderers and the same refusal of chained
displays.  The reductions' titles and check descriptions are written in a plain notation (``rho``, ``θ_i``,
``<θ_i, S>``); :func:`math_words` marks their formulas as inline math (``$\\rho$``, ``$\\langle\\theta_i,
S\\rangle$``) so that the LaTeX shows no code and the text reads them as Unicode."""

from __future__ import annotations

import re
from dataclasses import replace

import sympy as sp

from .equation import Derivation, Notation

__all__ = ["math_words", "sphere_derivation"]

_WHOLE = {"rho0": r"\rho_0", "lambda_k": r"\lambda_k", "lambda_ell": r"\lambda_\ell", "Delta_S": r"\Delta_S",
          "grad_S": r"\nabla_S", "c_ell": r"c_\ell", "Y_ell": r"Y_\ell", "dmu(y)": r"d\mu(y)", "int": r"\int",
          "+-": r"\pm", "11^T": r"\mathbf{1}\mathbf{1}^{\top}",
          "<": "<", "|difference|": r"|\text{difference}|", "d/drho": r"d/d\rho", "d/drho,": r"d/d\rho,"}
_INNER = [(r"(?<![A-Za-z\\])rho0(?![A-Za-z])", r"\\rho_0"), (r"(?<![A-Za-z\\])rho(?![A-Za-z])", r"\\rho"),
          (r"(?<![A-Za-z\\])beta(?![A-Za-z])", r"\\beta"), (r"(?<![A-Za-z\\])phi(?![A-Za-z])", r"\\phi"),
          (r"(?<![A-Za-z\\])theta(?![A-Za-z])", r"\\theta"), (r"(?<![A-Za-z\\])sigma(?![A-Za-z])", r"\\sigma"),
          (r"(?<![A-Za-z\\])eps(?![A-Za-z])", r"\\varepsilon"), (r"(?<![A-Za-z\\])2pi(?![A-Za-z])", r"2\\pi"),
          (r"(?<![A-Za-z\\])pi(?![A-Za-z])", r"\\pi"), (r"(?<![A-Za-z\\])mu(?![A-Za-z])", r"\\mu"),
          (r"(?<![A-Za-z\\])ell(?![A-Za-z])", r"\\ell"), (r"(?<![A-Za-z\\])lambda(?![A-Za-z])", r"\\lambda"),
          (r"(?<![A-Za-z\\])Delta(?![A-Za-z])", r"\\Delta"),
          (r"(?<![A-Za-z\\])(arccos|sin|cos|exp|log)(?![A-Za-z])", r"\\\1 "),
          ("θ", r"\\theta "), ("ρ", r"\\rho "), ("β", r"\\beta "), ("π", r"\\pi "), ("σ", r"\\sigma "),
          ("φ", r"\\phi "), ("μ", r"\\mu "), ("ℓ", r"\\ell "), ("Σ", r"\\sum "), ("∫", r"\\int "),
          ("≠", r"\\neq "), ("<", r"\\langle "), (">", r"\\rangle "), ("±", r"\\pm "),
          (r"\^\(([^()]*)\)", r"^{\1}")]
# a Unicode letter's command takes a space only before a letter (``\theta_i``, not ``\theta _i``)
_INNER = [(a + "(?=[A-Za-z])", b) if len(a) == 1 and b.endswith(" ") else
          (a, b[:-1]) if len(a) == 1 and b.endswith(" ") and a not in "<>" else (a, b) for a, b in _INNER] + \
    [(a, b[:-1]) for a, b in _INNER if len(a) == 1 and b.endswith(" ")]
_MATHY = re.compile(r"[θρβπσφμℓΣ∫≠<>_^|=±]|^[\d./e+\-]+$|^[b-zA-Z]$|^[()\d+\-*/]+$|"
                    r"(?<![A-Za-z])(rho0?|beta|phi|theta|sigma|eps|2?pi|mu|ell|arccos|sin|cos|lambda|Delta)(?![A-Za-z])")


def _math(tok: str) -> str:
    if tok in _WHOLE:
        return _WHOLE[tok]
    for a, b in _INNER:
        tok = re.sub(a, b, tok)
    return tok.replace("+-", r"\pm ").strip()


def math_words(s: str) -> str:
    """``s`` with its formulas between ``$`` marks (runs of formula tokens joined, trailing ``,;:`` outside)."""
    if "$" in s:
        return s
    out, run = [], []

    def flush():
        if run:
            out.append("$" + " ".join(run) + "$")
            run.clear()
    toks: list = []
    for tok in s.split(" "):          # a formula with spaces inside braces stays one token
        if toks and toks[-1].count("{") > toks[-1].count("}"):
            toks[-1] += " " + tok
        else:
            toks.append(tok)
    for tok in toks:
        core, tail = re.match(r"^(.*?)([,;:.]?)$", tok).groups() if not re.fullmatch(r"[\d.]+", tok) else (tok, "")
        if core and (core in _WHOLE or _MATHY.search(core)) and core not in ("a", "A", "I"):
            run.append(_math(core))
            if tail:
                run[-1] += tail if tail != "." else ""
                flush()
                if tail == ".":
                    out[-1] += "."
            continue
        flush()
        out.append(tok)
    flush()
    return " ".join(out)


def _shown(s):
    """The step with its title and check description as ``$``-marked sentences (the result, hence
    ``checked``, is the same object: only its words are set in math)."""
    res = s.result and replace(s.result, method=math_words(s.result.method))
    return replace(s, title=math_words(s.title), result=res)


MODEL = (r"Tokens $\theta_1, \ldots, \theta_n$ on the unit sphere move by self-attention with $Q = K = V = I$ and "
         r"weights $e^{\beta\langle\theta_i,\theta_j\rangle}/Z_i$ (normaliser $Z_i = \sum_k e^{\beta\langle\theta_i,"
         r"\theta_k\rangle}$ for the softmax model SA, $Z_i = n$ for the unnormalised USA); every reduction below is "
         r"obtained by substituting an ansatz into the particle system's definition and checked as stated under "
         r"each step.")


def sphere_derivation(title: str, steps, rhs: dict, extra: dict | None = None) -> Derivation:
    """A reduction's ``steps``, its closed system ``rhs`` (``rho``, ``phi``, ``r``: time derivatives;
    ``lambda_*``: rates) boxed, and its consequences near ``ρ = 1`` as conclusions."""
    names = {"rho": (Notation("ρ'", r"\dot\rho")), "phi": Notation("φ'", r"\dot\phi"), "r": Notation("r'", r"\dot r"),
             "lambda_k": Notation("λ_k", r"\lambda_k"), "lambda_ell": Notation("λ_ℓ", r"\lambda_\ell")}
    boxed = tuple((names.get(k, Notation(k, k)), v) for k, v in rhs.items())
    consequences = _consequence_steps(rhs, extra or {})
    scope = ("Scope: identities stated for symbolic $n$ are checked at the explicit $n$ named under each step "
             "(evidence at those $n$, not a proof for every $n$); the rates are checked by quadrature at the "
             "points named.")
    return Derivation(math_words(title), tuple(_shown(s) for s in steps) + _gram_steps(steps) + consequences,
                      (scope,), (),
                      model=(MODEL,), boxed=boxed)


def _gram_steps(steps) -> tuple:
    """For symbolic ``n``: the cosine ``ρ̇ = <v_i, θ_j> + <θ_i, v_j>`` of the sphere models recomputed by Gram
    algebra from the displayed coefficients ``(c_i, c_j, c_S)`` of ``v_i`` on ``(θ_i, θ_j, S)`` (``v_j`` by
    exchanging ``i`` and ``j``): with ``<θ_i, θ_i> = 1``, ``<θ_i, θ_j> = ρ``, ``<θ_i, S> = 1 + (n - 1)ρ``,
    ``ρ̇ = 2(c_i ρ + c_j + c_S(1 + (n - 1)ρ))``, compared with the displayed ``ρ̇`` by ``sympy.simplify`` with
    ``n`` a symbol.  A proof for every ``n`` of this step given the coefficients (themselves checked at the
    explicit ``n`` of their step)."""
    from .equation import Equation, Step

    coef = next((s for s in steps if s.eq.lhs.text.startswith("(coefficients of v_i")), None)
    cos = next((s for s in steps if s.eq.lhs.text == "ρ'" and s.eq.where
                and s.eq.where[0][1].text.startswith("⟨v_i, θ_j⟩")), None)
    if coef is None or cos is None or len(coef.eq.rhs) != 3:
        return ()
    rho, n = sp.Symbol("rho", real=True), sp.Symbol("n", integer=True, positive=True)
    ci, cj, cS = coef.eq.rhs

    def how(eq):
        gram = 2 * (ci * rho + cj + cS * (1 + (n - 1) * rho))
        ok = sp.simplify(eq.rhs - gram) == 0
        return ok, (r"$\langle v_i,\theta_j\rangle + \langle\theta_i, v_j\rangle$ expanded by bilinearity from "
                    r"the coefficients of $v_i$ above with $\langle\theta_i,\theta_i\rangle = 1$, "
                    r"$\langle\theta_i,\theta_j\rangle = \rho$, $\langle\theta_i, S\rangle = 1 + (n-1)\rho$; "
                    r"the difference simplifies to $0$ with $n$ a symbol" if ok else
                    "the Gram-algebra value differs from the displayed one"), "every n, given the coefficients"
    return (Step(r"the cosine for symbolic $n$, by Gram algebra", Equation(cos.eq.lhs, cos.eq.rhs, where=cos.eq.where),
                 how=how).check(),)


#: the consequences near ρ = 1 (:func:`..symbolic.sphere_reductions.rates`): title, displayed left side
_NEAR_ONE = {
    "fixed_point": (r"near $\rho = 1$: $\rho = 1$ is a fixed point", Notation("ρ'|_(ρ=1)", r"\dot\rho\big|_{\rho=1}")),
    "lambda": (r"near $\rho = 1$: the rate $\lambda$ of the final approach, $1 - \rho \sim e^{-\lambda t}$",
               Notation("-∂ρ'/∂ρ|_(ρ=1)", r"-\frac{\partial\dot\rho}{\partial\rho}\Big|_{\rho=1}")),
    "r_dot_at_1": (r"near $\rho = 1$: the radial speed $\dot r_1$", Notation("r'|_(ρ=1)", r"\dot r\big|_{\rho=1}")),
    "power": (r"near $\rho = 1$: the power $p$ of $1 - \rho \sim C t^{-p}$", Notation("λ r/r'_1", r"\lambda r/\dot r_1")),
}
#: the parameter values of the numeric check of a consequence (n, β, r, α: whichever appear)
_AT = {"n": 5, "beta": sp.Rational(7, 10), "r": sp.Rational(3, 2), "alpha": sp.Rational(1, 2)}


def _consequence_steps(rhs: dict, extra: dict) -> tuple:
    """The consequences near ``ρ = 1`` as steps, each checked at :data:`_AT` by a route of its own: the closed
    system's right side evaluated at ``ρ = 1`` (40 digits), a central difference of it in ``ρ`` (step ``1e-15``
    at 40 digits, truncation ``O(h²)``), and the power from those two numbers."""
    from .equation import Equation, Step

    rho = sp.Symbol("rho", real=True)
    f = rhs.get("rho")
    if f is None:
        return ()
    at = {sy: _AT[sy.name] for sy in set().union(*(sp.sympify(v).free_symbols for v in rhs.values()))
          if sy.name in _AT}

    def num(e, **extra_at):
        return sp.N(sp.sympify(e).xreplace({**at, **extra_at}), 40)

    h = sp.Rational(1, 10 ** 15)
    ref = {"fixed_point": num(f.subs(rho, 1)),
           "lambda": -(num(f.subs(rho, 1 + h)) - num(f.subs(rho, 1 - h))) / (2 * h)}
    if "r" in rhs:
        ref["r_dot_at_1"] = num(rhs["r"].subs(rho, 1))
        ref["power"] = ref["lambda"] * num(sp.Symbol("r", positive=True)) / ref["r_dot_at_1"]
    pt = ", ".join(f"${sp.latex(k)} = {sp.latex(v)}$" for k, v in sorted(at.items(), key=lambda kv: kv[0].name))
    out = []
    for key, value in extra.items():
        if key not in _NEAR_ONE or key not in ref:
            continue
        title, lhs = _NEAR_ONE[key]

        def how(eq, key=key):
            got = num(eq.rhs)
            err = abs(got - ref[key])
            ok = err <= sp.Float("1e-20") * max(1, abs(ref[key]))
            route = {"fixed_point": r"the closed system's right side evaluated at $\rho = 1$",
                     "lambda": r"a central difference of the closed system's right side at $\rho = 1$ (step $10^{-15}$, "
                               "40 digits)",
                     "r_dot_at_1": r"the radial equation evaluated at $\rho = 1$",
                     "power": "the two numbers above combined"}[key]
            return ok, (rf"at {pt}: {route} gives ${sp.latex(sp.Float(ref[key], 12))}$; |difference| $\leq 10^{{-20}}$"
                        if ok else f"at {pt}: {route} differs by {float(err):.2g}"), "the stated point"
        out.append(Step(title, Equation(lhs, value), how=how).check())
    return tuple(out)


_KIND_WORDS = {"sphere_sa": "SA (softmax)", "sphere_usa": "USA (unnormalised)"}


def reduction(name: str, norm: str, kind: str, d: int | None = None) -> tuple:
    """``(title, steps, rhs, extra)`` of the reduction ``name`` (``tpde derive --sphere``) for the normalisation
    ``norm`` and the model ``kind`` (``sphere_sa``/``sphere_usa``); ``d`` for ``harmonics``."""
    from ..errors import InputError
    from ..symbolic import sphere_reductions as R

    z = "n" if kind == "sphere_usa" else "softmax"
    kind = _KIND_WORDS.get(kind, kind)
    if name == "equiangular":
        red = R.equiangular(R.MODELS[norm](z))
        return (f"Equiangular reduction, {norm}, {kind} (Q = K = V = I, n symbolic)", red.steps, red.rhs,
                R.rates(red))
    if name == "two-tokens":
        out = R.two_tokens(R.MODELS[norm](z))
        rhs = {"rho": out["rho_dot"], "phi": out["phi_dot"], **({"r": out["r_dot"]} if "r_dot" in out else {})}
        return f"Two tokens, {norm}, {kind}", out["steps"], rhs, {}
    if name == "causal":
        if norm not in ("post", "ngpt"):
            raise InputError("--norm", "the causal reduction is derived for post and ngpt")
        red = R.causal_two_tokens(R.MODELS[norm]("softmax"))
        return f"Causal mask, two tokens, {norm}", red.steps, red.rhs, {}
    if name == "harmonics":
        d = 3 if d is None else d
        if not 2 <= d <= 64:
            raise InputError("--d", f"must be an integer in [2, 64] for --sphere harmonics, got {d}")
        lin = R.sphere_linearisation(z, d)
        return (f"Linearisation at the uniform measure on the sphere of dimension {d - 1}, {kind}", lin["steps"],
                {"lambda_ell": lin["rate"]}, {})
    lin = R.circle_linearisation(z)
    return f"Linearisation at the uniform measure on the circle, {kind}", lin["steps"], {"lambda_k": lin["rate"]}, {}
