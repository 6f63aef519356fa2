"""The authors' figure setups (``vcastin/2025-transformers-PDEs``, ``2d_plots.py`` and ``histograms.py``) in our
terms: their exact parameter draws, conventions, ``Σ₀`` grids, step sizes and tolerances, and their
projected Euler scheme (README Mathematics §7; the facts are listed in the project's notes on the authors'
figures).

Draws: the authors seed numpy's legacy global generator (``np.random.seed(s)``) and draw in a fixed order;
here every family uses its own ``np.random.RandomState(s)`` (same Mersenne-Twister stream, no global state)
and draws in the same order, so the matrices are bit-identical to theirs.

Conventions, re-expressed as registry heads (README Mathematics §3):

* softmax: ``A = KᵀQ/√d`` (``d = 2``), ``dΣ/dt = VΣAΣ + ΣAᵀΣVᵀ``;
* ℓ2: their kernel ``exp(2<Ax,y> - |Ky|²)``, i.e. our ``exp(-|Q'x - Ky|²/τ)`` with ``Q' = Q/√d``, ``τ = 1``;
  then ``dΣ/dt = 2VΣ(I + 2KᵀKΣ)⁻¹AΣ + (…)ᵀ``;
* Sinkhorn: ``A = KᵀQ`` (no ``√d``), ``ε = 1``;
* their multi-head with ``H`` heads splits the *rows*: ``k = d // H``, head ``h`` takes rows
  ``hk … (h+1)k - 1`` of ``Q`` and ``K`` (``A_h = K_hᵀQ_h/√k``) and its value matrix is ``C_h = E_hᵀE_hV``
  (rows of ``V`` in block ``h``, zero elsewhere; ``E_h`` the block of the identity).  A block past the last
  row of ``Q`` is empty, so its ``A_h = 0``; ``H = 1`` is single-head softmax.

Projected Euler (:func:`projected_euler`): ``S ← clip(S + h F(S))`` with the eigenvalues below 0 set to
``1e-14``; stop when ``‖F(S)‖_F < tol_low`` (converged; the state returned is the last one *before* that
update, as theirs), when ``tr S > tol_high`` after the update (diverged), or after ``max_iter`` steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..weights import Weights, make_head, make_weights

D = 2
CLIP = 1e-14          # the value their projection gives to negative eigenvalues


# ------------------------------------------------------------------------------------------ conventions
def softmax_weights(Q, K, V, d: int = D) -> Weights:
    return make_weights([make_head("softmax", A=np.asarray(K).T @ np.asarray(Q) / np.sqrt(d), V=V)])


def l2_weights(Q, K, V, d: int = D) -> Weights:
    """Their ℓ2 convention: our ℓ2 head with ``Q → Q/√d``, ``τ = 1`` (module docstring)."""
    return make_weights([make_head("l2", Q=np.asarray(Q) / np.sqrt(d), K=K, V=V, tau=1.0)])


def sinkhorn_weights(Q, K, V) -> Weights:
    return make_weights([make_head("sinkhorn", A=np.asarray(K).T @ np.asarray(Q), V=V, epsilon=1.0)])


def row_split_blocks(Q, K, V, H: int, d: int = D) -> list[tuple[np.ndarray, np.ndarray]]:
    """``[(A_h, C_h)]`` of their ``H``-head row split (module docstring); an empty block gives ``A_h = 0``."""
    Q, K, V = (np.asarray(M, float) for M in (Q, K, V))
    if d % H:
        raise ValueError(f"d = {d} is not divisible by H = {H}")
    k = d // H
    out = []
    for h in range(H):
        rows = slice(k * h, k * (h + 1))
        Kh, Qh = K[rows], Q[rows]
        A = Kh.T @ Qh / np.sqrt(k) if Kh.shape[0] else np.zeros((d, d))
        C = np.zeros((d, d))
        C[rows] = V[rows]
        out.append((A, C))
    return out


def multihead_weights(Q, K, V, H: int, d: int = D) -> Weights:
    return make_weights([make_head("softmax", A=A, V=C) for A, C in row_split_blocks(Q, K, V, H, d)])


def weights_for(kind: str, Q, K, V, H: int = 1, d: int = D) -> Weights:
    if kind == "softmax":
        return softmax_weights(Q, K, V, d)
    if kind == "l2":
        return l2_weights(Q, K, V, d)
    if kind == "sinkhorn":
        return sinkhorn_weights(Q, K, V)
    if kind == "multihead":
        return multihead_weights(Q, K, V, H, d)
    raise ValueError(kind)


# ------------------------------------------------------------------------------------------ draws
def authors_grid(n_u: int, n_c: int, limits=(-0.5, 0.5, -0.5, 0.5)) -> tuple[np.ndarray, np.ndarray]:
    """Their ``init_grid(n_u, n_c, 1, limits)``: ``Σ₀ = [[(1+u)/2, w/2], [w/2, (1-u)/2]]`` for ``u`` on
    ``linspace(limits[0], limits[1], n_u)``, ``w`` on ``linspace(limits[2], limits[3], n_c)``, kept where
    ``u² + w² < 1``, in their order (``u`` slow, ``w`` fast).  Returns ``(Sigma0s, w)``."""
    U = np.linspace(limits[0], limits[1], n_u)
    C = np.linspace(limits[2], limits[3], n_c)
    u, w = (a.ravel() for a in np.meshgrid(U, C, indexing="ij"))
    keep = 1.0 - u**2 > w**2
    u, w = u[keep], w[keep]
    S = np.empty((len(u), 2, 2))
    S[:, 0, 0], S[:, 1, 1], S[:, 0, 1], S[:, 1, 0] = (1 + u) / 2, (1 - u) / 2, w / 2, w / 2
    return S, w


def _redraw(rs: np.random.RandomState, cond: Callable[[np.ndarray], bool]) -> tuple[np.ndarray, np.ndarray]:
    """``Q, K = randn(2,2), randn(2,2)`` until ``cond(eigvalsh(KᵀQ + QᵀK))`` (at most 1000 tries, as theirs)."""
    for _ in range(1000):
        Q, K = rs.randn(2, 2), rs.randn(2, 2)
        A = K.T @ Q
        if cond(np.linalg.eigvalsh(A + A.T)):
            break
    return Q, K


def draws(setup: str) -> dict:
    """``{"Q", "K", "V", "seed"}`` of one of their setups, drawn in their order (module docstring)."""
    if setup == "neg_def_V":
        rs = np.random.RandomState(35)
        Q = rs.rand(2, 2)
        B = rs.randn(2, 2)
        return {"Q": Q, "K": -Q, "V": B @ B.T, "seed": "35"}
    if setup == "rank_1":
        rs = np.random.RandomState(36)
        q = rs.randn(1, 2)
        q = q / np.linalg.norm(q)
        rs.randn(2, 2)    # their random V, drawn and not used (V = I)
        return {"Q": q, "K": -q, "V": np.eye(2), "seed": "36"}
    if setup in ("mixed_3d", "both_V"):
        Q, K = _redraw(np.random.RandomState(36), lambda e: e[0] * e[1] < 0)
        if setup == "mixed_3d":
            V = np.random.RandomState(32).randn(2, 2)
            return {"Q": Q, "K": K, "V": V, "seed": "36, then 32 for V"}
        rs = np.random.RandomState(35)
        rs.randn(8, 7)    # their discarded draw
        return {"Q": Q, "K": K, "V": rs.randn(2, 2), "seed": "36, then 35 for V"}
    if setup == "explosion":
        Q, K = _redraw(np.random.RandomState(33), lambda e: e[0] > 0)
        return {"Q": Q, "K": K, "V": np.eye(2), "seed": "33"}
    raise ValueError(setup)


@dataclass(frozen=True)
class Run:
    """One of their runs: output file, variant, heads, their step and stopping rules."""
    file: str
    kind: str                # softmax | l2 | sinkhorn | multihead
    H: int
    h: float
    tol_low: float
    tol_high: float = 1e3
    max_iter: int = 50_000
    note: str = ""


@dataclass(frozen=True)
class Setup:
    name: str
    draws: str
    grid: tuple              # (n_u, n_c, limits)
    view: str                # "cone" (3-D, cone coordinates) or "disk" (Σ/tr Σ)
    colour_by: str           # "w" (starting point) or "trace" (final trace)
    runs: tuple[Run, ...] = field(default_factory=tuple)
    what: str = ""


_SMALL, _BIG = (10, 10, (-0.5, 0.5, -0.5, 0.5)), (-1.0, 1.0, -1.0, 1.0)
SETUPS: dict[str, Setup] = {s.name: s for s in (
    Setup("neg_def_V", "neg_def_V", _SMALL, "cone", "w", (
        Run("trad_neg_def_V", "softmax", 1, 0.3, 1e-5), Run("L2_neg_def_V", "l2", 1, 0.3, 1e-5),
        Run("MH_neg_def_V", "multihead", 2, 0.3, 1e-5), Run("sink_convergence", "sinkhorn", 1, 0.5, 1e-5)),
        r"$A = -Q^\top Q/\sqrt{2} \prec 0$, $V = BB^\top$: collapse to 0"),
    Setup("rank_1", "rank_1", _SMALL, "cone", "w", (
        Run("trad_rank_1", "softmax", 1, 0.5, 1e-4), Run("L2_rank_1", "l2", 1, 0.5, 1e-4)),
        r"$A = -q^\top q/\sqrt{2}$, $V = I$: rank-one limit on $\ker A = q^\perp$"),
    Setup("MH_rank_1", "rank_1", _SMALL, "cone", "w", (
        Run("MH_rank_1", "multihead", 2, 0.5, 1e-4,
            note="row split of a 1x2 Q: head 2 empty, A_2 = 0; head 1 has V_1 = e1 e1^T"),),
        r"their multi-head $H = 2$ on $Q = q \in \mathbb{R}^{1\times 2}$: head 2 has $A_2 = 0$"),
    Setup("mixed_3d", "mixed_3d", (20, 20, _BIG), "cone", "trace", (
        Run("trad_mixed_3d", "softmax", 1, 0.01, 1e-7, note="their file plots the l2 run (variable overwritten)"),
        Run("L2_mixed_3d", "l2", 1, 0.01, 1e-7)),
        r"indefinite $A + A^\top$, random $V$: 'two lines'"),
    Setup("explosion", "explosion", (40, 40, _BIG), "disk", "w", (
        Run("trad_explosion", "softmax", 1, 0.01, 1e-4, max_iter=100_000),
        Run("MH_explosion", "multihead", 2, 0.002, 1e-4, max_iter=100_000)),
        r"$A + A^\top \succ 0$, $V = I$: finite-time blow-up, $\Sigma/\mathrm{tr}\,\Sigma \to$ rank one"),
    Setup("divergence", "explosion", (40, 40, _BIG), "disk", "w", (
        Run("L2_divergence", "l2", 1, 0.001, 1e-5, tol_high=1e4),
        Run("sink_divergence", "sinkhorn", 1, 0.01, 1e-5, tol_high=1e4)),
        r"$A + A^\top \succ 0$, $V = I$: $\ell_2$ and Sinkhorn grow without finite-time blow-up"),
    Setup("both_V", "both_V", (30, 30, _BIG), "disk", "w", (
        Run("trad_both_V", "softmax", 1, 0.003, 1e-4), Run("L2_both", "l2", 1, 0.002, 1e-4),
        Run("MH_both", "multihead", 1, 0.002, 1e-4, note="called with the default H = 1: single-head softmax")),
        r"indefinite $A + A^\top$, random $V$: outcome depends on $\Sigma_0$"),
)}


def setup_weights(setup: Setup, run: Run) -> Weights:
    p = draws(setup.draws)
    return weights_for(run.kind, p["Q"], p["K"], p["V"], run.H)


def setup_grid(setup: Setup) -> tuple[np.ndarray, np.ndarray]:
    n_u, n_c, lim = setup.grid
    return authors_grid(n_u, n_c, lim)


# ------------------------------------------------------------------------------------------ histograms
HIST_STEPS = {"softmax": (0.09, 0.05, 0.02), "l2": (0.09, 0.06, 0.02)}   # their V = I step sizes, d = 3, 4, 5


def histogram_draws(d: int, n: int, n_per_dim: int = 100) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """First ``n`` of their ``(Q, Σ₀)`` at dimension ``d`` (``V = I``): all ``Q ∈ R^{⌊d/2⌋×d}`` for
    ``d = 3, 4, 5`` (100 each) are drawn in one stream from seed 40; ``Σ₀ = GGᵀ`` from seed 41 reset per
    dimension.  (Their retry rule draws a fresh ``Σ₀`` for the same ``Q`` after a non-converged run; the
    first 20 runs per dimension all converge at their step sizes, which :func:`projected_euler` reports.)"""
    rs = np.random.RandomState(40)
    Qs = [rs.randn(dd // 2, dd) for dd in np.repeat([3, 4, 5], n_per_dim)]
    j = (3, 4, 5).index(d)
    rs0 = np.random.RandomState(41)
    G = [rs0.randn(d, d) for _ in range(n)]
    return Qs[j * n_per_dim: j * n_per_dim + n], [g @ g.T for g in G]


# ------------------------------------------------------------------------------------------ the schemes
def covariance_field(weights_list: list[Weights]) -> Callable[[np.ndarray], np.ndarray]:
    """``F(S) -> dΣ/dt`` for a batch ``S (N, d, d)``, row ``i`` with ``weights_list[i]`` (one structure),
    from our generated batched right-hand side (mean 0: the covariance equation of these kinds does not
    involve the mean, README Mathematics §3)."""
    from ..gaussian import GaussianODE

    ode = GaussianODE.from_weights(weights_list[0])
    P = np.array([ode.params(0.0)] + [GaussianODE.from_weights(w).params(0.0) for w in weights_list[1:]])
    d = ode.d
    iu, ju = np.triu_indices(d)      # the packed layout (registry.layout.pack), indexed once

    def F(S, rows=None):
        S = np.asarray(S, float)
        Y = np.zeros((len(S), d + len(iu)))
        Y[:, d:] = S[:, iu, ju]
        PP = P[0] if len(P) == 1 else (P if rows is None else P[rows])
        dY = np.asarray(ode.rhs_batch(0.0, Y, PP), float)
        out = np.empty_like(S)
        out[:, iu, ju] = dY[:, d:]
        out[:, ju, iu] = dY[:, d:]
        return out

    return F


@dataclass
class EulerResult:
    paths: list[np.ndarray]   # per row, the iterates S_0, S_1, … (their S_list), subsampled if asked
    last: np.ndarray          # (N, d, d) their S_list[-1]
    steps: np.ndarray         # (N,) iterations done (their i + 1)
    status: list[str]         # "converged" | "diverged" | "max_iter"
    clipped: np.ndarray       # (N,) steps at which the projection clipped a negative eigenvalue


def projected_euler(F: Callable, S0s: np.ndarray, h: float, tol_low: float, tol_high: float = 1e3,
                    max_iter: int = 50_000, keep_paths: bool = True, max_points: int = 600) -> EulerResult:
    """The authors' projected Euler scheme (module docstring) on a batch, each row with its own stop.

    ``F(S, rows)`` evaluates ``dΣ/dt`` for the active rows (:func:`covariance_field`).  Paths keep every
    iterate up to ``max_points`` and then every k-th (plus the last), enough to draw them."""
    S = np.array(S0s, float)
    N = len(S)
    active = np.arange(N)
    steps = np.zeros(N, int)
    status = ["max_iter"] * N
    clipped = np.zeros(N, int)
    last = S.copy()
    hist: list[list[np.ndarray]] = [[S[i].copy()] for i in range(N)] if keep_paths else []
    stride = 1
    for it in range(max_iter):
        if not active.size:
            break
        cur = S[active]
        last[active] = cur
        r = F(cur, active)
        nrm = np.linalg.norm(r, axis=(1, 2))
        new = cur + h * r
        lam, U = np.linalg.eigh(new)
        neg = lam < 0
        clipped[active] += neg.any(axis=1)
        lam = np.where(neg, CLIP, lam)
        new = (U * lam[:, None, :]) @ np.swapaxes(U, 1, 2)
        S[active] = new
        steps[active] = it + 1
        conv = nrm < tol_low
        div = ~conv & (np.trace(new, axis1=1, axis2=2) > tol_high)
        for i in active[conv]:
            status[i] = "converged"
        for i in active[div]:
            status[i] = "diverged"
        if keep_paths:
            if it + 1 >= max_points * stride:
                stride *= 2
                for i in range(N):
                    hist[i] = hist[i][::2]
            if (it + 1) % stride == 0:
                for i, s in zip(active, new):
                    hist[i].append(s.copy())
        active = active[~(conv | div)]
    paths = []
    if keep_paths:
        for i in range(N):
            p = hist[i]
            # their S_list stops at `last` (the iterate before the final update)
            while len(p) > 1 and np.array_equal(p[-1], S[i]):
                p = p[:-1]
            paths.append(np.array(p + [last[i]]))
    return EulerResult(paths, last, steps, status, clipped)
