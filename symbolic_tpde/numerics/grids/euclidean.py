"""Finite volumes for the Transformer PDE ``∂ₜμ + ∇·(μ Γ_μ) = 0`` in ℝ¹ and ℝ² (Eulerian; README "Grid solver").

State: the masses ``m_c ≥ 0`` of the cells of a uniform Cartesian grid (spacings ``h_k``), plus the mass ``L``
that left through the boundary.  Right-hand side, per axis ``k``:

* velocity at the cell centres ``u_c = Γ_μh(x_c)``: the attention field of the measure ``μ_h = Σ_c m_c δ_{x_c}``,
  i.e. the particle field with the cell masses as weights (:func:`weighted_field`: the package's attention
  kernel :func:`.fields_core.attend` with key biases ``log m_c``, so no second attention sum); face velocity
  ``a_{c+½} = (u_c + u_{c+1})/2`` (one-sided at the domain boundary).  Cell masses as point masses are the
  midpoint rule: ``Σ_c m_c g(x_c) = ∫ g dμ + Σ_k (h_k²/24) ∫ ∂²_k g dμ + O(h⁴)`` (Sheppard's correction): the
  grid measure's second moment is too large by ``H = diag(h²/12)``, so softmax's tilted mean (``V(ȳ + H A x)``
  for Gaussian data) and linear attention's ``V M A x`` both carry ``+V H A x``; :func:`_sheppard` subtracts it
  for those kinds (velocity error O(h⁴) instead of O(h²); the other kinds keep the O(h²) midpoint rule);
* reconstruction: ``scheme="upwind"`` piecewise constant; ``scheme="muscl"`` piecewise linear with slope ``s_c``,
  face values ``m_c ± s_c/2``, ``Δ^± = ±(m_{c±1} - m_c)`` (zero ghost cells).  Where the cell resolves the data,
  ``|Δ⁺ - Δ⁻| ≤ κ m_c`` (``κ = SMOOTH = 1/4``: the second difference small against the cell's own mass), the
  central slope ``(Δ⁺ + Δ⁻)/2``; elsewhere (jumps, unresolved tails, negative round-off masses) the
  monotonized-central (MC) slope of van Leer, ``minmod((Δ⁺ + Δ⁻)/2, 2Δ⁺, 2Δ⁻)``.  Positivity: MC face values lie
  between ``m_c`` and its neighbours; a central slope under the test has ``|s_c| ≤ (1 + κ/2) m_c`` (the
  neighbours are ``≥ 0``, so ``Δ⁻ ≤ m_c`` and ``Δ⁺ ≤ Δ⁻ + κ m_c``, and symmetrically), so both face values lie in
  ``[0, 2 m_c]``: the forward-Euler bound below is unchanged.  The relaxation is Shu's TVB idea (1987) with a
  threshold relative to the cell mass instead of ``M h²`` (scale-free): a face value may leave the neighbours'
  range by at most ``κ m_c / 4``.  Why: MC clips at smooth extrema and, in 2-D, in a band around each curve
  where a directional derivative vanishes; measured (``numerics/grid_limiter_orders.py``, softmax_2d, Gaussian
  data, T = 0.5, 16² → 128²): plain MC 1.80, 1.70, 1.75; this limiter with Sheppard's correction 2.25, 1.85,
  1.87; with the exact velocity it equals the unlimited scheme from 64² on (1.90, 1.93 to 256²), plain MC
  reaches 1.94 only at 128² → 256²; minmod 1.27, 1.39; the time step plays no part (CFL 0.2, SSPRK3: same
  errors to 3 digits);
* flux ``F_{c+½} = a⁺ m^E_c + a⁻ m^W_{c+1}`` (upwind of the face), ``dm_c/dt = -(F_{c+½} - F_{c-½})/h_k``; the
  boundary fluxes feed ``dL/dt``, so ``Σ m + L`` is conserved to round-off by construction (telescoping sums).

Cells below :data:`FLOW_TOL` of the mass carry no flux out (they only receive): the CFL bound below is taken
over the faces next to cells that carry mass, not over far, nearly empty cells (where an unnormalised kernel's
velocity is huge); their mass stays on the grid and is reported as ``frozen`` (at most ``FLOW_TOL`` per cell).

Time: the strong-stability-preserving Runge–Kutta methods SSPRK2 (Heun) or SSPRK3 (Shu–Osher), given as
:class:`.rk.Tableau` and stepped by :func:`.rk.rk_stages` (the package's one RK routine).  Both are convex
combinations of forward-Euler steps, so the forward-Euler positivity bound carries over: the step is
``cfl · min_k h_k / (ν d max|a_k|)`` with ``ν = 1`` (upwind) or ``2`` (MUSCL), ``cfl = 0.8`` by default (the
velocity changes within a step: a stage with a negative mass below ``-POS_TOL · mass`` makes the step redo
itself at half the size).  Orders: upwind 1 (smooth data, L¹) and ½ in W₁ for rough data (Delarue,
Lagoutière, Vauchelet 2020), MUSCL 2 on smooth data (Carrillo, Chertock, Huang 2015; first order in a band of
cells at extrema, where the limited slope is 0).

Domain.  The initial box covers the data (Gaussian components: mean ± ``SPREAD`` standard deviations, where
the tail mass is below 1e-14; uniform and file data: their support) plus ``pad`` of its width on each side.
It follows the support: after every step, if the outer ``BAND`` cells on a side hold more than
``GROW_TOL`` of the mass, ``max(BAND, N/8)`` empty cells are added on that side (exact: no remap), up to
``max_growth`` times the initial cell count per axis; past that the mass crossing the boundary is removed and
reported as ``lost``.  The spacing never changes (the grid does not refine as the measure contracts: a run
that concentrates into a few cells loses accuracy; ``GridRun.occupied`` reports how many cells hold 99 %).

Kinds: every ℝᵈ kind whose field is a sum over the measure: every kind registered with a quadratic form
(softmax, ℓ2, custom, softmax_unnormalized, and a kind added with one: :func:`_form_field` reads the form),
linear, sigmoid; multi-head sums; ``ffn`` added.  Refused with a one-line reason: ``sinkhorn`` (the
plan's marginals would be the cell masses: the package's Sinkhorn solver has uniform marginals only) and
``masked`` (the position axis makes it a problem on [0,1] × ℝᵈ).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ...errors import BlowupError, InputError
from ...registry import kinds
from ..ode import rk
from ..particles.attend import attend
from . import separable

__all__ = ["weighted_field", "Grid", "GridRun", "solve_grid", "initial_grid", "SSPRK2", "SSPRK3", "MAX_CELLS"]

SSPRK2 = rk.Tableau("ssprk2", np.array([0.0, 1.0]), np.array([[0.0, 0.0], [1.0, 0.0]]), np.array([0.5, 0.5]), 2)
SSPRK3 = rk.Tableau("ssprk3", np.array([0.0, 1.0, 0.5]),
                    np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.25, 0.25, 0.0]]),
                    np.array([1 / 6, 1 / 6, 2 / 3]), 3)
SPREAD = 8.5          # Gaussian tail beyond 8.5 sd: < 2e-17 per side and axis
BAND, GROW_TOL, POS_TOL = 3, 1e-13, 1e-13
SMOOTH = 0.25         # κ of the reconstruction's smoothness test (module docstring)
MAX_CELLS = 1 << 16   # per run: the dense velocity evaluation is O(cells²)
#: Largest fraction of the initial law's mass that its projection onto the cells may miss (mass outside the box
#: plus the cell quadrature error); the projected masses are normalised to 1 and the miss is reported as
#: ``truncated``.  Above it the grid does not resolve the law (too coarse, or ``--pad`` so wide that the law
#: falls in a few cells): refused, never run with a wrong initial law.
MAX_TRUNCATED = 1e-2
#: Work budget of one run in cell-pair evaluations: each evaluation of a dense kind's field costs (cells next
#: to the mass) x (cells with mass) pairs (``linear``: their sum, it is O(cells)) plus EVAL_OVERHEAD; 2e10 is a
#: minute or two of one core.  A run whose CFL step would need more (e.g. huge velocities in nearly empty far
#: cells of an unnormalised kernel, or ``--cfl 1e-9``) stops with status ``"step-budget"`` at the time reached: the budget
#: follows from the input (the cells and the kinds), unlike the wall-clock cap.
WORK_BUDGET = 2e10
#: Each evaluation also counts this many cell pairs: its fixed cost (measured ~1 ms for 19 cells in 1-D, the
#: cost of ~2e5 pairs at ~5 ns), so the budget bounds small grids too (1-D, 16 cells, T = 1e6 ran for hours:
#: its pairs alone never reached the budget)
EVAL_OVERHEAD = 2e5
#: A cell whose mass is below ``FLOW_TOL`` (of the total mass 1) carries no flux out: it only receives, so it stays
#: ``>= 0``, and the CFL step is bounded over the faces next to cells that carry mass (flowing cells) only.  Why:
#: an unnormalised kernel's velocity grows like ``e^{c|x|}``, so the far cells of a Gaussian start (masses down to
#: 1e-91) set a CFL step 60x below the one where the mass is (2-D softmax_unnormalized, 24² cells: speed 2.5e3
#: there against 37 at cells above 1e-15; the run ground at t = 0.005 of 0.347 after 10 s).  The mass held in
#: such cells stays on the grid (the total is conserved exactly) and is reported as ``frozen``: at most
#: ``FLOW_TOL x cells`` (6.6e-11 at the 65 536-cell bound), so the moments move by at most that times the box.
FLOW_TOL = 1e-15
#: A run whose pace (the last step's length and work) projects more than this many times WORK_BUDGET for the rest
#: of ``[t, T]`` stops at once with status ``"step-budget"`` and the projection (e.g. ``--cfl 1e-9``: the budget
#: would otherwise be spent, minutes, before saying so): the pace would have to improve this much to finish
PROJECTED_EXCESS = 100.0


# ---------------------------------------------------------------------------------- weighted attention field
def _log_mass(m):
    with np.errstate(divide="ignore"):
        return np.log(m)


def _form_field(spec):
    """The weighted field of a kind registered with a quadratic form ``log k = xᵀBy + yᵀRy + rᵀy + …``
    (:attr:`symbolic_tpde.registry.kinds.KindSpec.quadratic`): the cell masses enter as one more key bias,
    ``log m_j`` (normalised) or ``log(n m_j)`` (unnormalised: mode ``"exp"`` is ``(1/n) Σ_j e^{q·k_j + β_j} v_j``,
    so this gives ``Σ_j m_j k(x, x_j) v_j``)."""
    def weighted(Xq, Xk, m, p, thr):
        f = spec.form(p)
        bias = _log_mass(m) if spec.normalised else _log_mass(m * len(m))
        if f["R"] is not None:
            bias = bias + np.einsum("ij,ij->i", Xk @ np.asarray(f["R"], float).T, Xk)
        if f["r"] is not None:
            bias = bias + Xk @ np.asarray(f["r"], float)
        q = Xq @ np.asarray(f["B"], float)
        if spec.normalised:
            return attend(q, Xk, Xk, key_bias=bias, threads=thr) @ p["V"].T
        with np.errstate(invalid="ignore", over="ignore"):
            return attend(q, Xk, Xk, mode="exp", key_bias=bias, threads=thr) @ p["V"].T
    return weighted


def _sigmoid(Xq, Xk, m, p, thr):
    # mode "sigmoid" is (1/n_k) Σ_j σ(q·k_j + b) v_j (no key bias): the weights go into the values
    vals = Xk * (m * len(m))[:, None]
    return attend(Xq @ p["A"].T, Xk, vals, mode="sigmoid", shift=float(p["b"]), threads=thr) @ p["V"].T


def _linear(Xq, Xk, m, p, thr):
    M = (Xk * m[:, None]).T @ Xk       # Σ_j m_j x_j x_jᵀ: the O(n d²) rearrangement of the double sum
    return Xq @ (p["V"] @ M @ p["A"]).T


#: weighted fields of the kinds without a quadratic form (those with one use :func:`_form_field`)
WEIGHTED = {"sigmoid": _sigmoid, "linear": _linear}
REFUSED = {
    "sinkhorn": "sinkhorn attention is not in the grid solver: its plan would need the cell masses as marginals "
                "and the package's Sinkhorn solver has uniform marginals only (use tpde particles)",
    "masked": "masked attention is not in the grid solver: its position axis makes it a problem on [0,1] x R^d "
              "(use tpde particles)",
}


def _weighted(kind: str):
    """The weighted field of ``kind``: its quadratic form's, else its entry of :data:`WEIGHTED`, else None."""
    spec = kinds.get(kind)
    return _form_field(spec) if spec.quadratic is not None else WEIGHTED.get(kind)


