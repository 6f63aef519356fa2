"""Text, JSON and LaTeX (fragment, A4 article, Beamer) renderings of a :class:`~.steps.Derivation`
(README, "`tpde derive` in more detail"; Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322, §3).

One notation throughout: transposes ``^\\top``, ``\\varepsilon``, ``\\Sigma``, matrices upright capitals as SymPy
prints ``MatrixSymbol``s.  Every step is printed with its check: "checked: <method>" or, in bold, "NOT
checked: <reason>"; nothing is printed as checked that was not.  Assumptions and conclusions are sentences
in the document body, not comments.
"""

from __future__ import annotations

import json
import re

import sympy as sp

from .printing import readable, words_tex, words_text
from .equation import RELATIONS, json_side, refuse_chained, tex, text

__all__ = ["render", "to_text", "to_json", "to_latex", "standalone", "beamer", "tex", "text", "readable"]


_UNI_TEX = {"∫": r"$\int$", "μ": r"$\mu$", "π": r"$\pi$", "σ": r"$\sigma$", "²": r"$^2$", "τ": r"$\tau$",
            "≤": r"$\leq$", "ᵀ": r"$^{\top}$", "'": "'"}


def _model_tex(m: str) -> str:
    """A model sentence (the registry's field formulas carry Unicode) for pdflatex."""
    out = words_tex(m)
    for u, t in _UNI_TEX.items():
        out = out.replace(u, t)
    return out


def _where_text(eq) -> str:
    return ("where " + ", ".join(f"{text(k)} := {text(v)}" for k, v in eq.where)) if eq.where else ""


def _free_text(eq) -> str:
    return f" + (terms free of {', '.join(eq.free_of)})" if eq.free_of else ""


def eq_text(eq) -> str:
    """The equation in one line, exactly the object: ``lhs rel rhs [+ (terms free of y)]``."""
    rel = RELATIONS[eq.rel][0]
    if eq.rhs is None:
        return f"{text(eq.lhs)} {rel}"
    return f"{text(eq.lhs)}  {rel}  {text(eq.rhs)}{_free_text(eq)}"


def _scope(s) -> str:
    return f" [{s.scope}]" if s.checked and s.scope else ""


def _plain(s: str) -> str:
    """A sentence for JSON: its ``$...$`` formulas read as Unicode (:func:`.printing.words_text`)."""
    return words_text(s) if "$" in s else s


def to_json(dv) -> dict:
    refuse_chained(dv)
    return {"title": _plain(dv.title), "model": [_plain(m) for m in dv.model],
            "assumptions": [_plain(a) for a in dv.assumptions], "conclusions": [_plain(c) for c in dv.conclusions],
            "all_checked": dv.all_checked, "summary": _plain(dv.summary()), "expr_format": "sympy-str",
            "notes": [_plain(n) for n in dv.notes], "data": {str(n): json_side(v) for n, v in dv.data},
            "steps": [_step_json(s) for s in dv.steps], "exercises": [_step_json(s) for s in dv.exercises]}


def _step_json(s) -> dict:
    return {"title": _plain(s.title), "lhs": json_side(s.eq.lhs), "relation": s.eq.rel,
            "rhs": json_side(s.eq.rhs) if s.eq.rhs is not None else None,
            "qualifier": (f"+ (terms free of {', '.join(s.eq.free_of)})" if s.eq.free_of else ""),
            "where": [[json_side(k), json_side(v)] for k, v in s.eq.where],
            "checked": s.checked, "scope": s.scope, "method": _plain(s.method), "note": _plain(s.note)}


