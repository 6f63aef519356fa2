"""The one integrator entry point (symbolic_tpde.numerics.ode.solve.integrate): every Status reached by a small
constructed case, breakpoints, events, outputs."""

import json
import math

import numpy as np
import pytest

from symbolic_tpde.numerics.ode.solve import BlowupMonitor, Status, StopCondition, integrate, wants_jacobian

SCALAR_SIZE = BlowupMonitor(lambda y: float(y[0]), lambda y, fy: float(fy[0]))
HALF = StopCondition(lambda t, y: y - 0.5, "half", "y reached 1/2 at t = {t:.12g}")


def test_ok_status_and_str_enum():
    """y' = -y: e^{-1} at t = 1; DP5 at rtol 1e-11 gives a global error of a few rtol (measured 2e-12)."""
    sol = integrate(lambda t, y: -y, [1.0], (0.0, 1.0), rtol=1e-11)
    assert sol.status == "ok" and sol.status is Status.OK and json.dumps(sol.status) == '"ok"'
    assert sol.t[0] == 0.0 and sol.t[-1] == 1.0 and sol.y.shape == (len(sol.t), 1)
    assert abs(sol.y_end[0] - math.exp(-1)) < 1e-10
    assert sol.n_steps == len(sol.t) - 1 and sol.nfev > 6 * sol.n_steps and sol.method == "dopri5"


@pytest.mark.parametrize("method", ["dopri5", "DOP853"])
def test_blowup_of_y_squared(method):
    """y' = y², y(0) = 2: y = 1/(T* - t), T* = 1/y0 = 0.5, exponent p = 1.  Measured errors ~1e-13 with
    error bars ~5e-12; the bar must cover the truth, and both are far below the 1e-6 requirement."""
    sol = integrate(lambda t, y: y * y, [2.0], (0.0, 10.0), method=method, rtol=1e-12, events=[SCALAR_SIZE])
    assert sol.status == Status.BLOWUP
    err = abs(sol.blowup_time - 0.5)
    assert err <= sol.blowup_time_error and sol.blowup_time_error < 1e-9
    assert abs(sol.exponent - 1) < 1e-3
    levels = [e for e in sol.events if e.kind == "level"]
    assert len(levels) == 8 and [e.index for e in levels] == list(range(8))
    # the run ends at the top level r = 1e10 r0; its time is a root in t, resolved to the float spacing near
    # t = 0.5 (~1e-16), which moves r = 1/(T* - t) by r²·1e-16 ≈ 2e-6 relative at r = 2e10
    assert np.isfinite(sol.y).all() and sol.t_end < 0.5 and abs(sol.y_end[0] / (2 * 1e10) - 1) < 1e-4


def test_exponential_growth_overflows_without_blowup():
    """y' = 3y grows without a finite-time singularity: q → 1/3, p_k → ∞, so no blow-up signature; the run
    stops where y = 1e200 y0, i.e. t = ln(1e200)/3 = 153.5057 (DOP853 at rtol 1e-10 over 460 e-foldings:
    relative error of y ≲ 1e-7, i.e. an error in t of ≲ 1e-7/3)."""
    sol = integrate(lambda t, y: 3 * y, [1.0], (0.0, 200.0), method="DOP853", events=[SCALAR_SIZE])
    assert sol.status == Status.OVERFLOW and sol.blowup_time is None
    assert abs(sol.t_end - math.log(1e200) / 3) < 1e-6 and np.isfinite(sol.y).all()
    ok = integrate(lambda t, y: 3 * y, [1.0], (0.0, 12.0), events=[SCALAR_SIZE])
    assert ok.status == Status.OK and abs(ok.y_end[0] / math.exp(36) - 1) < 1e-8


def test_stop_condition_located_by_root_finding():
    """y' = -y with the condition y - 1/2 > 0: it crosses 0 at t = ln 2.  The root of the dense output is
    found to round-off; the interpolant is accurate to ~rtol = 1e-12 (measured error 2e-14)."""
    sol = integrate(lambda t, y: -y, [1.0], (0.0, 5.0), rtol=1e-12, events=[HALF])
    assert sol.status == Status.EVENT and sol.message.startswith("y reached 1/2 at t = ")
    assert abs(sol.t_end - math.log(2)) < 1e-10 and sol.t[-1] == sol.t_end
    ev = [e for e in sol.events if e.kind == "half"]
    assert len(ev) == 1 and ev[0] is sol.event and ev[0].index == 0 and abs(ev[0].time - math.log(2)) < 1e-10


def test_stop_condition_where_the_rhs_stops_being_finite():
    """The rhs is NaN beyond the condition's zero (y = 1 - t, condition y - 1/2): trial steps past t = 1/2
    are rejected until the step size collapses (h < 1e-14 max(1, t)); the time reached is t = 1/2 to within
    that (measured 1e-14)."""
    f = lambda t, y: np.array([-1.0]) if y[0] > 0.5 else np.array([np.nan])  # noqa: E731
    sol = integrate(f, [1.0], (0.0, 5.0), events=[HALF])
    assert sol.status == Status.EVENT and sol.event.kind == "half" and abs(sol.t_end - 0.5) < 1e-10
    assert "blowup" not in sol.message


