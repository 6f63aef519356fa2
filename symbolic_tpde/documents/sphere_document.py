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
    concl = tuple(f"Near $\\rho = 1$: ${math_words(k).strip('$')} = {sp.latex(v)}$" for k, v in (extra or {}).items())
    scope = ("Scope: identities stated for symbolic $n$ are checked at the explicit $n$ named under each step "
             "(evidence at those $n$, not a proof for every $n$); the rates are checked by quadrature at the "
             "points named.")
    return Derivation(math_words(title), tuple(_shown(s) for s in steps), (scope,), concl, model=(MODEL,),
                      boxed=boxed)


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
