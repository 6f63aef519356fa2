"""Generate readable numpy/Python source for an :class:`~symbolic_tpde.symbolic.system.OdeSystem`.

The generated module defines, with the argument order listed in its docstrings:

* ``f(t, y, p) -> ndarray (n_states,)``: the right-hand side, evaluated with Python floats (``math``
  functions), which is the fastest route for one small state (``solve_ivp(lambda t, y: f(t, y, p), ...)``);
  on a floating-point exception (``OverflowError``, ``ZeroDivisionError``, a complex power...) it falls back
  to the vectorised form, which yields IEEE ``inf``/``nan`` instead of raising, so integrators can report
  a blow-up;
* ``batch(t, Y, P) -> ndarray (..., n_states)``: the same expressions vectorised over a leading axis.
  ``Y`` is ``(N, n_states)`` or ``(n_states,)``, ``P`` is ``(N, n_params)`` or ``(n_params,)`` and ``t`` a
  scalar or an ``(N,)`` array; shapes broadcast;
* optionally ``jac(t, y, p) -> (n_states, n_states)`` and ``jac_batch(t, Y, P) -> (..., n, n)``: the
  symbolic Jacobian ``∂ rhs_i / ∂ y_j`` (SymPy ``Matrix.jacobian``), generated the same way.

Expression shaping (README (Layout) habit 7): common-subexpression elimination with ``sympy.cse(order="none")``;
for large systems (measured (README, Benchmarks): global CSE cost grows like d⁷) CSE is *staged*: every node
of the derived expression DAG used more than once, i.e. every entry of every intermediate matrix product the
derivation builds, becomes one named temporary (:func:`dag_cse`, linear time).  No ``expand``/``simplify``.

Symbol names are never printed as given (the printers look names up in a map, so the expression DAG is never
rebuilt with ``xreplace``, which costs the full *tree* size on shared DAGs): every state becomes ``s_<name>``, every parameter ``p_<name>``,
time ``tt_`` and temporaries ``w_<k>`` (non-identifier characters replaced by ``_``, clashes numbered), so
names such as ``lambda``, ``np``, ``y``, ``p`` or ``t`` cannot collide with Python keywords, builtins, the
function arguments or the ``numpy``/``math`` modules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import sympy as sp
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.pycode import PythonCodePrinter

from ..symbolic.system import OdeSystem

#: Bump when the generated code changes shape, so cached artefacts of older versions are not reused.
from .cache import CODEGEN_VERSION  # noqa: E402,F401  (defined SymPy-free in .cache)
#: Above this many outputs the CSE is staged per block of this many outputs.
STAGE_THRESHOLD = 80
STAGE_BLOCK = 24
#: Staged CSE names any sub-expression larger than this many nodes (bounded statement size for compilers).
DAG_MAX_OPS = 48


def _float_repr(value: sp.Float) -> str:
    """Shortest round-trip decimal of the float64 nearest to a SymPy Float (SymPy's default loses digits)."""
    return repr(float(value))


class NamedPrinterMixin:
    """Prints symbols through an explicit name map (no ``xreplace`` of the possibly huge expression DAG);
    an unmapped symbol is an error, never a silently free variable."""

    def __init__(self, names: dict, settings=None):
        # order="none": print sums in their stored order; sorting terms (SymPy's default) dominated the
        # printing time of large systems and only changes the summation order
        super().__init__({"order": "none", **(settings or {})})
        self._names = names

    def _print_Symbol(self, expr):  # noqa: N802 (SymPy printer protocol)
        try:
            return self._names[expr]
        except KeyError:
            raise ValueError(f"symbol {expr.name!r} in the right-hand side is neither a state, a parameter "
                             "nor the time symbol") from None

    _print_Dummy = _print_Symbol

    def _print_Float(self, expr):  # noqa: N802
        return _float_repr(expr)


class _ScalarPrinter(NamedPrinterMixin, PythonCodePrinter):
    pass


class _ArrayPrinter(NamedPrinterMixin, NumPyPrinter):
    pass


def _sanitise(name: str) -> str:
    out = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return out or "x"


@dataclass(frozen=True)
class Prepared:
    """A system renamed to safe identifiers and reduced by CSE, ready for any printer.

    ``names``: safe identifier per state / parameter (same order as the system); ``temps``: list of
    ``(identifier, expr)`` to evaluate in order; ``outputs``: ``(index, expr)`` for every non-trivially
    computed output (for Jacobians, the flat row-major index of non-zero entries).
    """

    state_names: tuple[str, ...]
    param_names: tuple[str, ...]
    time_name: str
    names: dict  # Symbol (states, params, time, CSE temporaries) -> identifier
    temps: tuple[tuple[str, sp.Expr], ...]
    outputs: tuple[tuple[int, sp.Expr], ...]
    n_out: int


def safe_names(system: OdeSystem) -> tuple[dict[sp.Symbol, str], tuple[str, ...], tuple[str, ...], str]:
    """Map every system symbol to a prefixed, sanitised, unique identifier."""
    used: set[str] = {"tt_"}
    mapping: dict[sp.Symbol, str] = {system.time: "tt_"}

    def fresh(prefix: str, name: str) -> str:
        base = prefix + _sanitise(name)
        cand, k = base, 0
        while cand in used:
            k += 1
            cand = f"{base}_{k}"
        used.add(cand)
        return cand

    snames = []
    for s in system.states:
        n = fresh("s_", s.name)
        mapping[s] = n
        snames.append(n)
    pnames = []
    for s in system.params:
        n = fresh("p_", s.name)
        mapping[s] = n
        pnames.append(n)
    return mapping, tuple(snames), tuple(pnames), "tt_"


def _temp_symbols(prefix: str):
    """CSE temporaries: ``Dummy`` symbols (cannot equal any system symbol), printed as ``<prefix><k>``."""
    k = 0
    while True:
        yield sp.Dummy(f"{prefix}{k}")
        k += 1


def dag_cse(exprs: Sequence[sp.Expr], symbols, max_ops: int = DAG_MAX_OPS) -> tuple[list, list]:
    """Staged CSE: one named temporary per non-atomic node of the expression *DAG* that has more than one
    parent (nodes compared structurally), in dependency order; returns ``(temps, reduced)`` like ``sp.cse``.

    The derivation builds every matrix product once (explicit matrices of symbols, README "What is derived")
    and reuses it, so each product's entries become one block of temporaries.  Linear in the DAG size,
    where SymPy's global ``cse`` (which also searches sub-sums and sub-products, ``opt_cse``) grew like d⁷
    (measured: 0.6 s at d = 8, 81 s at d = 16); on softmax d = 8 both give the same operation count to 1%.
    A node whose expression (up to named temporaries) exceeds ``max_ops`` nodes is named too: C compilers
    are superlinear in the size of one expression (softmax d = 16 without this bound: gcc -O2 took ~3 min).
    """
    count: dict = {}
    order: list = []
    for root in exprs:
        stack = [(root, False)]
        while stack:
            e, done = stack.pop()
            if done:
                order.append(e)
                continue
            if e.is_Atom:
                continue
            if e in count:
                count[e] += 1
                continue
            count[e] = 1
            stack.append((e, True))
            stack.extend((a, False) for a in e.args)
    named: dict = {}
    memo: dict = {}
    temps: list = []

    def rebuild(e):
        if e.is_Atom:
            return e
        hit = named.get(e)
        if hit is None:
            hit = memo.get(e)
        if hit is not None:
            return hit
        args = [rebuild(a) for a in e.args]
        try:
            r = e.func(*args, evaluate=False)
        except TypeError:  # functions without an evaluate flag
            r = e.func(*args)
        memo[e] = r
        return r

    size: dict = {}
    for e in order:  # post-order: every child is named (or rebuilt) before its parents
        sz = 1 + sum(size.get(a, 0) for a in e.args if a not in named)
        trivial = e.is_Mul and len(e.args) == 2 and e.args[0] == -1 and e.args[1].is_Atom
        if (count[e] > 1 and not trivial) or sz > max_ops:
            sym = next(symbols)
            temps.append((sym, rebuild(e)))
            named[e] = sym
            sz = 0
        size[e] = sz
    return temps, [rebuild(e) for e in exprs]


def reduce_cse(exprs: Sequence[sp.Expr], staged: bool | None = None, prefix: str = "w_"):
    """CSE of a list of expressions; returns ``(temps, reduced)``.

    ``staged=None`` chooses: SymPy's global ``cse`` up to ``STAGE_THRESHOLD`` expressions (d <= 11 for one
    head), the linear-time DAG staging :func:`dag_cse` above.
    """
    exprs = list(exprs)
    if staged is None:
        staged = len(exprs) > STAGE_THRESHOLD
    if not staged:
        temps, reduced = sp.cse(exprs, symbols=_temp_symbols(prefix), order="none")
        return list(temps), list(reduced)
    return dag_cse(exprs, _temp_symbols(prefix))


def _forward_jacobian(states, temps, reduced):
    """Jacobian of a CSE-reduced program by forward-mode differentiation along its temporaries.

    For each temporary ``w_k = e_k(...)``: ``∂w_k/∂y_j = Σ_a (∂e_k/∂a) ∂a/∂y_j`` over the symbols ``a`` of
    ``e_k`` that depend on states; every non-trivial partial ``∂e_k/∂a`` and every non-zero ``∂w_k/∂y_j``
    becomes a new temporary.  Each ``e_k`` is small, so this costs O(program size x states), whereas
    ``Matrix.jacobian`` on the original expressions differentiates the full *tree* of a shared DAG (minutes
    to hours for the ℓ2 systems at d >= 3).  Returns ``(temps, outputs)`` with outputs ``(flat index, expr)``.
    """
    n = len(states)
    grad: dict = {s: {j: sp.Integer(1)} for j, s in enumerate(states)}
    out_temps = list(temps)
    gen = _temp_symbols("g_")

    def name(expr):
        if expr.is_Atom:
            return expr
        sym = next(gen)
        out_temps.append((sym, expr))
        return sym

    def gradient(e):
        g: dict = {}
        for a in e.free_symbols:
            ga = grad.get(a)
            if not ga:
                continue
            da = e.diff(a)
            if da == 0:
                continue
            da = name(da) if len(ga) > 1 else da
            for j, gaj in ga.items():
                g[j] = g[j] + da * gaj if j in g else da * gaj
        return g

    for sym, e in temps:
        g = gradient(e)
        grad[sym] = {j: name(ex) for j, ex in sorted(g.items()) if ex != 0}
    outputs = []
    for i, e in enumerate(reduced):
        for j, ex in sorted(gradient(e).items()):
            if ex != 0:
                outputs.append((i * n + j, ex))
    return out_temps, outputs


def prepare(system: OdeSystem, what: str = "rhs", staged: bool | None = None) -> Prepared:
    """Name and CSE-reduce the right-hand side (``what="rhs"``) or its state Jacobian (``"jac"``, by
    :func:`_forward_jacobian` on the reduced right-hand side)."""
    mapping, snames, pnames, tname = safe_names(system)
    if what not in ("rhs", "jac"):
        raise ValueError(f"what must be 'rhs' or 'jac', got {what!r}")
    exprs = [sp.sympify(e) for e in system.rhs]
    temps, reduced = reduce_cse(exprs, staged=staged)
    if what == "rhs":
        outputs = list(enumerate(reduced))
        n_out = len(exprs)
    else:
        temps, outputs = _forward_jacobian(system.states, temps, reduced)
        n_out = system.n_states ** 2
    names = dict(mapping)
    for sym, _ in temps:
        names[sym] = sym.name
    return Prepared(snames, pnames, tname, names, tuple((names[sym], e) for sym, e in temps),
                    tuple(outputs), n_out)


def _unpack(names: Sequence[str], source: str) -> str:
    if not names:
        return ""
    if len(names) == 1:
        return f"{names[0]}, = {source}"
    return f"{', '.join(names)} = {source}"


def _docstring(system: OdeSystem, kind: str, prep: Prepared) -> list[str]:
    lines = [f'    """{kind} of the {system.origin.get("variant", "ODE")} system '
             f'(generated by symbolic_tpde.codegen, version {CODEGEN_VERSION}).', "",
             "    Arguments: t (time, symbol "
             f"{system.time.name!r}), y (states, {system.n_states}), p (parameters, {system.n_params}).",
             "    States (index: symbol -> local name):"]
    for i, (s, n) in enumerate(zip(system.states, prep.state_names)):
        lines.append(f"      y[{i}]: {s.name} -> {n}")
    lines.append("    Parameters:")
    for i, (s, n) in enumerate(zip(system.params, prep.param_names)):
        lines.append(f"      p[{i}]: {s.name} -> {n}")
    lines.append('    """')
    return [ln.replace('"""', "'''").replace("\\", "\\\\") if 0 < k < len(lines) - 1 else ln
            for k, ln in enumerate(lines)]


def _scalar_function(fname: str, fallback: str, system: OdeSystem, prep: Prepared, shape: str) -> list[str]:
    pr = _ScalarPrinter(prep.names)
    L = [f"def {fname}(t, y, p):"] + _docstring(system, fname, prep)
    L.append("    try:")
    body = []
    if prep.state_names:
        body.append(_unpack(prep.state_names, "numpy.asarray(y, dtype=float).tolist()"))
    if prep.param_names:
        body.append(_unpack(prep.param_names, "numpy.asarray(p, dtype=float).tolist()"))
    body.append(f"{prep.time_name} = float(t)")
    for name, e in prep.temps:
        body.append(f"{name} = {pr.doprint(e)}")
    values = ["0.0"] * prep.n_out
    for i, e in prep.outputs:
        values[i] = pr.doprint(e)
    if prep.n_out <= 512 or len(prep.outputs) * 4 > prep.n_out:
        body.append("return numpy.array((" + ", ".join(values) + ("," if len(values) == 1 else "")
                    + f"), dtype=float){shape}")
    else:  # sparse (large Jacobians): fill the non-zeros only
        body.append(f"out = numpy.zeros({prep.n_out})")
        for i, e in prep.outputs:
            body.append(f"out[{i}] = {pr.doprint(e)}")
        body.append(f"return out{shape}")
    L += ["        " + b for b in body]
    L.append("    except (OverflowError, ZeroDivisionError, ValueError, TypeError):")
    L.append(f"        return {fallback}(t, numpy.asarray(y, dtype=float)[None], p)[0]")
    return L


def _batch_function(fname: str, system: OdeSystem, prep: Prepared, out_shape: tuple[int, ...]) -> list[str]:
    pr = _ArrayPrinter(prep.names)
    n, m = system.n_states, system.n_params
    L = [f"def {fname}(t, Y, P):"] + _docstring(system, fname + " (vectorised over leading axes)", prep)
    L += ["    Y = numpy.asarray(Y, dtype=float)",
          "    P = numpy.asarray(P, dtype=float)",
          "    t = numpy.asarray(t, dtype=float)",
          f"    if Y.ndim == 0 or Y.shape[-1] != {n}:",
          f"        raise ValueError(f'Y must have last axis of length {n}, got shape {{Y.shape}}')",
          f"    if P.ndim == 0 or P.shape[-1] != {m}:",
          f"        raise ValueError(f'P must have last axis of length {m}, got shape {{P.shape}}')",
          "    lead = numpy.broadcast_shapes(Y.shape[:-1], P.shape[:-1], t.shape)",
          "    Yc = numpy.moveaxis(Y, -1, 0)",
          "    Pc = numpy.moveaxis(P, -1, 0)"]
    for i, name in enumerate(prep.state_names):
        L.append(f"    {name} = Yc[{i}]")
    for i, name in enumerate(prep.param_names):
        L.append(f"    {name} = Pc[{i}]")
    L.append(f"    {prep.time_name} = t")
    L.append(f"    out = numpy.zeros(({prep.n_out},) + lead)")
    L.append("    with numpy.errstate(all='ignore'):")
    for name, e in prep.temps:
        L.append(f"        {name} = {pr.doprint(e)}")
    for i, e in prep.outputs:
        L.append(f"        out[{i}] = {pr.doprint(e)}")
    shape = ", ".join(str(s) for s in out_shape)
    L.append(f"    return numpy.ascontiguousarray(numpy.moveaxis(out, 0, -1)).reshape(lead + ({shape},))")
    return L


def numpy_source(system: OdeSystem, what: str = "rhs", staged: bool | None = None) -> str:
    """Source of a module defining ``f``/``batch`` (``what="rhs"``) or ``jac``/``jac_batch`` (``"jac"``)."""
    prep = prepare(system, what, staged=staged)
    n = system.n_states
    head = ['"""Generated by symbolic_tpde.codegen.numpy_backend; do not edit (regenerated from the OdeSystem).',
            f"origin: {dict(system.origin)!r}".replace('"""', "'''").replace("\\", "\\\\"),
            '"""', "import math", "import numpy", ""]
    if what == "rhs":
        body = _scalar_function("f", "batch", system, prep, "") + [""] + _batch_function("batch", system, prep, (n,))
    else:
        body = (_scalar_function("jac", "jac_batch", system, prep, f".reshape({n}, {n})") + [""]
                + _batch_function("jac_batch", system, prep, (n, n)))
    return "\n".join(head + body) + "\n"


def existence_source(system: OdeSystem) -> str | None:
    """Source of ``existence(t, p) -> list of arrays``: the tilt-existence matrices ``system.existence`` (in
    time and parameters only) for the SymPy-free warm path; ``None`` when an entry involves the states."""
    mapping, _, pnames, tname = safe_names(system)
    names = {k: v for k, v in mapping.items() if k not in set(system.states)}
    pr = _ScalarPrinter(names)
    L = ['"""Tilt-existence matrices (generated by symbolic_tpde.codegen.numpy_backend)."""', "import math",
         "import numpy", "", "def existence(t, p):"]
    if pnames:
        L.append("    " + _unpack(pnames, "numpy.asarray(p, dtype=float).tolist()"))
    L.append(f"    {tname} = float(t)")
    mats = []
    try:
        for M in system.existence:
            rows = ["[" + ", ".join(pr.doprint(sp.sympify(M[i, j])) for j in range(M.shape[1])) + "]"
                    for i in range(M.shape[0])]
            mats.append("numpy.array([" + ", ".join(rows) + "], dtype=float)")
    except ValueError:  # a state symbol: not expressible without the states
        return None
    L.append("    return [" + ", ".join(mats) + "]")
    return "\n".join(L) + "\n"


from .warm import load_source  # noqa: E402,F401  (SymPy-free; re-exported here)