def test_nonfinite_rhs_is_an_event_not_silent_nans():
    f = lambda t, y: np.array([1.0]) if t < 0.5 else np.array([np.nan])  # noqa: E731
    sol = integrate(f, [1.0], (0.0, 5.0))
    assert sol.status == Status.STALLED and np.isfinite(sol.y).all()
    ev = [e for e in sol.events if e.kind == "nonfinite"]
    # located by the collapse of the step size: h < 1e-14 max(1, t) (measured 1e-15)
    assert len(ev) == 1 and abs(ev[0].time - 0.5) < 1e-10 and abs(sol.t_end - 0.5) < 1e-10


def test_stiff_problem_stalls_on_the_evaluation_budget():
    """An explicit method on y' = -1e7 (y - cos t) needs ~1e7 steps: max_nfev stops it."""
    sol = integrate(lambda t, y: -1e7 * (y - np.cos(t)), [1.0], (0.0, 10.0), max_nfev=20_000)
    assert sol.status == Status.STALLED and 0 < sol.t_end < 10 and "20000" in sol.message


@pytest.mark.parametrize("method", ["dopri5", "rk4", "euler", "DOP853", "LSODA"])
def test_breakpoints_make_piecewise_constant_rhs_exact(method):
    """y' = 1 for t < 1/3, 2 after: y(1) = 1/3 + 4/3.  Every RK method integrates a constant exactly, so with
    the breakpoint the only error is round-off (a few ulps); without it the step across the jump errs."""
    g = lambda t, y: np.array([1.0 if t < 1 / 3 else 2.0])  # noqa: E731
    kw = dict(method=method, steps=10) if method in ("rk4", "euler") else dict(method=method)
    sol = integrate(g, [0.0], (0.0, 1.0), breakpoints=(1 / 3,), **kw)
    assert abs(sol.y_end[0] - 5 / 3) < 1e-14 and 1 / 3 in sol.t.tolist()
    if method in ("rk4", "euler"):
        bad = integrate(g, [0.0], (0.0, 1.0), **kw)
        assert abs(bad.y_end[0] - 5 / 3) > 1e-3   # h = 0.1 step straddling the jump: O(h) error


def test_t_eval_progress_and_fixed_steps():
    """RK4 with 20 steps on y' = -y (global error ~h⁴/120·e^{-t} ~ 5e-8 at h = 0.05): t_eval points are the
    Hermite interpolant (local error O(h⁴) ~ 1e-7), and progress sees every step."""
    seen = []
    te = np.array([0.0, 0.25, 0.33, 1.0])
    sol = integrate(lambda t, y: -y, [1.0], (0.0, 1.0), method="rk4", steps=20, t_eval=te,
                    progress=lambda t, T: seen.append((t, T)))
    assert np.array_equal(sol.t, te) and sol.n_steps == 20 and len(seen) == 20 and seen[-1] == (1.0, 1.0)
    assert np.abs(sol.y[:, 0] - np.exp(-te)).max() < 1e-6
    with pytest.raises(ValueError):
        integrate(lambda t, y: -y, [1.0], (0.0, 1.0), t_eval=[0.5, 0.2])


def test_error_run_can_be_switched_off():
    mon = BlowupMonitor(SCALAR_SIZE.size, SCALAR_SIZE.dsize, error_run=False)
    a = integrate(lambda t, y: y * y, [2.0], (0.0, 10.0), method="DOP853", rtol=1e-12, events=[mon])
    b = integrate(lambda t, y: y * y, [2.0], (0.0, 10.0), method="DOP853", rtol=1e-12, events=[SCALAR_SIZE])
    assert a.blowup_time == b.blowup_time and a.blowup_time_error <= b.blowup_time_error and a.nfev < b.nfev


def test_the_method_says_whether_it_wants_a_jacobian():
    """Asked of the method: scipy's implicit solvers take ``jac`` (BDF, Radau, LSODA), the explicit pairs and the
    package's tableaus (strictly lower-triangular ``a``) do not; the Jacobian given is then used (a wrong one
    changes a BDF run, and leaves an explicit run bit-for-bit alone)."""
    assert [m for m in ("RK45", "RK23", "DOP853", "LSODA", "BDF", "Radau", "euler", "rk4", "bs32", "dopri5")
            if wants_jacobian(m)] == ["LSODA", "BDF", "Radau"]
    wrong = lambda t, y: np.array([[5.0]])  # noqa: E731
    for m, used in (("BDF", True), ("dopri5", False)):
        a = integrate(lambda t, y: -y, [1.0], (0.0, 1.0), method=m, rtol=1e-6)
        b = integrate(lambda t, y: -y, [1.0], (0.0, 1.0), method=m, rtol=1e-6, jac=wrong)
        assert (a.nfev != b.nfev or a.y_end[0] != b.y_end[0]) == used