def check_kinds(weights) -> None:
    """InputError (one line, the reason) for a head the grid solver does not take."""
    for i, head in enumerate(weights.heads):
        if _weighted(head.kind) is None:
            raise InputError(f"heads[{i}].attention", REFUSED.get(
                head.kind, f"{head.kind!r} has no weighted field in the grid solver"))


def weighted_field(Xq, Xk, m, weights, *, threads=None) -> np.ndarray:
    """``Γ_μ(x)`` at the rows of ``Xq`` for ``μ = Σ_j m_j δ_{x_j}`` (``Xk (n, d)``, masses ``m ≥ 0`` summing to
    the measure's mass; zero masses are allowed).  All heads of ``weights`` summed, plus ``W x + c``.  With
    ``m_j = 1/n`` and ``Xq = Xk`` this is :func:`.fields.field` of the cloud (tested)."""
    check_kinds(weights)
    Xq = np.ascontiguousarray(Xq, dtype=float)
    Xk = np.ascontiguousarray(Xk, dtype=float)
    m = np.ascontiguousarray(m, dtype=float)
    keep = m > 0                      # a zero mass is no key (its log-bias would be -inf)
    if not keep.all():
        Xk, m = np.ascontiguousarray(Xk[keep]), np.ascontiguousarray(m[keep])
    out = np.zeros_like(Xq)
    for head in weights.heads:
        out += _weighted(head.kind)(Xq, Xk, m, head.effective, threads)
    if weights.ffn is not None:
        out += Xq @ weights.ffn.W.T + weights.ffn.c
    return out