def to_text(dv) -> str:
    refuse_chained(dv)
    lines = [words_text(dv.title), "", words_text(dv.summary()), ""]
    if dv.model:
        lines += ["The model:"] + [f"  {words_text(m)}" for m in dv.model] + [""]
    if dv.data:
        lines += ["The data:"] + [f"  {text(sp.Symbol(n) if isinstance(n, str) else n)} = {text(v)}"
                                  for n, v in dv.data] + [""]
    lines += ["Assumptions:"] + [f"  - {words_text(a)}" for a in dv.assumptions] + [""]
    lines += _steps_text(dv.steps, "Step")
    if dv.boxed:
        lines += ["", "Result:"] + [f"  {text(b[0])} = {text(b[1])}" + (f"  ({b[2]})" if len(b) > 2 else "")
                                    for b in dv.boxed]
    lines += (["", "Conclusions:"] + [f"  - {words_text(c)}" for c in dv.conclusions]) if dv.conclusions else []
    lines += (["", "Exercises (the hint, then the solution):"] + _steps_text(dv.exercises, "Exercise")
              if dv.exercises else [])
    lines += ([""] + [f"Note: {words_text(n)}" for n in dv.notes]) if dv.notes else []
    return "\n".join(lines)


def _steps_text(steps, word: str) -> list:
    lines = []
    for k, s in enumerate(steps, 1):
        lines.append(f"{word} {k}. {words_text(s.title)}")
        lines.append(f"    {eq_text(s.eq)}")
        if s.eq.where:
            lines.append(f"    {_where_text(s.eq)}")
        if s.note:
            lines.append(f"    ({words_text(s.note)})")
        lines.append((f"    checked{_scope(s)}: " if s.checked else "    NOT CHECKED: ") + words_text(s.method))
    return lines


#: an equation whose two sides typeset wider than this many glyphs (:func:`.printing.latex_width`) is set
#: on two lines (``multline*``); the A4 text width holds ~80 glyphs at 11pt, minus the list indent
EQ_ONE_LINE = 66


def _rhs_tex(eq) -> str:
    """The right side with the relation's qualifier (``+ (terms free of y)``)."""
    if eq.rhs is None:
        return ""
    return tex(eq.rhs) + (r" + \text{(terms free of }" + ", ".join(eq.free_of) + r"\text{)}" if eq.free_of else "")


def _where_tex(eq) -> str:
    """The named blocks of the equation, as a sentence under it (what the check substituted): short ones inline
    (an explicit matrix at display size), an integral or a definition wider than the line displayed on its own,
    broken between terms (:func:`.printing._latex_row`)."""
    from .printing import _latex_row, latex_width

    if not eq.where:
        return ""
    inline, shown = [], []
    for k, v in eq.where:
        body = tex(v)
        if (isinstance(v, sp.Basic) and v.has(sp.Integral)) or latex_width(tex(k) + body) > EQ_ONE_LINE - 10:
            row = (_latex_row(tex(k), v, tex, budget=ENTRY_ROW_WIDTH)[0] if isinstance(v, sp.Basic)
                   and not isinstance(v, sp.MatrixBase) else tex(k) + " &= " + body)
            shown.append("\\begin{align*}\n" + row.replace("&=", "&:=", 1) + "\n\\end{align*}")
        else:
            style = r"\displaystyle " if isinstance(v, sp.MatrixBase) else ""
            inline.append(f"${style}{tex(k)} := {body}$")
    head = ("where " + ", ".join(inline) + (", and" if shown else ".\\\\")) if inline else "where"
    return head + "\n" + "\n".join(shown) + "\n"


def _eq(s) -> str:
    from .printing import latex_width

    eq = s.eq
    rel = RELATIONS[eq.rel][1]
    lhs, rhs = tex(eq.lhs), _rhs_tex(eq)
    if eq.rhs is None:
        return "\\[\n" + lhs + " " + rel + "\n\\]"
    if rel != "=":
        return "\\[\n" + lhs + " " + rel + " " + rhs + "\n\\]"
    if isinstance(eq.rhs, sp.MatrixBase) and latex_width(rhs) > 2 * EQ_ONE_LINE:
        return _entry_rows(lhs, eq.rhs)
    if latex_width(lhs) + latex_width(rhs) > EQ_ONE_LINE:
        return _broken_eq(eq, lhs, rhs)
    return "\\[\n" + lhs + " = " + rhs + "\n\\]"


