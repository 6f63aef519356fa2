"""Normalised tokens: particles on the sphere ``S^{d-1}`` under Post-LN, Pre-LN, Peri-LN and nGPT (README "Sphere").

Tokens ``x_i = r_i θ_i``, ``θ_i ∈ S^{d-1}``.  The attention vector is the one of the sphere kinds of the registry
(:data:`symbolic_tpde.registry.kinds.SPHERE_KINDS`), evaluated at the unit tokens by the package's particle
field (:func:`symbolic_tpde.numerics.particles.fields.field`, i.e. the fused kernel; nothing is re-implemented here)::

    A_i = Σ_heads V Σ_j w_ij θ_j,   w_ij = e^{β<Aθ_i, θ_j>} / Z_i,
    Z_i = Σ_k e^{β<Aθ_i, θ_k>} (sphere_sa),  n (sphere_usa),  Σ_{k<=i} (sphere_causal, j <= i only)

(``A = KᵀQ/√k`` when ``Q, K`` are given, the registry's convention; ``<Aθ_i, θ_j> = <Qθ_i, Kθ_j>/√k``).

**Which normalisation** is the argument ``norm`` (scenario key ``"norm"``), one family for all kinds; with
``P⊥_θ y = y - <θ, y>θ``:

=========  =====================================  ===================================================
``norm``   dynamics                               state integrated
=========  =====================================  ===================================================
``post``   ``θ̇_i = P⊥_{θ_i} A_i``                  ``θ`` (renormalised after every accepted step)
``ngpt``   ``θ̇_i = α P⊥_{θ_i}(A_i/|A_i|)``         ``θ`` (renormalised after every accepted step)
``pre``    ``ẋ_i = A_i(θ)``  (``θ̇ = P⊥A/r``,       ``x = rθ``; ``θ = x/|x|``, ``r = |x|``
           ``ṙ = <θ, A>``)
``peri``   ``ẋ_i = A_i/|A_i|``                     ``x = rθ``
=========  =====================================  ===================================================

Sources: Geshkovski-Letrouit-Polyanskiy-Rigollet (NeurIPS 2023, arXiv 2312.10794) for Post-LN SA/USA;
Karagodin-Ge-Polyanskiy-Rigollet (arXiv 2510.22026) for Pre-/Peri-LN as speed regulation; nGPT (Loshchilov
et al., arXiv 2410.01131) ``h <- Norm(h + α(Norm(h_att) - h))`` in continuous time.

The right-hand side evaluates the field at ``y/|y|`` row by row, so for ``post``/``ngpt`` it is homogeneous of
degree 0 and tangent: the exact flow keeps every ``|θ_i|``; the Runge-Kutta steps leave the sphere by the local
error, and every accepted step is renormalised (the size of that correction is reported as
``SphereRun.max_renorm``, it is of the order of the tolerance).  Because the rhs is degree-0 homogeneous, the
renormalisation does not change it (the first-same-as-last stage stays exact).

Steps: the package's error-controlled Dormand-Prince 5(4) (:class:`symbolic_tpde.numerics.ode.rk.RKSolver`,
``rtol = atol = tol``; default ``1e-10`` in float64, ``100 ε₃₂ ≈ 1.2e-5`` in float32, where the error estimate
is round-off below that), on a batch of clouds ``(B, n, d)`` (each cloud its own step size), restarted at layer
breakpoints of a :class:`~symbolic_tpde.weights.Schedule` (weights of a segment: those at its start; a callable
schedule is read at each stage time).  A state or velocity that leaves the floats raises
:class:`~symbolic_tpde.errors.BlowupError` with the last accepted time (e.g. ``peri``/``ngpt`` where
``A_i = 0``); a step limit, or a step size that collapses while both stay finite, is status ``"stalled"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from typing import Callable

import numpy as np

from ...errors import BlowupError, InputError
from ...values import value_eq
from ...registry.kinds import register, scenario_geometry
from ...weights import Schedule, Weights
from ..ode import rk
from .fields import as_schedule, field, masked_field, softmax_field, softmax_unnormalized_field
from .attend import as_points, attend, work_dtype
from .simulate import segments

__all__ = ["NORMS", "SphereRun", "StepCollapse", "FixedPointWatch", "attention_vectors", "sphere_velocity", "simulate_sphere",
           "default_tolerance"]

NORMS = ("post", "pre", "peri", "ngpt")
ON_SPHERE = ("post", "ngpt")



_SCALARS: dict = {}


def _scalar(M):
    """``c`` when ``M = cI`` exactly (then ``XMᵀ = cX``: no ``d × d`` product), else ``None``.  Remembered for
    the last 16 read-only matrices (a head's parameters are read-only: one check per head, not per step)."""
    hit = _SCALARS.get(id(M))
    if hit is not None and hit[0] is M:
        return hit[1]
    diag = M.flat[:: len(M) + 1]
    c = diag[0]
    ok = c != 0 and np.all(diag == c) and np.count_nonzero(M) == len(M)     # no d x d temporary
    out = float(c) if ok else None
    if not M.flags.writeable:
        if len(_SCALARS) >= 16:
            _SCALARS.pop(next(iter(_SCALARS)))
        _SCALARS[id(M)] = (M, out)
    return out


def _part(general, mode):
    """A sphere kind's particle part: ``general(X, βA, V)`` (the package's field), or, when ``A = aI`` and
    ``V = vI`` (the usual ``Q = K = V = I``), the same attention average :func:`.fields_core.attend` with the
    logits ``βa<θ_i, θ_j>`` and values ``vθ_j`` without the two ``d × d`` products (``d = 1024``: the products
    cost ~30x the attention itself at ``n = 32``).  ``tests/test_sphere.py`` checks both paths agree."""
    def f(X, p, c):
        a, v = _scalar(p["A"]), _scalar(p["V"])
        if a is None or v is None:
            return general(X, p["beta"] * p["A"], p["V"], **c.kw)
        X = as_points(X, c.kw.get("dtype"))
        kw = {"block": c.kw.get("block"), "threads": c.kw.get("threads")}
        if mode == "causal":
            kw["prefix"] = np.arange(1, len(X) + 1)
        with np.errstate(invalid="ignore", over="ignore"):
            out = attend(X * X.dtype.type(p["beta"] * a), X, X, mode="exp" if mode == "exp" else "softmax", **kw)
        return out * out.dtype.type(v)
    return f


# particle parts of the sphere kinds: the attention vector at unit tokens (β folded into A)
register("sphere_sa", "particle")(_part(softmax_field, "softmax"))
register("sphere_usa", "particle")(_part(softmax_unnormalized_field, "exp"))
register("sphere_causal", "particle")(_part(masked_field, "causal"))


def _check_weights(w: Weights) -> Weights:
    from ...registry.kinds import get

    if not isinstance(w, Weights):
        raise InputError("weights", f"expected Weights, got {type(w).__name__}")
    for i, h in enumerate(w.heads):
        if get(h.kind).geometry != "sphere":
            raise InputError(f"heads[{i}].attention", f"{h.kind!r} is an R^d kind; on the sphere use one of "
                                                      "['sphere_causal', 'sphere_sa', 'sphere_usa']")
    if w.ffn is not None:
        raise InputError("ffn", "not defined for tokens on the sphere")
    if w.sink is not None:
        raise InputError("sink", "not defined for tokens on the sphere")
    return w


def _unit(Y):
    return Y / np.linalg.norm(Y, axis=-1, keepdims=True)


def attention_vectors(theta, weights: Weights, *, block=None, threads=None) -> np.ndarray:
    """``A_i`` (all heads summed) at the unit tokens ``theta (n, d)``, by the package's particle field."""
    return field(theta, _check_weights(weights), block=block, threads=threads)


def sphere_velocity(Y, weights: Weights, norm: str = "post", alpha: float = 1.0, **kw) -> np.ndarray:
    """The right-hand side of ``norm`` at the state ``Y (n, d)`` (unit tokens for post/ngpt, ``x = rθ`` else)."""
    th = _unit(Y)
    A = attention_vectors(th, weights, **kw)
    if norm in ("peri", "ngpt"):
        with np.errstate(divide="ignore", invalid="ignore"):
            A = A / np.linalg.norm(A, axis=1, keepdims=True)
    if norm in ON_SPHERE:
        A = A - np.einsum("ij,ij->i", th, A)[:, None] * th
        return A * A.dtype.type(alpha) if norm == "ngpt" else A
    return A


#: step-collapse detector of :func:`simulate_sphere` (:class:`StepCollapse`): a cloud is looked at every
#: ``COLLAPSE_WINDOW`` attempted steps; a window in which the mean accepted step is below ``COLLAPSE_DROP`` times
#: the largest accepted step so far *and* at whose pace ``T`` would need more than ``COLLAPSE_EXCESS`` times the
#: accepted steps left in the budget is a strike; ``COLLAPSE_STRIKES`` strikes in a row stop the cloud as
#: "stalled" (step collapse) with that evidence.  Such a run would only end at its step budget (minutes), so
#: nothing it could have reached is cut off unless the pace improves more than ``COLLAPSE_EXCESS``-fold later,
#: which the second window checks against.  Measured: an nGPT / Peri-LN run whose attention vector vanishes
#: (``V = -e₁e₁ᵀ``, rank one: the sign of ``A_i`` flips across ``(m_i)_1 = 0``, a sliding mode) chatters at
#: steps of 1e-8 after t ≈ 0.08 (the largest step before: 0.05), 40 % of the attempts accepted; it took 76-95 s
#: to reach the 50 000-step budget and now stops after 400 attempts (about a second)
COLLAPSE_WINDOW, COLLAPSE_DROP, COLLAPSE_EXCESS, COLLAPSE_STRIKES = 200, 1e-4, 10.0, 2


@dataclass(frozen=True)
class _Window:
    """One cloud's window between checkpoints: attempted and accepted steps, its start ``t0`` and ``span``, the mean
    accepted step, the steps left in the budget and those ``T`` would need at that pace."""

    attempts: float
    accepted: float
    t0: float
    span: float
    mean: float
    left: float
    need: float


class _WindowWatch:
    """The bookkeeping :class:`StepCollapse` and :class:`FixedPointWatch` share, per cloud (row of a batched
    :class:`~symbolic_tpde.numerics.ode.rk.RKSolver`): the attempts, accepted steps and time at the last
    checkpoint and the strikes; :meth:`windows` yields each cloud whose ``COLLAPSE_WINDOW`` attempts since its
    checkpoint are complete, with its :class:`_Window`, and moves the checkpoint."""

    def __init__(self, N: int, T: float, max_steps: int):
        self.T, self.max_steps = float(T), max_steps
        self.mark = np.zeros((N, 3))          # attempts, accepted, t at the last checkpoint
        self.strikes = np.zeros(N, dtype=int)

    def restart(self, s) -> None:
        """A new segment (layer breakpoint): the counters of the solver ``s`` start at zero."""
        self.mark[:] = 0.0
        self.mark[:, 2] = s.t

    def windows(self, s):
        act = s.active
        for i in act[s.n_steps[act] + s.n_rejected[act] - self.mark[act, 0] >= COLLAPSE_WINDOW]:
            att = float(s.n_steps[i] + s.n_rejected[i])
            a0, n0, t0 = self.mark[i]
            n_acc, span = float(s.n_steps[i] - n0), float(s.t[i] - t0)
            self.mark[i] = att, s.n_steps[i], s.t[i]
            mean = span / max(n_acc, 1.0)
            need = (self.T - float(s.t[i])) / mean if mean > 0 else np.inf
            yield int(i), _Window(att - a0, n_acc, t0, span, mean, max(self.max_steps - float(s.n_steps[i]), 1.0),
                                  need)

    def strike(self, i: int, hit: bool) -> int:
        """Count a strike for cloud ``i`` (``hit``) or clear them; the strikes in a row."""
        self.strikes[i] = self.strikes[i] + 1 if hit else 0
        return int(self.strikes[i])


class StepCollapse(_WindowWatch):
    """Per cloud: the largest accepted step, the window bookkeeping (:class:`_WindowWatch`) and the strikes (module
    constants above).  :meth:`update` after every step returns ``{row: evidence}`` for the clouds whose step
    collapsed."""

    def __init__(self, N: int, T: float, max_steps: int):
        super().__init__(N, T, max_steps)
        self.hmax = np.zeros(N)

    def update(self, s, acc) -> dict:
        if acc.rows.size:
            np.maximum.at(self.hmax, acc.rows, np.abs(acc.h))
        out = {}
        for i, w in self.windows(s):
            hit = w.mean <= COLLAPSE_DROP * self.hmax[i] and w.need > COLLAPSE_EXCESS * w.left
            if self.strike(i, hit) >= COLLAPSE_STRIKES:
                out[i] = (f"step collapse: the mean accepted step over the last {int(w.attempts)} attempts is "
                          f"{w.mean:.3g}, {w.mean / self.hmax[i]:.2g} of the largest step so far ({self.hmax[i]:.3g}); "
                          f"{1 - w.accepted / w.attempts:.0%} of those attempts were rejected; at that pace T = "
                          f"{self.T:.6g} needs {w.need:.3g} more steps, the budget has {int(w.left)} left")
        return out


def _vanishing_attention(theta, weights, norm) -> str:
    """Evidence for nGPT / Peri-LN (they normalise ``A_i``): the token whose attention vector is smallest against
    the median, where ``A_i/|A_i|`` jumps; ``""`` for the other norms."""
    if norm not in ("ngpt", "peri"):
        return ""
    a = np.linalg.norm(attention_vectors(theta, weights), axis=1)
    i = int(np.argmin(a))
    med = float(np.median(a))
    return (f"; the attention vector nearly vanishes at token {i}: |A_{i}| = {a[i]:.3g} against a median |A_j| of "
            f"{med:.3g} ({norm} normalises A_i, so A_i/|A_i| jumps where A_i changes sign: a discontinuous "
            "right-hand side the steps cannot resolve)")


#: fixed-point detector of :func:`simulate_sphere` (``fixed_points=True``: ``tpde particles``), on the step-collapse
#: detector's cadence (every ``COLLAPSE_WINDOW`` attempts of a cloud): a window over which no entry of the state
#: moved by more than ``FIXED_FACTOR·tol`` (relative to ``max(1, |Y|_∞)``), and at whose pace ``T`` needs more
#: steps than the budget has left, is a strike; ``FIXED_STRIKES`` strikes in a row stop the cloud with status
#: ``"fixed-point"`` at that time, with the evidence (the largest move, the window's span, the velocity).  Such a
#: run would otherwise grind to its step budget and end "stalled": measured on ``tpde particles --scenario
#: sphere_sa_s2 --n 16 --T 1e6``, the tokens are one cluster by t ≈ 30 and stay within ~1e-10 (the tolerance) of
#: each other; the explicit steps are then bounded by stability, not accuracy (h ≈ 3.3 whatever the tolerance,
#: 1e-10 or 1e-6), 50 000 steps to t ≈ 1.65e5 in 48 s wall at load 3 (now: "fixed-point" at t ≈ 1.4e3, 1.7 s).  A stiff scipy method is no cure (measured from that
#: collapsed state to T = 1e6: BDF 1.3 s on sphere_sa_s2 but stalled on sphere_causal_vmf, LSODA the reverse,
#: Radau stalled on both; on a cluster that keeps moving, sphere_ngpt, all three are slower than these steps).
#: A run that could reach ``T`` within its budget is never stopped by this detector.
FIXED_FACTOR, FIXED_STRIKES = 100.0, 2


class FixedPointWatch(_WindowWatch):
    """Per cloud: the state at the last checkpoint, the window bookkeeping (:class:`_WindowWatch`) and the strikes
    (constants above).  :meth:`update` after every step (and renormalisation) returns ``{row: evidence}`` for the
    clouds that sit at a fixed point to the tolerance."""

    def __init__(self, Y, T: float, max_steps: int, tol: float, F, n: int, d: int):
        super().__init__(len(Y), T, max_steps)
        self.tol, self.F, self.n, self.d = tol, F, n, d
        self.Y = np.array(Y, dtype=float)
        self.moved = np.zeros(len(Y))

    def restart(self, s) -> None:
        super().restart(s)
        self.Y[:] = s.Y

    def update(self, s) -> dict:
        out = {}
        for i, w in self.windows(s):
            y = np.asarray(s.Y[i], float)
            moved = float(np.max(np.abs(y - self.Y[i]))) / max(1.0, float(np.max(np.abs(y))))
            self.Y[i] = y
            strikes = self.strike(i, moved <= FIXED_FACTOR * self.tol and w.need > w.left)
            if strikes:
                self.moved[i] = max(self.moved[i], moved) if strikes > 1 else moved
            if strikes >= FIXED_STRIKES:
                v = np.asarray(self.F(np.array([float(s.t[i])]), y[None]), float)[0].reshape(self.n, self.d)
                th = _unit(y.reshape(self.n, self.d))
                m = _unit(th.mean(axis=0))
                out[i] = (f"a fixed point to the tolerance: over each of the last {FIXED_STRIKES} windows of "
                          f"{COLLAPSE_WINDOW} attempted steps (the last from t = {w.t0:.6g}, {w.span:.3g} time units) "
                          f"no coordinate moved by more than {self.moved[i]:.2g} (<= {FIXED_FACTOR:g} tol = "
                          f"{FIXED_FACTOR * self.tol:.2g}); the largest velocity is "
                          f"{float(np.max(np.linalg.norm(v, axis=1))):.2g}, every token is within "
                          f"{float(np.max(np.linalg.norm(th - m, axis=1))):.2g} of the mean direction; at "
                          f"the pace of these steps (h = {w.mean:.3g}) "
                          f"T = {self.T:.6g} would need {w.need:.3g} more steps, the budget has {int(w.left)} left")
        return out


def default_tolerance(dtype) -> float:
    return 1e-10 if np.dtype(dtype) == np.float64 else 100 * float(np.finfo(np.float32).eps)


@dataclass(frozen=True)
class SphereRun:
    """Result of :func:`simulate_sphere`.  ``X``: end state ``(B, n, d)`` (or ``(n, d)`` for one cloud);
    ``theta = X/|X|`` and ``r = |X|`` (``r`` is ``None`` for post/ngpt); ``times``/``trajectory`` at ``t_eval``
    (``(k, B, n, d)`` or ``(k, n, d)``); ``max_renorm``: largest ``||θ| - 1|`` removed by a renormalisation."""

    t: float
    X: np.ndarray
    theta: np.ndarray
    r: np.ndarray | None
    times: np.ndarray | None
    trajectory: np.ndarray | None
    norm: str
    steps: int
    rejected: int
    nfev: int
    dtype: str
    tolerance: float
    max_renorm: float
    status: str = "ok"                 # "time-limit": max_seconds stopped the run at t < T; "stalled",
                                       # "fixed-point" (simulate_sphere's fixed_points): below
    detail: str = ""                   # why a run that is not "ok" stopped

    __eq__ = value_eq                  # by value, arrays entry by entry (symbolic_tpde.values)


def simulate_sphere(X0, schedule: Schedule | Weights | Callable[[float], Weights], T: float, *,
                    norm: str = "post", alpha: float = 1.0, dtype=None, tol: float | None = None,
                    t_eval=None, max_steps: int = 200_000, max_seconds: float | None = None, block=None,
                    threads=None, fixed_points: bool = False) -> SphereRun:
    """Evolve ``X0`` (``(n, d)`` or a batch ``(B, n, d)``) to ``T`` under ``norm`` (module docstring).

    For post/ngpt the rows of ``X0`` are normalised first; for pre/peri ``X0`` is ``x = rθ`` (non-zero rows).
    ``max_seconds``: wall-clock cap (:class:`symbolic_tpde.numerics.ode.solve.Deadline`, checked once per step);
    when it expires the run returns with ``status == "time-limit"`` and ``t`` the time every cloud reached.
    ``status == "stalled"`` (``detail`` says which cloud and why): the step limit was reached, or the step size
    collapsed while the state and its velocity were finite (no blow-up: e.g. a speed factor ``alpha`` so large
    that the flow's time scale is below what the tolerance resolves); ``t`` as for the time limit.  A state or
    velocity that left the finite floats raises :class:`~symbolic_tpde.errors.BlowupError`.
    ``fixed_points``: stop a cloud whose state has stopped moving (to ``FIXED_FACTOR·tol``) and that would
    otherwise spend its step budget before ``T`` (:class:`FixedPointWatch`): ``status == "fixed-point"``, ``t``
    the time of the detection, ``detail`` the evidence; not integrated past that time.
    """
    from ..ode.solve import Deadline

    if norm not in NORMS:
        raise InputError("norm", f"unknown normalisation {norm!r}; expected one of {list(NORMS)}")
    if not (isinstance(T, (int, float)) and np.isfinite(T) and T >= 0):
        raise InputError("T", f"must be a finite number >= 0, got {T!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not np.isfinite(alpha):
        raise InputError("alpha", f"must be a finite number, got {alpha!r}")
    dt = work_dtype(X0, dtype)
    X = np.array(X0, dtype=dt)
    single = X.ndim == 2
    if single:
        X = X[None]
    if X.ndim != 3 or X.shape[1] < 1 or not np.all(np.isfinite(X)):
        raise InputError("X0", f"expected finite tokens of shape (n, d) or (B, n, d), got {np.shape(X0)}")
    if np.any(np.linalg.norm(X, axis=2) == 0):
        raise InputError("X0", "a token is zero: it has no direction on the sphere")
    B, n, d = X.shape
    if norm in ON_SPHERE:
        X = _unit(X)
    sched = as_schedule(schedule)
    tol = default_tolerance(dt) if tol is None else float(tol)
    if not tol > 0:
        raise InputError("tol", f"must be > 0, got {tol}")
    if sched.func is None:
        for w in sched.weights:
            _check_weights(w)
    kw = dict(block=block, threads=threads)

    def rhs(w_seg):
        def F(t, Y):
            out = np.empty_like(Y)
            for m in range(Y.shape[0]):
                if not np.all(np.isfinite(Y[m])):      # a trial stage left the floats: the step is rejected
                    out[m] = np.nan
                    continue
                w = w_seg if w_seg is not None else _check_weights(sched(float(t[m])))
                with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                    out[m] = sphere_velocity(Y[m].reshape(n, d), w, norm, alpha, **kw).ravel()
            return out
        return F

    tq = None if t_eval is None else np.asarray(t_eval, float)
    if tq is not None and (tq.ndim != 1 or np.any(np.diff(tq) < 0) or np.any(tq < 0) or np.any(tq > T)):
        raise InputError("t_eval", "expected non-decreasing times in [0, T]")
    frames = None if tq is None else np.full((len(tq), B, n * d), np.nan, dtype=dt)
    Y = X.reshape(B, n * d).copy()
    steps = rejected = nfev = 0
    max_renorm = 0.0
    t = 0.0
    dl = Deadline(max_seconds)
    status, detail = "ok", ""
    watch, collapsed, fixed = StepCollapse(B, T, max_steps), {}, {}
    for a, b in (segments(sched, T) if T > 0 else []):
        F = rhs(sched(a) if sched.func is None else None)
        s = rk.RKSolver(F, a, Y, b, method="dopri5", rtol=tol, atol=tol, max_steps=max_steps)
        rec = rk.Recorder(tq, s.Y, s.t)
        watch.restart(s)
        still = FixedPointWatch(s.Y, T, max_steps, tol, F, n, d) if fixed_points else None
        if still is not None:
            still.restart(s)
        while s.active.size:
            acc = s.step()
            for i, why in watch.update(s, acc).items():
                s.stop([i])
                collapsed[i] = why
            if norm in ON_SPHERE and acc.rows.size:
                Z = s.Y[acc.rows].reshape(-1, n, d)
                nr = np.linalg.norm(Z, axis=2, keepdims=True)
                max_renorm = max(max_renorm, float(np.max(np.abs(nr - 1))))
                s.Y[acc.rows] = (Z / nr).reshape(len(acc.rows), n * d)
            rec.record(s.tab, acc)
            if still is not None:
                for i, why in still.update(s).items():
                    s.stop([i])
                    fixed[i] = why
            if dl.expired() and s.active.size:
                status, detail = "time-limit", f"the wall-clock cap stopped the run at t = {float(np.min(s.t)):.6g}"
                break
        ended = [s.status(i) for i in range(len(s.t))]
        bad = np.nonzero([e not in (rk.Status.OK, rk.Status.RUNNING) for e in ended])[0]
        steps += int(s.n_steps.sum())
        rejected += int(s.n_rejected.sum())
        nfev += s.nfev
        if bad.size:
            i = bad[0]
            Yi = s.Y[i:i + 1]
            finite = bool(np.all(np.isfinite(Yi)) and np.all(np.isfinite(F(np.array([float(s.t[i])]), Yi))))
            if ended[i] != rk.Status.STALLED and not finite:
                raise BlowupError(float(s.t[i]), f"sphere {norm} (cloud {i})",
                                  "the state or the field left the finite floats")
            # the state and its velocity are finite: no blow-up, the integrator could not go on
            status = "stalled"
            if i in fixed:
                status, detail = "fixed-point", f"cloud {i}: stopped at t = {s.t[i]:.6g}: {fixed[i]}"
            elif i in collapsed:
                Zi = Yi.reshape(n, d)
                detail = (f"cloud {i}: stalled at t = {s.t[i]:.6g} ({collapsed[i]}"
                          f"{_vanishing_attention(_unit(Zi), sched(float(s.t[i])), norm)})")
            else:
                detail = (f"cloud {i}: " + (f"step limit ({max_steps} steps) reached" if ended[i] == rk.Status.STALLED
                                            else "the step size collapsed with a finite state and velocity (a time "
                                                 "scale far below the tolerance's reach)") + f" at t = {s.t[i]:.6g}")
        if frames is not None:
            inside = (tq >= a) & ((tq < b) | (b == T))
            frames[inside] = rec.ys[inside].astype(dt)
        Y, t = s.Y, (b if status == "ok" else float(np.min(s.t)))
        if status != "ok":
            break
    if frames is not None and T == 0:
        frames[:] = Y
    Xf = Y.reshape(B, n, d)
    traj = None if frames is None else frames.reshape(len(tq), B, n, d)
    if traj is not None and norm in ON_SPHERE:
        traj = _unit(traj)        # dense output between renormalised steps: back onto the sphere
    th = _unit(Xf)
    r = None if norm in ON_SPHERE else np.linalg.norm(Xf, axis=2)
    if single:
        Xf, th = Xf[0], th[0]
        r = None if r is None else r[0]
        traj = None if traj is None else traj[:, 0]
    return SphereRun(float(t), Xf, th, r, tq, traj, norm, steps, rejected, nfev, dt.name, tol, max_renorm, status,
                     detail)


# ------------------------------------------------------------------------------------------------ scenarios
#: token dimension limit of sphere scenarios (the survey's phase diagram goes to d = 1024)
SPHERE_MAX_DIM = 1024
_TOP = {"geometry", "norm", "alpha", "attention", "d", "heads", "init", "T", "r0", "name", "description"}
_HEAD = {"attention", "beta", "A", "V", "Q", "K", "WO"}


@dataclass(frozen=True)
class SphereScenario:
    """A validated sphere scenario: weights, ``norm`` (and nGPT's ``alpha``), the ``init`` block as given (a
    validated ``dict``) and its law ``law`` (an :class:`~symbolic_tpde.inputs.scenario.InitSpec` with
    ``geometry == "sphere"``), ``T``, the initial radius ``r0`` (Pre-/Peri-LN), ``d``."""

    weights: Weights
    norm: str
    alpha: float
    init: dict = dc_field(hash=False)      # a dict does not hash; ``law`` holds the same law and hashes
    T: float
    r0: float
    d: int
    name: str = ""
    law: object = None
    geometry = "sphere"           # what analysis.verdict.classify_long_time dispatches on

    def initial(self, n: int, rng) -> np.ndarray:
        from ..measures.laws import sample

        return sample(self.law, n, rng) * self.r0


def _matrix(value, d, field):
    from ...inputs.checks import finite_array

    if value == "identity":
        return np.eye(d)
    if not isinstance(value, list):
        raise InputError(field, 'expected a matrix (list of rows) or "identity"')
    return finite_array(value, field, 2)     # numbers only, rectangular, finite, bounded (as every scenario)


def parse_sphere_scenario(data: dict, base_dir=None) -> SphereScenario:
    """Validate a ``"geometry": "sphere"`` scenario (README "Sphere", format)::

        {"geometry": "sphere", "norm": "post" | "pre" | "peri" | "ngpt", "alpha": 1.0 (ngpt),
         "attention": "sphere_sa" | "sphere_usa" | "sphere_causal", "d": 3,
         "beta": 1.0, "A": "identity" | [[...]], "V": "identity" | [[...]]   (or "Q", "K" (k, d); "WO")
         | "heads": [{"attention": ..., "beta": ..., "A": ..., "V": ...}, ...],
         "init": {"type": "uniform_sphere" | "vmf" | "frame" | "points", ...}, "T": 10.0, "r0": 1.0}

    The ``init`` block is checked by the shared schema (:func:`symbolic_tpde.inputs.scenario.parse_init` with
    ``geometry="sphere"``; relative paths from ``base_dir``)."""
    from ...inputs.checks import horizon, number_tree
    from ...weights import make_head, make_weights
    from ...registry.kinds import kind_names
    from ...inputs.scenario import parse_init

    if not isinstance(data, dict):
        raise InputError("scenario", "expected a JSON object")
    for key in data:
        if key not in _TOP | _HEAD:
            raise InputError(str(key)[:40], f"unknown key in a sphere scenario; allowed: {sorted(_TOP | _HEAD)}")
    if scenario_geometry(data) != "sphere":
        raise InputError("geometry", 'must be "sphere" here (or omitted with sphere attention kinds)')
    norm = data.get("norm", "post")
    if norm not in NORMS:
        raise InputError("norm", f"expected one of {list(NORMS)}, got {norm!r}"[:120])
    # a number of magnitude <= MAX_ENTRY, the bound on matrix entries (alpha scales the speed as they do); the
    # scenario reader's check, which compares a huge JSON integer exactly instead of converting it
    alpha = float(number_tree(data.get("alpha", 1.0), "alpha", ndim=0))
    if "alpha" in data and norm != "ngpt":
        raise InputError("alpha", "only for norm ngpt")
    d = data.get("d")
    if not isinstance(d, int) or isinstance(d, bool) or not 2 <= d <= SPHERE_MAX_DIM:
        raise InputError("d", f"must be an integer in [2, {SPHERE_MAX_DIM}]")
    r0 = data.get("r0", 1.0)
    if isinstance(r0, bool) or not isinstance(r0, (int, float)) or not (0 < r0 < 1e6):
        raise InputError("r0", "must be a number in (0, 1e6)")
    if "r0" in data and norm in ON_SPHERE:
        raise InputError("r0", "only for norm pre or peri (post and ngpt keep unit tokens)")
    if "T" not in data:
        raise InputError("T", "missing (the horizon of the run)")
    T = horizon(data["T"], "T")
    if "init" not in data:
        raise InputError("init", 'missing: {"type": NAME, ...} with NAME a sphere init type')
    init = parse_init(data["init"], base_dir, d=d, geometry="sphere")
    top = {k: v for k, v in data.items() if k in _HEAD}
    if "heads" in data:
        if set(top) - {"attention"}:
            raise InputError(sorted(set(top) - {"attention"})[0], "give head parameters at top level or in "
                                                                  "'heads', not both")
        specs = data["heads"]
        if not isinstance(specs, list) or not specs:
            raise InputError("heads", "must be a non-empty list of head objects")
    else:
        specs = [top]
    heads = []
    for i, h in enumerate(specs):
        where = f"heads[{i}]" if "heads" in data else ""
        pre = f"{where}." if where else ""
        if not isinstance(h, dict):
            raise InputError(where, "must be an object")
        for key in h:
            if key not in _HEAD:
                raise InputError(f"{pre}{str(key)[:40]}", f"unknown key in a head; allowed: {sorted(_HEAD)}")
        kind = h.get("attention", data.get("attention"))
        if kind not in kind_names("sphere"):
            raise InputError(f"{pre}attention", f"expected one of {list(kind_names('sphere'))}, got {kind!r}"[:120])
        prm = {k: v for k, v in h.items() if k != "attention"}
        for key in ("A", "V"):
            if key in prm:
                prm[key] = _matrix(prm[key], d, f"{pre}{key}")
        if "V" not in prm:
            raise InputError(f"{pre}V", 'missing ("identity" or a matrix)')
        heads.append(make_head(kind, d=d, where=where, **prm))
    w = make_weights(heads)
    if w.d != d:
        raise InputError("V", f"the heads have dimension {w.d}, the scenario d = {d}")
    return SphereScenario(w, norm, float(alpha), dict(data["init"]), T, float(r0), d, str(data.get("name", "")),
                          init)


def load_sphere_scenario(path) -> SphereScenario:
    """Read a sphere scenario file, or a built-in name (``symbolic_tpde/scenarios/sphere_*.json``), with the input
    layer's one reader (:func:`symbolic_tpde.inputs.scenario.read_scenario_file`)."""
    from ...inputs.scenario import read_scenario_file

    return parse_sphere_scenario(*read_scenario_file(path, ("sphere",)))


__all__ += ["SphereScenario", "parse_sphere_scenario", "load_sphere_scenario", "SPHERE_MAX_DIM"]