# ------------------------------------------------------------------------------------------------ the grid
@dataclass
class Grid:
    """Uniform Cartesian grid: lower corner ``lo (d,)``, spacings ``h (d,)``, cells per axis ``shape``."""

    lo: np.ndarray
    h: np.ndarray
    shape: tuple

    @property
    def d(self) -> int:
        return len(self.shape)

    @property
    def edges(self) -> list[np.ndarray]:
        return [self.lo[k] + self.h[k] * np.arange(n + 1) for k, n in enumerate(self.shape)]

    @property
    def centres(self) -> np.ndarray:
        cs = [(e[1:] + e[:-1]) / 2 for e in self.edges]
        return np.stack(np.meshgrid(*cs, indexing="ij"), axis=-1).reshape(-1, self.d)

    @property
    def cell_volume(self) -> float:
        return float(np.prod(self.h))


def _support_box(spec):
    """A box holding the law's support (Gaussian parts: mean ± SPREAD sd)."""
    p = spec.params
    if spec.type == "gaussian":
        s = np.sqrt(np.diag(p["Sigma"]))
        return p["alpha"] - SPREAD * s, p["alpha"] + SPREAD * s
    if spec.type == "mixture":
        s = np.sqrt(np.diagonal(p["covs"], axis1=1, axis2=2))
        return (p["means"] - SPREAD * s).min(axis=0), (p["means"] + SPREAD * s).max(axis=0)
    if spec.type == "uniform_box":
        return p["low"], p["high"]
    if spec.type == "uniform_ball":
        return p["center"] - p["radius"], p["center"] + p["radius"]
    if spec.type == "empirical":
        return p["points"].min(axis=0), p["points"].max(axis=0)
    if spec.type == "grid_density":
        return np.array([e[0] for e in p["edges"]]), np.array([e[-1] for e in p["edges"]])
    raise InputError("init.type", f"{spec.type!r} has no support box for the grid solver")


