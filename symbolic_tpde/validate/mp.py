"""High-precision evaluation of an :class:`OdeSystem` with mpmath, independent of every code printer.

:func:`mp_eval` walks each right-hand-side expression tree itself (memoised per sub-expression) with
``mpmath.mpf`` arithmetic inside ``mpmath.workdps(dps)`` (default 50 digits): no ``lambdify``, no CSE, no
generated code, so it is an independent route to the values the numpy and C backends compute.

Alongside each value it returns a *magnitude* ``M(e)``: the same tree evaluated with every sum replaced by the
sum of absolute values (``M(a + b) = M(a) + M(b)``, ``M(a b) = M(a) M(b)``, ``M(a^k) = M(a)^k`` for integer
``k``, ``|value|`` for other functions).  Standard running-error analysis (Higham, *Accuracy and Stability of
Numerical Algorithms*, §3.1) bounds the float64 evaluation error of an expression with ``k`` floating-point
operations along any path by about ``k · u · M(e)`` with ``u = 2^-53``; :func:`roundoff_tolerance` uses this
with a stated safety factor.  The tolerance therefore scales with the size of the *terms*, not of the result,
which is what matters when terms cancel.
"""

from __future__ import annotations

from typing import Sequence

import mpmath
import sympy as sp

from ..symbolic.system import OdeSystem

U64 = 2.0 ** -53

_FUNCS = {
    sp.exp: mpmath.exp, sp.log: mpmath.log, sp.sin: mpmath.sin, sp.cos: mpmath.cos, sp.tan: mpmath.tan,
    sp.tanh: mpmath.tanh, sp.sinh: mpmath.sinh, sp.cosh: mpmath.cosh, sp.atan: mpmath.atan,
    sp.erf: mpmath.erf,
}


def _eval(expr: sp.Basic, env: dict, memo: dict) -> tuple[mpmath.mpf, mpmath.mpf]:
    hit = memo.get(id(expr))
    if hit is not None:
        return hit[0]
    if expr.is_Symbol:
        v = env[expr]
        out = (v, abs(v))
    elif expr.is_Integer:
        v = mpmath.mpf(int(expr))
        out = (v, abs(v))
    elif expr.is_Rational:
        v = mpmath.mpf(int(expr.p)) / int(expr.q)
        out = (v, abs(v))
    elif expr.is_Float:
        v = mpmath.mpf(expr._mpf_) if hasattr(expr, "_mpf_") else mpmath.mpf(str(expr))
        out = (v, abs(v))
    elif expr is sp.pi:
        out = (+mpmath.pi, +mpmath.pi)
    elif expr is sp.E:
        out = (mpmath.e(), mpmath.e())
    elif expr.is_Add:
        vals = [_eval(a, env, memo) for a in expr.args]
        out = (mpmath.fsum(v for v, _ in vals), mpmath.fsum(m for _, m in vals))
    elif expr.is_Mul:
        v, m = mpmath.mpf(1), mpmath.mpf(1)
        for a in expr.args:
            va, ma = _eval(a, env, memo)
            v *= va
            m *= ma
        out = (v, m)
    elif expr.is_Pow:
        base, ex = expr.args
        vb, mb = _eval(base, env, memo)
        if ex.is_Integer:
            k = int(ex)
            v = vb ** k
            m = mb ** k if k > 0 else abs(v)
        elif ex == sp.Rational(1, 2):
            v = mpmath.sqrt(vb)
            m = abs(v)
        else:
            ve, _ = _eval(ex, env, memo)
            v = mpmath.power(vb, ve)
            m = abs(v)
        out = (v, m)
    elif isinstance(expr, sp.Abs):
        v, m = _eval(expr.args[0], env, memo)
        out = (abs(v), m)
    elif expr.func in _FUNCS:
        args = [_eval(a, env, memo)[0] for a in expr.args]
        v = _FUNCS[expr.func](*args)
        out = (v, abs(v))
    else:
        raise NotImplementedError(f"mp_eval: unsupported node {expr.func.__name__}")
    if isinstance(out[0], mpmath.mpc):
        raise ValueError(f"mp_eval: complex intermediate value in {expr}")
    memo[id(expr)] = (out, expr)  # memo by node identity: one pass over the DAG; keep the node alive
    return out


def mp_eval(system: OdeSystem, t, y: Sequence, p: Sequence, dps: int = 50, exprs=None):
    """Evaluate ``system.rhs`` (or ``exprs``) at ``(t, y, p)`` with ``dps`` digits.

    Inputs are converted exactly (a float64 is a dyadic rational).  Returns ``(values, magnitudes)``, two lists
    of ``mpmath.mpf`` (see the module docstring for the magnitude).
    """
    exprs = system.rhs if exprs is None else exprs
    if len(y) != system.n_states or len(p) != system.n_params:
        raise ValueError(f"expected {system.n_states} states and {system.n_params} params, got {len(y)}, {len(p)}")
    with mpmath.workdps(dps):
        env = {system.time: mpmath.mpf(t)}
        env.update({s: mpmath.mpf(v) for s, v in zip(system.states, y)})
        env.update({s: mpmath.mpf(v) for s, v in zip(system.params, p)})
        memo: dict = {}
        vals, mags = [], []
        for e in exprs:
            v, m = _eval(sp.sympify(e), env, memo)
            vals.append(+v)
            mags.append(+m)
    return vals, mags


def op_depth(expr: sp.Basic) -> int:
    """Number of arithmetic operations on the longest path of the tree (each n-ary Add/Mul counts n - 1)."""
    memo: dict = {}

    def rec(e):
        if id(e) in memo:
            return memo[id(e)][0]
        if not e.args:
            r = 0
        else:
            r = max(rec(a) for a in e.args) + max(len(e.args) - 1, 1)
        memo[id(e)] = (r, e)
        return r

    return rec(sp.sympify(expr))


def roundoff_tolerance(magnitude, depth: int, safety: float = 4.0) -> float:
    """Float64 round-off bound ``safety · (depth + CSE reassociation slack) · u · M``.

    ``depth`` is :func:`op_depth` of the un-reduced expression; CSE and printing can re-associate sums and
    products, so the bound uses ``2 · depth + 8`` operations; ``safety = 4`` covers the conversion of inputs
    and outputs.  Returns an absolute tolerance.
    """
    return float(safety * (2 * depth + 8) * U64 * float(magnitude))