def _broken_eq(eq, lhs: str, rhs: str) -> str:
    """A wide equation over several ``align*`` lines: each side broken between the terms of its sums (also
    inside parenthesised sums of matrices, :func:`.printing._latex_row`), the qualifier on a line of its own."""
    from .printing import _latex_row, latex_width

    if latex_width(lhs) <= EQ_ONE_LINE:
        left = "& " + lhs
    else:
        left = _latex_row("", eq.lhs, tex, budget=ENTRY_ROW_WIDTH)[0].replace(" &= ", "& ", 1)
    right = (_latex_row("", eq.rhs, tex, budget=ENTRY_ROW_WIDTH)[0] if isinstance(eq.rhs, sp.Basic)
             else " &= " + rhs)
    qual = (" \\\\\n&\\quad + \\text{(terms free of }" + ", ".join(eq.free_of) + "\\text{)}") if eq.free_of else ""
    return "\\begin{align*}\n" + left + " \\\\\n" + right + qual + "\n\\end{align*}"


def _entry_rows(lhs: str, M, budget: int | None = None) -> str:
    """A matrix too wide for the page, one entry per ``align*`` row (``(lhs)_{ij} = ...``, 1-based; the upper
    triangle of a symmetric matrix), long entries broken between terms by :func:`.printing._latex_row`."""
    from .printing import _latex_row

    sym = M.rows == M.cols and all(M[i, j] == M[j, i] for i in range(M.rows) for j in range(i))
    rows = []
    for i in range(M.rows):
        for j in range(i if sym else 0, M.cols):
            idx = f"{i + 1}" if M.cols == 1 else f"{i + 1}{j + 1}" if max(M.shape) < 10 else f"{i + 1},{j + 1}"
            rows.append(_latex_row(rf"\left({lhs}\right)_{{{idx}}}", M[i, j], tex,
                                   budget=ENTRY_ROW_WIDTH if budget is None else budget)[0])
    return "\\begin{align*}\n" + " \\\\\n".join(rows) + "\n\\end{align*}"


#: glyphs per row of an entry (the list indent and the label ``(dΣ/dt)_{12} =`` take the rest of the A4 line)
ENTRY_ROW_WIDTH = 56


def _sentence(note: str) -> str:
    """A note as a sentence: capitalised unless it starts with a formula (``c(x) = ...``, ``log N(...)``)."""
    first = note.split(" ", 1)[0]
    if "(" in first or "_" in first or first in ("log", "exp", "alpha", "Sigma") or len(first) == 1:
        return note
    return note[:1].upper() + note[1:]


def _scope_tex(scope: str) -> str:
    """``every d`` / ``d = 2, 3`` / ``n = 2, d = 2`` with its formulas in math."""
    return re.sub(r"\b([a-z] = [\d, ]*\d)|\bd\b", lambda m: f"${m.group(0)}$", scope)


def _check_line(s) -> str:
    scope = f" ({_scope_tex(s.scope)})" if s.scope else ""
    return ("{\\small\\emph{Checked by SymPy" + scope + ":} " + words_tex(s.method) + ".}" if s.checked else
            "{\\small\\textbf{NOT checked:} " + words_tex(s.method) + ".}")


def _boxed_tex(dv) -> list:
    """The result (the right sides of the derivation's final moment equations), boxed when it fits the line,
    else broken between terms."""
    from .printing import _latex_row, latex_width

    if not dv.boxed:
        return []
    out = ["\\paragraph{Result.} Derived and checked in the steps above:"]
    for lhs, rhs, *cond in dv.boxed:
        if cond:
            out.append(words_tex(cond[0][:1].upper() + cond[0][1:]) + ":")
        body = tex(lhs) + " = " + tex(rhs)
        if latex_width(body) <= EQ_ONE_LINE - 4:
            out.append("\\[\n\\boxed{" + body + "}\n\\]")
        else:
            out.append("\\begin{align*}\n" + _latex_row(tex(lhs), rhs, tex, budget=ENTRY_ROW_WIDTH)[0] + "\n\\end{align*}")
    return out


