"""Printing equations in the derivation scripts: ``sympy.pretty`` (unicode, wrapped), never raw ``str`` lines.

``show(label, expr)`` prints ``label`` and the pretty form of ``expr`` (wrapped at ``WIDTH`` columns; a one-line
form stays on the label's line).  An expression too large to be worth reading (more than ``MAX_OPS``
operations) is summarised by its size: the script's ``assert`` on it is what carries the result.
``show_latex(label, expr)`` prints the LaTeX source instead (``--latex`` on a script's command line).
"""

from __future__ import annotations

import sys

import sympy as sp

WIDTH = 110       # columns of the wrapped pretty form (test: no output line longer than 200 characters)
MAX_OPS = 200     # beyond this the pretty form runs to pages; print the size instead
LATEX = "--latex" in sys.argv


def _ops(e) -> int:
    if isinstance(e, sp.MatrixBase):
        return sum(sp.count_ops(v) for v in e)
    return int(sp.count_ops(e)) if isinstance(e, sp.Basic) else 0


def show(label: str, *exprs, note: str = "") -> None:
    """Print ``label`` followed by each expression in pretty unicode (or LaTeX with ``--latex``)."""
    parts = []
    for e in exprs:
        sym = isinstance(e, (sp.Basic, sp.MatrixBase))
        if sym and _ops(e) > MAX_OPS:
            parts.append(f"<expression with {_ops(e)} operations, not printed>")
        elif LATEX and sym:
            parts.append(sp.latex(e))
        elif sym:
            parts.append(sp.pretty(e, use_unicode=True, num_columns=WIDTH))
        else:
            parts.append(str(e))
    tail = f"   {note}" if note else ""
    if all("\n" not in p for p in parts) and len(label) + sum(len(p) + 3 for p in parts) + len(tail) <= WIDTH:
        print(label, "   ".join(parts) + tail)
        return
    print(label + tail)
    for p in parts:
        print("\n".join("    " + line for line in p.splitlines()))
