"""Text, LaTeX and JSON renderings of derived moment ODEs and of non-preservation witnesses.

* Entrywise systems (:class:`~.system.OdeSystem`): one equation per state.  Large systems are printed with
  common sub-expressions named first (``sympy.cse``; the temporaries ``u_1, u_2, ...`` -- never ``x_k``,
  which reads as the token ``x`` -- are listed before the equations), small ones inline.  Text and JSON keep
  the 0-based code names (``alpha_0``, ``Sigma_0_1``, ``h0_A_0_1``: what generated code and ``parse_expr``
  use).  LaTeX uses the paper's 1-based names (:func:`paper_name`, shared with the steps): ``alpha_0 ->
  \\alpha_{1}``, ``Sigma_0_1 -> \\Sigma_{12}`` (``\\Sigma_{1,10}`` once an index exceeds 9), head parameters
  ``h0_A_0_1 -> A_{12}`` for one head, ``A^{(1)}_{12}`` for several, ``ffn_W_0_1 -> W_{12}``,
  ``tau -> \\tau``, ``epsilon -> \\varepsilon``; and only while readable (:func:`entrywise_unreadable`:
  at most :data:`ENTRYWISE_LATEX_MAX_TEMPS` temporaries), else ``tpde derive`` prints a note and the matrix
  form (``--entrywise-anyway`` overrides).
* Matrix forms (:class:`~.moments.MatrixForm`): ``dα/dt`` and ``dΣ/dt`` as matrix expressions.
* JSON: ``{"variant", "d", "form", "alpha_dot": [...], "Sigma_dot": [[...]], "assumptions": [...],
  "expr_format": "sympy-str"}``.  Expressions are SymPy ``str`` output (``sympy.sstr``), readable back with
  ``sympy.parse_expr`` given the symbol names.  Entrywise: ``Sigma_dot`` is the full symmetric ``d×d`` array;
  large systems come with ``"definitions": [[name, expr], ...]`` (common sub-expressions ``u_k``, to be
  substituted in order), small ones with ``"definitions": []``.
  Matrix form: ``d`` is ``null`` and ``alpha_dot = [expr]``, ``Sigma_dot = [[expr]]`` hold the single matrix
  expression each.

LaTeX output is a fragment (``align*``, needs ``amsmath``); :func:`latex_document` wraps it into a complete
document (A4 portrait, 11pt, 2 cm margins).  Rows wider than the page (:data:`LATEX_LINE_WIDTH`, estimated by
:func:`latex_width`) are broken between the terms of sums, also inside parenthesised sums (``\\right.`` /
``\\left.`` close and reopen the parenthesis at the break, as TeX needs ``\\left``/``\\right`` paired per
line), and inside long reciprocals and roots of sums, typeset as ``\\left(...\\right)^{-1}`` /
``^{1/2}``.  Exponents and other fractions cannot be broken: with CSE forced off, a row whose unbreakable
piece is still wider than the page is refused (``ValueError``) rather than typeset off the page.  Checked: every variant's
output compiles with ``pdflatex`` without overfull lines (``tests/test_symbolic_printing.py``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import sympy as sp

from ..registry.layout import symmetric_rows

_STATE_LATEX = {"alpha": r"\alpha", "Sigma": r"\Sigma"}


def _latex_base(base: str) -> str:
    """LaTeX of a state or parameter name: the state's Greek letter, else the registry's
    :attr:`~symbolic_tpde.registry.kinds.ParamSpec.latex` (braced when it carries its own index), else ``base``."""
    from ..registry import kinds

    if base in _STATE_LATEX:
        return _STATE_LATEX[base]
    for p in (*kinds.STRUCTURED_A, kinds.OUTPUT_BLOCK, *(q for k in kinds.KINDS.values() for q in k.params)):
        if p.name == base and p.latex:
            return "{" + p.latex + "}" if ("^" in p.latex or "_" in p.latex) else p.latex
    return sp.latex(sp.Symbol(base))       # a user's Greek name: lambda -> \lambda


def field_letters(names) -> tuple[str, str]:
    """The display letters of ``Γ(x) = b + Jx``: ``b``, ``J``, or ``b_Gamma``, ``J_Gamma`` when a parameter
    among ``names`` already takes the letter (a key bias ``b``)."""
    return tuple(f"{c}_Gamma" if c in names else c for c in ("b", "J"))


_CODE_NAME = re.compile(r"^(?:h(\d+)_)?(?:ffn_)?([A-Za-z]+)((?:_\d+)*)$")


def paper_name(name: str, several_heads: bool, latex: bool = False) -> str | None:
    r"""The paper's (arXiv 2501.18322) 1-based display name of a 0-based code name: ``alpha_0 -> alpha_1``,
    ``Sigma_0_1 -> Sigma_12`` (indices joined by a comma once one exceeds 9: ``Sigma_1,10``), head parameters
    ``h0_A_0_1 -> A_12`` for one head and ``A^(1)_12`` for several, ``ffn_W_0_1 -> W_12``, ``ffn_c_0 -> c_1``,
    ``h0_tau -> tau``; with ``latex``: ``\alpha_{1}``, ``\Sigma_{12}``, ``A^{(1)}_{12}``, ``\tau``,
    ``\varepsilon``.  ``None`` for a name not of that shape.  The one naming function of the display forms
    (LaTeX entrywise systems here, the steps' entrywise equations in :func:`.steps.one_based`); text/JSON and
    generated code keep the code names."""
    m = _CODE_NAME.match(name)
    if not m:
        return None
    h, base, idx_part = m.groups()
    idx = [int(v) + 1 for v in idx_part.split("_")[1:]]
    joined = ("," if idx and max(idx) > 9 else "").join(map(str, idx))
    head = str(int(h) + 1) if h is not None and several_heads else ""
    if latex:
        return _latex_base(base) + (f"^{{({head})}}" if head else "") + (f"_{{{joined}}}" if joined else "")
    return base + (f"^({head})" if head else "") + (f"_{joined}" if joined else "")


def latex_symbol_names(system) -> dict[sp.Symbol, str]:
    """LaTeX names (:func:`paper_name`, 1-based) for every state and parameter symbol of ``system``."""
    structure = system.origin.get("structure")
    many = structure is None or len(structure.heads) > 1   # head superscripts unless there is a single head
    return {s: paper_name(s.name, many, latex=True) or tex(s) for s in (*system.states, *system.params)}


def tree_size(exprs) -> int:
    """Number of nodes of ``exprs`` written out as trees (what ``str``/LaTeX printing would produce); computed
    on the DAG with memoisation.  Nested matrix solves make this grow much faster than the DAG (ℓ2 at d = 4:
    ~10⁸ tree nodes, ~10³ distinct sub-expressions), hence CSE before printing."""
    memo: dict[int, int] = {}

    def size(e) -> int:
        k = id(e)
        if k not in memo:
            memo[k] = 1 + sum(size(a) for a in e.args)
        return memo[k]
    return sum(size(e) for e in exprs)


#: above this many tree nodes per equation, text/LaTeX/JSON name common sub-expressions first
CSE_THRESHOLD = 60
#: refuse to print without CSE above this many tree nodes in total
MAX_TREE = 2_000_000


def tex(e, **kw) -> str:
    """``sympy.latex`` in the package's one notation: ``^{\\top}`` for transposes, ``\\varepsilon``."""
    return (sp.latex(e, **kw).replace("^{T}", "^{\\top}").replace("\\epsilon", "\\varepsilon"))


def _cse(exprs: list, prefix: str = "u_") -> tuple[list, list]:
    # order="none": SymPy's canonical ordering sorts with keys that walk the expression *tree* (minutes at
    # d >= 3 for ℓ2); without it CSE takes ~0.3 s at d = 4
    # temporaries u_1, u_2, ... (1-based as in the paper; never x_k, which reads as the token x)
    return sp.cse(exprs, symbols=sp.numbered_symbols(prefix, start=1), order="none")


#: LaTeX offers the entrywise system while ``sympy.cse`` names at most this many temporaries ``u_k``: an A4
#: page (25.7 cm of text height) holds ~35 ``align*`` rows with fractions (~20 pt each), and 30 temporaries
#: plus the ``d(d+3)/2`` equations fill about that.  Measured (``tpde derive --d N``): softmax 9 / 21 / 38
#: temporaries at d = 2 / 3 / 4, linear 12 / 27 / 48, two softmax heads with FFN 19 / 42 at d = 2 / 3, l2 41 and
#: Sinkhorn 79 already at d = 2 (nested solves); so softmax and linear stay entrywise up to d = 3.
ENTRYWISE_LATEX_MAX_TEMPS = 30


def entrywise_unreadable(system, max_temps: int = ENTRYWISE_LATEX_MAX_TEMPS) -> str | None:
    """``None`` when the LaTeX entrywise form of ``system`` stays readable, else the one-line note saying why
    it is not shown (more than ``max_temps`` common sub-expressions, :data:`ENTRYWISE_LATEX_MAX_TEMPS`).
    Systems small enough to print without CSE (:data:`CSE_THRESHOLD`) are readable."""
    exprs = list(system.rhs)
    if tree_size(exprs) <= CSE_THRESHOLD * len(exprs):
        return None
    n = len(_cse(exprs)[0])
    if n <= max_temps:
        return None
    d = system.origin.get("d")
    return (f"The entrywise form at d = {d} is not shown: it needs {n} named sub-expressions (more than "
            f"{max_temps}, over a page), so the matrix form below is the result; --entrywise-anyway prints it, "
            "--format text or json give it in full.")


#: width budget of one typeset line, in the units of :func:`latex_width` (A4 portrait with 2 cm margins is
#: 17 cm = ~484 pt wide; an average math glyph at 11 pt is ~6 pt, so ~80 glyphs; 66 leaves room for the
#: label ``\frac{d\Sigma_{1,2}}{dt} =`` and the ``\quad`` indent of continuation lines)
LATEX_LINE_WIDTH = 66


def latex_width(s: str) -> int:
    r"""Rough number of glyphs a LaTeX math string typesets to (an over-estimate for fractions, which count
    numerator plus denominator): commands count one glyph, ``\left``/``\right``/spacing and braces none."""
    s = re.sub(r"\\\\|\\(left|right)\.", "", s)            # line breaks, invisible delimiters
    s = re.sub(r"\\(left|right|frac|dfrac|quad|qquad|,|;|!)(?![a-zA-Z])", "", s)
    s = re.sub(r"\\[a-zA-Z]+", "x", s)
    return len(re.sub(r"[{}^_ &]", "", s))


_OPEN, _CLOSE, _TEXT = "open", "close", "text"


def _tokens(e, tex, budget: int) -> list[tuple[str, str]]:
    r"""LaTeX of ``e`` as a token list with break points between the terms of sums: ``(_TEXT, s)`` pieces,
    and ``(_OPEN, "prefix \left(")`` / ``(_CLOSE, "\right)")`` around a parenthesised sum that had to be
    broken itself.  Pieces that cannot be broken (fractions, powers) are returned whole."""
    s = tex(e)
    if latex_width(s) <= budget:
        return [(_TEXT, s)]
    if isinstance(e, (sp.Add, sp.MatAdd)):                  # matrix forms: sums of matrix products
        out: list[tuple[str, str]] = []
        for i, t in enumerate(e.args):
            neg = t.could_extract_minus_sign()
            sub = _tokens(-t if neg else t, tex, budget)
            kind, text = sub[0]
            if text.startswith("-"):                        # e.g. a MatMul with a negative coefficient
                neg, text = not neg, text[1:].lstrip()
            sign = "- " if neg else ("+ " if i else "")
            out.append((kind, sign + text))
            out.extend(sub[1:])
        return out
    if _breakable_factor(e):                               # (sum)^p, e.g. 1/(sum): \left( ... \right)^{p}
        return _paren_tokens(e, tex, budget)
    if isinstance(e, sp.MatMul) and any(_mat_paren(a) for a in e.args):   # order kept: matrices do not commute
        out = []
        for a in e.args:
            if _mat_paren(a):
                base, sup = _mat_paren(a)
                inner = _tokens(base, tex, budget)
                out += ([(_TEXT, tex(a))] if len(inner) == 1 else
                        [(_OPEN, r"\left(")] + inner + [(_CLOSE, r"\right)" + sup)])
            else:
                out.append((_TEXT, tex(a)))
        merged: list = []
        for kind, text in out:            # adjacent plain pieces stay together
            if merged and kind == _TEXT and merged[-1][0] == _TEXT and \
                    latex_width(merged[-1][1]) + latex_width(text) <= budget:
                merged[-1] = (_TEXT, merged[-1][1] + " " + text)
            else:
                merged.append((kind, text))
        return merged
    if isinstance(e, sp.Mul):
        sums = [a for a in e.args if _breakable_factor(a)]
        if sums:
            rest = sp.Mul(*[a for a in e.args if not _breakable_factor(a)])
            out = [(_TEXT, "" if rest == 1 else "-" if rest == -1 else tex(rest))]
            # the first parenthesis is broken to fit after its coefficient on the same line
            first = max(budget - latex_width(out[0][1]) - 2, budget // 2)
            for k, f in enumerate(sums):            # every parenthesised sum is a place to break
                out += _paren_tokens(f, tex, first if k == 0 else budget)
            return _glue([t for t in out if t[1]], budget)
    return [(_TEXT, s)]


def _glue(tokens: list[tuple[str, str]], budget: int) -> list[tuple[str, str]]:
    """A product's coefficient joined to the first piece after it while they fit, so it stays on the line of
    the parenthesis it multiplies (``2 Σ₁₁ (...``, not ``2 Σ₁₁`` / ``(...)``)."""
    if (len(tokens) > 1 and tokens[0][0] == _TEXT and tokens[1][0] in (_TEXT, _OPEN)
            and latex_width(tokens[0][1]) + latex_width(tokens[1][1]) <= budget):
        return [(tokens[1][0], tokens[0][1] + " " + tokens[1][1])] + tokens[2:]
    return tokens


def _breakable_factor(e) -> bool:
    """A sum, or a sum to a rational power (``1/(a + b)``, ``sqrt(a + b)``): typeset as a parenthesis that
    may be broken, ``\\left( a + b \\right)^{-1}``, instead of an unbreakable fraction or root."""
    return isinstance(e, sp.Add) or (isinstance(e, sp.Pow) and isinstance(e.base, sp.Add)
                                     and e.exp.is_Rational and e.exp != 1)


def _mat_paren(a):
    """``(base, superscript)`` when the matrix factor ``a`` is a parenthesised sum (``(X + Y)``, ``(X + Y)^{-1}``,
    ``(X + Y)^{\top}``) that may be broken, else None."""
    if isinstance(a, sp.MatAdd):
        return a, ""
    if isinstance(a, sp.Inverse) and isinstance(a.arg, sp.MatAdd):
        return a.arg, "^{-1}"
    if isinstance(a, sp.Transpose) and isinstance(a.arg, sp.MatAdd):
        return a.arg, r"^{\top}"
    return None


def _paren_tokens(f, tex, budget: int) -> list[tuple[str, str]]:
    base, exp = (f.base, f.exp) if isinstance(f, sp.Pow) else (f, sp.S.One)
    sup = "" if exp == 1 else "^{" + sp.latex(exp) + "}"
    inner = _tokens(base, tex, budget)
    if len(inner) == 1 and exp == 1:
        return [(_TEXT, r"\left(" + inner[0][1] + r"\right)")]
    if len(inner) == 1:                             # small enough whole: keep SymPy's own form
        return [(_TEXT, tex(f))]
    return [(_OPEN, r"\left(")] + inner + [(_CLOSE, r"\right)" + sup)]


def _latex_row(label: str, e, tex, budget: int = LATEX_LINE_WIDTH) -> tuple[str, int]:
    r"""``label &= e`` for ``align*``, broken over several lines (``&\quad ...``) between the terms of sums
    when too wide; a parenthesis left open at a break is closed by ``\right.`` and reopened by ``\left.``."""
    s = tex(e)
    if latex_width(s) <= budget:
        return f"{label} &= {s}", latex_width(s)
    lines: list[str] = []
    cur, width, depth = "", 0, 0
    for kind, text in _tokens(e, tex, budget):
        w = latex_width(text)
        if width and width + w > budget:
            lines.append(cur + r" \right." * depth)
            cur, width = r"\left. " * depth, 0
        cur += (" " if cur else "") + text
        width += w
        depth += (kind == _OPEN) - (kind == _CLOSE)
    lines.append(cur)
    row = f"{label} &= {lines[0]}" + "".join(f" \\\\\n&\\quad {line}" for line in lines[1:])
    return row, max(latex_width(line) for line in lines)


# ------------------------------------------------------------------- sentences with formulas in them
# ------------------------------------------------------------------------- sentences with typeset math
#: A sentence may carry its mathematics between ``$...$`` written in LaTeX (``the tilt exists iff
#: $\Sigma^{-1} - R - R^{\top} \succ 0$``): LaTeX prints it as written (math mode: true minus, ``\mathcal N``
#: for the normal law, ``\Lambda`` for the precision), the terminal and JSON as Unicode by the fixed table
#: :data:`_TEX_TEXT` (:func:`tex_to_text`; a command missing from the table is left visible, and the
#: derivation tests fail on any backslash in text output).  Sentences without ``$`` keep the older rule
#: (:func:`words_tex` guesses the formula pieces).
_TEX_TEXT = [(r"\mathcal{N}", "N"), (r"\mathbb{R}", "ℝ"), (r"\mathbb{E}", "E"), (r"^{-1}", "⁻¹"),
             (r"^{\top}", "ᵀ"), (r"\top", "ᵀ"), (r"^{*}", "*"), (r"\langle ", "⟨"),
             (r"\langle", "⟨"), (r"\rangle", "⟩"), (r"\succeq", "⪰"), (r"\succ", "≻"), (r"\preceq", "⪯"),
             (r"\leq", "≤"), (r"\geq", "≥"), (r"\iff", "⇔"), (r"\implies", "⇒"), (r"\to", "→"),
             (r"\iint", "∬"), (r"\int", "∫"), (r"\sum", "Σ"), (r"\sim", "~"), (r"\propto", "∝"),
             (r"\otimes", "⊗"), (r"\ldots", "..."), (r"\prec", "≺"), (r"\|", "‖"), (r"\dot X", "Ẋ"),
             (r"\dot x", "ẋ"), (r"\Delta", "Δ"), (r"\delta", "δ"), (r"\nabla", "∇"), (r"\partial", "∂"), (r"\cdot", "·"), (r"\mid", "|"),
             (r"\varepsilon", "ε"), (r"\Sigma", "Σ"), (r"\Lambda", "Λ"), (r"\Gamma", "Γ"), (r"\alpha", "α"),
             (r"\beta", "β"), (r"\lambda", "λ"), (r"\kappa", "κ"), (r"\sigma", "σ"), (r"\tau", "τ"),
             (r"\mu", "μ"), (r"\pi", "π"), (r"\rho", "ρ"), (r"\theta", "θ"), (r"\phi", "φ"), (r"\ell", "ℓ"),
             (r"\det", "det"), (r"\dim", "dim "), (r"\ker", "ker "), (r"\log", "log"), (r"\exp", "exp"), (r"\max", "max"), (r"\min", "min"),
             (r"\operatorname{tr}", "tr"), (r"\quad", "  "), (r"\,", " "), (r"\ ", " "), (r"\{", "{"),
             (r"\}", "}"), (r"\left", ""), (r"\right", ""), (r"\big", ""), (r"\infty", "∞"), (r"\approx", "≈"), (r"\mathbf{1}", "1"), (r"\pm", "±"),
             (r"\dot r", "ṙ"), (r"\dot\rho", "ρ̇"), (r"\cos", "cos"), (r"\sin", "sin"), (r"\arccos", "arccos"),
             (r"\times", "×"), (r"\le", "≤"), (r"\ge", "≥"), (r"\neq", "≠"), (r"\in", "∈")]
_TEX_FRAC = re.compile(r"\\[td]?frac\{([^{}]*)\}\{([^{}]*)\}")


def tex_to_text(m: str) -> str:
    """The Unicode reading of an inline LaTeX formula of a sentence (:data:`_TEX_TEXT`)."""
    m = re.sub(r"\\operatorname\{([^{}]*)\}", r"\1 ", m)
    m = re.sub(r"\\left\(\\begin\{smallmatrix\}(.*?)\\end\{smallmatrix\}\\right\)",
               lambda g: "(" + "; ".join(r.replace(" & ", ", ").strip() for r in g.group(1).split(r"\\")) + ")", m)
    m = re.sub(r"\\(?:text|mathrm)\{([^{}]*)\}", r"\1", m)
    for a, b in _TEX_TEXT:
        m = re.sub(re.escape(a) + (r"(?![A-Za-z])" if a[-1].isalpha() else ""), lambda _: b, m)
    m = re.sub(r"\^(?:\{(\d+)\}|(\d))", lambda g: "".join("⁰¹²³⁴⁵⁶⁷⁸⁹"[int(c)] for c in g.group(1) or g.group(2)), m)
    m = re.sub(r"\^\{([^{}]*)\}", lambda g: "^" + (g.group(1) if len(g.group(1)) == 1 or g.group(1)[0] == "("
                                                    else f"({g.group(1)})"), m)
    while _TEX_FRAC.search(m):
        m = _TEX_FRAC.sub(lambda g: "/".join(g.groups()) if all(v.isdigit() for v in g.groups()) else
                          "(" + "/".join(v if re.fullmatch(r"[^\s+\-]+", v) else f"({v})" for v in g.groups())
                          + ")", m)
    m = re.sub(r"  +", " ", m)
    m = re.sub(r"_\{([^{}]*)\}", r"_\1", m)
    m = re.sub(r"_(\d)(?!\d)", lambda g: "₀₁₂₃₄₅₆₇₈₉"[int(g.group(1))], m)
    return m


def _marked(s: str, math, words) -> str:
    """``s`` split at its ``$`` marks: the formulas through ``math``, the words through ``words``."""
    parts = s.split("$")
    if len(parts) % 2 == 0:
        raise ValueError(f"unbalanced $ in a sentence: {s!r}")
    return "".join(math(p) if k % 2 else words(p) for k, p in enumerate(parts))


def readable(s: str) -> str:
    """SymPy ``str`` artefacts in a sentence as readable ASCII notation: ``Sigma**(-1) -> Sigma^-1``,
    ``A.T -> A^T``, ``x**2 -> x^2``, ``2*A -> 2 A`` (for JSON and as the input of :func:`words_tex` /
    :func:`words_text`); a sentence with ``$`` marks is kept as written (its words hold no code)."""
    if "$" in str(s):
        return str(s)
    s = re.sub(r"\*\*\((-?\d+)\)", r"^\1", str(s))
    s = re.sub(r"\*\*\(([^()]*)\)", r"^{\1}", s)
    s = s.replace("**", "^")
    s = re.sub(r"(?<=[\w)])\.T\b", "^T", s)
    return re.sub(r"\s*\*\s*", " ", s)


def words_text(s: str) -> str:
    """A sentence for the terminal in math notation: :func:`readable`, then Greek letters and ``⁻¹``/``ᵀ``
    (``$...$`` formulas by :func:`tex_to_text`)."""
    if "$" in s:
        return _marked(s, tex_to_text, words_text)
    s = readable(s)
    for a, b in _TEXT_SUBS:
        s = re.sub(r"\b" + re.escape(a) + r"(?![A-Za-z])" if a[0].isalpha() else re.escape(a), b, s)
    return s


_TEXT_SUBS = [("Sigma_0", "Σ₀"), ("Sigma", "Σ"), ("alpha", "α"), ("epsilon", "ε"), ("eps", "ε"), ("Gamma", "Γ"),
              ("lambda_max", "λ_max"), ("^-1", "⁻¹"), ("^T", "ᵀ"), ("tau", "τ"), ("delta", "δ")]


_GREEK_WORDS = {"Sigma": r"\Sigma", "Sigma_0": r"\Sigma_0", "alpha": r"\alpha", "epsilon": r"\varepsilon",
                "eps": r"\varepsilon", "Gamma": r"\Gamma", "tau": r"\tau", "lambda_max": r"\lambda_{\max}",
                "mu_t": r"\mu_t", "pi": r"\pi", "mu": r"\mu", "delta": r"\delta"}
_MATH = re.compile(r"(?P<pow>\b(?:Sigma_0|Sigma|epsilon|Gamma|tau|alpha|delta|[A-Za-z])\^(?:\{[^}]*\}|-?\w+))|(?P<word>\b(?:"
                   + "|".join(sorted(map(re.escape, _GREEK_WORDS), key=len, reverse=True)) + r")\b)|(?P<ge>>=)|(?P<le> ≤ )|(?P<tstar>\bT\*)|(?P<gmu>\bGamma_mu_t\b)|(?P<ptop>\)\^(?:T\b|-1\b|\{-1\}|\d\b))")


def _math_piece(m: re.Match) -> str:
    if m.group("ge"):
        return r"$\geq$"
    if m.group("ptop"):
        e = m.group("ptop")[2:].strip("{}")
        return r")$^{" + (r"\top" if e == "T" else e) + "}$"
    if m.group("le"):
        return r" $\leq$ "
    if m.group("tstar"):
        return r"$T^{*}$"
    if m.group("gmu"):
        return r"$\Gamma_{\mu_t}$"
    if m.group("word"):
        return "$" + _GREEK_WORDS[m.group("word")] + "$"
    base, exp = m.group("pow").split("^", 1)
    exp = exp.strip("{}")
    exp = r"\top" if exp == "T" else exp
    return "$" + _GREEK_WORDS.get(base, base) + "^{" + exp + "}$"


_WORD_FIX = [(re.compile(r"\bd(Sigma|alpha)\b"), r"d \1"), (re.compile(r"\bGamma_\{?mu(_t)?\}?"), "Gamma_mu_t"),
             (re.compile(r"<=|≤"), " ≤ ")]


def words_tex(s: str) -> str:
    """A sentence with inline formulas (``Sigma^-1``, ``A^T``, ``X^{1/2}``, Greek names, ``T*``) for LaTeX text
    mode: formula pieces become inline math, the rest is escaped (``$...$`` formulas as written)."""
    if "$" in s:     # the formulas as written; words between them by the rule below (composed sentences)
        return _marked(s, lambda m: "$" + m + "$", words_tex)
    for pat, rep in _WORD_FIX:
        s = pat.sub(rep, s)
    out, pos = [], 0
    esc = (lambda t: t.replace("\\", "").replace("&", "\\&").replace("%", "\\%").replace("#", "\\#")
           .replace("_", "\\_").replace("^", "\\^{}").replace("~", "\\textasciitilde{}")
           .replace("<", "$<$").replace(">", "$>$"))
    for m in _MATH.finditer(s):
        out.append(esc(s[pos:m.start()]))
        out.append(_math_piece(m))
        pos = m.end()
    out.append(esc(s[pos:]))
    return "".join(out)


def sentences(items, fmt: str) -> list[str]:
    """Assumption / conclusion sentences for ``fmt``: JSON readable ASCII (:func:`readable`, no ``**``), text
    math notation (``Σ⁻¹``, :func:`words_text`), LaTeX text mode with inline math (``$\\Sigma^{-1}$``,
    :func:`words_tex`); repeated sentences (heads repeat them) once."""
    items = list(dict.fromkeys(items))
    if fmt == "latex":
        return [words_tex(readable(a)) for a in items]
    return [words_text(a) if fmt == "text" else readable(a) for a in items]


def _comment(text: str) -> str:
    """``text`` as LaTeX comment lines (every line starts with ``%``)."""
    return "".join(f"\n% {line}" for line in str(text).splitlines() or [""])



def _state_label(system, i: int, latex: bool) -> str:
    if latex:
        return r"\frac{d" + latex_symbol_names(system)[system.states[i]] + "}{dt}"
    return f"d{system.states[i].name}/dt"


#: the conclusion printed with a derived moment ODE (``--standalone`` documents)
EXACT_CONCLUSION = ("The field Gamma(x) = b + J x is affine in x, so the flow map is affine and N(alpha, Sigma) "
                    "stays Gaussian: the moment ODE above is exact, not an approximation.")


def render_system(system, fmt: str = "text", cse: bool | None = None, standalone: bool = False) -> str:
    """Render an entrywise system as ``text``, ``latex`` or ``json`` (``standalone``: LaTeX as a complete
    document with the assumptions and conclusion as sentences, :func:`latex_document`)."""
    exprs = list(system.rhs)
    forced_no_cse = cse is False
    size = tree_size(exprs)
    if cse is None:
        cse = size > CSE_THRESHOLD * len(exprs)
    elif not cse and size > MAX_TREE:
        raise ValueError(f"the right-hand side has {size} nodes written out as trees; printing it without "
                         "common sub-expressions would be unreadable (use CSE)")
    if fmt == "json":
        return json.dumps(system_to_json(system, cse=cse), indent=1)
    temps: list[tuple[sp.Symbol, sp.Expr]] = []
    if cse:
        temps, exprs = _cse(exprs)
    assumptions = system.origin.get("assumptions", ())
    if fmt == "latex":                      # heads numbered 1, 2, ... as the superscripts A^{(1)}, A^{(2)}
        assumptions = [re.sub(r"\bhead (\d+)\b", lambda m: f"head {int(m.group(1)) + 1}", a) for a in assumptions]
    assumptions = sentences(assumptions, fmt)
    head = f"variant {system.origin.get('variant')}, d = {system.origin.get('d')}, entrywise form; "
    if fmt == "text":
        head += ("states alpha_i then Sigma_i_j (i <= j); code names, 0-based (alpha_0, Sigma_0_1, h0_A_0_1), as "
                 "generated code and parse_expr use them (--format latex: the paper's 1-based names)")
        lines = [f"# {head}"] + [f"# assumption: {a}" for a in assumptions]
        lines += [f"{t} = {sp.sstr(e)}" for t, e in temps]
        lines += [f"{_state_label(system, i, False)} = {sp.sstr(e)}" for i, e in enumerate(exprs)]
        return "\n".join(lines)
    if fmt == "latex":
        head += ("the paper's 1-based names (alpha_1, Sigma_12, A_12, several heads A^(1)_12; temporaries u_k); "
                 "--format text/json keep the 0-based code names (alpha_0, Sigma_0_1, h0_A_0_1)")
        names = latex_symbol_names(system)
        names.update({t: f"u_{{{t.name.split('_')[1]}}}" for t, _ in temps})
        memo: dict = {}

        def tex_memo(e) -> str:     # memoised: the row breaker asks again for the LaTeX of sub-expressions
            if e not in memo:
                memo[e] = tex(e, symbol_names=names)
            return memo[e]
        rows = [_latex_row(names[t], e, tex_memo) for t, e in temps]
        rows += [_latex_row(_state_label(system, i, True), e, tex_memo) for i, e in enumerate(exprs)]
        too_wide = [r for r, w in rows if w > LATEX_LINE_WIDTH]
        rows = [r for r, _ in rows]
        if too_wide and forced_no_cse:
            raise ValueError(f"{len(too_wide)} equation(s) have unbreakable parts wider than the page "
                             f"(> {LATEX_LINE_WIDTH} characters) and would not typeset legibly; "
                             "print with common sub-expressions (drop --no-cse) or use --format text")
        body = "\\begin{align*}\n" + " \\\\\n".join(rows) + "\n\\end{align*}"
        if standalone:
            return latex_document(body, assumptions, sentences([EXACT_CONCLUSION], "latex"),
                                  words_tex(f"{system.origin.get('variant')} attention, d = {system.origin.get('d')}: "
                                            "the Gaussian moment ODE, entrywise"))
        notes = "".join(_comment(f"assumption: {a}") for a in assumptions)
        return f"{_comment(head)}{notes}".lstrip("\n") + f"\n{body}"
    raise ValueError(f"unknown format {fmt!r}")


def system_to_json(system, cse: bool = False) -> dict[str, Any]:
    """JSON dict; with ``cse`` the expressions refer to ``definitions`` (``[[name, expr], ...]``, to be
    substituted in order); without, ``definitions`` is empty."""
    d = system.origin["d"]
    temps, exprs = _cse(list(system.rhs)) if cse else ([], list(system.rhs))
    rhs = [sp.sstr(e) for e in exprs]
    Sd = symmetric_rows(rhs[d:], d)
    return {"variant": system.origin.get("variant"), "d": d, "form": "entrywise", "alpha_dot": rhs[:d],
            "Sigma_dot": Sd, "assumptions": sentences(system.origin.get("assumptions", ()), "json"),
            "definitions": [[t.name, sp.sstr(e)] for t, e in temps],
            "states": [s.name for s in system.states], "params": [p.name for p in system.params],
            "expr_format": "sympy-str"}


def render_matrix_form(mf, fmt: str = "text", standalone: bool = False, note: str | None = None) -> str:
    """Render a :class:`~.moments.MatrixForm` (general ``d``; ``standalone`` as :func:`render_system`).
    ``note`` (LaTeX only; e.g. :func:`entrywise_unreadable`): a comment line above the fragment, and in a
    ``standalone`` document a sentence above the equations."""
    lb, lJ = field_letters({str(n) for h in mf.heads for n in h["symbols"]})
    extra: list[tuple[str, Any]] = [(lb, mf.b), (lJ, mf.J)]
    for h, head in enumerate(mf.heads):
        if head["Ct"] is not None:
            extra.append((f"C^T (head {h})" if len(mf.heads) > 1 else "C^T", head["Ct"]))
    assumptions = sentences([*mf.assumptions, "Sigma symmetric positive definite"], fmt)
    if fmt == "json":
        return json.dumps({"variant": mf.variant, "d": None, "form": "matrix",
                           "alpha_dot": [sp.sstr(mf.alpha_dot)], "Sigma_dot": [[sp.sstr(mf.Sigma_dot)]],
                           "field": {k: sp.sstr(v) for k, v in extra}, "assumptions": assumptions,
                           "expr_format": "sympy-str"}, indent=1)
    if fmt == "text":
        lines = [f"# variant {mf.variant}, general d, matrix form; Gamma(x) = {lb} + {lJ} x"]
        lines += [f"# assumption: {a}" for a in assumptions]
        lines += [f"{k} = {sp.sstr(v)}" for k, v in extra]
        lines += [f"dalpha/dt = {sp.sstr(mf.alpha_dot)}", f"dSigma/dt = {sp.sstr(mf.Sigma_dot)}"]
        return "\n".join(lines)
    if fmt == "latex":
        ren, assumptions = _head_superscripts(mf, [e for _, e in extra] + [mf.alpha_dot, mf.Sigma_dot])
        labels = [tex(sp.Symbol(lb)), tex(sp.Symbol(lJ))] + [f"\\left(C^{{({h + 1})}}\\right)^{{\\top}}" if len(mf.heads) > 1 else "C^{\\top}"
                               for h, head in enumerate(mf.heads) if head["Ct"] is not None]
        rows = [_latex_row(k, v.xreplace(ren), tex)[0] for k, (_, v) in zip(labels, extra)]
        rows += [_latex_row(r"\frac{d\alpha}{dt}", mf.alpha_dot.xreplace(ren), tex)[0],
                 _latex_row(r"\frac{d\Sigma}{dt}", mf.Sigma_dot.xreplace(ren), tex)[0]]
        body = "\\begin{align*}\n" + " \\\\\n".join(rows) + "\n\\end{align*}"
        if standalone:
            lead = "\\paragraph{Note.} " + words_tex(note).replace("--", "-{}-") + "\n" if note else ""
            conclusion = EXACT_CONCLUSION.replace("b + J x", f"{lb} + {lJ} x")
            return latex_document(lead + body, assumptions, sentences([conclusion], "latex"),
                                  words_tex(f"{mf.variant} attention: the Gaussian moment ODE, matrix form "
                                            f"(general d), Gamma(x) = {lb} + {lJ} x"))
        notes = "".join(_comment(f"assumption: {a}") for a in assumptions)
        top = (_comment(note).lstrip("\n") + "\n") if note else ""
        return top + f"% variant {mf.variant}, general d, matrix form{notes}\n" + body
    raise ValueError(f"unknown format {fmt!r}")


def _head_superscripts(mf, exprs) -> tuple[dict, list[str]]:
    """LaTeX of a several-head matrix form in the entrywise form's notation (:func:`paper_name`): the code's
    head-indexed symbols ``V_0, tau_0`` become ``V^{(1)}, \\tau^{(1)}`` (returned as an ``xreplace`` map), and
    an assumption about one head ``h`` reads ``head h+1: ... (2/tau) K^T K ...``.  One head: nothing renamed."""
    raw = [*mf.assumptions, "Sigma symmetric positive definite"]
    if len(mf.heads) < 2:
        return {}, sentences(raw, "latex")
    ren: dict = {}
    for e in exprs:
        for a in e.atoms(sp.Symbol, sp.MatrixSymbol):
            m = re.fullmatch(r"([A-Za-z]+)_(\d+)", a.name)
            if m:
                name = f"{m.group(1)}^({int(m.group(2)) + 1})"
                ren[a] = (sp.MatrixSymbol(name, *a.shape) if isinstance(a, sp.MatrixSymbol)
                          else sp.Symbol(name, **a.assumptions0))
    pattern = re.compile(r"\b(" + "|".join(sorted({re.escape(str(a.name).rsplit("_", 1)[0]) for a in ren})
                                            or ["(?!)"]) + r")_(\d+)\b")
    out = []
    for a in raw:
        heads = {m.group(2) for m in pattern.finditer(a)}
        out.append(f"head {int(heads.pop()) + 1}: " + pattern.sub(r"\1", a) if len(heads) == 1 else a)
    return ren, sentences(out, "latex")


def render_witness(w, fmt: str = "text", standalone: bool = False) -> str:
    """A non-preservation witness (:class:`~.witness.Witness`) as ``text`` (:meth:`~.witness.Witness.summary`
    in math notation), ``json`` or ``latex`` (``standalone``: a document with the description and the
    conclusion as sentences)."""
    if fmt == "json":
        return json.dumps(w.to_dict(), indent=1)
    if fmt == "text":
        return w.summary("text")
    if fmt == "latex":
        # the point's values are numbers set by the witness code (int / Rational), never user strings
        point = ", ".join(f"{tex(sp.Symbol(k))} = {tex(sp.S(v))}" for k, v in w.point.items())
        rows = [_latex_row(r"\Gamma(x)", w.field_expr, tex)[0]]
        q_row, q_width = _latex_row(w.label(), w.quantity, tex)
        if len(sp.sstr(w.quantity)) < 400 and q_width <= LATEX_LINE_WIDTH:   # else: the value only
            rows.append(q_row)
            rows.append(f"&= {w.value:.15g} \\quad \\text{{at }} " + point)
        else:
            rows.append(w.label() + " &= " + f"{w.value:.15g}"
                        + r" \quad \text{at } " + point)
        body = "\\begin{align*}\n" + " \\\\\n".join(rows) + "\n\\end{align*}"
        if standalone:
            concl = [words_tex(c) for c in w.sentences()]   # the lemmas travel with the witness
            return latex_document(body, [words_tex(w.description)], concl,
                                  words_tex(f"{w.variant}: a $d = 1$ witness of non-preservation"), "Setting")
        return (f"% {w.variant}: not Gaussian-preserving (d = 1 witness){_comment(words_text(w.description))}\n"
                + body)
    raise ValueError(f"unknown format {fmt!r}")


def latex_document(fragment: str, assumptions=(), conclusions=(), title: str | None = None,
                   assumptions_name: str = "Assumptions") -> str:
    """A complete ``amsmath`` document around a fragment: A4 portrait, 11pt, 2 cm margins; the rows are
    already broken to :data:`LATEX_LINE_WIDTH` and ``\\allowdisplaybreaks`` lets long ``align*`` blocks
    break across pages (``breqn`` is avoided: only ``amsmath``/``amssymb`` are used).  ``title``,
    ``assumptions`` and ``conclusions`` (LaTeX text-mode sentences, :func:`sentences`) are set in the document
    as a heading and two sentence lists around the fragment."""
    def listed(name, items):
        return ("\\paragraph{" + name + ".}\n\\begin{itemize}\n" + "".join(f"\\item {a}\n" for a in items)
                + "\\end{itemize}\n") if items else ""
    top = ("\\section*{" + title + "}\n" if title else "") + listed(assumptions_name, assumptions)
    return ("\\documentclass[11pt,a4paper]{article}\n\\usepackage{amsmath,amssymb}\n\\usepackage[margin=2cm]"
            "{geometry}\n\\allowdisplaybreaks\n\\begin{document}\n" + top + fragment + "\n"
            + listed("Conclusions", conclusions) + "\\end{document}\n")


def check_latex_structure(text: str) -> list[str]:
    """Structural problems of a LaTeX string: unbalanced braces, unmatched ``\\begin``/``\\end``, an
    ``align`` row (between ``\\\\``) whose ``\\left``/``\\right`` do not pair up."""
    problems = []
    depth = 0
    stripped = re.sub(r"\\[{}]", "", "\n".join(line.split("%")[0] if not line.lstrip().startswith("%") else ""
                                              for line in text.splitlines()))
    for ch in stripped:
        depth += ch == "{"
        depth -= ch == "}"
        if depth < 0:
            problems.append("closing brace without opening brace")
            depth = 0
    if depth:
        problems.append(f"{depth} unclosed brace(s)")
    stack: list[str] = []
    for kind, env in re.findall(r"\\(begin|end)\{([^}]*)\}", stripped):
        if kind == "begin":
            stack.append(env)
        elif not stack or stack.pop() != env:
            problems.append(f"\\end{{{env}}} does not match")
    if stack:
        problems.append(f"unclosed environments {stack}")
    for k, row in enumerate(re.split(r"\\\\", stripped)):     # TeX needs \left/\right paired within each row
        if len(re.findall(r"\\left(?![a-zA-Z])", row)) != len(re.findall(r"\\right(?![a-zA-Z])", row)):
            problems.append(f"row {k}: unpaired \\left/\\right")
    return problems
