"""Gaussian moment ODEs: from an affine field to ``dα/dt``, ``dΣ/dt`` (README, Mathematics §3).

If ``μ_t = N(α, Σ)`` and the field is affine, ``Γ_μ(x) = b + J x``, the flow map is affine and

    dα/dt = b + J α,        dΣ/dt = J Σ + Σ Jᵀ.

Per head the affine field is *derived*:

* softmax / ℓ2 / custom (softmax-normalised exponential-quadratic kernels): ``Γ = V E[y | x]`` with
  ``E[y | x] = m0 + M x`` from the Gaussian tilt (:mod:`.tilt`), so ``b = V m0``, ``J = V M``;
* linear, ``Γ = V ∫ <Ax, y> y dμ(y)`` (not a normalised average): the integrand is a polynomial in ``y``
  and its Gaussian expectation is taken monomial by monomial from the moment generating function
  ``E[e^{sᵀy}] = exp(sᵀα + ½ sᵀΣs)`` (derivatives at ``s = 0``);  the result is checked to be affine in ``x``;
* Sinkhorn: ``Γ = V(α + CᵀΣ⁻¹(x - α))`` (:mod:`.sinkhorn`), which contributes ``Vα`` to ``dα/dt`` and
  ``VCᵀ + CVᵀ`` to ``dΣ/dt`` (no ``Σ⁻¹`` left);
* multi-head: fields add, so contributions add; the affine feed-forward term ``Wx + c`` adds ``(c, W)``.

Sigmoid, unnormalised softmax and masked heads raise :class:`~.witness.NotGaussianPreserving` with a
symbolic witness.  Time-dependent (layered) weights need no change: the ODE is pointwise in ``t`` and the
parameter vector is simply refilled per layer; every system also carries the ``time`` symbol so a user may
substitute functions of ``t`` for parameter symbols (``system.rhs[i].subs(p, f(t))``).

Public entry points: :func:`derive_gaussian_system` (structure -> :class:`OdeSystem`, cached) and
:func:`derive_for_weights`.  General-``d`` matrix form: :func:`matrix_form`.

Expression shape: nothing is expanded; sub-expressions are shared (a DAG).  Written out as trees the ℓ2/custom
right-hand sides are huge (ℓ2, d = 4: ~10⁸ tree nodes for ~10³ distinct sub-expressions), so consumers must
work on the DAG: ``sympy.cse(..., order="none")`` takes ~0.3 s there, whereas the default canonical ordering
and ``lambdify`` without CSE walk the tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import sympy as sp

from ..errors import NotGaussianPreserving
from ..registry import kinds
from ..weights import Structure
from . import sinkhorn as sk
from .kernels import ExpQuadKernel
from .system import OdeSystem, ParamBlock
from .tilt import sym_matrix, sym_vector, tilt_explicit

@dataclass(frozen=True)
class HeadField:
    """One head's contribution: ``drift`` to ``dα/dt`` (= ``b + Jα``) and ``JSigma`` (``dΣ/dt += JΣ + (JΣ)ᵀ``).
    ``b``, ``J`` are kept when they are available without ``Σ⁻¹`` (all but Sinkhorn)."""

    kind: str
    drift: sp.Matrix
    JSigma: sp.Matrix
    b: sp.Matrix | None
    J: sp.Matrix | None
    assumptions: tuple[str, ...]
    conditions: tuple = ()   # expressions that must stay > 0 (LDLᵀ pivots of the tilt; empty if none)
    existence: object = None  # R + Rᵀ (the tilt exists iff Σ⁻¹ - (R + Rᵀ) ≻ 0), None when R = 0


def dag_symbols(exprs) -> set:
    """Symbols occurring in ``exprs``, visiting each shared sub-expression once (``free_symbols`` walks the
    expression *tree*, which is exponentially larger than the DAG for nested adjugate expressions)."""
    seen: set[int] = set()
    out: set = set()
    stack = list(exprs)
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, sp.Symbol):
            out.add(e)
        else:
            stack.extend(e.args)
    return out


def gaussian_symbols(d: int) -> tuple[sp.Matrix, sp.Matrix]:
    """State symbols (names from :mod:`symbolic_tpde.registry.layout`): ``alpha_i`` and the symmetric ``Sigma``
    built from ``Sigma_i_j`` (``i <= j``)."""
    return sym_vector("alpha", d), sym_matrix("Sigma", d, symmetric=True)


def param_symbol_block(pre: str, spec, shape: tuple[int, ...]):
    """SymPy symbols for one parameter block: ``{pre}_i_j`` (matrix), ``{pre}_i`` (vector), ``{pre}`` (scalar,
    positive when the registry says so)."""
    if len(shape) == 2:
        return sp.Matrix(*shape, lambda i, j: sp.Symbol(f"{pre}_{i}_{j}", real=True))
    if len(shape) == 1:
        return sym_vector(pre, shape[0])
    return sp.Symbol(pre, positive=True) if spec.constraint == "positive" else sp.Symbol(pre, real=True)


def head_symbols(h: int, kind: str, form: tuple) -> dict[str, Any]:
    """Symbols ``h{h}_{name}…`` for the parameters of a head of ``kind`` with ``form`` ``((name, shape), …)``."""
    specs = {p.name: p for p in kinds.head_param_specs(kind, [n for n, _ in form])}
    return {name: param_symbol_block(f"h{h}_{name}", specs[name], tuple(shape)) for name, shape in form}


def canonical_form(kind: str, d: int, m: int) -> tuple:
    """The ``form`` of an unstructured head of ``kind`` (``m``: ℓ2 head dimension)."""
    dims = {"d": d, "m": m}
    return tuple((p.name, tuple(dims[s] for s in p.shape)) for p in kinds.get(kind).params)


def head_param_symbols(h: int, kind: str, d: int, m: int) -> dict[str, Any]:
    """Symbols of an unstructured head (see :func:`head_symbols`)."""
    return head_symbols(h, kind, canonical_form(kind, d, m))


def effective_params(kind: str, prm: dict[str, Any]) -> dict[str, Any]:
    """A structured head's ``A = KᵀQ/√k`` and ``V = WO V`` as products of the factor symbols (low rank stays
    low rank: nothing is multiplied out)."""
    out = dict(prm)
    if "Q" in prm and "A" in kinds.get(kind).names:
        k = prm["Q"].shape[0]
        out["A"] = prm["K"].T * prm["Q"] / sp.sqrt(k)
        del out["Q"], out["K"]
    if "WO" in prm:
        out["V"] = prm["WO"] * prm["V"]
        del out["WO"]
    return out


def head_kernel(kind: str, prm: dict[str, Any], x: sp.Matrix, d: int) -> ExpQuadKernel:
    """Exponential-quadratic kernel of a softmax-normalised head, read off its registered log-kernel."""
    from .kernels import analyse_log_kernel

    y = sym_vector("_ky", d)
    form = analyse_log_kernel(kinds.part(kind, "symbolic").log_kernel(prm, x, y), list(x), list(y))
    if isinstance(form, str):
        raise AssertionError(f"the registered {kind!r} log-kernel is not exponential-quadratic: {form}")
    return form.kernel(kind)


def gaussian_expectation(expr: sp.Expr, y: list[sp.Symbol], alpha: sp.Matrix, Sigma: sp.Matrix) -> sp.Expr:
    """``E[expr(y)]`` for ``y ~ N(α, Σ)``, ``expr`` polynomial in ``y``: each monomial ``y^k`` is replaced by
    ``∂^k/∂s^k exp(sᵀα + ½sᵀΣs)`` at ``s = 0`` (the moment generating function, differentiated by SymPy)."""
    d = len(y)
    s = [sp.Symbol(f"_s{i}") for i in range(d)]
    sv = sp.Matrix(s)
    mgf = sp.exp((sv.T * alpha)[0, 0] + sp.Rational(1, 2) * (sv.T * Sigma * sv)[0, 0])
    at0 = {si: 0 for si in s}
    total = sp.S.Zero
    for monom, coeff in sp.Poly(expr, *y).terms():
        deriv = mgf
        for si, k in zip(s, monom):
            if k:
                deriv = sp.diff(deriv, si, k)
        total += coeff * deriv.xreplace(at0)
    return total


def tilt_head(kernel: ExpQuadKernel, V, alpha: sp.Matrix, Sigma: sp.Matrix, x: sp.Matrix, method: str = "ldl",
              kind: str = "") -> HeadField:
    """Affine field ``Γ = V E[y | x]`` of a softmax-normalised exponential-quadratic kernel (the tilt)."""
    tilt = tilt_explicit(kernel, alpha, Sigma, x, method=method)
    b, J = V * tilt.m0, V * tilt.M
    R = kernel.R
    exist = None if R is None or R.is_zero_matrix else R + R.T
    conds = tuple(sp.StrictGreaterThan(pv, 0, evaluate=False) for pv in tilt.steps["pivots"])
    return HeadField(kind or kernel.name, b + J * alpha, J * Sigma, b, J, tilt.assumptions, conds, exist)


def head_field(kind: str, prm: dict[str, Any], alpha: sp.Matrix, Sigma: sp.Matrix, method: str = "ldl",
               sink: bool = False) -> HeadField:
    """Derive one head's affine field and its moment-ODE contribution from its registered symbolic part.

    Normalised kinds give a log-kernel (derived through the tilt, exactly as :func:`~.kernel.derive_kernel`
    does for a user's kernel); other affine kinds give the field directly; the rest raise
    :class:`~symbolic_tpde.NotGaussianPreserving` with their witness."""
    d = Sigma.shape[0]
    sym = kinds.part(kind, "symbolic")
    if sym.witness is not None:
        raise NotGaussianPreserving(sym.witness(sink=sink))
    eff = effective_params(kind, prm)
    if sym.log_kernel is not None:
        x = sym_vector("_x", d)
        return tilt_head(head_kernel(kind, eff, x, d), eff["V"], alpha, Sigma, x, method, kind)
    return sym.field(eff, alpha, Sigma)


def check_structure(structure: Structure | tuple, d: int | None = None) -> Structure:
    """Normalise a :class:`~symbolic_tpde.weights.Structure`, also spelt ``(d, ((kind, form), …), has_ffn,
    has_sink)``; ``(kind, m)`` head entries are expanded to their canonical form."""
    if isinstance(structure, Structure):
        structure = (structure.d, structure.heads, structure.ffn, structure.sink)
    try:
        sd, heads, has_ffn, has_sink = structure
    except (TypeError, ValueError):
        raise ValueError(f"structure must be a Structure or (d, ((kind, form), ...), has_ffn, has_sink), "
                         f"got {structure!r}") from None
    if d is not None and int(d) != int(sd):
        raise ValueError(f"d = {d} differs from the structure's d = {sd}")
    if not heads:
        raise ValueError("structure has no heads")
    out = []
    for kind, form in heads:
        kind = str(kind)
        try:
            kinds.get(kind)
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
        if isinstance(form, (int,)) or hasattr(form, "__index__"):
            form = canonical_form(kind, int(sd), int(form))
        out.append((kind, tuple((str(n), tuple(int(v) for v in shp)) for n, shp in form)))
    return Structure(int(sd), tuple(out), bool(has_ffn), bool(has_sink))


def derive_gaussian_system(structure: Structure | tuple, d: int | None = None, method: str = "ldl") -> OdeSystem:
    """Entrywise Gaussian moment ODE for a :class:`~symbolic_tpde.weights.Structure` (cached: the result is
    immutable); a tuple is normalised by :func:`check_structure`.

    States: ``alpha_0..alpha_{d-1}`` then ``Sigma_i_j`` (``i <= j``, row by row).  Parameters: per head in
    order its blocks (``("heads", h, name)``, row-major, names and order from the registry), then
    ``("ffn", "W")``, ``("ffn", "c")``.  Raises :class:`~symbolic_tpde.NotGaussianPreserving` for kinds whose
    registry entry is ``"witness"`` and :class:`~.sinkhorn.MatrixSqrtRequired` for Sinkhorn heads with
    ``d >= 3``.

    >>> import numpy as np
    >>> from symbolic_tpde import make_head, make_weights
    >>> w = make_weights([make_head("softmax", A=np.eye(2), V=np.eye(2))])
    >>> derive_gaussian_system(w.structure()).n_states      # α (2) and the upper triangle of Σ (3)
    5
    """
    return _derive(check_structure(structure, d), method)


def assemble_system(d: int, fields: list[HeadField], *, params: tuple, layout: tuple, time=None, origin: dict,
                    ffn: tuple | None = None, derivation=None) -> OdeSystem:
    """Sum head contributions (and an FFN ``Wx + c``) into the entrywise moment ODE ``dα/dt = b + Jα``,
    ``dΣ/dt = JΣ + ΣJᵀ`` (upper triangle).  ``derivation``: ``system -> checked steps`` (built on
    first access of ``system.steps``); default for built-in structures: :func:`.steps.entrywise_system_steps` (through the kind's symbolic part)."""
    alpha, Sigma = gaussian_symbols(d)
    drift, JS = sp.zeros(d, 1), sp.zeros(d, d)
    assumptions, conditions, existence = [], [], []
    many = len(fields) > 1
    for h, hf in enumerate(fields):
        drift += hf.drift
        JS += hf.JSigma
        pre = f"head {h} ({hf.kind}): " if many or origin.get("variant") != hf.kind else ""
        assumptions += [pre + a for a in hf.assumptions]
        conditions += list(hf.conditions)
        if hf.existence is not None:
            existence.append(hf.existence)
    if ffn is not None:
        W, c = ffn
        drift += W * alpha + c
        JS += W * Sigma
    rhs = list(drift) + [JS[i, j] + JS[j, i] for i in range(d) for j in range(i, d)]
    states = tuple(list(alpha) + [Sigma[i, j] for i in range(d) for j in range(i, d)])
    used = dag_symbols(rhs)
    params = tuple(params)
    unused = sorted({b.key for b in layout if not any(params[b.offset + k] in used for k in range(b.size))})
    origin = {**origin, "d": d, "assumptions": tuple(assumptions), "unused_params": tuple(unused),
              "time_dependence": "parameters may depend on t: refill p per layer, or substitute functions of the "
                                 "`time` symbol for parameter symbols"}
    if derivation is None and origin.get("structure") is not None:
        # the steps module sits above this one: its entry point is reached through the registry (the kind's
        # symbolic part, symbolic.kind_parts), a module-level function, so that the system pickles
        derivation = kinds.part(origin["structure"].heads[0][0], "symbolic").system_steps
    return OdeSystem(states=states, params=params, rhs=tuple(rhs), param_layout=tuple(layout),
                       time=time if time is not None else sp.Symbol("t", real=True), origin=origin,
                       conditions=tuple(conditions), existence=tuple(existence), derivation=derivation)


@lru_cache(maxsize=64)
def _derive(structure: Structure, method: str) -> OdeSystem:
    d, heads, has_ffn, has_sink = structure.d, structure.heads, structure.ffn, structure.sink
    for kind, _ in heads:  # refuse early, before any algebra
        sym = kinds.part(kind, "symbolic")
        if sym.witness is not None:
            raise NotGaussianPreserving(sym.witness(sink=has_sink))
        if sym.entrywise_max_d is not None and d > sym.entrywise_max_d:
            raise sk.MatrixSqrtRequired(d)
    if has_sink:
        raise ValueError("an attention sink only applies to masked heads (which are not Gaussian-preserving)")
    alpha, Sigma = gaussian_symbols(d)
    params: list[sp.Symbol] = []
    layout: list[ParamBlock] = []

    def add_block(key: tuple, value: Any, vector: bool = False) -> None:
        if isinstance(value, sp.MatrixBase):
            shape = (value.shape[0],) if value.shape[1] == 1 and vector else value.shape
            layout.append(ParamBlock(key, tuple(shape), len(params)))
            params.extend(list(value))  # row-major
        else:
            layout.append(ParamBlock(key, (), len(params)))
            params.append(value)

    fields = []
    for h, (kind, form) in enumerate(heads):
        prm = head_symbols(h, kind, form)
        vectors = {p.name for p in kinds.head_param_specs(kind, [n for n, _ in form]) if p.block == "vector"}
        for name, _ in form:
            add_block(("heads", h, name), prm[name], name in vectors)   # the head's specs, read now
        fields.append(head_field(kind, prm, alpha, Sigma, method=method))
    ffn = None
    if has_ffn:
        W = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"ffn_W_{i}_{j}", real=True))
        c = sym_vector("ffn_c", d)
        add_block(("ffn", "W"), W)
        add_block(("ffn", "c"), c, vector=True)
        ffn = (W, c)
    variant = heads[0][0] if len(heads) == 1 else "multihead"
    origin = {"variant": variant, "structure": structure, "form": "entrywise", "method": method}
    return assemble_system(d, fields, params=tuple(params), layout=tuple(layout), origin=origin, ffn=ffn)


