"""Gaussian moment ODEs: from an affine field to ``dα/dt``, ``dΣ/dt`` (``../shared/MATH.md`` §3).

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

from . import sinkhorn as sk
from .kernels import ExpQuadKernel, kernel_from_log, l2_log_kernel_explicit, softmax_kernel
from .system import OdeSystem, ParamBlock, gaussian_state_layout
from .tilt import sym_matrix, sym_vector, tilt_explicit

GAUSSIAN_PRESERVING = ("softmax", "l2", "custom", "linear", "sinkhorn")
NOT_PRESERVING = ("sigmoid", "softmax_unnormalized", "masked")

# parameters of each head kind, in layout order: (name, kind of block) with kind in matrix / vector / scalar
_HEAD_PARAMS = {
    "softmax": (("A", "mat"), ("V", "mat")),
    "linear": (("A", "mat"), ("V", "mat")),
    "l2": (("Q", "qk"), ("K", "qk"), ("V", "mat"), ("tau", "scalar")),
    "sinkhorn": (("A", "mat"), ("V", "mat"), ("epsilon", "scalar")),
    "custom": (("B", "mat"), ("P", "mat"), ("R", "mat"), ("p", "vec"), ("r", "vec"), ("V", "mat")),
}


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
    """State symbols: ``alpha_i`` and the symmetric ``Sigma`` built from ``Sigma_i_j`` (``i <= j``)."""
    return sym_vector("alpha", d), sym_matrix("Sigma", d, symmetric=True)


def head_param_symbols(h: int, kind: str, d: int, m: int) -> dict[str, Any]:
    """Symbols ``h{h}_{name}_{i}_{j}`` (matrices), ``h{h}_{name}_{i}`` (vectors), ``h{h}_{name}`` (scalars)."""
    out: dict[str, Any] = {}
    for name, block in _HEAD_PARAMS[kind]:
        pre = f"h{h}_{name}"
        if block == "mat":
            out[name] = sp.Matrix(d, d, lambda i, j, pre=pre: sp.Symbol(f"{pre}_{i}_{j}", real=True))
        elif block == "qk":
            out[name] = sp.Matrix(m, d, lambda i, j, pre=pre: sp.Symbol(f"{pre}_{i}_{j}", real=True))
        elif block == "vec":
            out[name] = sym_vector(pre, d)
        else:
            out[name] = sp.Symbol(pre, positive=True)
    return out


def head_kernel(kind: str, prm: dict[str, Any], x: sp.Matrix, d: int) -> ExpQuadKernel:
    """Explicit exponential-quadratic kernel of a softmax-normalised head (ℓ2 read off its definition)."""
    if kind == "softmax":
        return softmax_kernel(prm["A"])
    if kind == "l2":
        y = sp.Matrix([sp.Symbol(f"_ky{i}") for i in range(d)])
        expr = l2_log_kernel_explicit(prm["Q"], prm["K"], prm["tau"], x, y)
        return kernel_from_log(expr, list(x), list(y), name="l2", check=False)
    if kind == "custom":
        return ExpQuadKernel(B=prm["B"], P=prm["P"], R=prm["R"], p=prm["p"], r=prm["r"], name="custom")
    raise ValueError(kind)


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


def head_field(kind: str, prm: dict[str, Any], alpha: sp.Matrix, Sigma: sp.Matrix, method: str = "ldl"
               ) -> HeadField:
    """Derive one head's affine field and its moment-ODE contribution (explicit form)."""
    d = Sigma.shape[0]
    V = prm["V"]
    if kind in ("softmax", "l2", "custom"):
        x = sym_vector("_x", d)
        tilt = tilt_explicit(head_kernel(kind, prm, x, d), alpha, Sigma, x, method=method)
        b, J = V * tilt.m0, V * tilt.M
        ass = tilt.assumptions if kind != "l2" else (
            "none: R = -K^T K / tau is negative semi-definite, so the tilt exists for every SPD Sigma",)
        return HeadField(kind, b + J * alpha, J * Sigma, b, J, ass, tilt.steps["pivots"])
    if kind == "linear":
        x = sym_vector("_x", d)
        y = sym_vector("_y", d)
        kern = (y.T * prm["A"] * x)[0, 0]  # <Ax, y> = yᵀAx
        field = V * sp.Matrix([gaussian_expectation(sp.expand(kern * y[i]), list(y), alpha, Sigma)
                               for i in range(d)])
        J = field.jacobian(list(x))
        if any(e.has(*x) for e in J):
            raise AssertionError("linear-attention field is not affine in x")
        b = field.xreplace({xi: 0 for xi in x})
        return HeadField(kind, b + J * alpha, J * Sigma, b, J, ())
    if kind == "sinkhorn":
        Ct = sk.cross_covariance_explicit(Sigma, prm["A"] / prm["epsilon"])
        return HeadField(kind, V * alpha, V * Ct, None, None,
                         ("Sinkhorn plan: principal square root of I + 4 A^T Sigma A Sigma / epsilon^2 "
                          "(eigenvalues >= 1 for SPD Sigma)",))
    if kind in NOT_PRESERVING:
        from .witness import NotGaussianPreserving, witness_for

        raise NotGaussianPreserving(witness_for(kind))
    raise ValueError(f"unknown head kind {kind!r}")