def initial_grid(spec, N: int, pad: float = 0.25) -> Grid:
    """``N`` cells per axis over the support box of ``spec`` widened by ``pad`` of its width on each side."""
    if spec.d > 2:
        raise InputError("d", f"the grid solver covers d = 1 and d = 2, got d = {spec.d}")
    lo, hi = (np.asarray(a, dtype=float) for a in _support_box(spec))
    width = np.maximum(hi - lo, 1e-12 * np.maximum(1.0, np.abs(lo)))
    lo, hi = lo - pad * width, hi + pad * width
    return Grid(lo, (hi - lo) / N, (N,) * spec.d)


def _mc_slope(dp, dm):
    """Monotonized-central slope from the forward/backward differences (module docstring)."""
    mag = np.minimum(np.minimum(2 * np.abs(dp), 2 * np.abs(dm)), np.abs(dp + dm) / 2)
    return np.where(dp * dm > 0, np.sign(dp) * mag, 0.0)


def _slope(dp, dm, m):
    """Central slope where ``|Δ⁺ - Δ⁻| ≤ SMOOTH · m``, MC elsewhere (module docstring)."""
    return np.where(np.abs(dp - dm) <= SMOOTH * m, (dp + dm) / 2, _mc_slope(dp, dm))


def _axis_flux(m, a, k, muscl):
    """Face fluxes along axis ``k`` (shape of ``m`` with ``N_k + 1`` along ``k``) for face velocities ``a``."""
    z = np.zeros_like(np.take(m, [0], axis=k))
    mp = np.concatenate([z, m, z], axis=k)                       # zero ghost cells
    if muscl:
        dm = np.diff(mp, axis=k)                                  # N_k + 1 differences
        s = _slope(np.take(dm, range(1, dm.shape[k]), axis=k), np.take(dm, range(0, dm.shape[k] - 1), axis=k), m)
        east, west = m + s / 2, m - s / 2
    else:
        east = west = m
    east = np.concatenate([z, east], axis=k)                      # east value of the cell left of each face
    west = np.concatenate([west, z], axis=k)                      # west value of the cell right of each face
    return np.maximum(a, 0) * east + np.minimum(a, 0) * west