def _data_tex(dv) -> list:
    """The data as displayed matrices (``pmatrix``, two per line), then the figure if any."""
    if not dv.data:
        return []
    items = [(sp.latex(sp.Symbol(n)) if isinstance(n, str) else tex(n)) + " = "
             + sp.latex(v, mat_str="pmatrix", mat_delim="") for n, v in dv.data]
    rows = [r", \qquad ".join(items[k:k + 2]) for k in range(0, len(items), 2)]
    out = ["\\paragraph{The data.}", "\\begin{gather*}\n" + " \\\\\n".join(rows) + "\n\\end{gather*}"]
    if dv.figure:
        out += ["\\begin{center}\n\\includegraphics[width=\\linewidth]{" + dv.figure + "}\n\\end{center}"]
    return out


def _steps_tex(steps, hint: str = "") -> list:
    """Numbered steps (or exercises: the problem, the hint, the solution): title, equation, note, check."""
    out = ["\\begin{enumerate}"]
    for s in steps:
        out.append(f"\\item \\textbf{{{words_tex(s.title)}.}}")
        if hint and s.note:
            out.append(hint + words_tex(s.note) + ". Solution:")
        out.append(_eq(s))
        out.append(_where_tex(s.eq))
        if s.note and not hint:
            out.append(words_tex(_sentence(s.note)) + ".\\\\")
        out.append(_check_line(s))
    return out + ["\\end{enumerate}"]


def _listed(name: str, items) -> list:
    """A titled list of sentences, nothing when there are none (an empty ``itemize`` does not compile)."""
    if not items:
        return []
    return [f"\\paragraph{{{name}.}}", "\\begin{itemize}"] + [f"\\item {words_tex(a)}" for a in items] + ["\\end{itemize}"]


def to_latex(dv) -> str:
    """A LaTeX fragment: assumptions, numbered steps (each: title, equation, note, check), conclusions."""
    refuse_chained(dv)
    out = ["\\paragraph{The model.}", " ".join(_model_tex(m) for m in dv.model)] if dv.model else []
    out += _data_tex(dv)
    out += _listed("Assumptions", dv.assumptions) + ["\\paragraph{Derivation.}"] + _steps_tex(dv.steps)
    out += _boxed_tex(dv) + _listed("Conclusions", dv.conclusions)
    out += (["\\paragraph{Exercises.} Each with a hint, then the solution SymPy derived and how it was checked."]
            + _steps_tex(dv.exercises, "Hint: ") if dv.exercises else [])
    out += [f"\\paragraph{{Note.}} {words_tex(n)}" for n in dv.notes]
    return "\n".join(out)


_PREAMBLE = ("\\input{glyphtounicode}\n\\pdfgentounicode=1\n\\usepackage{amsmath,amssymb,graphicx}\n"
             "\\emergencystretch=1.5em\n")


def standalone(dv) -> str:
    """An A4 portrait article (compiles with pdflatex)."""
    return ("\\documentclass[11pt,a4paper]{article}\n" + _PREAMBLE + "\\usepackage[margin=2.2cm]{geometry}\n"
            "\\allowdisplaybreaks\n\\begin{document}\n\\section*{" + words_tex(dv.title) + "}\n"
            "Castin, Ablin, Carrillo, Peyr\\'e, arXiv 2501.18322. " + words_tex(dv.summary()) + "\n" + to_latex(dv) + "\n\\end{document}\n")


#: Beamer (16:9, 11pt) glyph budgets: one equation line, and one entry row of a wide matrix (the A4 budgets
#: scaled by the text widths, ~14 cm against ~16.6 cm, rounded down)
BEAMER_LINE = 52
BEAMER_ENTRY_ROW = 44
#: shrink a box to the line width only when it is wider (``graphicx``, loaded by Beamer)
_FIT = ("\\newcommand{\\tpdefit}[1]{\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}"
        "{$\\displaystyle #1$}}\n")


