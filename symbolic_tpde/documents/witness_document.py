"""A non-preservation witness (:class:`~..symbolic.witness.Witness`) as a document of the one engine (Beamer
slides; the article keeps :func:`.printing.render_witness`): the field as a definition, the witness as one
equation whose check is the certification (the SymPy expression at the witness point against an independent
mpmath quadrature of the integral definition), the conclusion and the lemmas as conclusions."""

from __future__ import annotations

import numpy as np
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
                    "value exceeds $10^6$ times it)" if ok else "the value at the point is not certified"), "at the point"
    quantity = w.quantity if len(sp.sstr(w.quantity)) < 400 else Notation("(the expression of the text output)",
                                                                         r"\text{(see the text output)}")
    step = Step(f"the witness (at {pt})", Equation(label, quantity, where=(gamma,)), how=how).check()
    return Derivation(f"{w.variant}: a $d = 1$ witness of non-preservation", (step,),
                      (w.description,), tuple(w.sentences()) + ((w.notes,) if w.notes else ()))


#: the fields whose cumulant rates are evaluated at a scenario's data (the kernel of ``V E_Y[k(<Ax, Y>) Y]``)
_KERNELS = {"sigmoid": lambda z, b: 1 / (1 + np.exp(-(z + b))), "softmax_unnormalized": lambda z, b: np.exp(z)}
#: Gauss-Hermite nodes per axis of the two rules compared, and the factor by which the value must exceed their
#: difference for its sign to count as decided
RULES, DECIDED = (24, 40), 1e3


def _rates(kind: str, A, V, b, alpha, Sigma, u, nodes: int) -> tuple:
    """``(dκ₃/dt, dκ₄/dt)`` at ``t = 0`` of ``u·X`` for ``X ~ N(α, Σ)`` moved by ``V E_Y[k(<AX, Y>) Y]`` (the
    cumulant lemma: ``3E[Y_u²G]`` and ``4E[Y_u³G] - 12E[Y_u²]E[Y_uG]``, ``Y_u = u·(X - α)``, ``G = u·(Γ(X) -
    EΓ)``), every expectation by a tensor Gauss-Hermite rule with ``nodes`` nodes per axis."""
    import itertools

    d = len(alpha)
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()
    pts = np.array(list(itertools.product(z, repeat=d)))
    wts = np.prod(np.array(list(itertools.product(w, repeat=d))), axis=1)
    L = np.linalg.cholesky(Sigma)
    X = alpha + pts @ L.T                                   # the same nodes serve X and Y
    K = _KERNELS[kind]((X @ A.T) @ X.T, b)                  # K[i, j] = k(<A x_i, y_j>)
    Gam = (K * wts) @ X @ V.T                               # Γ(x_i) = V Σ_j w_j k(...) y_j
    Yu, G = (X - alpha) @ u, (Gam - wts @ Gam) @ u
    E = lambda f: float(wts @ f)                            # noqa: E731
    return 3 * E(Yu ** 2 * G), 4 * E(Yu ** 3 * G) - 12 * E(Yu ** 2) * E(Yu * G)