def _face_velocity(u, k):
    """Axis-``k`` component averaged to the faces; one-sided (the cell's own) at both boundary faces."""
    uk = u[..., k]
    inner = (np.take(uk, range(0, uk.shape[k] - 1), axis=k) + np.take(uk, range(1, uk.shape[k]), axis=k)) / 2
    return np.concatenate([np.take(uk, [0], axis=k), inner, np.take(uk, [-1], axis=k)], axis=k)


def _dilate(mask):
    out = mask.copy()
    for k in range(mask.ndim):
        sl_a = [slice(None)] * mask.ndim
        sl_b = [slice(None)] * mask.ndim
        sl_a[k], sl_b[k] = slice(1, None), slice(None, -1)
        out[tuple(sl_a)] |= mask[tuple(sl_b)]
        out[tuple(sl_b)] |= mask[tuple(sl_a)]
    return out


def _sheppard(X, weights, h) -> np.ndarray:
    """``Σ V H (Bᵀx + r)`` over the normalised heads whose quadratic form has ``R = 0`` (softmax: ``V H A x``) and
    ``Σ V H A x`` over the linear heads, ``H = diag(h²/12)`` (module docstring: the tilt of ``N(ȳ, Σ + H)``
    moves the mean by ``(Σ + H)(Bᵀx + r)``)."""
    out = np.zeros_like(X)
    for head in weights.heads:
        spec, p = kinds.get(head.kind), head.effective
        if spec.tilt:
            f = spec.form(p)
            if f["R"] is not None:
                continue
            lin = X @ np.asarray(f["B"], float) if f["r"] is None else X @ np.asarray(f["B"], float) + f["r"]
            out += (lin * (h ** 2 / 12)) @ p["V"].T
        elif head.kind == "linear":
            out += ((X @ p["A"].T) * (h ** 2 / 12)) @ p["V"].T
    return out


class _Rhs:
    """``y = (masses.ravel(), lost)`` → ``dy/dt``; records the largest face speed per axis of the last call."""

    def __init__(self, grid: Grid, schedule, muscl: bool, threads, velocity_tol=None):
        self.grid, self.schedule, self.muscl, self.threads = grid, schedule, muscl, threads
        self.velocity_tol = velocity_tol  # None: the direct sum; else the separable path where it applies
        self.velocity_bound = 0.0         # largest error bound of a separable velocity so far
        self.C = grid.centres
        self.nfev = 0
        self.work = 0.0                   # cell pairs evaluated (WORK_BUDGET)
        self.amax = np.zeros(grid.d)

    def velocity(self, t, m, flowing=None):
        """Velocity ``(*shape, d)`` at the cell centres next to the ``flowing`` cells (default: every cell with
        mass; zero elsewhere: those faces carry no flux); every cell with mass is a key of the field."""
        keys = m.ravel() > 0
        query = _dilate(m > 0 if flowing is None else flowing).ravel()
        u = np.zeros((m.size, self.grid.d))
        if keys.any() and query.any():
            w = self.schedule(t)
            nq, nk = float(query.sum()), float(keys.sum())
            if self.velocity_tol is not None and separable.covers(w, self.grid):  # sub-quadratic, bounded error
                self.work += len(w.heads) * (nq + nk)
                v, bound = separable.weighted_field(self.C[query], self.grid, m, w, self.velocity_tol)
                self.velocity_bound = max(self.velocity_bound, float(bound.max()))
            else:
                self.work += sum(nq + nk if h.kind == "linear" else nq * nk for h in w.heads)
                v = weighted_field(self.C[query], self.C[keys], m.ravel()[keys], w, threads=self.threads)
            u[query] = v - _sheppard(self.C[query], w, self.grid.h)
        return u.reshape(m.shape + (self.grid.d,))

    def __call__(self, t, y):
        self.nfev += 1
        self.work += EVAL_OVERHEAD
        g = self.grid
        m = y[:-1].reshape(g.shape)
        flowing = np.abs(m) >= FLOW_TOL          # cells below FLOW_TOL carry no flux out (module constant)
        u = self.velocity(float(t), m, flowing)
        if not np.all(np.isfinite(u)):
            raise _NonFinite()
        dm = np.zeros_like(m)
        lost = 0.0
        m_flow = np.where(flowing, m, 0.0)
        for k in range(g.d):
            a = _face_velocity(u, k)
            z = np.zeros_like(np.take(flowing, [0], axis=k))
            near = np.concatenate([z, flowing], axis=k) | np.concatenate([flowing, z], axis=k)   # faces
            self.amax[k] = max(self.amax[k], float(np.abs(a[near]).max(initial=0.0)))
            F = _axis_flux(m_flow, a, k, self.muscl)
            dm -= np.diff(F, axis=k) / g.h[k]
            lost += (np.take(F, -1, axis=k).sum() - np.take(F, 0, axis=k).sum()) / g.h[k]
        return np.concatenate([dm.ravel(), [lost]])


