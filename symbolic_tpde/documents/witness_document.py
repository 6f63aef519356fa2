"""A non-preservation witness (:class:`~..symbolic.witness.Witness`) as a document of the one engine (Beamer
slides; the article keeps :func:`.printing.render_witness`): the field as a definition, the witness as one
equation whose check is the certification (the SymPy expression at the witness point against an independent
mpmath quadrature of the integral definition), the conclusion and the lemmas as conclusions."""

from __future__ import annotations

import sympy as sp

from .equation import Derivation, Equation, Notation, Step

__all__ = ["witness_derivation"]


def witness_derivation(w) -> Derivation:
    from .equation import tex

    label = Notation(w.label("text"), w.label("latex"))
    gamma = (Notation("Γ(x)", r"\Gamma(x)"), w.field_expr)
    pt = ", ".join(f"${tex(sp.Symbol(k))} = {tex(sp.S(v))}$" for k, v in w.point.items())

    def how(eq):
        ok = bool(w.certified) and eq.rhs == w.quantity
        return ok, (f"at {pt} the right side is {w.value:.12g} and an independent quadrature of the definition "
                    f"gives {w.independent:.12g} (disagreement {w.discrepancy:.1e}, the sign certified when the "
                    "value exceeds 10^6 times it)" if ok else "the value at the point is not certified"), "at the point"
    quantity = w.quantity if len(sp.sstr(w.quantity)) < 400 else Notation("(the expression of the text output)",
                                                                         r"\text{(see the text output)}")
    step = Step(f"the witness (at {pt})", Equation(label, quantity, where=(gamma,)), how=how).check()
    return Derivation(f"{w.variant}: a $d = 1$ witness of non-preservation", (step,),
                      (w.description,), tuple(w.sentences()) + ((w.notes,) if w.notes else ()))
