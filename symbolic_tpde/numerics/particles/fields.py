"""Particle velocity fields ``dx_i/dt = Γ_{μ_n}(x_i)`` of every attention variant (README Mathematics §2).

Conventions (Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322, §2): ``X`` has shape
``(n, d)``, row ``i`` is token ``x_i``; the kernel is ``exp(<A x_i, x_j>) = exp(x_jᵀ A x_i)`` with ``x_i`` the
*query* and ``x_j`` the key/value; ``V`` is applied *after* averaging.  Every softmax is a stable
log-sum-exp evaluated over row blocks of queries (memory ``O(n · block)``), see :mod:`.fields_core`.
Each function accepts ``dtype`` (float32 or float64; all work is done in it; default: X's float dtype,
else float64) and ``block`` (rows per block; default about 2^19 logits per block).

Array-level fields:  :func:`form_field` (any kernel ``exp`` of a quadratic form: the particle part of every kind
registered with one), :func:`softmax_field`, :func:`l2_field`, :func:`sinkhorn_field`, :func:`sigmoid_field`,
:func:`linear_field`, :func:`softmax_unnormalized_field`, :func:`custom_field`, :func:`masked_field`.
Dispatcher: :func:`field` (all heads of a :class:`~symbolic_tpde.weights.Weights` summed, plus ``W x + c``)
and :func:`velocity` (weights of a schedule at time ``t``).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ...errors import InputError
from ...weights import Schedule, Sink, Weights
from ...inputs.checks import positive_number
from ...registry.kinds import get, part, register
from .attend import as_matrix, as_points, attend, one_blas_thread
from .sinkhorn import SinkhornInfo, raise_if_not_converged, sinkhorn_potentials

__all__ = ["form_field", "softmax_field", "l2_field", "sinkhorn_field", "sigmoid_field", "linear_field",
           "softmax_unnormalized_field", "custom_field", "masked_field", "field", "velocity", "as_schedule"]


def _setup(X, dtype, **mats):
    X = as_points(X, dtype)
    d = X.shape[1]
    out = [X]
    for name, M in mats.items():
        out.append(as_matrix(M, (d, d), X.dtype, name))
    return out


@one_blas_thread
def softmax_field(X, A, V, *, block=None, dtype=None, threads=None) -> np.ndarray:
    """Softmax attention: ``dx_i/dt = V Σ_j softmax_j(<A x_i, x_j>) x_j``, ``<A x_i, x_j> = x_jᵀ A x_i``."""
    X, A, V = _setup(X, dtype, A=A, V=V)
    return attend(X @ A.T, X, X, block=block, threads=threads) @ V.T


@one_blas_thread
def form_field(X, form: dict, V, *, normalised: bool = True, block=None, dtype=None, threads=None) -> np.ndarray:
    """The field of a kernel ``log k(x, y) = xᵀBy + yᵀRy + rᵀy + (terms in x alone)``: ``form`` a registry
    quadratic form ``{"B", "R", "r"}`` (:attr:`symbolic_tpde.registry.kinds.KindSpec.form`; ``R``, ``r`` may be
    ``None``).  Normalised: ``dx_i/dt = V Σ_j w_ij x_j``, ``w_ij = k(x_i, x_j)/Σ_l k(x_i, x_l)``; otherwise
    ``dx_i/dt = V (1/n) Σ_j k(x_i, x_j) x_j`` (entries ``inf`` only where the true value overflows).

    Terms in the query alone cancel in the normalisation; the logits are ``(x_iᵀB)·x_j + β_j`` with the key
    bias ``β_j = x_jᵀRx_j + rᵀx_j``, one call of :func:`.attend.attend` (stable log-sum-exp)."""
    X = as_points(X, dtype)
    d, dt = X.shape[1], X.dtype
    B = as_matrix(form["B"], (d, d), dt, "B")
    V = as_matrix(V, (d, d), dt, "V")
    bias = None
    if form.get("R") is not None:
        R = as_matrix(form["R"], (d, d), dt, "R")
        bias = np.einsum("ij,ij->i", X @ R.T, X)                      # x_jᵀ R x_j
    if form.get("r") is not None:
        r = as_matrix(form["r"], (d,), dt, "r")
        bias = X @ r if bias is None else bias + X @ r
    if normalised:
        return attend(X @ B, X, X, key_bias=bias, block=block, threads=threads) @ V.T
    with np.errstate(invalid="ignore", over="ignore"):
        return attend(X @ B, X, X, mode="exp", key_bias=bias, block=block, threads=threads) @ V.T


@one_blas_thread
def l2_field(X, Q, K, V, tau, *, block=None, dtype=None, threads=None) -> np.ndarray:
    """ℓ2 attention: ``dx_i/dt = V Σ_j softmax_j(-|Q x_i - K x_j|² / τ) x_j``, ``Q, K (m, d)``, ``τ > 0``.

    The registry's form of ℓ2 (``B = (2/τ)QᵀK``, ``R = -KᵀK/τ``; the term ``-|Qx_i|²/τ`` depends on ``i``
    only and cancels in the normalisation) evaluated by :func:`form_field`.  (Absolute logit round-off
    ~ eps·(|Qx|² + |Kx|²)/τ.)
    """
    X = as_points(X, dtype)
    d = X.shape[1]
    Q = np.asarray(Q)
    if Q.ndim != 2 or Q.shape[1] != d:
        raise InputError("Q", f"expected shape (m, {d}), got {Q.shape}")
    Q = as_matrix(Q, (Q.shape[0], d), X.dtype, "Q")
    K = as_matrix(K, Q.shape, X.dtype, "K")
    tau = positive_number(tau, "tau")
    form = get("l2").form({"Q": Q, "K": K, "tau": X.dtype.type(tau)})
    return form_field(X, form, V, block=block, threads=threads)


@one_blas_thread
def sinkhorn_field(X, A, V, epsilon=1.0, *, tol=1e-9, max_iter=10_000, g0=None, return_info=False,
                   block=None, dtype=None, threads=None):
    """Sinkhorn attention: ``dx_i/dt = V Σ_j P_ij x_j``, ``P`` = ``n`` x the entropic self-transport plan.

    ``P_ij = exp(<A x_i, x_j>/ε + f_i + g_j)`` with all row and column sums equal to 1 (marginals ``1/n`` of
    the plan ``P/n``), solved in the log domain to a marginal error ``< tol`` (see :mod:`.sinkhorn`).
    Non-convergence within ``max_iter`` raises :class:`~symbolic_tpde.errors.ConvergenceError`, unless
    ``return_info=True``, in which case ``(field, SinkhornInfo)`` is returned and the caller must look at
    ``info.converged``.  ``g0`` warm-starts the column potential.
    """
    X, A, V = _setup(X, dtype, A=A, V=V)
    info = sinkhorn_potentials(X, A, epsilon, tol=tol, max_iter=max_iter, g0=g0, block=block)
    if not return_info:
        raise_if_not_converged(info)
    if info.overflow:   # the state left the floats: the field is non-finite (integrators: blow-up with its time)
        out = np.full_like(X, np.inf)
        return (out, info) if return_info else out
    q = (X @ A.T) / X.dtype.type(epsilon)
    out = attend(q, X, X, key_bias=info.g, block=block, threads=threads) @ V.T
    return (out, info) if return_info else out


@one_blas_thread
def sigmoid_field(X, A, V, b, *, block=None, dtype=None, threads=None) -> np.ndarray:
    """Sigmoid attention: ``dx_i/dt = (1/n) Σ_j σ(<A x_i, x_j> + b) V x_j``, ``σ(z) = 1/(1 + e^{-z})``."""
    X, A, V = _setup(X, dtype, A=A, V=V)
    b = float(b)
    if not math.isfinite(b):
        raise InputError("b", "must be finite")
    return attend(X @ A.T, X, X, mode="sigmoid", shift=b, block=block, threads=threads) @ V.T


@one_blas_thread
def linear_field(X, A, V, *, block=None, dtype=None, threads=None) -> np.ndarray:
    """Linear attention: ``dx_i/dt = (1/n) Σ_j <A x_i, x_j> V x_j = V M A x_i``, ``M = (1/n) Σ_j x_j x_jᵀ``.

    Exact rearrangement of the double sum, ``O(n d²)``; ``block``/``threads`` are accepted and unused.
    """
    X, A, V = _setup(X, dtype, A=A, V=V)
    M = (X.T @ X) / X.dtype.type(X.shape[0])
    return X @ (V @ M @ A).T


@one_blas_thread
def softmax_unnormalized_field(X, A, V, *, block=None, dtype=None, threads=None) -> np.ndarray:
    """Unnormalised softmax: ``dx_i/dt = V (1/n) Σ_j e^{<A x_i, x_j>} x_j``.

    Evaluated as ``e^{m_i} (1/n) Σ_j e^{<Ax_i,x_j> - m_i} x_j`` (``m_i`` the row maximum), so entries are
    ``inf`` only when the true value overflows the dtype (the integrators report that as a blow-up).
    """
    X, A, V = _setup(X, dtype, A=A, V=V)
    return form_field(X, {"B": A.T}, V, normalised=False, block=block, threads=threads)


@one_blas_thread
def custom_field(X, B, P=None, R=None, p=None, r=None, V=None, *, block=None, dtype=None,
                 threads=None) -> np.ndarray:
    """Softmax with log-kernel ``log k(x, y) = xᵀBy + xᵀPx + yᵀRy + pᵀx + rᵀy``: ``dx_i/dt = V Σ_j w_ij x_j``.

    ``w_ij = k(x_i, x_j) / Σ_l k(x_i, x_l)``.  Terms in the query ``x`` alone (``P``, ``p``) cancel in the
    normalisation (they are validated, then drop out); :func:`form_field` of the form ``(B, R, r)``.
    ``B = Aᵀ``, ``P = R = 0``, ``p = r = 0`` is softmax attention.  ``P, R, p, r`` default to zero.
    """
    if V is None:
        raise InputError("V", "missing parameter")
    X = as_points(X, dtype)
    d, dt = X.shape[1], X.dtype
    if P is not None:
        as_matrix(P, (d, d), dt, "P")
    if p is not None:
        as_matrix(p, (d,), dt, "p")
    return form_field(X, {"B": B, "R": R, "r": r}, V, block=block, threads=threads)


@one_blas_thread
def masked_field(X, A, V, *, sink: Sink | None = None, positions=None, block=None, dtype=None,
                 threads=None) -> np.ndarray:
    """Causal softmax: ``dx_i/dt = V Σ_{j ≤ i} softmax_j(<A x_i, x_j>) x_j`` (tokens ordered by index).

    ``positions`` (optional, shape ``(n,)``): token ``i`` sits at ``s_i`` and attends to every ``j`` with
    ``s_j ≤ s_i`` (ties see each other); default ``s_i = i``.  Without a sink, token 0 (first position)
    attends only to itself: its field is ``V x_0``.

    With a ``Sink(mass=m0, x=x_s)``: the sink is an extra key every query sees, with prior weight ``m0``, each
    token having prior weight ``(1 - m0)/n``:
    ``dx_i/dt = V [m0 e^{<Ax_i,x_s>} x_s + ((1-m0)/n) Σ_{s_j ≤ s_i} e^{<Ax_i,x_j>} x_j] / (same without x)``.
    """
    X, A, V = _setup(X, dtype, A=A, V=V)
    n, d = X.shape
    dt = X.dtype
    if positions is None:
        order = None
        Xs = X
        prefix = np.arange(1, n + 1)
    else:
        s = np.asarray(positions, dtype=float)
        if s.shape != (n,) or not np.isfinite(s).all():
            raise InputError("positions", f"expected {n} finite numbers, got shape {s.shape}")
        order = np.argsort(s, kind="stable")
        s_sorted = s[order]
        Xs = np.ascontiguousarray(X[order])
        prefix = np.searchsorted(s_sorted, s_sorted, side="right")
    q = Xs @ A.T
    kw: dict[str, Any] = {}
    if sink is not None:
        if not isinstance(sink, Sink):
            raise InputError("sink", f"expected a Sink, got {type(sink).__name__}")
        m0 = float(sink.mass)
        if not 0 < m0 < 1:
            raise InputError("sink.mass", f"must lie in (0, 1), got {m0}")
        xs = as_matrix(sink.x, (d,), dt, "sink.x")
        kw = dict(key_bias=np.full(n, math.log((1 - m0) / n), dtype=dt),
                  sink_logit=q @ xs + dt.type(math.log(m0)), sink_value=xs)
    out = attend(q, Xs, Xs, prefix=prefix, block=block, threads=threads, **kw) @ V.T
    if order is not None:
        res = np.empty_like(out)
        res[order] = out
        out = res
    return out


# ------------------------------------------------------------ particle parts of the registry kinds
# Each kind's "particle" part (symbolic_tpde/registry/kinds.py): ``(X, prm, ctx) -> field``, with ``prm`` the head's
# canonical parameters (``Head.effective``) and ``ctx`` a :class:`_Ctx` (sink, warm-start cache, head index,
# blocking options).

class _Ctx:
    __slots__ = ("sink", "cache", "idx", "kw")

    def __init__(self, sink, cache, idx, kw):
        self.sink, self.cache, self.idx, self.kw = sink, cache, idx, kw


register("sigmoid", "particle")(lambda X, p, c: sigmoid_field(X, p["A"], p["V"], p["b"], **c.kw))
register("linear", "particle")(lambda X, p, c: linear_field(X, p["A"], p["V"], **c.kw))
register("masked", "particle")(lambda X, p, c: masked_field(X, p["A"], p["V"], sink=c.sink, **c.kw))


def part_from_form(spec, part_name: str):
    """The ``particle`` part of a kind registered with a quadratic form (softmax, ℓ2, custom, unnormalised
    softmax, and any kind added with a form): :func:`form_field` of the form at the head's parameters
    (:func:`symbolic_tpde.registry.kinds.part`)."""
    if part_name != "particle":
        return None

    def particle(X, p, c):
        return form_field(X, spec.form(p), p["V"], normalised=spec.normalised, **c.kw)

    return particle


@register("sinkhorn", "particle")
def _sinkhorn_particle(X, p, c):
    key = ("sinkhorn_g", c.idx)
    g0 = None if c.cache is None else c.cache.get(key)
    out, info = sinkhorn_field(X, p["A"], p["V"], p["epsilon"], g0=g0, return_info=True, **c.kw)
    raise_if_not_converged(info, f"heads[{c.idx}] (sinkhorn)")
    if c.cache is not None:
        c.cache[key] = info.g
    return out


def _head_field(X: np.ndarray, head, sink, cache, idx, kw) -> np.ndarray:
    try:
        fn = part(head.kind, "particle")
    except KeyError:
        raise InputError(f"heads[{idx}].attention", f"unknown variant {head.kind!r}") from None
    return fn(X, head.effective, _Ctx(sink, cache, idx, kw))


@one_blas_thread
def field(X, weights: Weights, *, block=None, dtype=None, threads=None, cache: dict | None = None) -> np.ndarray:
    """Total velocity ``Σ_h Γ^h(x_i) + W x_i + c`` for all heads of ``weights`` (README Mathematics §2, multi-head).

    The sink of ``weights`` (if any) applies to its masked heads.  ``cache`` (a dict owned by the caller,
    e.g. the integrator) carries Sinkhorn potentials from one call to the next as warm starts.

    >>> import numpy as np
    >>> from symbolic_tpde import make_head, make_weights
    >>> w = make_weights([make_head("softmax", A=np.zeros((2, 2)), V=np.eye(2))])
    >>> field(np.array([[0.0, 0.0], [1.0, 0.0]]), w).tolist()      # A = 0: every token moves by V (mean)
    [[0.5, 0.0], [0.5, 0.0]]
    """
    if not isinstance(weights, Weights):
        raise InputError("weights", f"expected Weights, got {type(weights).__name__}")
    X = as_points(X, dtype)
    if X.shape[1] != weights.d:
        raise InputError("X", f"tokens have dimension {X.shape[1]} but the weights have d = {weights.d}")
    kw = dict(block=block, threads=threads)
    out = np.zeros_like(X)
    for idx, head in enumerate(weights.heads):
        out += _head_field(X, head, weights.sink, cache, idx, kw)
    if weights.ffn is not None:
        out += X @ weights.ffn.W.T.astype(X.dtype) + weights.ffn.c.astype(X.dtype)
    return out


def as_schedule(obj: Schedule | Weights | Callable[[float], Weights]) -> Schedule:
    """A :class:`Schedule` from a schedule, a constant :class:`Weights` or a callable ``t -> Weights``."""
    if isinstance(obj, Schedule):
        return obj
    if isinstance(obj, Weights):
        return Schedule.constant(obj)
    if callable(obj):
        return Schedule.from_callable(obj)
    raise InputError("schedule", f"expected a Schedule, Weights or callable, got {type(obj).__name__}")


def velocity(schedule, t: float, X, **kw) -> np.ndarray:
    """``Γ_{μ_t}(x_i)`` with the weights of ``schedule`` (Schedule, Weights or callable) read at time ``t``.

    >>> import numpy as np
    >>> from symbolic_tpde import make_head, make_weights
    >>> w = make_weights([make_head("softmax", A=np.zeros((2, 2)), V=np.eye(2))])
    >>> velocity(w, 0.0, np.array([[0.0, 0.0], [1.0, 0.0]])).tolist()
    [[0.5, 0.0], [0.5, 0.0]]
    """
    return field(X, as_schedule(schedule)(t), **kw)


__all__ += ["SinkhornInfo"]