def scenario_witness_steps(kind: str, head, alpha0, Sigma0) -> tuple:
    """Steps with the cumulant rates at the scenario's own data (weights, ``α₀``, ``Σ₀``), along the axes and
    the diagonal: the third-order rate, then, where it is 0 at the data (symmetric data, an odd field), the
    fourth-order one.  Each value is computed by two Gauss-Hermite rules (:data:`RULES`); a value is reported
    as non-zero only when it exceeds :data:`DECIDED` times their difference, as 0 when it is below that
    difference.  Numerical evidence (quadrature), not an interval certificate.  ``()`` for kinds without a
    kernel here (:data:`_KERNELS`)."""
    if kind not in _KERNELS:
        return ()
    p = head.effective if hasattr(head, "effective") else head.params
    A, V = np.asarray(p["A"], float), np.asarray(p["V"], float)
    b = float(p.get("b", 0.0))
    alpha, Sigma = np.asarray(alpha0, float), np.asarray(Sigma0, float)
    d = len(alpha)
    dirs = [np.eye(d)[k] for k in range(d)] + ([np.ones(d) / np.sqrt(d)] if d > 1 else [])
    out = []
    for order in (3, 4):
        best = None
        for u in dirs:
            v1, v2 = (_rates(kind, A, V, b, alpha, Sigma, u, n)[order - 3] for n in RULES)
            gap = abs(v1 - v2) + 1e-13 * max(1.0, abs(v2))      # the rules' difference, at least rounding
            if best is None or abs(v2) / gap > abs(best[1]) / best[2]:
                best = (u, v2, gap)
        u, val, gap = best
        decided = abs(val) > DECIDED * gap
        zero = abs(val) <= gap
        uw = "(" + ", ".join(f"{c:.3g}" for c in u) + ")"
        lhs = Notation(f"dκ_{order}(u·X_t)/dt|_(t=0)",
                       rf"\left.\frac{{d\kappa_{order}(u\cdot X_t)}}{{dt}}\right|_{{t=0}}")

        def how(eq, val=val, gap=gap, decided=decided, zero=zero):
            shown = float(eq.rhs)
            ok = (decided or zero) and abs(shown - val) <= gap
            return ok, (f"two tensor Gauss-Hermite rules ({RULES[0]} and {RULES[1]} nodes per axis) differ by "
                        f"{gap:.1e}; " + ("the value exceeds 1000 times that: non-zero" if decided else
                                          "the value is within that difference: 0 at the data")
                        if ok else "the two rules do not decide the sign"), "the scenario's data"
        rhs = sp.Float(0) if zero else sp.Float(val, 6)
        out.append(Step(f"at the scenario's data: the rate of the cumulant of order {order} along $u = {uw}$",
                        Equation(lhs, rhs),
                        "numerical evidence (quadrature), not an interval certificate", how=how).check())
        if decided:
            break
    return tuple(out)


def scenario_witness_derivation(w, kind: str, scn, name: str) -> Derivation:
    """The witness document of a scenario: its data, the generic ``d = 1`` witness (at the generic point,
    said so), and the cumulant rates at the scenario's own data (:func:`scenario_witness_steps`)."""
    from dataclasses import replace

    generic = witness_derivation(w)
    head = scn.weights(0.0).heads[0]
    steps = scenario_witness_steps(kind, head, scn.alpha0, scn.Sigma0)
    g = replace(generic.steps[0], title=generic.steps[0].title.replace("the witness", "the $d = 1$ witness at "
                                                                             "generic values, not the scenario's"))
    data = tuple((k, sp.Matrix(np.round(np.asarray(v, float), 12)).applyfunc(sp.nsimplify) if np.ndim(v) else
                  sp.nsimplify(float(v))) for k, v in head.params.items()) + (
        ("alpha_0", sp.Matrix(scn.alpha0).applyfunc(sp.nsimplify)),
        ("Sigma_0", sp.Matrix(scn.Sigma0).applyfunc(sp.nsimplify)))
    concl = list(generic.conclusions)
    if steps:
        last = steps[-1]
        if last.checked and last.eq.rhs != 0:
            concl.insert(0, f"At this scenario's data the rate of the cumulant of order {len(steps) + 2} is non-zero "
                            "(numerical evidence): the law leaves the Gaussian family at once"
                         + (", the third-order rate being 0 there (symmetric data)" if len(steps) > 1 else "") + ".")
        else:
            concl.insert(0, "At this scenario's data the cumulant rates computed here do not decide: no witness "
                            "at the data is claimed.")
    else:
        concl.insert(0, "The witness is evaluated at generic values; the scenario's data are shown but not used.")
    ass = (r"At $t = 0$ the tokens are i.i.d. $\mathcal{N}(\alpha_0, \Sigma_0)$, moved by the scenario's weights "
           r"(constant in $t$).",)
    return Derivation(f"{w.variant} attention: scenario {name}", (g, *steps), ass, tuple(concl),
                      model=generic.assumptions, data=data)