def _structure_variant(kinds: tuple) -> str:
    return kinds[0][0] if len(kinds) == 1 else "multihead"


def check_structure(structure: tuple, d: int | None = None) -> tuple:
    try:
        sd, kinds, has_ffn, has_sink = structure
    except (TypeError, ValueError):
        raise ValueError(f"structure must be (d, ((kind, m), ...), has_ffn, has_sink), got {structure!r}") from None
    if d is not None and int(d) != int(sd):
        raise ValueError(f"d = {d} differs from the structure's d = {sd}")
    if not kinds:
        raise ValueError("structure has no heads")
    return int(sd), tuple((str(k), int(m)) for k, m in kinds), bool(has_ffn), bool(has_sink)


def derive_gaussian_system(structure: tuple, d: int | None = None, method: str = "ldl") -> OdeSystem:
    """Entrywise Gaussian moment ODE for a :meth:`Weights.structure` (cached: the result is immutable).

    States: ``alpha_0..alpha_{d-1}`` then ``Sigma_i_j`` (``i <= j``, row by row).  Parameters: per head in
    order its blocks (``("heads", h, name)``, row-major), then ``("ffn", "W")``, ``("ffn", "c")``.  Raises
    :class:`~.witness.NotGaussianPreserving` for sigmoid / unnormalised softmax / masked heads and
    :class:`~.sinkhorn.MatrixSqrtRequired` for Sinkhorn heads with ``d >= 3``.
    """
    return _derive(check_structure(structure, d), method)


@lru_cache(maxsize=64)
def _derive(structure: tuple, method: str) -> OdeSystem:
    d, kinds, has_ffn, has_sink = structure
    for kind, _ in kinds:  # refuse early, before any algebra
        if kind in NOT_PRESERVING:
            from .witness import NotGaussianPreserving, witness_for

            raise NotGaussianPreserving(witness_for(kind, sink=has_sink and kind == "masked"))
        if kind not in _HEAD_PARAMS:
            raise ValueError(f"unknown head kind {kind!r}")
        if kind == "sinkhorn" and d >= 3:
            raise sk.MatrixSqrtRequired(d)
    if has_sink:
        raise ValueError("an attention sink only applies to masked heads (which are not Gaussian-preserving)")
    alpha, Sigma = gaussian_symbols(d)
    params: list[sp.Symbol] = []
    layout: list[ParamBlock] = []
    assumptions: list[str] = []
    conditions: list = []
    drift = sp.zeros(d, 1)
    JS = sp.zeros(d, d)

    def add_block(key: tuple, value: Any) -> None:
        if isinstance(value, sp.MatrixBase):
            shape = (value.shape[0],) if value.shape[1] == 1 and key[-1] in ("p", "r", "c") else value.shape
            layout.append(ParamBlock(key, tuple(shape), len(params)))
            params.extend(list(value))  # row-major
        else:
            layout.append(ParamBlock(key, (), len(params)))
            params.append(value)

    for h, (kind, m) in enumerate(kinds):
        prm = head_param_symbols(h, kind, d, m)
        for name, _ in _HEAD_PARAMS[kind]:
            add_block(("heads", h, name), prm[name])
        hf = head_field(kind, prm, alpha, Sigma, method=method)
        drift += hf.drift
        JS += hf.JSigma
        assumptions += [f"head {h} ({kind}): {a}" for a in hf.assumptions]
        conditions += list(hf.conditions)
    if has_ffn:
        W = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"ffn_W_{i}_{j}", real=True))
        c = sym_vector("ffn_c", d)
        add_block(("ffn", "W"), W)
        add_block(("ffn", "c"), c)
        drift += W * alpha + c
        JS += W * Sigma
    rhs = list(drift) + [JS[i, j] + JS[j, i] for i in range(d) for j in range(i, d)]
    states = tuple(list(alpha) + [Sigma[i, j] for i in range(d) for j in range(i, d)])
    assert [s.name for s in states] == [f"{n}_{'_'.join(map(str, ix))}" for n, ix in gaussian_state_layout(d)]
    used = dag_symbols(rhs)
    unused = sorted({b.key for b in layout if not any(params[b.offset + k] in used for k in range(b.size))})
    origin = {"variant": _structure_variant(kinds), "d": d, "structure": (d, kinds, has_ffn, has_sink),
              "form": "entrywise", "method": method, "assumptions": tuple(assumptions),
              "unused_params": tuple(unused),
              "time_dependence": "parameters may depend on t: refill p per layer, or substitute functions "
                                 "of the `time` symbol for parameter symbols"}
    system = OdeSystem(states=states, params=tuple(params), rhs=tuple(rhs), param_layout=tuple(layout),
                       time=sp.Symbol("t", real=True), origin=origin)
    _CONDITIONS[id(system)] = (system, tuple(conditions))
    return system