def existence_conditions(system: OdeSystem) -> tuple:
    """Expressions (in the system's states and parameters) that must stay ``> 0`` for the derived ODE to be
    valid: the ``LDLᵀ`` pivots of ``N = Σ - Σ(R+Rᵀ)Σ`` of every head with ``R ≠ 0`` (the Gaussian tilt exists
    iff all are positive); ``system.conditions`` holds the same as SymPy relations ``pivot > 0``."""
    return tuple(c.lhs for c in system.conditions)


def derive_for_weights(weights) -> OdeSystem:
    """:func:`derive_gaussian_system` for ``weights.structure()`` (a :class:`~symbolic_tpde.weights.Weights`).

    >>> import numpy as np
    >>> from symbolic_tpde import make_head, make_weights
    >>> system = derive_for_weights(make_weights([make_head("softmax", A=np.eye(2), V=np.eye(2))]))
    >>> system.n_states, system.n_params
    (5, 8)
    """
    return derive_gaussian_system(weights.structure())


def param_vector(system: OdeSystem, weights) -> list[float]:
    """Fill the flat parameter vector of ``system`` from a ``Weights`` object, following ``param_layout``."""
    out = [0.0] * system.n_params
    for blk in system.param_layout:
        if blk.key[0] == "heads":
            value = weights.heads[blk.key[1]].params[blk.key[2]]
        else:
            value = getattr(weights.ffn, blk.key[1])
        flat = [float(value)] if blk.shape == () else [float(v) for v in value.reshape(-1)]
        out[blk.offset:blk.offset + blk.size] = flat
    return out


