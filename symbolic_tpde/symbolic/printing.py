"""Text, LaTeX and JSON renderings of derived moment ODEs and of non-preservation witnesses.

* Entrywise systems (:class:`~.system.OdeSystem`): one equation per state.  Large systems are printed with
  common sub-expressions named first (``sympy.cse``; the temporaries ``x_0, x_1, ...`` are listed before the
  equations), small ones inline.  LaTeX names: ``alpha_i -> \\alpha_{i}``, ``Sigma_i_j -> \\Sigma_{i,j}``,
  head parameters ``h0_A_i_j -> A^{(0)}_{i,j}`` (the head index only when there are several heads),
  ``ffn_W_i_j -> W_{i,j}``, ``tau -> \\tau``, ``epsilon -> \\varepsilon``.
* Matrix forms (:class:`~.moments.MatrixForm`): ``dα/dt`` and ``dΣ/dt`` as matrix expressions.
* JSON: ``{"variant", "d", "form", "alpha_dot": [...], "Sigma_dot": [[...]], "assumptions": [...],
  "expr_format": "sympy-str"}``.  Expressions are SymPy ``str`` output (``sympy.sstr``), readable back with
  ``sympy.parse_expr`` given the symbol names.  Entrywise: ``Sigma_dot`` is the full symmetric ``d×d`` array;
  large systems come with ``"definitions": [[name, expr], ...]`` (common sub-expressions ``x_k``, to be
  substituted in order), small ones with ``"definitions": []``.
  Matrix form: ``d`` is ``null`` and ``alpha_dot = [expr]``, ``Sigma_dot = [[expr]]`` hold the single matrix
  expression each.

LaTeX output is a fragment (``align*``, needs ``amsmath``); :func:`latex_document` wraps it into a complete
document.
"""

from __future__ import annotations

import json
import re
from typing import Any

import sympy as sp

from .system import OdeSystem

_GREEK = {"tau": r"\tau", "epsilon": r"\varepsilon", "alpha": r"\alpha", "Sigma": r"\Sigma"}


def latex_symbol_names(system: OdeSystem) -> dict[sp.Symbol, str]:
    """LaTeX names for every state and parameter symbol of ``system``."""
    structure = system.origin.get("structure")
    many = structure is None or len(structure[1]) > 1   # head superscripts unless there is a single head
    out: dict[sp.Symbol, str] = {}
    for s in (*system.states, *system.params):
        parts = s.name.split("_")
        head = ""
        if re.fullmatch(r"h\d+", parts[0]):
            head = f"^{{({parts[0][1:]})}}" if many else ""
            parts = parts[1:]
        elif parts[0] == "ffn":
            parts = parts[1:]
        base = _GREEK.get(parts[0], parts[0])
        idx = ",".join(parts[1:])
        out[s] = base + head + (f"_{{{idx}}}" if idx else "")
    return out


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


def _cse(exprs: list, prefix: str = "x_") -> tuple[list, list]:
    # order="none": SymPy's canonical ordering sorts with keys that walk the expression *tree* (minutes at
    # d >= 3 for ℓ2); without it CSE takes ~0.3 s at d = 4
    return sp.cse(exprs, symbols=sp.numbered_symbols(prefix), order="none")


def _state_label(system: OdeSystem, i: int, latex: bool) -> str:
    if latex:
        return r"\frac{d" + latex_symbol_names(system)[system.states[i]] + "}{dt}"
    return f"d{system.states[i].name}/dt"


def render_system(system: OdeSystem, fmt: str = "text", cse: bool | None = None) -> str:
    """Render an entrywise system as ``text``, ``latex`` or ``json``."""
    exprs = list(system.rhs)
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
    assumptions = list(system.origin.get("assumptions", ()))
    head = (f"variant {system.origin.get('variant')}, d = {system.origin.get('d')}, entrywise form; "
            "states alpha_i then Sigma_i_j (i <= j)")
    if fmt == "text":
        lines = [f"# {head}"] + [f"# assumption: {a}" for a in assumptions]
        lines += [f"{t} = {sp.sstr(e)}" for t, e in temps]
        lines += [f"{_state_label(system, i, False)} = {sp.sstr(e)}" for i, e in enumerate(exprs)]
        return "\n".join(lines)
    if fmt == "latex":
        names = latex_symbol_names(system)
        names.update({t: f"x_{{{t.name.split('_')[1]}}}" for t, _ in temps})
        tex = lambda e: sp.latex(e, symbol_names=names)  # noqa: E731
        rows = [f"{names[t]} &= {tex(e)}" for t, e in temps]
        rows += [f"{_state_label(system, i, True)} &= {tex(e)}" for i, e in enumerate(exprs)]
        body = "\\begin{align*}\n" + " \\\\\n".join(rows) + "\n\\end{align*}"
        notes = "".join(f"\n% assumption: {a}" for a in assumptions)
        return f"% {head}{notes}\n{body}"
    raise ValueError(f"unknown format {fmt!r}")