class _NonFinite(ArithmeticError):
    pass


@dataclass
class GridRun:
    """Result of :func:`solve_grid`: final ``masses`` on ``grid``, time ``t``, ``lost`` (mass that left the
    domain), ``status`` (``"ok"``, ``"time-limit"`` or ``"step-budget"``: :data:`WORK_BUDGET`), counts, the largest ``mass_error`` (``|Σm + lost - M₀|``)
    and most negative mass seen after any step, ``truncated = 1 - Σ m₀`` (the law's mass outside the initial
    grid plus the quadrature error of the initial cell masses, at most :data:`MAX_TRUNCATED` in size; the projected
    masses are normalised to ``M₀ = 1``, which the run conserves), and the saved ``frames`` ``[(t, masses, lo)]``."""

    grid: Grid
    masses: np.ndarray
    t: float
    lost: float
    status: str
    steps: int
    rejected: int
    nfev: int
    grown: int
    mass_error: float
    min_mass: float
    truncated: float
    scheme: str
    seconds: float
    frames: list = field(default_factory=list, repr=False)
    velocity_bound: float = 0.0   # largest bound on a separable velocity's error (0: direct sums only)
    frozen: float = 0.0           # mass at the end in cells below FLOW_TOL (they carry no flux out)
    detail: str = ""              # why a "step-budget" run stopped (spent, or projected: PROJECTED_EXCESS)

    @property
    def density(self) -> np.ndarray:
        return self.masses / self.grid.cell_volume

    @property
    def occupied(self) -> int:
        """Number of cells holding 99 % of the mass (resolution indicator)."""
        s = np.sort(self.masses.ravel())[::-1]
        return int(np.searchsorted(np.cumsum(s), 0.99 * s.sum()) + 1)