_CONDITIONS: dict[int, tuple] = {}


def existence_conditions(system: OdeSystem) -> tuple:
    """Expressions (in the system's states and parameters) that must stay ``> 0`` for the derived ODE to be
    valid: the ``LDLᵀ`` pivots of ``N = Σ - Σ(R+Rᵀ)Σ`` of every head with ``R ≠ 0`` (the Gaussian tilt exists
    iff all are positive).  Empty for softmax, linear, Sinkhorn and FFN terms.  A numerical integrator can
    evaluate them to report "tilt ceased to exist at t" instead of returning meaningless numbers."""
    hit = _CONDITIONS.get(id(system))
    if hit is None or hit[0] is not system:
        raise ValueError("not a system returned by derive_gaussian_system")
    return hit[1]


def derive_for_weights(weights) -> OdeSystem:
    """:func:`derive_gaussian_system` for ``weights.structure()`` (a :class:`~symbolic_tpde.model.Weights`)."""
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


def _mat_head(kind: str, h: int | None, d, m=None) -> tuple[dict, object, object, object, tuple]:
    """Symbols and (b, J or None, sinkhorn Cᵀ or None, assumptions) for one head in matrix form."""
    from .kernels import l2_kernel_matrix
    from .tilt import tilt_matrix

    sfx = "" if h is None else f"_{h}"
    alpha = sp.MatrixSymbol("alpha", d, 1)
    Sigma = sp.MatrixSymbol("Sigma", d, d)
    V = sp.MatrixSymbol("V" + sfx, d, d)
    syms: dict[str, Any] = {"V": V}
    if kind in ("softmax", "linear", "sinkhorn"):
        syms["A"] = sp.MatrixSymbol("A" + sfx, d, d)
    if kind == "softmax":
        t = tilt_matrix(softmax_kernel(syms["A"]), alpha, Sigma)
        return syms, V * t.m0, V * t.M, None, t.assumptions
    if kind == "l2":
        m = m if m is not None else sp.Symbol("m", integer=True, positive=True)
        syms.update(Q=sp.MatrixSymbol("Q" + sfx, m, d), K=sp.MatrixSymbol("K" + sfx, m, d),
                    tau=sp.Symbol("tau" + sfx, positive=True))
        t = tilt_matrix(l2_kernel_matrix(syms["Q"], syms["K"], syms["tau"]), alpha, Sigma)
        return syms, V * t.m0, V * t.M, None, t.assumptions
    if kind == "custom":
        syms.update({n: sp.MatrixSymbol(n + sfx, d, d) for n in ("B", "P", "R")})
        syms.update({n: sp.MatrixSymbol(n + sfx, d, 1) for n in ("p", "r")})
        kern = ExpQuadKernel(B=syms["B"], P=syms["P"], R=syms["R"], p=syms["p"], r=syms["r"])
        t = tilt_matrix(kern, alpha, Sigma)
        return syms, V * t.m0, V * t.M, None, t.assumptions
    if kind == "linear":
        # Γ(x) = V ∫ <Ax,y> y dμ = V ∫ y yᵀ dμ · A x and ∫ y yᵀ dμ = Σ + ααᵀ (definition of the covariance);
        # the entrywise form derives the same moment from the Gaussian MGF and the tests compare the two.
        return syms, sp.ZeroMatrix(d, 1), V * (Sigma + alpha * alpha.T) * syms["A"], None, ()
    if kind == "sinkhorn":
        syms["epsilon"] = sp.Symbol("epsilon" + sfx, positive=True)
        Ct = sk.closed_form_matrix(d).xreplace({sp.MatrixSymbol("A", d, d): syms["A"] / syms["epsilon"]})
        J = V * Ct * Sigma.I                        # E_π[y|x] = α + CᵀΣ⁻¹(x - α)
        return syms, V * (alpha - Ct * Sigma.I * alpha), J, Ct, ("Sinkhorn: principal square root",)
    from .witness import NotGaussianPreserving, witness_for

    raise NotGaussianPreserving(witness_for(kind))


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