def _eq_beamer(s) -> str:
    """An equation on a slide: a wide matrix one entry per ``align*`` row (breakable across the frame's
    pages); otherwise the left side, then ``=`` and the right side broken between the terms of sums
    (:func:`.printing._latex_row`), as one ``aligned`` block shrunk to the line width if still wider."""
    from .printing import _latex_row, latex_width

    eq = s.eq
    lhs, rhs = tex(eq.lhs), _rhs_tex(eq)
    rel = RELATIONS[eq.rel][1]
    if isinstance(eq.rhs, sp.MatrixBase) and latex_width(rhs) > 2 * BEAMER_LINE:
        return _entry_rows(lhs, eq.rhs, BEAMER_ENTRY_ROW)
    if latex_width(lhs) + latex_width(rhs) <= BEAMER_LINE or rel != "=":
        return "\\[\n\\tpdefit{" + lhs + " " + rel + " " + rhs + "}\n\\]"
    if isinstance(eq.rhs, sp.Basic) and not isinstance(eq.rhs, sp.MatrixBase) and not eq.free_of:
        body = _latex_row("", eq.rhs, tex, budget=BEAMER_LINE)[0]
    else:
        body = "&= " + rhs
    return "\\[\n\\tpdefit{\\begin{aligned}\n&" + lhs + " \\\\\n" + body + "\n\\end{aligned}}\n\\]"


def beamer(dv) -> str:
    """Beamer slides: assumptions, one frame per step (``allowframebreaks``: a long step continues on the next
    slide), conclusions; no equation wider than the slide (:func:`_eq_beamer`)."""
    refuse_chained(dv)
    fr = ["\\begin{frame}[allowframebreaks]{The model, and what was checked}\n"
          + " ".join(_model_tex(m) for m in dv.model) + "\n\n" + words_tex(dv.summary()) + "\n\\end{frame}"]
    fr += ["\\begin{frame}[allowframebreaks]{The data}\n" + "\n".join(_data_tex(dv)[1:]).replace(
        "width=\\linewidth", "height=0.6\\textheight") + "\n\\end{frame}"] if dv.data else []
    fr += ["\\begin{frame}[allowframebreaks]{Assumptions}\n\\begin{itemize}\n"
          + "\n".join(f"\\item {words_tex(a)}" for a in dv.assumptions) + "\n\\end{itemize}\n\\end{frame}"]
    for k, s in enumerate(dv.steps, 1):
        fr.append(f"\\begin{{frame}}[allowframebreaks]{{Step {k}}}\n\\textbf{{{words_tex(s.title)}}}\n{_eq_beamer(s)}\n"
                  + _where_tex(s.eq) + (words_tex(s.note) + "\\\\[1ex]\n" if s.note else "") + _check_line(s) + "\n\\end{frame}")
    fr += ["\\begin{frame}[allowframebreaks]{Result}\n" + "\n".join(_boxed_tex(dv)[1:]).replace(
        "\\boxed{", "\\tpdefit{\\boxed{").replace("}\n\\]", "}}\n\\]") + "\n\\end{frame}"] if dv.boxed else []
    fr += ["\\begin{frame}[allowframebreaks]{Conclusions}\n\\begin{itemize}\n"
           + "\n".join(f"\\item {words_tex(c)}" for c in dv.conclusions + dv.notes)
           + "\n\\end{itemize}\n\\end{frame}"] if dv.conclusions + dv.notes else []
    return ("\\documentclass[aspectratio=169]{beamer}\n" + _PREAMBLE + "\\allowdisplaybreaks\n" + _FIT
            + "\\setbeamertemplate{frametitle continuation}[from second][(cont.)]\n"
            + "\\title{" + words_tex(dv.title) + "}\n"
            "\\begin{document}\n\\frame{\\titlepage}\n" + "\n".join(fr) + "\n\\end{document}\n")


def render(dv, fmt: str = "text", standalone_doc: bool = False, slides: bool = False) -> str:
    if fmt == "json":
        return json.dumps(to_json(dv), indent=1)
    if fmt == "text":
        return to_text(dv)
    if fmt == "latex":
        return beamer(dv) if slides else standalone(dv) if standalone_doc else to_latex(dv)
    raise ValueError(f"unknown format {fmt!r}")