def system_to_json(system: OdeSystem, cse: bool = False) -> dict[str, Any]:
    """JSON dict; with ``cse`` the expressions refer to ``definitions`` (``[[name, expr], ...]``, to be
    substituted in order); without, ``definitions`` is empty."""
    d = system.origin["d"]
    temps, exprs = _cse(list(system.rhs)) if cse else ([], list(system.rhs))
    rhs = [sp.sstr(e) for e in exprs]
    Sd = [[""] * d for _ in range(d)]
    k = d
    for i in range(d):
        for j in range(i, d):
            Sd[i][j] = Sd[j][i] = rhs[k]
            k += 1
    return {"variant": system.origin.get("variant"), "d": d, "form": "entrywise", "alpha_dot": rhs[:d],
            "Sigma_dot": Sd, "assumptions": list(system.origin.get("assumptions", ())),
            "definitions": [[t.name, sp.sstr(e)] for t, e in temps],
            "states": [s.name for s in system.states], "params": [p.name for p in system.params],
            "expr_format": "sympy-str"}


def render_matrix_form(mf, fmt: str = "text") -> str:
    """Render a :class:`~.moments.MatrixForm` (general ``d``)."""
    extra: list[tuple[str, Any]] = [("b", mf.b), ("J", mf.J)]
    for h, head in enumerate(mf.heads):
        if head["Ct"] is not None:
            extra.append((f"C^T (head {h})" if len(mf.heads) > 1 else "C^T", head["Ct"]))
    assumptions = list(mf.assumptions) + ["Sigma symmetric positive definite"]
    if fmt == "json":
        return json.dumps({"variant": mf.variant, "d": None, "form": "matrix",
                           "alpha_dot": [sp.sstr(mf.alpha_dot)], "Sigma_dot": [[sp.sstr(mf.Sigma_dot)]],
                           "field": {k: sp.sstr(v) for k, v in extra}, "assumptions": assumptions,
                           "expr_format": "sympy-str"}, indent=1)
    if fmt == "text":
        lines = [f"# variant {mf.variant}, general d, matrix form; Gamma(x) = b + J x"]
        lines += [f"# assumption: {a}" for a in assumptions]
        lines += [f"{k} = {sp.sstr(v)}" for k, v in extra]
        lines += [f"dalpha/dt = {sp.sstr(mf.alpha_dot)}", f"dSigma/dt = {sp.sstr(mf.Sigma_dot)}"]
        return "\n".join(lines)
    if fmt == "latex":
        top = "C^{\\top}"
        rows = [k.replace("C^T", top).replace("(head ", "_{").replace(")", "}") + " &= " + sp.latex(v)
                for k, v in extra]
        rows += [r"\frac{d\alpha}{dt} &= " + sp.latex(mf.alpha_dot),
                 r"\frac{d\Sigma}{dt} &= " + sp.latex(mf.Sigma_dot)]
        notes = "".join(f"\n% assumption: {a}" for a in assumptions)
        return (f"% variant {mf.variant}, general d, matrix form{notes}\n\\begin{{align*}}\n"
                + " \\\\\n".join(rows) + "\n\\end{align*}")
    raise ValueError(f"unknown format {fmt!r}")


def render_witness(w, fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps(w.to_dict(), indent=1)
    if fmt == "text":
        return w.summary()
    if fmt == "latex":
        q = w.quantity if len(sp.sstr(w.quantity)) < 400 else sp.Derivative(w.field_expr, sp.Symbol("x", real=True), 2)
        return (f"% {w.variant}: not Gaussian-preserving (d = 1 witness)\n"
                f"% {w.description}\n"
                "\\begin{align*}\n\\Gamma(x) &= " + sp.latex(w.field_expr) + " \\\\\n"
                "\\frac{\\partial^2 \\Gamma}{\\partial x^2} &= " + sp.latex(q) + " \\\\\n"
                f"&= {w.value:.15g} \\quad \\text{{at }} " + ", ".join(f"{k} = {v}" for k, v in w.point.items())
                .replace("_", r"\_") + "\n\\end{align*}")
    raise ValueError(f"unknown format {fmt!r}")


def latex_document(fragment: str) -> str:
    """A complete ``amsmath`` document around a fragment (long equations broken by ``breqn`` are avoided:
    only ``amsmath``/``amssymb`` are used)."""
    return ("\\documentclass{article}\n\\usepackage{amsmath,amssymb}\n\\usepackage[margin=1cm,a3paper,landscape]"
            "{geometry}\n\\allowdisplaybreaks\n\\begin{document}\n" + fragment + "\n\\end{document}\n")


def check_latex_structure(text: str) -> list[str]:
    """Structural problems of a LaTeX string: unbalanced braces, unmatched ``\\begin``/``\\end``."""
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
    return problems
