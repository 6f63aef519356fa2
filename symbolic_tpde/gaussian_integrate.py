"""Integration of a :class:`~symbolic_tpde.gaussian.GaussianODE` (moved out of ``gaussian.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import InputError
from .model import check_gaussian
from .gaussian import BLOWUP_FACTOR, pack_state, unpack_state


@dataclass(frozen=True)
class GaussianSolution:
    """``t (K,)``, ``alpha (K, d)``, ``Sigma (K, d, d)``; ``status`` ``"ok"`` or ``"blowup"``."""

    t: np.ndarray
    alpha: np.ndarray
    Sigma: np.ndarray
    status: str
    blowup_time: float | None
    message: str
    backend: str


def integrate_gaussian(self, alpha0, Sigma0, T: float, *, method: str = "LSODA", rtol: float = 1e-10,
                       atol: float = 1e-12, t_eval=None) -> GaussianSolution:
    """Integrate on ``[0, T]``, restarting at layer breakpoints; stops with status ``"blowup"`` when
    ``tr Σ + |α|²`` exceeds ``BLOWUP_FACTOR`` times its initial value (event time = first estimate of the
    blow-up time) or when the state stops being finite.

    ``t_eval``: output times; interior points come from the solver's dense output (``DOP853``: 7th-order
    interpolant, about ``rtol``; ``LSODA``'s is coarser, ~1e-8 relative measured), layer ends and ``T``
    from the integrator's own steps."""
    from scipy.integrate import solve_ivp

    alpha0, Sigma0 = check_gaussian(alpha0, Sigma0, self.d)
    if not (math.isfinite(T) and T >= 0):
        raise InputError("T", f"must be finite and >= 0, got {T}")
    y = pack_state(alpha0, Sigma0)
    d = self.d
    size0 = float(np.trace(Sigma0) + alpha0 @ alpha0)
    log_limit = math.log(BLOWUP_FACTOR * size0)

    def size_event(t, yy):
        s = float(np.sum(yy[d:][_diag_index(d)]) + yy[:d] @ yy[:d])
        return (math.log(s) if s > 0 else -math.inf) - log_limit

    size_event.terminal = True
    size_event.direction = 1.0
    if t_eval is not None:
        t_eval = np.asarray(t_eval, dtype=float)
        if t_eval.ndim != 1 or np.any(np.diff(t_eval) < 0) or (t_eval.size and (t_eval[0] < 0 or t_eval[-1] > T)):
            raise InputError("t_eval", "must be increasing times within [0, T]")
    edges = [0.0, *self.schedule.breakpoints(T), float(T)]
    ts, ys = ([np.array([0.0])], [y[None]]) if t_eval is None else ([], [])
    status, tb, message = "ok", None, "integrated to T"
    for a, b in zip(edges[:-1], edges[1:]):
        if b <= a:
            continue
        fun, jac = _bound(self, a)
        # The generated Jacobian (built lazily; seconds for ℓ2 at d >= 3) is given to the implicit methods
        # that need it; LSODA estimates its own by differences, which is cheaper here.
        kwargs = {"jac": jac} if (jac is not None and method in ("BDF", "Radau")) else {}
        try:
            sol = solve_ivp(fun, (a, b), y, method=method, rtol=rtol, atol=atol, events=size_event,
                            dense_output=t_eval is not None, **kwargs)
        except _NonFinite as exc:
            status, tb, message = "blowup", exc.t, f"state became non-finite near t = {exc.t:.6g}"
            break
        last = ts[-1][-1] if ts and ts[-1].size else -math.inf
        if t_eval is None:
            keep = sol.t > last
            ts.append(sol.t[keep])
            ys.append(sol.y.T[keep])
        elif sol.t.size > 1:
            te = t_eval[(t_eval >= a) & (t_eval <= sol.t[-1]) & (t_eval > last)]
            vals = sol.sol(te).T if te.size else np.zeros((0, y.size))
            vals[te == sol.t[-1]] = sol.y[:, -1]  # segment ends: the integrator's own value, not interpolated
            ts.append(te)
            ys.append(vals)
        if sol.status == 1:
            tb = float(sol.t_events[0][0])
            status = "blowup"
            message = (f"tr Σ + |α|² exceeded {BLOWUP_FACTOR:.0e} x its initial value at t = {tb:.6g} "
                       "(first estimate of the blow-up time; the last row is the state at that time)")
            ts.append(sol.t_events[0][:1])
            ys.append(sol.y_events[0][:1])
            break
        if sol.status != 0:
            status, tb = "blowup", float(sol.t[-1]) if sol.t.size else a
            message = f"integrator stopped at t = {tb:.6g}: {sol.message}"
            break
        y = sol.y[:, -1]
    n = d + d * (d + 1) // 2
    t_all = np.concatenate(ts) if ts else np.zeros(0)
    y_all = np.concatenate(ys) if ys else np.zeros((0, n))
    alpha, Sigma = unpack_state(y_all, d)
    return GaussianSolution(t_all, alpha, Sigma, status, tb, message, self.backend)

def _bound(self, t_start: float):
    """``(fun, jac)`` for ``solve_ivp`` on a segment starting at ``t_start`` (params fixed per layer)."""
    fixed = self.schedule.func is None
    if self.system is None:
        w0 = self.weights(t_start)

        def fun(t, y):
            out = self._numeric_rhs(y, w0 if fixed else self.weights(t))
            if not np.isfinite(out).all():
                raise _NonFinite(t)
            return out

        return fun, None
    f = self.compiled.f
    if fixed:
        p = self.params(t_start)

        def fun(t, y):
            out = f(t, y, p)
            if not np.isfinite(out).all():
                raise _NonFinite(t)
            return out

        cj = self.compiled.jac
        return fun, (lambda t, y: cj(t, y, p))

    def fun(t, y):
        out = f(t, y, self.params(t))
        if not np.isfinite(out).all():
            raise _NonFinite(t)
        return out

    return fun, (lambda t, y: self.jac(t, y))



class _NonFinite(ArithmeticError):
    def __init__(self, t: float):
        self.t = float(t)
        super().__init__(t)


def _diag_index(d: int) -> np.ndarray:
    """Positions of the diagonal entries of Σ in the packed upper triangle."""
    iu = np.triu_indices(d)
    return np.nonzero(iu[0] == iu[1])[0]
