"""Forward sensitivity equations of a derived system, as another :class:`~.system.OdeSystem`.

For ``dy/dt = f(t, y, θ)`` and a chosen list of directions ``θ_k`` (parameters of the system, or entries of
the initial state ``y(0)``), the sensitivities ``S_k = ∂y/∂θ_k`` obey

    dS_k/dt = (∂f/∂y) S_k + ∂f/∂θ_k,        S_k(0) = 0 for a parameter,  e_i for the initial entry y_i(0)

(forward sensitivity analysis; e.g. Hairer, Nørsett, Wanner I, §I.14).  Both Jacobians are taken from the
system's own SymPy right-hand side by :func:`dag_diff` (the chain rule on the expression DAG, each shared
node differentiated once; ``sympy.diff`` walks the tree, which for the ℓ2 systems is exponentially larger),
so nothing is hand-written per kind;
the result is an ordinary :class:`OdeSystem` with states ``y`` then ``S_1, .., S_K`` (each in the order of
``y``) and the *same* parameters and ``param_layout``, so code generation (numpy, C, batched) and the
package's integrator apply unchanged.  The products ``J S`` are left unexpanded (the rhs stays a DAG).

Directions are named by the system's own symbol names: a parameter (``h0_A_0_1``) or an initial state entry
written ``init:<state name>`` (``init:Sigma_0_1`` perturbs the packed entry, i.e. ``Σ₀[0,1]`` and ``Σ₀[1,0]``
together, keeping Σ₀ symmetric).
"""

from __future__ import annotations

import sympy as sp

from .system import OdeSystem

INIT = "init:"


def dag_diff(exprs, var: sp.Symbol) -> list:
    """``[∂e/∂var for e in exprs]`` by the chain rule over the DAG (memoised by node identity):
    ``d e = Σ_i (∂e/∂a_i) d a_i`` over the arguments ``a_i`` of ``e``; ``Add``, ``Mul`` and ``Pow`` are
    differentiated explicitly, functions through their ``fdiff``.  Equal to ``sympy.diff`` (checked in the
    tests at random points); the result shares sub-expressions with ``exprs``."""
    memo: dict[int, sp.Expr] = {}
    keep = []

    def d(e):
        hit = memo.get(id(e))
        if hit is not None:
            return hit
        if e.is_Symbol:
            # equality, not identity: SymPy's symbol cache is an LRU (SYMPY_CACHE_SIZE), so after a long
            # session — or a system read back from the disk cache — the same symbol can be two objects
            out = sp.S.One if e == var else sp.S.Zero
        elif not e.args or e.is_number:
            out = sp.S.Zero
        else:
            da = [d(a) for a in e.args]
            if all(x is sp.S.Zero for x in da):
                out = sp.S.Zero
            elif isinstance(e, sp.Add):
                out = sp.Add(*[x for x in da if x is not sp.S.Zero])
            elif isinstance(e, sp.Mul):
                a = e.args
                out = sp.Add(*[sp.Mul(*a[:i], x, *a[i + 1:]) for i, x in enumerate(da) if x is not sp.S.Zero])
            elif isinstance(e, sp.Pow):
                b, p = e.args
                out = sp.S.Zero
                if da[0] is not sp.S.Zero:
                    out = p * b ** (p - 1) * da[0]
                if da[1] is not sp.S.Zero:
                    out = out + e * sp.log(b) * da[1]
            elif isinstance(e, sp.Function):
                out = sp.Add(*[e.fdiff(i + 1) * x for i, x in enumerate(da) if x is not sp.S.Zero])
            else:
                out = sp.diff(e, var)
        memo[id(e)] = out
        keep.append(e)
        return out

    return [d(sp.sympify(e)) for e in exprs]


def resolve_directions(system: OdeSystem, names) -> tuple[tuple[str, int], ...]:
    """``(("param", index) | ("init", state index), …)`` for ``names``; an unknown name is a ``KeyError``
    naming the valid ones (the gaussian layer turns it into an :class:`~symbolic_tpde.InputError`)."""
    pidx = {s.name: i for i, s in enumerate(system.params)}
    sidx = {s.name: i for i, s in enumerate(system.states)}
    out = []
    for nm in names:
        if not isinstance(nm, str):
            raise KeyError(f"a sensitivity direction must be a name (str), got {nm!r}")
        if nm.startswith(INIT) and nm[len(INIT):] in sidx:
            out.append(("init", sidx[nm[len(INIT):]]))
        elif nm in pidx:
            out.append(("param", pidx[nm]))
        else:
            raise KeyError(f"unknown sensitivity direction {nm!r}: expected a parameter of the system "
                           f"({', '.join(list(pidx)[:6])}{', …' if len(pidx) > 6 else ''}) or 'init:' + a state "
                           f"({', '.join(list(sidx)[:4])}, …)")
    if len(set(out)) != len(out):
        raise KeyError("repeated sensitivity direction")
    return tuple(out)