def _grow(grid: Grid, m: np.ndarray, limit: tuple, N0: tuple):
    """Add empty cells on each side whose outer BAND cells hold more than GROW_TOL of the mass."""
    total = m.sum()
    grown = False
    for k in range(grid.d):
        n = m.shape[k]
        add = max(BAND, N0[k] // 8)
        for side in (0, 1):
            band = np.take(m, range(0, BAND) if side == 0 else range(n - BAND, n), axis=k)
            if band.sum() > GROW_TOL * total and m.shape[k] + add <= limit[k] \
                    and np.prod(m.shape) // m.shape[k] * (m.shape[k] + add) <= MAX_CELLS:
                shape = list(m.shape)
                shape[k] = add
                z = np.zeros(shape)
                m = np.concatenate([z, m] if side == 0 else [m, z], axis=k)
                if side == 0:
                    grid = Grid(grid.lo - add * grid.h * (np.arange(grid.d) == k), grid.h, m.shape)
                grid = Grid(grid.lo, grid.h, m.shape)
                grown = True
    return grid, m, grown


def solve_grid(spec, schedule, T: float, N: int, *, scheme: str = "muscl", cfl: float = 0.8, pad: float = 0.25,
               max_growth: float = 4.0, method: str = "ssprk2", grid: Grid | None = None, save_every: float = 0.0,
               threads=None, max_seconds=None, max_steps: int = 1_000_000,
               velocity_tol: float | None = separable.DEFAULT_TOL) -> GridRun:
    """Solve the PDE from the initial law ``spec`` (an :class:`~symbolic_tpde.inputs.scenario.InitSpec`) to ``T`` with
    ``N`` cells per axis (module docstring).  ``schedule``: a :class:`~symbolic_tpde.weights.Schedule` (weights
    read at each stage time).  ``grid``: use this grid instead of :func:`initial_grid` (convergence studies).
    ``save_every``: keep a frame at least this far apart in time (0: first and last only).  A non-finite
    velocity raises :class:`~symbolic_tpde.errors.BlowupError` with the last time the state was finite.
    ``velocity_tol``: relative tolerance of the separable velocity (:mod:`.separable`: 2-D softmax, ℓ2 and
    custom heads from 32² cells on; its error bound is ``GridRun.velocity_bound``); None: the direct sum."""
    from ..measures.laws import cell_masses
    from ..ode.solve import Deadline

    if scheme not in ("upwind", "muscl"):
        raise InputError("scheme", f"must be 'upwind' or 'muscl', got {scheme!r}")
    tab = {"ssprk2": SSPRK2, "ssprk3": SSPRK3}.get(method)
    if tab is None:
        raise InputError("method", f"must be 'ssprk2' or 'ssprk3', got {method!r}")
    if not (isinstance(N, int) and N >= 4):
        raise InputError("grid", f"must be an integer >= 4 (cells per axis), got {N!r}")
    if not 0 < cfl <= 1:
        raise InputError("cfl", f"must lie in (0, 1], got {cfl}")
    g = initial_grid(spec, N, pad) if grid is None else grid
    if int(np.prod(g.shape)) > MAX_CELLS:
        raise InputError("grid", f"{int(np.prod(g.shape))} cells exceed the bound {MAX_CELLS} (the velocity "
                         "evaluation is quadratic in the cell count)")
    check_kinds(schedule(0.0))
    if velocity_tol is not None:
        separable.nodes_for(velocity_tol)  # InputError unless a positive number
    vbound = 0.0
    m = np.asarray(cell_masses(spec, g.edges), dtype=float)
    raw = float(m.sum())
    truncated = 1.0 - raw
    if not raw > 0:
        raise InputError("init", f"no mass of the initial law lands on the grid (cell masses sum to {raw!r}: the law is "
                         "narrower than the grid resolves, e.g. than the float64 spacing at its centre)")
    if not abs(truncated) <= MAX_TRUNCATED:
        raise InputError("grid", f"the projection of the initial law onto the {'x'.join(map(str, g.shape))} cells "
                         f"misses {abs(truncated):.3g} of its mass (more than {MAX_TRUNCATED:g}: the cells do not "
                         "resolve it); raise --grid or lower --pad")
    m = m / raw                 # the projected law, normalised: mass 1 (the miss is reported as truncated)
    mean0, cov0 = grid_moments(g, m)
    sd0 = np.sqrt(np.maximum(np.diag(cov0), 0.0))
    if np.any(sd0 < 0.5 * g.h):      # one cell alone has sd h/√12 ≈ 0.29 h: the law must spread over cells
        k = int(np.argmin(sd0 / g.h))
        raise InputError("grid", f"the initial law spans less than two cells along axis {k} (standard deviation "
                         f"{sd0[k]:.3g}, cell width {g.h[k]:.3g}): raise --grid or lower --pad")
    M0 = 1.0
    N0 = g.shape
    limit = tuple(int(max_growth * n) for n in g.shape)
    nu = 2.0 if scheme == "muscl" else 1.0
    deadline = Deadline.of(max_seconds)
    t, lost, steps, rejected, nfev, grown, work = 0.0, 0.0, 0, 0, 0, 0, 0.0
    mass_err, min_mass = 0.0, float(m.min())
    frames = [(0.0, m.copy(), g.lo.copy())]
    last_frame = 0.0
    status, detail = "ok", ""
    t_start = time.perf_counter()
    while t < T:
        if deadline.expired():
            status = "time-limit"
            break
        if steps >= max_steps:
            raise InputError("grid", f"more than {max_steps} steps before T (the CFL step became too small)")
        if work >= WORK_BUDGET:
            status = "step-budget"
            detail = f"the work budget of {WORK_BUDGET:.0e} cell-pair evaluations ran out"
            break
        f = _Rhs(g, schedule, scheme == "muscl", threads, velocity_tol)
        y = np.concatenate([m.ravel(), [lost]])
        try:
            f0 = f(t, y)
        except _NonFinite:
            raise BlowupError(t, "grid velocity", "the attention field at the cell centres is not finite") from None
        amax = f.amax.copy()
        dt_cfl = cfl * float(np.min(g.h / (nu * g.d * np.maximum(amax, 1e-300))))
        dt = min(dt_cfl, T - t)
        while True:
            if dt < 1e-12 * max(1.0, T) and dt < T - t:   # (a rejected step halves dt down to the same floor)
                raise BlowupError(t, "grid", f"the CFL step fell below {dt:.3g} (velocity {float(np.max(amax)):.3g}: "
                                  "a concentration the grid cannot follow, or a blow-up)")
            f.amax[:] = 0
            try:
                y1, _ = rk.rk_stages(tab, f, t, y, dt, f0)
            except _NonFinite:
                y1 = None
            ok = y1 is not None and np.all(np.isfinite(y1)) and float(y1[:-1].min()) >= -POS_TOL * M0 \
                and bool(np.all(f.amax * dt <= g.h / (nu * g.d)))   # every stage's speeds within the CFL bound
            if ok:
                break
            rejected += 1
            dt /= 2
        nfev += f.nfev
        work += f.work
        need = (T - t - dt) / dt * f.work if dt < T - t else 0.0
        if need > PROJECTED_EXCESS * WORK_BUDGET:
            status = "step-budget"
            detail = (f"at the pace of the last step (dt = {dt:.3g}, {f.work:.3g} cell-pair evaluations) the rest of "
                      f"[t, T] needs about {need:.3g} evaluations, over {PROJECTED_EXCESS:g}x the work budget "
                      f"{WORK_BUDGET:.0e}")
        vbound = max(vbound, f.velocity_bound)
        m = y1[:-1].reshape(g.shape)
        lost = float(y1[-1])
        t = T if dt == T - t else t + dt
        steps += 1
        mass_err = max(mass_err, abs(float(m.sum()) + lost - M0))
        min_mass = min(min_mass, float(m.min()))
        g, m, did = _grow(g, m, limit, N0)
        grown += did
        if save_every > 0 and (t - last_frame >= save_every or t >= T):
            frames.append((t, m.copy(), g.lo.copy()))
            last_frame = t
        if status == "step-budget":
            break
    if frames[-1][0] != t:
        frames.append((t, m.copy(), g.lo.copy()))
    frozen = float(m[(m > 0) & (m < FLOW_TOL)].sum())
    return GridRun(g, m, t, lost, status, steps, rejected, nfev, grown, mass_err, min_mass, truncated, scheme,
                   time.perf_counter() - t_start, frames, vbound, frozen, detail)


# ----------------------------------------------------------------------------------------- grid measures
def grid_moments(grid: Grid, masses) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of the piecewise-constant density with cell ``masses`` (normalised to mass 1):
    exact (``Σ p_c (x_c x_cᵀ + diag(h²/12))`` for the covariance)."""
    p = np.asarray(masses, dtype=float).ravel()
    p = p / p.sum()
    C = grid.centres
    mean = p @ C
    cov = np.einsum("c,ci,cj->ij", p, C, C) + np.diag(grid.h ** 2 / 12) - np.outer(mean, mean)
    return mean, (cov + cov.T) / 2


def _quantile_segments_grid(edges, masses):
    m = np.asarray(masses, dtype=float)
    s = np.concatenate([[0.0], np.cumsum(m) / m.sum()])
    keep = m > 0
    return s[:-1][keep], s[1:][keep], edges[:-1][keep], edges[1:][keep]


def _quantile_segments_points(x, weights=None):
    order = np.argsort(x, kind="stable")
    x = np.asarray(x, dtype=float)[order]
    w = np.full(len(x), 1.0 / len(x)) if weights is None else np.asarray(weights, dtype=float)[order]
    s = np.concatenate([[0.0], np.cumsum(w) / w.sum()])
    return s[:-1], s[1:], x, x


def _quantile_at(seg, S):
    s0, s1, q0, q1 = seg
    j = np.clip(np.searchsorted(s0, S, side="right") - 1, 0, len(s0) - 1)
    L = s1[j] - s0[j]
    th = np.where(L > 0, (S - s0[j]) / np.where(L > 0, L, 1.0), 0.0)
    return q0[j] + (q1[j] - q0[j]) * np.clip(th, 0.0, 1.0)


def wasserstein_1d_exact(a, b, p: int = 1) -> float:
    """``W_p`` (p = 1 or 2) between two measures on ℝ, each ``("grid", edges, masses)`` (piecewise-constant
    density: its quantile function is piecewise linear) or ``("points", x)`` (empirical: a step quantile).
    Exact up to round-off: ``W_p^p = ∫₀¹ |Q_a(s) - Q_b(s)|^p ds`` with both quantiles affine between the merged
    breakpoints, integrated in closed form."""
    if p not in (1, 2):
        raise InputError("p", f"must be 1 or 2, got {p}")
    segs = [(_quantile_segments_grid(np.asarray(m[1], float), m[2]) if m[0] == "grid"
             else _quantile_segments_points(m[1])) for m in (a, b)]
    S = np.unique(np.concatenate([segs[0][0], segs[0][1], segs[1][0], segs[1][1], [0.0, 1.0]]))
    S = S[(S >= 0) & (S <= 1)]
    lo, hi = S[:-1], S[1:]
    L = hi - lo
    eps = L * 1e-9      # evaluate just inside each sub-interval: the left/right limits at jumps
    D0 = _quantile_at(segs[0], lo + eps) - _quantile_at(segs[1], lo + eps)
    D1 = _quantile_at(segs[0], hi - eps) - _quantile_at(segs[1], hi - eps)
    # the values at lo + eps, hi - eps extrapolated affinely to lo, hi (both quantiles are affine inside)
    slope = (D1 - D0) / np.where(L > 2 * eps, L - 2 * eps, 1.0)
    D0, D1 = D0 - slope * eps, D1 + slope * eps
    if p == 2:
        return float(math.sqrt(max(0.0, float(np.sum(L * (D0 * D0 + D0 * D1 + D1 * D1) / 3)))))
    same = D0 * D1 >= 0
    den = np.abs(D0) + np.abs(D1)
    part = np.where(same, L * den / 2, L * (D0 * D0 + D1 * D1) / (2 * np.where(den > 0, den, 1.0)))
    return float(np.sum(part))
