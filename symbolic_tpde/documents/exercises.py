"""Exercises with solutions for a course (``tpde derive --steps --exercises``; issue 19, item 5).

Each exercise is a :class:`~.steps_eq.Step`: the title states the problem, the equation is the solution SymPy
derived, and the check substitutes that solution back (into the ODE, or into the definition), so what the
document shows as the answer is what was verified:

1. softmax, ``d = 1``: the covariance equation ``dΣ/dt = 2avΣ²`` is read from the derived moment system (not
   typed in), solved by ``sympy.dsolve`` with ``Σ(0) = Σ₀``; the check puts the solution into the ODE and the
   initial condition;
2. ℓ2, ``d = 1``: the tilt of ``N(α, s)`` by ``k(x, y) = exp(-(qx - ky)²/τ)``, its precision (minus the second
   ``y``-derivative of the exponent) and mean (the stationary point) solved by SymPy; the check: the exponent
   plus ``(y - m)²/(2S)`` is free of ``y``, i.e. the tilted density is proportional to that of ``N(m, S)``.
"""

from __future__ import annotations

import sympy as sp

from .equation import Equation, Notation, Step, tex

__all__ = ["exercises"]


def _riccati() -> Step:
    from ..symbolic.moments import canonical_form, derive_gaussian_system

    system = derive_gaussian_system((1, (("softmax", canonical_form("softmax", 1, 1)),), False, False))
    a, v = sp.symbols("a v", real=True)
    S0 = sp.Symbol("Sigma_0", positive=True)
    t = sp.Symbol("t", real=True)
    names = dict(zip(system.params, (a, v)))          # the system's A, V at d = 1
    Sig = sp.Symbol("Sigma", positive=True)
    rate = system.rhs[1].xreplace({**names, system.states[1]: Sig})
    f = sp.Function("Sigma")
    sol = sp.together(sp.dsolve(sp.Eq(f(t).diff(t), rate.xreplace({Sig: f(t)})), f(t), ics={f(0): S0}).rhs)

    def how(eq):
        res = sp.simplify(eq.rhs.diff(t) - rate.xreplace({Sig: eq.rhs}))
        ok = res == 0 and sp.simplify(eq.rhs.xreplace({t: 0}) - S0) == 0
        return ok, (r"solved by SymPy; substituted back, $\frac{d\Sigma}{dt} - " + tex(rate)
                    + r"$ simplifies to $0$ and $\Sigma(0) = \Sigma_0$" if ok else "the solution does not solve the "
                    "ODE"), "exact"
    return Step(r"softmax attention in $d = 1$ with $A = a$, $V = v$: solve the covariance equation $\frac{d\Sigma}{dt}"
                r" = " + tex(rate) + r"$ (read from the derived moment ODE) with $\Sigma(0) = \Sigma_0 > 0$, and "
                "say when it blows up", Equation(Notation("Σ(t)", r"\Sigma(t)"), sol),
                r"separate the variables: $\frac{d}{dt}\Sigma^{-1} = -2av$, so $\Sigma(t)^{-1} = \Sigma_0^{-1} - 2avt$; "
                r"for $av > 0$ it blows up at $T^{*} = 1/(2av\Sigma_0)$, for $av \leq 0$ never", how=how).check()


def _l2_tilt() -> Step:
    y, x, alpha = sp.symbols("y x alpha", real=True)
    q, k, tau, s = sp.symbols("q k tau s", positive=True)
    E = -(q * x - k * y) ** 2 / tau - (y - alpha) ** 2 / (2 * s)
    S = sp.simplify(1 / -E.diff(y, 2))
    m = sp.simplify(sp.solve(E.diff(y), y)[0])
    mS = sp.Matrix([sp.Symbol("m(x)"), sp.Symbol("S")])

    def how(eq):
        mm, SS = eq.rhs
        rest = sp.expand(sp.cancel(E + (y - mm) ** 2 / (2 * SS)))
        ok = not rest.has(y) and SS.is_positive
        return ok, (r"substituted back into the definition: the exponent $" + tex(E) + r"$ plus $(y - m)^{2}/(2S)$ "
                    r"is free of $y$ (exact), so the tilted density is proportional to that of $\mathcal{N}(m(x), S)$"
                    if ok else "the exponent and the claimed Gaussian differ by a function of y"), "exact"
    return Step(r"$\ell_2$ attention in $d = 1$: for $k(x, y) = \exp(-(qx - ky)^{2}/\tau)$ and $\mu = \mathcal{N}"
                r"(\alpha, s)$, find the tilted measure $k(x, y)\,\mu(dy)/Z(x)$", Equation(mS, sp.Matrix([m, S])),
                r"complete the square in $y$: the precision is minus the second $y$-derivative of the exponent, the "
                r"mean its stationary point; $m$ is affine in $x$, so $\ell_2$ attention preserves Gaussians",
                how=how).check()


def exercises() -> tuple:
    """The exercises of the module docstring, solved and checked."""
    return (_riccati(), _l2_tilt())