# --------------------------------------------------------------------------------------------------------
# matrix form (general d, MatrixSymbols)
# --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MatrixForm:
    """General-``d`` result: ``b``, ``J`` (sums over heads + FFN), ``alpha_dot``, ``Sigma_dot``, per-head data."""

    variant: str
    alpha: sp.MatrixSymbol
    Sigma: sp.MatrixSymbol
    b: object
    J: object
    alpha_dot: object
    Sigma_dot: object
    heads: tuple
    assumptions: tuple[str, ...]
    symbols: dict


def mexpand(expr):
    """Distribute products over sums and collapse (``Σ⁻¹Σ = I`` etc.): the targeted simplification used for
    matrix expressions (never a global ``simplify``)."""
    return sp.expand(expr).doit()


def _mat_symbols(kind: str, sfx: str, d, m):
    """``MatrixSymbol``s (and scalar Symbols) for the registry parameters of ``kind`` at general ``d``."""
    dims = {"d": d, "m": m if m is not None else sp.Symbol("m", integer=True, positive=True)}
    out: dict[str, Any] = {}
    for p in kinds.get(kind).params:
        if p.block == "scalar":
            out[p.name] = sp.Symbol(p.name + sfx, positive=True) if p.constraint == "positive" else \
                sp.Symbol(p.name + sfx, real=True)
        else:
            shape = tuple(dims[s] for s in p.shape) + ((1,) if len(p.shape) == 1 else ())
            out[p.name] = sp.MatrixSymbol(p.name + sfx, *shape)
    return out


