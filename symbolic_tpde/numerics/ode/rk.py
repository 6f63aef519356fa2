"""Explicit Runge-Kutta methods as data, and one batched stepping routine for all of them.

A method is a Butcher tableau (:class:`Tableau`): stages ``k_i = f(t + c_i h, y + h Σ_{j<i} a_ij k_j)``,
solution ``y₁ = y₀ + h Σ_i b_i k_i``, optional embedded error ``e = h Σ_i (b_i - b̂_i) k_i`` and optional dense
output ``y(t₀ + θh) = y₀ + h Σ_i b_i(θ) k_i`` with ``b_i(θ) = Σ_j P_ij θ^{j+1}`` (Hairer, Nørsett & Wanner,
*Solving ODEs I*, §II.1 and §II.6).  Built in:

* :data:`EULER` (order 1), :data:`RK4` (classical, order 4; Hairer I Table 1.2);
* :data:`BS32`: Bogacki-Shampine 3(2) (Appl. Math. Lett. 2 (1989) 321), FSAL, 3rd-order dense output;
* :data:`DOPRI5`: Dormand-Prince 5(4) (J. Comput. Appl. Math. 6 (1980) 19-26; Hairer I Table 5.2), FSAL,
  with its own continuous extension (Shampine, Math. Comp. 46 (1986) 135, the 4th-order interpolant of
  Hairer I §II.6 / ``dopri5.f``), not a Hermite cubic.  Methods without dense coefficients (Euler, RK4) are
  interpolated by the cubic Hermite polynomial through ``(y, f)`` at both step ends.

:class:`RKSolver` advances a batch ``Y (N, n)`` of independent rows, each with its own time, horizon and step
size.  Adaptive mode (tableaus with an error estimate): error norm
``‖e‖ = RMS_j e_j / (atol + rtol max(|y₀_j|, |y₁_j|))``, accept if ``‖e‖ ≤ 1``, step update
``h ← h · clip(0.9 ‖e‖^{-1/(q+1)}, 0.2, 10)`` with ``q`` the lower of the two orders and no growth after a
rejection (the standard controller, Hairer I §II.4); non-finite trial values are rejected (``h ← 0.2 h``).
Fixed-step mode (``steps``): ``steps`` equal steps per row, the last one landing on ``T`` exactly.
The error norm accumulates in float64 whatever the state's dtype (float32 particle clouds: a float32 sum
of 10⁶ squares would carry its own round-off into the step control).
:func:`rk_solve` loops the solver over all rows with a ``monitor`` hook and dense output at ``t_eval``.

:class:`Status` is the package's one vocabulary for how an integration ended (rows of :class:`RKSolver`,
:class:`~symbolic_tpde.numerics.ode.solve.Solution`, the particle runs): a row is ``RUNNING`` until it is ``OK``
(reached ``T``), ``NONFINITE`` (non-finite state, or the step size fell below ``hmin_rel·max(1, |t|)``: the
error control cannot be met, typically a singularity) or ``STALLED`` (``max_steps`` used up), or a monitor
stopped it with another member.  Whether a method needs a Jacobian is asked of the method
(:attr:`Tableau.implicit`; :func:`symbolic_tpde.numerics.ode.solve.wants_jacobian` for scipy's).
No SymPy here (numerics layer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Sequence

import numpy as np


class Status(str, Enum):
    """How an integration (or one row of a batch) ended; compares equal to its string value."""

    RUNNING = "running"
    OK = "ok"                  # reached T
    BLOWUP = "blowup"          # a finite-time singularity signature (solve.BlowupMonitor)
    EVENT = "event"            # a terminal event handed in by the caller (Solution.event names it)
    OVERFLOW = "overflow"      # growth past the monitor's overflow size without a singularity signature
    NONFINITE = "nonfinite"    # non-finite values or a collapsed step size (rows of RKSolver)
    STALLED = "stalled"        # an evaluation/step budget was used up, or the step size collapsed
    TIME_LIMIT = "time-limit"  # the wall-clock cap (solve.Deadline) expired

    def __str__(self) -> str:
        return self.value


# rows of RKSolver carry small integer codes (vectorised comparisons); results show them as Status members
_STATUS = tuple(Status)
_CODE = {s: i for i, s in enumerate(_STATUS)}
_RUN, _OK, _NONFINITE, _STALLED = (_CODE[s] for s in (Status.RUNNING, Status.OK, Status.NONFINITE,
                                                       Status.STALLED))


def as_statuses(codes) -> np.ndarray:
    """Integer row codes as an object array of :class:`Status` (``arr == Status.OK`` compares per row)."""
    out = np.empty(len(codes), dtype=object)
    out[:] = [_STATUS[int(c)] for c in codes]
    return out




@dataclass(frozen=True, eq=False)
class Tableau:
    """Butcher tableau ``(c, A, b)`` with optional error weights ``e = b - b̂`` and dense matrix ``P``."""

    name: str
    c: np.ndarray
    a: np.ndarray                      # (s, s) strictly lower triangular
    b: np.ndarray
    order: int
    e: np.ndarray | None = None        # b - b̂ (embedded error estimate)
    error_order: int | None = None     # order of the embedded formula
    fsal: bool = False                 # last stage = f(t + h, y₁)
    P: np.ndarray | None = None        # (s, m): b_i(θ) = Σ_j P_ij θ^{j+1}

    @property
    def implicit(self) -> bool:
        """Whether a stage depends on itself or a later one (a non-zero on or above the diagonal of ``a``):
        only then would a step solve equations and want the Jacobian.  All built-in tableaus are explicit."""
        return bool(np.any(np.triu(self.a) != 0))

    @property
    def stages(self) -> int:
        return len(self.c)

    @property
    def adaptive(self) -> bool:
        return self.e is not None


def _t(name, c, a, b, order, **kw) -> Tableau:
    s = len(c)
    A = np.zeros((s, s))
    for i, row in enumerate(a):
        A[i, :len(row)] = row
    arr = {k: (np.array(v, float) if isinstance(v, (list, tuple)) else v) for k, v in kw.items()}
    return Tableau(name, np.array(c, float), A, np.array(b, float), order, **arr)


EULER = _t("euler", [0.0], [[]], [1.0], 1)
RK4 = _t("rk4", [0, 1 / 2, 1 / 2, 1], [[], [1 / 2], [0, 1 / 2], [0, 0, 1]], [1 / 6, 1 / 3, 1 / 3, 1 / 6], 4)
BS32 = _t("bs32", [0, 1 / 2, 3 / 4, 1], [[], [1 / 2], [0, 3 / 4], [2 / 9, 1 / 3, 4 / 9]], [2 / 9, 1 / 3, 4 / 9, 0], 3,
          e=[2 / 9 - 7 / 24, 1 / 3 - 1 / 4, 4 / 9 - 1 / 3, -1 / 8], error_order=2, fsal=True,
          P=[[1, -4 / 3, 5 / 9], [0, 1, -2 / 3], [0, 4 / 3, -8 / 9], [0, -1, 1]])
_DP_B = [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0]
_DP_BHAT = [5179 / 57600, 0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40]
DOPRI5 = _t(
    "dopri5", [0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1, 1],
    [[], [1 / 5], [3 / 40, 9 / 40], [44 / 45, -56 / 15, 32 / 9],
     [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
     [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656], _DP_B[:6]],
    _DP_B, 5, e=[x - y for x, y in zip(_DP_B, _DP_BHAT)], error_order=4, fsal=True,
    # Shampine (1986) continuous extension, coefficients of θ, θ², θ³, θ⁴ (as in Hairer's dopri5.f / scipy RK45)
    P=[[1, -8048581381 / 2820520608, 8663915743 / 2820520608, -12715105075 / 11282082432],
       [0, 0, 0, 0],
       [0, 131558114200 / 32700410799, -68118460800 / 10900136933, 87487479700 / 32700410799],
       [0, -1754552775 / 470086768, 14199869525 / 1410260304, -10690763975 / 1880347072],
       [0, 127303824393 / 49829197408, -318862633887 / 49829197408, 701980252875 / 199316789632],
       [0, -282668133 / 205662961, 2019193451 / 616988883, -1453857185 / 822651844],
       [0, 40617522 / 29380423, -110615467 / 29380423, 69997945 / 29380423]])
TABLEAUS = {tab.name: tab for tab in (EULER, RK4, BS32, DOPRI5)}


def tableau(method: str | Tableau) -> Tableau:
    if isinstance(method, Tableau):
        return method
    try:
        return TABLEAUS[method]
    except KeyError:
        raise ValueError(f"unknown Runge-Kutta method {method!r}; expected one of {sorted(TABLEAUS)}") from None


def rk_stages(tab: Tableau, F: Callable, t, Y: np.ndarray, h, f0: np.ndarray, args: Sequence = ()):
    """One step of ``tab`` from ``(t, Y)`` with step ``h`` (scalar or per row) and first stage ``f0 = F(t, Y)``.

    Returns ``(Y₁, K)`` with ``K (s, *Y.shape)`` the stages, in ``Y``'s dtype (float32 stays float32).
    ``F`` is called as ``F(t + c_i h, Y_i, *args)`` with ``t``, ``h`` as given (scalars or ``(N,)`` arrays).
    """
    dt = Y.dtype
    hb = dt.type(h) if np.ndim(h) == 0 else np.asarray(h, dtype=dt)[:, None]
    K = np.empty((tab.stages,) + Y.shape, dtype=dt)
    K[0] = f0
    Ys = Y
    for i in range(1, tab.stages):
        Ys = Y + hb * _combine(tab.a[i, :i], K)
        K[i] = F(t + tab.c[i] * h, Ys, *args)
    if tab.fsal:
        return Ys, K
    return Y + hb * _combine(tab.b, K), K


def _combine(coef, K):
    """``Σ_j coef_j K_j`` over the non-zero coefficients (Python floats: the dtype of ``K`` is kept)."""
    out = None
    for j, cj in enumerate(coef.tolist()):
        if cj != 0.0:
            out = cj * K[j] if out is None else out + cj * K[j]
    return np.zeros_like(K[0]) if out is None else out


def dense_eval(tab: Tableau, theta, Y0, Y1, K, h, f1=None):
    """The step's interpolant at ``θ = (t - t₀)/h`` (per row, in ``[0, 1]``): the tableau's own dense output,
    or the cubic Hermite interpolant through ``(Y0, K[0])``, ``(Y1, f1)`` when it has none."""
    th = np.asarray(theta, float)
    hb = np.asarray(h, float)
    if hb.ndim:
        hb = hb[:, None]
    if tab.P is not None:
        powers = th[..., None] ** np.arange(1, tab.P.shape[1] + 1)      # (..., m)
        bth = powers @ tab.P.T                                          # (..., s)
        if th.ndim == 0:
            return Y0 + hb * np.tensordot(bth, K, axes=1)
        return Y0 + hb * np.einsum("ns,snj->nj", bth, K)
    s = th if th.ndim == 0 else th[:, None]
    h00, h10 = (1 + 2 * s) * (1 - s) ** 2, s * (1 - s) ** 2
    h01, h11 = s * s * (3 - 2 * s), s * s * (s - 1)
    return h00 * Y0 + h10 * hb * K[0] + h01 * Y1 + h11 * hb * f1


def initial_step(F, t, Y, f, T, rtol, atol, order: int, args: Sequence = ()):
    """Starting step per row (Hairer I §II.4, algorithm of p. 169), one extra evaluation of ``F``."""
    with np.errstate(over="ignore", invalid="ignore"):    # an overflowing norm only makes the first step small
        scale = atol + rtol * np.abs(Y)
        d0 = np.sqrt(np.mean((Y / scale) ** 2, axis=1))
        d1 = np.sqrt(np.mean((f / scale) ** 2, axis=1))
        h0 = np.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / np.maximum(d1, 1e-300))
        h0 = np.minimum(h0, T - t)
        f1 = F(t + h0, Y + h0[:, None] * f, *args)
        d2 = np.sqrt(np.mean(((f1 - f) / scale) ** 2, axis=1)) / np.maximum(h0, 1e-300)
    dm = np.maximum(d1, d2)
    h1 = np.where(dm <= 1e-15, np.maximum(1e-6, h0 * 1e-3), (0.01 / np.maximum(dm, 1e-300)) ** (1 / (order + 1)))
    h = np.minimum(100 * h0, h1)
    h = np.where(np.isfinite(h) & (h > 0), h, 1e-6)
    return np.minimum(h, T - t)


@dataclass
class Accepted:
    """Rows that completed a step: global ``rows``, ``t0 → t1``, states, stages ``K (s, m, n)``, ``f1``."""

    rows: np.ndarray
    t0: np.ndarray
    t1: np.ndarray
    y0: np.ndarray
    y1: np.ndarray
    K: np.ndarray
    f1: np.ndarray | None
    h: np.ndarray
    err: np.ndarray | None = None

    def at(self, tab: Tableau, tq, sel=slice(None)):
        """Interpolated states at times ``tq`` (one per selected row) inside this step."""
        h = self.h[sel]
        theta = np.clip((np.asarray(tq, float) - self.t0[sel]) / np.where(h > 0, h, 1.0), 0.0, 1.0)
        return dense_eval(tab, theta, self.y0[sel], self.y1[sel], self.K[:, sel], h, self.f1[sel])


class RKSolver:
    """Batched explicit RK: rows of ``Y0 (N, n)`` from ``t0`` to ``T`` (scalar or per row), each with its own
    step.  ``steps`` (int or per row) selects fixed-step mode; otherwise the tableau must be adaptive.
    ``F(t, Y, *args)``: ``t (m,)``, ``Y (m, n)`` for the ``m`` active rows; ``args`` are per-row arrays.
    ``rhs_at_ends=False`` (fixed steps, a tableau without FSAL): the first stage of each step is evaluated at
    its start instead of at the end of the step before, so no evaluation is spent past the last step (one per
    solver: a particle layer of one Euler step costs one field); ``Accepted.f1`` is then ``None`` (no Hermite
    dense output, no ``f`` for monitors)."""

    def __init__(self, F: Callable, t0, Y0, T, *, method: str | Tableau = "dopri5", rtol: float = 1e-8,
                 atol: float = 1e-10, args: Sequence = (), h0=None, steps=None, max_steps: int = 100_000,
                 hmin_rel: float = 1e-14, rhs_at_ends: bool = True):
        self.tab = tableau(method)
        self.F = F
        Y = np.array(Y0, copy=True)
        if Y.ndim != 2:
            raise ValueError(f"Y0 must have shape (N, n), got {Y.shape}")
        if not np.issubdtype(Y.dtype, np.floating):
            Y = Y.astype(float)
        N = Y.shape[0]
        self.args = []
        for a in args:
            a = np.asarray(a)
            if a.shape[0] != N:
                raise ValueError(f"per-trajectory argument has leading size {a.shape[0]}, expected {N}")
            self.args.append(a)
        self.Y, self.rtol, self.atol = Y, rtol, atol
        self.t = np.broadcast_to(np.asarray(t0, float), (N,)).copy()
        self.T = np.broadcast_to(np.asarray(T, float), (N,)).copy()
        self.t_start = self.t.copy()
        self.code = np.zeros(N, dtype=int)
        self.n_steps = np.zeros(N, dtype=int)
        self.n_rejected = np.zeros(N, dtype=int)
        self.max_steps, self.hmin_rel = max_steps, hmin_rel
        self.fixed = steps is not None
        self.lazy = self.fixed and not rhs_at_ends and not self.tab.fsal
        self.f, self.nfev = None, 0
        if not self.lazy:
            with np.errstate(over="ignore", invalid="ignore"):
                self.f = np.asarray(F(self.t, Y, *self.args), dtype=Y.dtype)
            self.nfev = 1
            self.code[~np.all(np.isfinite(self.f), axis=1)] = _NONFINITE
        if self.fixed:
            self.steps = np.broadcast_to(np.asarray(steps, int), (N,)).copy()
            self.h = (self.T - self.t) / np.maximum(self.steps, 1)
        elif not self.tab.adaptive:
            raise ValueError(f"method {self.tab.name!r} has no error estimate: give steps= for fixed steps")
        elif h0 is None:
            self.h = np.asarray(initial_step(F, self.t, Y, self.f, self.T, rtol, atol, self.tab.order, self.args),
                                float)
            self.nfev += 1
        else:
            self.h = np.minimum(np.broadcast_to(np.asarray(h0, float), (N,)).copy(), self.T - self.t)
        self.rejected = np.zeros(N, dtype=bool)      # the row's last attempt was rejected: no growth next
        self.code[(self.code == _RUN) & (self.T <= self.t)] = _OK
        if self.fixed:
            self.code[(self.code == _RUN) & (self.steps <= 0)] = _OK

    def status(self, i: int) -> Status:
        return _STATUS[self.code[i]]

    def stop(self, rows, status: Status = Status.STALLED) -> None:
        """End ``rows`` with ``status`` (a caller's own test, e.g. a step-collapse detector)."""
        self.code[np.asarray(rows, dtype=int)] = _CODE[status]

    @property
    def active(self) -> np.ndarray:
        return np.nonzero(self.code == _RUN)[0]

    def step(self) -> Accepted:
        """One attempt for every running row; returns the rows whose step was accepted."""
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return self._step()

    def _step(self) -> Accepted:
        idx = self.active
        tab, F = self.tab, self.F
        y, tt, hh = self.Y[idx], self.t[idx], self.h[idx]
        if not self.fixed:   # h keeps the controller's proposal; a step never passes T
            hh = np.minimum(hh, self.T[idx] - tt)
        a = [x[idx] for x in self.args]
        f0 = np.asarray(F(tt, y, *a), dtype=y.dtype) if self.lazy else self.f[idx]
        ynew, K = rk_stages(tab, F, tt, y, hh, f0, a)
        f1 = K[-1] if tab.fsal else (None if self.lazy else np.asarray(F(tt + hh, ynew, *a), dtype=y.dtype))
        self.nfev += tab.stages - 1 + (0 if tab.fsal else 1)
        finite = np.isfinite(ynew).all(axis=1) & (True if f1 is None else np.isfinite(f1).all(axis=1))
        err = None
        if self.fixed:
            k = self.n_steps[idx] + 1
            last = k >= self.steps[idx]
            tnew = np.where(last, self.T[idx], self.t_start[idx] + k * hh)
            accept = finite
            self.code[idx[~finite]] = _NONFINITE
        else:
            ev = hh[:, None] * _combine(tab.e, K)
            scale = self.atol + self.rtol * np.maximum(np.abs(y), np.abs(ynew))
            err = np.sqrt(np.square(ev / scale, dtype=np.float64).sum(axis=1) / ev.shape[1])
            finite &= np.isfinite(err)
            accept = finite & (err <= 1.0)
            q = min(tab.order, tab.error_order)
            fac = np.where(err > 0, 0.9 * np.where(finite, err, 1.0) ** (-1.0 / (q + 1)), 10.0)
            fac = np.clip(np.where(finite, fac, 0.2), 0.2, 10.0)
            fac = np.where(accept & ~self.rejected[idx], fac, np.minimum(fac, 1.0))
            self.rejected[idx] = ~accept
            tnew = np.where(hh >= self.T[idx] - tt, self.T[idx], tt + hh)
        ai = np.nonzero(accept)[0]
        gi = idx[ai]
        out = Accepted(gi, tt[ai], tnew[ai], y[ai], ynew[ai], K[:, ai], None if f1 is None else f1[ai], hh[ai],
                       None if err is None else err[ai])
        self.Y[gi], self.t[gi] = ynew[ai], tnew[ai]
        if f1 is not None:
            self.f[gi] = f1[ai]
        self.n_steps[gi] += 1
        self.n_rejected[idx[~accept]] += 1
        self.code[gi[self.t[gi] >= self.T[gi]]] = _OK
        if not self.fixed:
            hnew = hh * fac
            self.h[idx] = hnew
            run = self.code[idx] == _RUN
            self.code[idx[run & (self.n_steps[idx] >= self.max_steps)]] = _STALLED
            tiny = hnew < self.hmin_rel * np.maximum(1.0, np.abs(self.t[idx]))
            self.code[idx[tiny & (self.code[idx] == _RUN)]] = _NONFINITE
        return out


@dataclass
class RKResult:
    """End states of :func:`rk_solve`: ``t (N,)``, ``y (N, n)``, ``status`` (:class:`Status` per row), per-row ``n_steps`` /
    ``n_rejected``, ``nfev`` (batched calls), dense output ``ys (len(t_eval), N, n)`` (NaN after a row
    stopped), ``f`` = right-hand side at the end states, ``err`` = sum over accepted steps of the local error
    norm (adaptive mode; a cheap global error indicator in units of the tolerance)."""

    t: np.ndarray
    y: np.ndarray
    status: np.ndarray
    n_steps: np.ndarray
    n_rejected: np.ndarray
    nfev: int
    t_eval: np.ndarray | None = None
    ys: np.ndarray | None = None
    f: np.ndarray | None = field(default=None, repr=False)
    err: np.ndarray | None = None


class Recorder:
    """Fills ``ys[k, i]`` for every ``t_eval[k]`` crossed by row ``i`` during an accepted step."""

    def __init__(self, t_eval, Y0, t0):
        self.t_eval = None if t_eval is None else np.asarray(t_eval, dtype=float)
        self.ys = None
        if self.t_eval is not None:
            if np.any(np.diff(self.t_eval) < 0):
                raise ValueError("t_eval must be non-decreasing")
            N, n = Y0.shape
            t0 = np.broadcast_to(np.asarray(t0, float), (N,))
            self.ys = np.full((len(self.t_eval), N, n), np.nan)
            hit = self.t_eval[:, None] == t0[None, :]
            self.ys[hit] = np.broadcast_to(Y0, (len(self.t_eval), N, n))[hit]
            self.next = np.searchsorted(self.t_eval, t0, side="right")

    def record(self, tab: Tableau, acc: Accepted) -> None:
        if self.t_eval is None or acc.rows.size == 0:
            return
        nt = len(self.t_eval)
        while True:
            k = self.next[acc.rows]
            tk = self.t_eval[np.minimum(k, nt - 1)]
            sel = np.nonzero((k < nt) & (tk <= acc.t1))[0]
            if sel.size == 0:
                return
            vals = acc.at(tab, tk[sel], sel)
            ends = tk[sel] == acc.t1[sel]
            vals[ends] = acc.y1[sel][ends]          # step ends: the integrator's own value
            self.ys[k[sel], acc.rows[sel]] = vals
            self.next[acc.rows[sel]] += 1


def rk_solve(F: Callable, t0, Y0, T, *, method: str | Tableau = "dopri5", rtol: float = 1e-8, atol: float = 1e-10,
             args: Sequence = (), monitor: Callable | None = None, t_eval=None, h0=None, steps=None,
             max_steps: int = 100_000, hmin_rel: float = 1e-14) -> RKResult:
    """Integrate every row of ``Y0`` with :class:`RKSolver` until each is done or stopped.

    ``monitor(acc: Accepted)`` is called after each batch of accepted steps and returns, per accepted row,
    ``None`` (keep going) or the :class:`Status` that stops the row (or ``None`` for all)."""
    s = RKSolver(F, t0, Y0, T, method=method, rtol=rtol, atol=atol, args=args, h0=h0, steps=steps,
                 max_steps=max_steps, hmin_rel=hmin_rel)
    rec = Recorder(t_eval, s.Y, s.t)
    err = np.zeros(len(s.Y))
    while s.active.size:
        acc = s.step()
        rec.record(s.tab, acc)
        if acc.err is not None:
            err[acc.rows] += acc.err
        if monitor is not None and acc.rows.size:
            out = monitor(acc)
            if out is not None:
                out = np.asarray(out, dtype=object)
                for j in np.nonzero(out != None)[0]:  # noqa: E711  (elementwise on an object array)
                    s.code[acc.rows[j]] = _CODE[Status(out[j])]
    return RKResult(s.t, s.Y, as_statuses(s.code), s.n_steps, s.n_rejected, s.nfev, rec.t_eval, rec.ys, s.f,
                    None if s.fixed else err)
