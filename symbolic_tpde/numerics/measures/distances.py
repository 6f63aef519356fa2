"""Wasserstein distances between empirical measures, Gaussians and position-indexed measures.

All measures are discrete, ``μ = Σ_i a_i δ_{x_i}`` (uniform ``a_i = 1/n`` unless weights are given), with the
ground cost ``|x - y|^p`` (Euclidean norm).  ``W_p(μ, ν)^p = min_π Σ_ij π_ij |x_i - y_j|^p`` over couplings
with marginals ``a`` and ``b`` (Villani, *Optimal transport, old and new*, ch. 6; Peyré & Cuturi,
*Computational Optimal Transport*, ch. 2-4).

Routes, chosen by :func:`wasserstein`:

* **equal sizes, uniform weights** — an optimal plan is a permutation (Birkhoff-von Neumann), found exactly
  by the Hungarian-type solver ``scipy.optimize.linear_sum_assignment`` (O(n³)); exact to round-off;
* **any weights** — the transport LP, by POT's network simplex ``ot.emd`` when POT is installed (optional
  dependency, ``pip install symbolic_tpde[ot]``), else ``scipy.optimize.linprog`` (HiGHS);
* **d = 1** — closed form through quantile functions: ``W_p^p = ∫_0^1 |F^{-1}(u) - G^{-1}(u)|^p du``,
  i.e. sorted samples for equal sizes (:func:`wasserstein_1d`);
* **large n** — :func:`sliced_wasserstein` (Monte-Carlo over directions, with its standard error) and
  :func:`entropic_wasserstein` (log-domain Sinkhorn in row blocks, O(n · block) memory, with the rigorous
  bracket ``OT_ε - ε log min(n, m) ≤ W_p^p ≤ OT_ε``, and the debiased Sinkhorn divergence).

Also: :func:`bures_wasserstein` between Gaussians and :func:`conditional_wasserstein` ``W_p^c`` for measures
on ``[0, 1] × R^d`` sharing their position marginal (README Mathematics §2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment, linprog

from ...errors import ConvergenceError, InputError
from ..linalg import logsumexp_rows, sqrtm_psd

__all__ = [
    "wasserstein", "w1", "w2", "wasserstein_1d", "SlicedResult", "sliced_wasserstein", "EntropicResult",
    "entropic_wasserstein", "bures_wasserstein", "conditional_wasserstein", "cost_matrix", "have_pot",
]


def have_pot() -> bool:
    """True when the optional dependency POT (``import ot``) is importable."""
    try:
        import ot  # noqa: F401
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------------------------- validation
def _points(X: Any, name: str, d: int | None = None) -> np.ndarray:
    try:
        arr = np.asarray(X, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(name, f"not a numeric array ({exc})") from None
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise InputError(name, f"expected a non-empty (n, d) array of points, got shape {arr.shape}")
    if d is not None and arr.shape[1] != d:
        raise InputError(name, f"dimension {arr.shape[1]} differs from the other measure's {d}")
    if not np.all(np.isfinite(arr)):
        raise InputError(name, "contains NaN or Inf")
    return arr


def _weights(a: Any, n: int, name: str) -> np.ndarray:
    if a is None:
        return np.full(n, 1.0 / n)
    w = np.asarray(a, dtype=float)
    if w.shape != (n,):
        raise InputError(name, f"expected {n} weights, got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise InputError(name, "weights must be finite and >= 0")
    s = w.sum()
    if not s > 0:
        raise InputError(name, "weights sum to 0")
    return w / s


def _check_p(p: float) -> float:
    p = float(p)
    if not (np.isfinite(p) and p >= 1):
        raise InputError("p", f"must be a finite number >= 1, got {p}")
    return p


def cost_matrix(X: np.ndarray, Y: np.ndarray, p: float = 2.0) -> np.ndarray:
    """``C_ij = |x_i - y_j|^p``.  Squared distances by the expansion ``|x|² + |y|² - 2<x,y>`` clipped at 0;
    for ``p != 2`` the root is taken, so tiny distances carry an absolute error ~ sqrt(eps)·|x|."""
    sq = (X * X).sum(1)[:, None] + (Y * Y).sum(1)[None, :] - 2.0 * (X @ Y.T)
    np.maximum(sq, 0.0, out=sq)
    if p == 2.0:
        return sq
    return sq ** (p / 2.0)


def _cost_direct(X: np.ndarray, Y: np.ndarray, p: float) -> np.ndarray:
    """Cost by explicit differences (no cancellation), O(n m d) memory: used for small exact problems."""
    diff = X[:, None, :] - Y[None, :, :]
    return np.sqrt((diff * diff).sum(-1)) ** p if p != 2.0 else (diff * diff).sum(-1)


# ---------------------------------------------------------------------------------------------- exact W_p
#: equal-size uniform problems from this size on go to POT's network simplex when POT is installed: measured
#: ``ot.emd`` / assignment time ratio 0.57 at n = 500 and 0.28 at n = 1000 (numerics/meanfield_bench_distances.py)
_EMD_FROM = 400

def wasserstein(X: Any, Y: Any, p: float = 2.0, a: Any = None, b: Any = None, *,
                return_plan: bool = False, method: str = "auto"):
    """Exact ``W_p(μ, ν)`` between ``μ = Σ a_i δ_{X_i}`` and ``ν = Σ b_j δ_{Y_j}`` (uniform when omitted).

    ``method``: ``"auto"`` (assignment for equal sizes and uniform weights below n = 400 or without POT, else
    the LP: both are exact, POT's network simplex is the faster one for larger n), ``"assignment"``,
    ``"lp"`` (POT's ``ot.emd`` if installed, else SciPy HiGHS), ``"linprog"`` (force SciPy).  With
    ``return_plan=True`` returns ``(W, plan)`` where ``plan`` is the ``(n, m)`` coupling.
    Cost O(n³) (assignment) / network simplex: meant for n up to a few thousand.

    >>> float(wasserstein([[0.0], [1.0]], [[1.0], [2.0]]))       # a shift by 1
    1.0
    """
    p = _check_p(p)
    X = _points(X, "X")
    Y = _points(Y, "Y", X.shape[1])
    n, m = len(X), len(Y)
    uniform = a is None and b is None
    a = _weights(a, n, "a")
    b = _weights(b, m, "b")
    if method not in ("auto", "assignment", "lp", "linprog"):
        raise InputError("method", f"unknown method {method!r}")
    if method == "assignment" and not (uniform and n == m):
        raise InputError("method", "assignment needs equal sizes and uniform weights")
    C = _cost_direct(X, Y, p) if n * m * X.shape[1] <= 4_000_000 else cost_matrix(X, Y, p)
    use_assignment = uniform and n == m and (n < _EMD_FROM or not have_pot())
    if method == "assignment" or (method == "auto" and use_assignment):
        rows, cols = linear_sum_assignment(C)
        val = C[rows, cols].sum() / n
        plan = None
        if return_plan:
            plan = np.zeros((n, m))
            plan[rows, cols] = 1.0 / n
    else:
        plan = _transport_lp(a, b, C, force_scipy=(method == "linprog"))
        val = float((plan * C).sum())
    W = max(val, 0.0) ** (1.0 / p)
    return (W, plan) if return_plan else W


def _transport_lp(a: np.ndarray, b: np.ndarray, C: np.ndarray, force_scipy: bool = False) -> np.ndarray:
    """Optimal plan of the transport LP ``min <π, C>`` s.t. ``π 1 = a``, ``πᵀ 1 = b``, ``π ≥ 0``."""
    if not force_scipy and have_pot():
        import ot

        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # reported below through the result code instead
            plan, log = ot.emd(a, b, C, numItermax=10_000_000, log=True)
        if log.get("result_code") != 1:  # 1 = optimal (POT network simplex)
            raise ConvergenceError("transport LP (POT ot.emd)", str(log.get("warning")))
        return np.asarray(plan)
    n, m = C.shape
    if n * m > 250_000:
        raise InputError("X", f"LP with {n}x{m} variables is too large without POT; install POT "
                         "(pip install symbolic_tpde[ot]) or use sliced/entropic distances")
    # equality constraints: row sums (n) and column sums (m); one is redundant, HiGHS handles that
    rows = np.repeat(np.arange(n), m)
    cols = np.tile(np.arange(m), n)
    from scipy.sparse import coo_matrix, vstack

    Ar = coo_matrix((np.ones(n * m), (rows, np.arange(n * m))), shape=(n, n * m))
    Ac = coo_matrix((np.ones(n * m), (cols, np.arange(n * m))), shape=(m, n * m))
    res = linprog(C.ravel(), A_eq=vstack([Ar, Ac]).tocsr(), b_eq=np.concatenate([a, b]), bounds=(0, None),
                  method="highs")
    if res.status != 0:
        raise ConvergenceError("transport LP", res.message)
    return res.x.reshape(n, m)


def w1(X: Any, Y: Any, a: Any = None, b: Any = None) -> float:
    """Exact ``W_1`` (see :func:`wasserstein`)."""
    return wasserstein(X, Y, 1.0, a, b)


def w2(X: Any, Y: Any, a: Any = None, b: Any = None) -> float:
    """Exact ``W_2`` (see :func:`wasserstein`)."""
    return wasserstein(X, Y, 2.0, a, b)


def wasserstein_1d(x: Any, y: Any, p: float = 2.0, a: Any = None, b: Any = None) -> float:
    """``W_p`` on the real line by the quantile formula ``W_p^p = ∫_0^1 |F^{-1}(u) - G^{-1}(u)|^p du``.

    The monotone (sorted) coupling is optimal for any convex cost (Villani, *Topics in OT*, Thm 2.18).
    Weighted and unequal sizes are handled by merging the two cumulative-weight grids.  O((n+m) log(n+m)).
    """
    p = _check_p(p)
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    _points(x, "x")
    _points(y, "y")
    a = _weights(a, len(x), "a")
    b = _weights(b, len(y), "b")
    ix, iy = np.argsort(x, kind="stable"), np.argsort(y, kind="stable")
    xs, ys, ca, cb = x[ix], y[iy], np.cumsum(a[ix]), np.cumsum(b[iy])
    ca[-1] = cb[-1] = 1.0
    u = np.union1d(ca, cb)  # breakpoints of both quantile functions, ends at 1
    du = np.diff(np.concatenate([[0.0], u]))
    mid = u - du / 2.0
    qx = xs[np.minimum(np.searchsorted(ca, mid), len(xs) - 1)]
    qy = ys[np.minimum(np.searchsorted(cb, mid), len(ys) - 1)]
    return float((du * np.abs(qx - qy) ** p).sum() ** (1.0 / p))


# ----------------------------------------------------------------------------------------------- sliced
@dataclass(frozen=True)
class SlicedResult:
    """Sliced Wasserstein ``SW_p = (E_θ W_p^p(θ#μ, θ#ν))^{1/p}``, θ uniform on the unit sphere.

    ``value`` is the Monte-Carlo estimate over ``n_proj`` directions and ``stderr`` its standard error
    (sample standard deviation of the per-direction ``W_p^p`` over ``sqrt(n_proj)``, carried through the
    ``1/p`` power by the delta method).  Relation to ``W_2``: for any coupling, ``E_θ <θ, x - y>² =
    |x - y|²/d``, hence ``SW_2 ≤ W_2 / sqrt(d)``; ``lower_bound_w2 = sqrt(d)·value`` (up to the MC error).
    """

    value: float
    stderr: float
    n_proj: int
    p: float
    d: int

    @property
    def lower_bound_w2(self) -> float:
        return float(np.sqrt(self.d) * self.value)


def sliced_wasserstein(X: Any, Y: Any, p: float = 2.0, *, n_proj: int = 200,
                       rng: np.random.Generator, a: Any = None, b: Any = None) -> SlicedResult:
    """Monte-Carlo sliced Wasserstein distance with its standard error (see :class:`SlicedResult`).

    Each direction costs a sort: O(n_proj (n + m) log(n + m)) time, O((n + m) · chunk) memory.
    """
    p = _check_p(p)
    X = _points(X, "X")
    Y = _points(Y, "Y", X.shape[1])
    if not isinstance(rng, np.random.Generator):
        raise InputError("rng", "pass a seeded numpy.random.Generator (numpy.random.default_rng(seed))")
    if int(n_proj) < 2:
        raise InputError("n_proj", "need at least 2 directions for a standard error")
    d = X.shape[1]
    theta = rng.standard_normal((int(n_proj), d))
    theta /= np.linalg.norm(theta, axis=1, keepdims=True)
    uniform_equal = a is None and b is None and len(X) == len(Y)
    vals = np.empty(len(theta))
    chunk = max(1, 4_000_000 // (len(X) + len(Y)))
    for k0 in range(0, len(theta), chunk):
        th = theta[k0:k0 + chunk]
        px, py = X @ th.T, Y @ th.T
        if uniform_equal:
            px.sort(axis=0)
            py.sort(axis=0)
            vals[k0:k0 + len(th)] = (np.abs(px - py) ** p).mean(axis=0)
        else:
            for j in range(len(th)):
                vals[k0 + j] = wasserstein_1d(px[:, j], py[:, j], p, a, b) ** p
    mean = float(vals.mean())
    se_pow = float(vals.std(ddof=1) / np.sqrt(len(vals)))
    value = mean ** (1.0 / p)
    stderr = se_pow / (p * mean ** (1.0 - 1.0 / p)) if mean > 0 else se_pow ** (1.0 / p)
    return SlicedResult(value=value, stderr=float(stderr), n_proj=len(vals), p=p, d=d)


# --------------------------------------------------------------------------------------------- entropic
@dataclass(frozen=True)
class EntropicResult:
    """Entropic OT ``OT_ε(μ,ν) = min_π <π, C> + ε KL(π | a ⊗ b)`` with ``C = |x - y|^p``.

    * ``ot_eps``: the dual value ``<f, a> + <g, b>`` at the last iterate; after a ``g`` update the mass term
      of the dual vanishes, so by weak duality ``ot_eps ≤ OT_ε`` (round-off aside);
    * ``transport_cost``: ``<π, C>`` for the current plan ``π``;
    * ``lower``, ``upper``: a rigorous bracket of ``W_p^p``.  ``OT_ε ≤ W_p^p + ε·min(H(a), H(b))`` because
      ``KL(π|a⊗b)`` is a mutual information, bounded by either marginal's entropy (``log n`` when uniform):
      ``lower = ot_eps - ε·H_min``.  The plan has exact column marginals and row marginals off by ``δ``;
      rounding it onto the couplings moves at most ``2‖δ‖₁`` of mass (Altschuler-Weed-Rigollet 2017,
      Lemma 7), so ``upper = transport_cost + 2‖δ‖₁·max C``;
    * ``divergence``: the debiased Sinkhorn divergence ``OT_ε(μ,ν) - ½OT_ε(μ,μ) - ½OT_ε(ν,ν)`` (≥ 0,
      Feydy et al. 2019) when requested, else ``nan``; it estimates ``W_p^p`` with a much smaller bias
      than ``OT_ε`` but has no rigorous bracket.
    """

    ot_eps: float
    transport_cost: float
    lower: float
    upper: float
    divergence: float
    eps: float
    p: float
    iterations: int
    marginal_error: float
    converged: bool

    @property
    def w_lower(self) -> float:
        return max(self.lower, 0.0) ** (1.0 / self.p)

    @property
    def w_upper(self) -> float:
        return max(self.upper, 0.0) ** (1.0 / self.p)


_lse_rows = logsumexp_rows


def _softmin(Xq: np.ndarray, Yk: np.ndarray, logw: np.ndarray, G: np.ndarray, p: float, eps: float,
             block: int, C: np.ndarray | None = None) -> np.ndarray:
    """``-ε log Σ_j w_j exp((G_j - C(x_i, y_j))/ε)`` for every query ``x_i``, in row blocks of ``block``
    (or with the precomputed full cost matrix ``C`` when it fits in memory)."""
    shift = logw + G / eps
    if C is not None:
        Z = C * (-1.0 / eps)
        Z += shift[None, :]
        return -eps * _lse_rows(Z)
    out = np.empty(len(Xq))
    for i0 in range(0, len(Xq), block):
        Cb = cost_matrix(Xq[i0:i0 + block], Yk, p)
        Cb *= -1.0 / eps
        Cb += shift[None, :]
        out[i0:i0 + block] = -eps * _lse_rows(Cb)
    return out


#: full cost matrices up to this many entries are kept in memory (8 bytes each: 32 MB, two copies)
_FULL_COST_LIMIT = 4_000_000


def _sinkhorn(X, Y, a, b, p, eps, tol, max_iter, block):
    la, lb = np.log(a), np.log(b)
    C = CT = None
    if len(X) * len(Y) <= _FULL_COST_LIMIT:
        C = cost_matrix(X, Y, p)
        CT = np.ascontiguousarray(C.T)
        cmax = float(C.max())
    else:
        cmax = float(cost_matrix(X[:block], Y[:block], p).max())
    cmax = max(cmax, 1e-300)
    # ε-scaling: start at the cost scale and divide by 2 until the target ε (warm-started duals)
    eps_list = []
    e = max(cmax, eps)
    while e > eps:
        eps_list.append(e)
        e /= 2.0
    eps_list.append(eps)
    f, g = np.zeros(len(X)), np.zeros(len(Y))
    it, err = 0, np.inf
    for k, e in enumerate(eps_list):
        last = k == len(eps_list) - 1
        cap = max_iter if last else 20
        for j in range(cap):
            it += 1
            f_new = _softmin(X, Y, lb, g, p, e, block, C)
            # row marginal error of the plan built from (f, g): Σ_i |a_i (exp((f_i - f_new_i)/ε) - 1)|
            err = float(np.abs(a * np.expm1((f - f_new) / e)).sum()) if j else np.inf
            f = f_new
            g = _softmin(Y, X, la, f, p, e, block, CT)
            if err < (tol if last else 10 * tol):
                break
    # final row-marginal error for (f, g) (columns are exact after the g update)
    f_chk = _softmin(X, Y, lb, g, p, eps, block, C)
    err = float(np.abs(a * np.expm1((f - f_chk) / eps)).sum())
    return f, g, err, it


def _plan_cost(X, Y, a, b, f, g, p, eps, block) -> tuple[float, float]:
    """``<π, C>`` and ``max C`` for ``π_ij = a_i b_j exp((f_i + g_j - C_ij)/ε)``, in blocks."""
    total, cmax = 0.0, 0.0
    for i0 in range(0, len(X), block):
        Cb = cost_matrix(X[i0:i0 + block], Y, p)
        P = np.exp((f[i0:i0 + block, None] + g[None, :] - Cb) / eps)
        P *= a[i0:i0 + block, None] * b[None, :]
        total += float((P * Cb).sum())
        cmax = max(cmax, float(Cb.max()))
    return total, cmax


def entropic_wasserstein(X: Any, Y: Any, p: float = 2.0, *, eps: float, a: Any = None, b: Any = None,
                         tol: float = 1e-6, max_iter: int = 2000, debias: bool = True,
                         block: int = 256) -> EntropicResult:
    """Log-domain Sinkhorn for ``W_p^p`` between large clouds with a rigorous bracket (see
    :class:`EntropicResult`).  Memory O((n + m) · block); time O(n m) per iteration.  ``eps`` is absolute
    (in units of the cost ``|x - y|^p``); the bracket width is about ``ε log n``.  ``tol`` bounds the L1 row
    marginal error; when ``max_iter`` is reached first, ``converged`` is False (the bracket stays valid).
    """
    p = _check_p(p)
    X = _points(X, "X")
    Y = _points(Y, "Y", X.shape[1])
    eps = float(eps)
    if not (np.isfinite(eps) and eps > 0):
        raise InputError("eps", f"must be > 0, got {eps}")
    a = _weights(a, len(X), "a")
    b = _weights(b, len(Y), "b")
    block = max(1, int(block))
    f, g, err, it = _sinkhorn(X, Y, a, b, p, eps, tol, max_iter, block)
    dual = float(f @ a + g @ b)
    cost, cmax = _plan_cost(X, Y, a, b, f, g, p, eps, block)

    def ent(w):
        w = w[w > 0]
        return float(-(w * np.log(w)).sum())

    h_min = min(ent(a), ent(b))
    div = np.nan
    if debias:
        fx, gx, _, _ = _sinkhorn(X, X, a, a, p, eps, tol, max_iter, block)
        fy, gy, _, _ = _sinkhorn(Y, Y, b, b, p, eps, tol, max_iter, block)
        div = dual - 0.5 * float(fx @ a + gx @ a) - 0.5 * float(fy @ b + gy @ b)
    return EntropicResult(ot_eps=dual, transport_cost=cost, lower=dual - eps * h_min,
                          upper=cost + 2.0 * err * cmax, divergence=float(div), eps=eps, p=p, iterations=it,
                          marginal_error=err, converged=err < tol)


# ------------------------------------------------------------------------------------ Bures-Wasserstein
def _sym_sqrt(S: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return sqrtm_psd(S, return_eig=True)


def _bw2_one_side(S1: np.ndarray, S2: np.ndarray) -> float:
    """``BW²`` computed in the eigenbasis of ``S1``; the stable form when ``S1`` is well conditioned."""
    lam, U = np.linalg.eigh(0.5 * (S1 + S1.T))
    lam = np.clip(lam, 0.0, None)
    S2u = U.T @ S2 @ U
    r = np.sqrt(lam)
    M = r[:, None] * S2u * r[None, :]
    R, _, _ = _sym_sqrt(M)  # (S1^{1/2} S2 S1^{1/2})^{1/2} in the eigenbasis of S1
    if lam.min() > 1e-8 * max(lam.max(), 1e-300):
        # BW² = tr((T - I) S1 (T - I)) with T the optimal map  ==  ‖D S1^{-1/2}‖_F²,  D = R - S1
        D = R - np.diag(lam)
        return float(((D * D) / lam[None, :]).sum())
    return float(max(lam.sum() + np.trace(S2u) - 2.0 * np.trace(R), 0.0))


def bures_wasserstein(m1: Any, S1: Any, m2: Any, S2: Any) -> float:
    """``W_2(N(m1, S1), N(m2, S2))`` (Dowson-Landau 1982; Olkin-Pukelsheim 1982):

    ``BW² = |m1 - m2|² + tr S1 + tr S2 - 2 tr (S1^{1/2} S2 S1^{1/2})^{1/2}``.

    Computed as ``‖D S1^{-1/2}‖_F²`` with ``D = (S1^{1/2} S2 S1^{1/2})^{1/2} - S1`` (equivalently
    ``tr((T - I) S1 (T - I))``, ``T`` the optimal affine map), a sum of squares with no cancellation, so
    nearby covariances give an accurate small distance (the trace form loses everything below
    ``sqrt(eps·tr S)``); the trace form is used when ``S1`` is (near) singular.  Both orders are computed
    and averaged, so the result is exactly symmetric.  Symmetric PSD inputs are required.

    >>> round(bures_wasserstein([0.0], [[1.0]], [3.0], [[4.0]]) ** 2, 12)   # |m1 - m2|² + (σ1 - σ2)²
    10.0
    """
    m1 = np.atleast_1d(np.asarray(m1, dtype=float))
    m2 = np.atleast_1d(np.asarray(m2, dtype=float))
    d = m1.shape[0]
    mats = []
    for S, name in ((S1, "S1"), (S2, "S2")):
        S = np.atleast_2d(np.asarray(S, dtype=float))
        if S.shape != (d, d):
            raise InputError(name, f"expected shape {(d, d)}, got {S.shape}")
        if not np.all(np.isfinite(S)):
            raise InputError(name, "contains NaN or Inf")
        scale = max(1.0, float(np.abs(S).max()))
        if np.abs(S - S.T).max() > 1e-10 * scale:
            raise InputError(name, "not symmetric")
        if np.linalg.eigvalsh(0.5 * (S + S.T)).min() < -1e-10 * scale:
            raise InputError(name, "not positive semi-definite")
        mats.append(0.5 * (S + S.T))
    if m2.shape != (d,) or not (np.all(np.isfinite(m1)) and np.all(np.isfinite(m2))):
        raise InputError("m2", f"means must be finite vectors of length {d}")
    cov = 0.5 * (_bw2_one_side(mats[0], mats[1]) + _bw2_one_side(mats[1], mats[0]))
    return float(np.sqrt(float(((m1 - m2) ** 2).sum()) + max(cov, 0.0)))


# ----------------------------------------------------------------------------------------- conditional
def conditional_wasserstein(X: Any, Y: Any, positions: Any, p: float = 2.0, *, positions_y: Any = None,
                            bins: int | None = None) -> float:
    """Conditional Wasserstein ``W_p^c(μ, ν)^p = ∫ W_p(μ_s, ν_s)^p dλ(s)`` (README Mathematics §2).

    ``μ = (1/n) Σ δ_{(s_i, X_i)}``, ``ν = (1/n) Σ δ_{(s'_j, Y_j)}``, with the same position marginal ``λ``.
    For discrete positions, ``μ_s`` is the uniform measure on the tokens at position ``s`` and ``λ(s)`` the
    fraction of tokens there, so ``W_p^c`` is a per-position-group transport (exact, :func:`wasserstein`).
    When ``positions_y`` is given, the two position multisets must coincide (else :class:`InputError`).
    ``bins=K`` groups positions into ``K`` equal bins of ``[0, 1]`` first: an approximation of a continuous
    ``λ`` (the disintegration is only defined up to that resolution).
    """
    p = _check_p(p)
    X = _points(X, "X")
    Y = _points(Y, "Y", X.shape[1])
    s = np.asarray(positions, dtype=float).ravel()
    if s.shape != (len(X),) or not np.all(np.isfinite(s)):
        raise InputError("positions", f"expected {len(X)} finite positions, got shape {s.shape}")
    sy = s if positions_y is None else np.asarray(positions_y, dtype=float).ravel()
    if sy.shape != (len(Y),):
        raise InputError("positions_y", f"expected {len(Y)} positions, got shape {sy.shape}")
    if bins is not None:
        k = int(bins)
        if k < 1:
            raise InputError("bins", "must be >= 1")
        s = np.minimum(np.floor(np.clip(s, 0, 1) * k), k - 1)
        sy = np.minimum(np.floor(np.clip(sy, 0, 1) * k), k - 1)
    if len(s) != len(sy) or not np.array_equal(np.sort(s), np.sort(sy)):
        raise InputError("positions_y", "the two measures must have the same position marginal")
    total = 0.0
    n = len(X)
    for val in np.unique(s):
        gx, gy = X[s == val], Y[sy == val]
        if len(gx) == 1:
            c = float(np.linalg.norm(gx[0] - gy[0])) ** p
        elif X.shape[1] == 1:
            c = wasserstein_1d(gx[:, 0], gy[:, 0], p) ** p
        else:
            c = wasserstein(gx, gy, p) ** p
        total += len(gx) / n * c
    return float(total ** (1.0 / p))