def _mat_head(kind: str, h: int | None, d, m=None) -> tuple[dict, object, object, object, tuple]:
    """Symbols and (b, J or None, sinkhorn Cᵀ or None, assumptions) for one head in matrix form, from the
    kind's registered symbolic part: normalised kinds through their matrix kernel and the tilt, the others
    through their matrix field."""
    from .tilt import tilt_matrix

    sfx = "" if h is None else f"_{h}"
    alpha = sp.MatrixSymbol("alpha", d, 1)
    Sigma = sp.MatrixSymbol("Sigma", d, d)
    sym = kinds.part(kind, "symbolic")
    if sym.witness is not None:
        raise NotGaussianPreserving(sym.witness())
    syms = _mat_symbols(kind, sfx, d, m)
    if sym.matrix_kernel is not None:
        t = tilt_matrix(sym.matrix_kernel(syms), alpha, Sigma)
        return syms, syms["V"] * t.m0, syms["V"] * t.M, None, t.assumptions
    b, J, Ct, ass = sym.matrix_field(syms, alpha, Sigma, d)
    return syms, b, J, Ct, ass


def matrix_form(kinds: tuple[str, ...] = ("softmax",), ffn: bool = False, d=None) -> MatrixForm:
    """Matrix-form moment ODE for heads of the given kinds (summed) and an optional FFN ``Wx + c``."""
    d = d if d is not None else sp.Symbol("d", integer=True, positive=True)
    alpha = sp.MatrixSymbol("alpha", d, 1)
    Sigma = sp.MatrixSymbol("Sigma", d, d)
    single = len(kinds) == 1
    heads = []
    b, J, assumptions = sp.ZeroMatrix(d, 1), sp.ZeroMatrix(d, d), []
    for h, kind in enumerate(kinds):
        syms, bh, Jh, Ct, ass = _mat_head(kind, None if single else h, d)
        heads.append({"kind": kind, "symbols": syms, "b": bh, "J": Jh, "Ct": Ct})
        b, J = b + bh, J + Jh
        assumptions += list(ass)
    symbols: dict[str, Any] = {"alpha": alpha, "Sigma": Sigma}
    if ffn:
        W, c = sp.MatrixSymbol("W", d, d), sp.MatrixSymbol("c", d, 1)
        b, J = b + c, J + W
        symbols.update(W=W, c=c)
    alpha_dot = mexpand(symmetric_subs_all(b + J * alpha, Sigma))
    Sigma_dot = mexpand(symmetric_subs_all(J * Sigma + Sigma * J.T, Sigma))
    variant = kinds[0] if single else "multihead"
    return MatrixForm(variant, alpha, Sigma, mexpand(b), mexpand(J), alpha_dot, Sigma_dot, tuple(heads),
                      tuple(assumptions), symbols)


def symmetric_subs_all(expr, Sigma):
    """``Σᵀ -> Σ`` and ``(Σ⁻¹)ᵀ -> Σ⁻¹`` after pushing transposes inward."""
    expr = expr.doit()
    return expr.xreplace({Sigma.T: Sigma, sp.Transpose(sp.Inverse(Sigma)): sp.Inverse(Sigma),
                          sp.Inverse(sp.Transpose(Sigma)): sp.Inverse(Sigma)})