def sensitivity_system(system: OdeSystem, names) -> OdeSystem:
    """The augmented system ``(y, S_1..S_K)`` for the directions ``names`` (module docstring)."""
    dirs = resolve_directions(system, names)
    n = system.n_states
    cols = [dag_diff(system.rhs, s) for s in system.states]      # cols[j][i] = ∂f_i/∂y_j
    taken = {s.name for s in (*system.states, *system.params, system.time)}
    S_cols = []
    for k in range(len(dirs)):
        col = []
        for s in system.states:
            nm = f"dS{k}_{s.name}"
            while nm in taken:
                nm = "_" + nm
            taken.add(nm)
            col.append(sp.Symbol(nm, real=True))
        S_cols.append(col)
    rhs = list(system.rhs)
    for (what, idx), col in zip(dirs, S_cols):
        dtheta = dag_diff(system.rhs, system.params[idx]) if what == "param" else [sp.S.Zero] * n
        for i in range(n):
            terms = [cols[j][i] * col[j] for j in range(n) if cols[j][i] is not sp.S.Zero]
            rhs.append(sp.Add(*terms, dtheta[i]))
    states = tuple(system.states) + tuple(s for col in S_cols for s in col)
    origin = {**dict(system.origin), "form": "sensitivity", "sensitivity_of": tuple(names),
              "base_states": n}
    return OdeSystem(states=states, params=system.params, rhs=tuple(rhs), param_layout=system.param_layout,
                     time=system.time, origin=origin, conditions=system.conditions, existence=system.existence)


def initial_sensitivities(system: OdeSystem, names) -> list[list[float]]:
    """``S_k(0)`` per direction: zeros for a parameter, the unit vector of the entry for ``init:``."""
    out = []
    for what, idx in resolve_directions(system, names):
        col = [0.0] * system.n_states
        if what == "init":
            col[idx] = 1.0
        out.append(col)
    return out


def dag_grad(expr, variables) -> list:
    """``[∂expr/∂v for v in variables]`` by reverse accumulation over the DAG (one sweep for all variables):
    nodes in reverse topological order, each passing ``adj(node) · ∂node/∂arg`` to its arguments (``Add``,
    ``Mul``, ``Pow`` explicitly, functions through ``fdiff``).  The cost is one pass over the DAG, against one
    :func:`dag_diff` pass per variable: what makes the adjoint mode cheap for many parameters."""
    expr = sp.sympify(expr)
    order, seen, stack = [], set(), [(expr, False)]
    while stack:                                   # iterative post-order (children before parents)
        e, done = stack.pop()
        if done:
            order.append(e)
            continue
        if id(e) in seen:
            continue
        seen.add(id(e))
        stack.append((e, True))
        if not (e.is_Symbol or e.is_number):
            stack.extend((a, False) for a in e.args)
    adj: dict[int, list] = {id(expr): [sp.S.One]}
    for e in reversed(order):                      # parents before children
        terms = adj.get(id(e))
        if not terms or e.is_Symbol or e.is_number:
            continue
        a_e = sp.Add(*terms)
        args = e.args
        if isinstance(e, sp.Add):
            parts = [a_e] * len(args)
        elif isinstance(e, sp.Mul):
            parts = [sp.Mul(a_e, *args[:i], *args[i + 1:]) for i in range(len(args))]
        elif isinstance(e, sp.Pow):
            b, p = args
            parts = [a_e * p * b ** (p - 1), a_e * e * sp.log(b) if not p.is_number else sp.S.Zero]
        elif isinstance(e, sp.Function):
            parts = [a_e * e.fdiff(i + 1) for i in range(len(args))]
        else:
            raise NotImplementedError(f"reverse differentiation of {type(e).__name__}")
        for a, part in zip(args, parts):
            if part is not sp.S.Zero and not a.is_number:
                adj.setdefault(id(a), []).append(part)
    # equality, not identity, for the variables (see dag_diff)
    by_sym: dict = {}
    for e in order:
        if e.is_Symbol and id(e) in adj:
            by_sym.setdefault(e, []).extend(adj[id(e)])
    return [sp.Add(*by_sym.get(v, [])) for v in variables]


def adjoint_system(system: OdeSystem) -> OdeSystem:
    """The adjoint system in reversed time ``s = T - t`` for an autonomous ``system``: states ``(y, λ, μ)``,

        dy/ds = -f(y),   dλ/ds = (∂f/∂y)ᵀ λ,   dμ/ds = (∂f/∂θ)ᵀ λ,

    started at ``s = 0`` from ``(y(T), ∂ℓ/∂y(T), 0)``; at ``s = T``: ``λ = ∂ℓ/∂y(0)`` and ``μ = ∂ℓ/∂θ`` (the
    adjoint method; e.g. Hairer, Nørsett, Wanner I, §I.14, or CVODES' adjoint module).  Both vector-Jacobian
    products come from one reverse sweep (:func:`dag_grad`) of ``φ = λ·f``.  ``y`` is re-integrated backwards
    (no stored trajectory): fine on non-stiff horizons, not near a blow-up."""
    if any(system.time in dag_symbols_of(e) for e in system.rhs):
        raise ValueError("adjoint_system needs an autonomous system (no explicit time)")
    taken = {s.name for s in (*system.states, *system.params, system.time)}

    def fresh(nm):
        while nm in taken:
            nm = "_" + nm
        taken.add(nm)
        return sp.Symbol(nm, real=True)
    lam = [fresh(f"lam_{s.name}") for s in system.states]
    mu = [fresh(f"mu_{p.name}") for p in system.params]
    phi = sp.Add(*[l_ * f for l_, f in zip(lam, system.rhs)])
    g = dag_grad(phi, list(system.states) + list(system.params))
    n = system.n_states
    rhs = [-f for f in system.rhs] + g[:n] + g[n:]
    origin = {**dict(system.origin), "form": "adjoint (reversed time)", "base_states": n}
    return OdeSystem(states=tuple(system.states) + tuple(lam) + tuple(mu), params=system.params, rhs=tuple(rhs),
                     param_layout=system.param_layout, time=system.time, origin=origin)


def dag_symbols_of(expr) -> set:
    from .moments import dag_symbols

    return dag_symbols([expr])
