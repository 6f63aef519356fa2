"""Bounded work (issue 11, item 4): a wall-clock cap reported as a status with the time reached, never a hang.

The one mechanism is :class:`symbolic_tpde.numerics.ode.solve.Deadline`: :func:`~symbolic_tpde.numerics.ode.solve.integrate`
checks it before every rhs evaluation (status ``time-limit``), the particle loops once per step, ``tpde sweep``
per grid point.  No timing assertions (tests/conftest.py's alarm catches a hang): each run below would take
minutes to hours without its cap, so reaching the status at all is the test; what is asserted is that the
reported ``t`` and state are exactly those of the integration up to ``t`` (checked by independent routes).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from symbolic_tpde.cli import main
from symbolic_tpde.numerics.ode.solve import Deadline, Status, TimeLimitReached, integrate

#: a cap far below any of the runs' uncapped durations (each would need >= 10⁵ steps), seconds
TINY = 0.05


def oscillator(t, y):
    return np.array([y[1], -y[0]])


@pytest.mark.parametrize("method", ["dopri5", "rk4", "DOP853", "LSODA"])
def test_integrate_time_limit_reports_the_state_at_the_time_reached(method):
    """``y'' = -y`` on ``[0, 10⁶]``: the capped run stops with status ``time-limit`` at a ``t_end < T`` that is
    its last output row, and ``y_end`` is the exact solution ``(cos t, -sin t)`` at that ``t_end`` within the
    global error of a 1e-10 tolerance run over ``t_end <= 10⁴`` (bound 1e-4: error ~ rtol·t for a
    non-expanding flow, and rk4 at 100 steps per unit time has local error h⁵/120 ~ 1e-12 per step)."""
    sol = integrate(oscillator, [1.0, 0.0], (0.0, 1e6), method=method, rtol=1e-10, max_seconds=TINY)
    assert sol.status == Status.TIME_LIMIT and str(sol.status) == "time-limit"
    assert 0.0 <= sol.t_end < 1e4
    assert sol.t[-1] == sol.t_end and np.array_equal(sol.y[-1], sol.y_end)
    assert [e.kind for e in sol.events][-1] == "time-limit" and sol.events[-1].time == sol.t_end
    assert np.allclose(sol.y_end, [math.cos(sol.t_end), -math.sin(sol.t_end)], rtol=0, atol=1e-4)
    assert "wall-clock limit" in sol.message and f"{sol.t_end:.6g}" in sol.message


def test_time_limit_with_output_times_ends_with_the_stopping_point():
    ts = np.linspace(0.0, 1e6, 11)
    sol = integrate(oscillator, [1.0, 0.0], (0.0, 1e6), t_eval=ts, max_seconds=TINY)
    assert sol.status == Status.TIME_LIMIT
    assert sol.t[0] == 0.0 and sol.t[-1] == sol.t_end < ts[1]   # only t = 0 reached of the requested times


def test_no_cap_and_generous_cap_change_nothing():
    """The deadline only stops runs: with a cap that is not reached the result is bit-identical."""
    a = integrate(oscillator, [1.0, 0.0], (0.0, 20.0), rtol=1e-10)
    b = integrate(oscillator, [1.0, 0.0], (0.0, 20.0), rtol=1e-10, max_seconds=3600.0)
    assert a.status == b.status == Status.OK
    assert np.array_equal(a.y, b.y) and a.nfev == b.nfev


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, "1", True])
def test_deadline_refuses_non_positive_or_non_finite(bad):
    with pytest.raises(ValueError, match="max_seconds"):
        Deadline(bad)


def test_deadline_check_raises_once_expired():
    dl = Deadline(1e-9)
    while not dl.expired():
        pass
    with pytest.raises(TimeLimitReached, match="wall-clock limit"):
        dl.check()
    Deadline(None).check()   # no cap: never raises
    assert Deadline.of(dl) is dl


@pytest.mark.parametrize("method,steps", [("euler", 10**6), ("rk4", 10**6), ("dopri5", None), ("ivp", None)])
def test_simulate_time_limit(method, steps):
    """Particles: status ``time-limit`` at ``t < T``.  For the fixed-step methods the state at ``t = k h`` is
    re-derived by an uncapped run of exactly those ``k`` steps (same ``h``): equal to round-off."""
    from symbolic_tpde.weights import make_head, make_weights
    from symbolic_tpde.numerics.particles.simulate import simulate

    w = make_weights([make_head("softmax", A=np.array([[-0.5]]), V=np.array([[1.0]]))])
    X0 = np.random.default_rng(0).normal(size=(64, 1))
    T = 1e4
    run = simulate(X0, w, T, method=method, steps=steps, progress=False, max_seconds=TINY)
    assert run.status == "time-limit" and 0 < run.t < T and np.isfinite(run.X).all()
    if steps is not None:
        ref = simulate(X0, w, run.t, method=method, steps=run.steps, progress=False)
        assert ref.status == "ok"
        assert np.allclose(run.X, ref.X, rtol=0, atol=1e-12)   # same steps; h agrees to an ulp


def test_simulate_saved_trajectory_ends_at_the_time_reached():
    from symbolic_tpde.weights import make_head, make_weights
    from symbolic_tpde.numerics.particles.simulate import simulate

    w = make_weights([make_head("softmax", A=np.array([[-0.5]]), V=np.array([[1.0]]))])
    X0 = np.random.default_rng(1).normal(size=(32, 1))
    run = simulate(X0, w, 1e4, method="rk4", steps=10**6, save_every=1000, progress=False, max_seconds=TINY)
    assert run.status == "time-limit"
    assert run.times[-1] == run.t and np.array_equal(run.trajectory[-1], run.X)


LONG = {"attention": "softmax", "A": [[0.0, 1.0], [-1.0, 0.0]], "V": [[0.0, 1.0], [-1.0, 0.0]],
        "alpha0": [0.5, 0.0], "Sigma0": [[1.0, 0.0], [0.0, 1.0]], "T": 1e6}


def test_gaussian_cli_time_limit_exit_5_strict_json(tmp_path, capsys):
    """A rotation (skew ``A``, ``V``): no blow-up, ~10⁶ time units of oscillation; the cap stops it."""
    from symbolic_tpde.commands.gaussian import EXIT_TIME_LIMIT

    f = tmp_path / "long.json"
    f.write_text(json.dumps(LONG))
    rc = main(["gaussian", "--scenario", str(f), "--backend", "numpy", "--json", "--max-seconds", str(TINY)])
    out = capsys.readouterr().out
    obj = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-finite {c}"))
    assert rc == EXIT_TIME_LIMIT == 5
    assert obj["status"] == "time-limit" and 0 <= obj["t"] < 1e6 and "wall-clock" in obj["message"]


def test_particles_cli_time_limit_exit_5(tmp_path, capsys):
    f = tmp_path / "long.json"
    f.write_text(json.dumps(dict(LONG, T=1e4)))
    save = tmp_path / "traj.npz"
    rc = main(["particles", "--scenario", str(f), "--n", "50", "--seed", "0", "--json", "--steps", "1000000",
               "--progress", "never", "--save", str(save), "--max-seconds", str(TINY)])
    obj = json.loads(capsys.readouterr().out)
    assert rc == 5 and obj["status"] == "time-limit" and 0 < obj["t"] < 1e4
    assert np.isfinite(obj["mean"]).all() and not save.exists()   # an incomplete trajectory is not written


@pytest.mark.parametrize("cmd", ["gaussian", "particles", "sweep"])
@pytest.mark.parametrize("bad", ["0", "-1", "1e9"])
def test_max_seconds_is_checked(cmd, bad, tmp_path, capsys):
    f = tmp_path / "s.json"
    f.write_text(json.dumps(dict(LONG, T=1.0)))
    argv = {"gaussian": ["gaussian", "--scenario", str(f)],
            "particles": ["particles", "--scenario", str(f), "--n", "4", "--seed", "0"],
            "sweep": ["sweep", "--out", str(tmp_path / "sw")]}[cmd]
    assert main(argv + ["--max-seconds", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tpde {cmd}: error: max-seconds:")


def test_sweep_point_cap_is_a_phase_and_exit_5(tmp_path, capsys):
    from symbolic_tpde.analysis.sweep import DEFAULT_POINT_SECONDS, PHASES
    from symbolic_tpde.commands.sweep import POINT_SECONDS

    assert POINT_SECONDS == DEFAULT_POINT_SECONDS   # the CLI default is the API's (spelled out numpy-free)
    stem = tmp_path / "sw"
    # V ≠ cI: no closed form decides the points (a V = I point is decided by the theorem in microseconds and
    # never reaches a cap), so every point needs the numerics and meets the 1 ms cap
    rc = main(["sweep", "--n", "2", "--K", "1", "--T", "1e6", "--V", "1", "0.5", "--out", str(stem),
               "--max-seconds", "0.001"])
    cap = capsys.readouterr()
    # stderr: the s = 0 warning, progress lines, then the time-limit line
    assert rc == 5 and cap.err.splitlines()[-1].startswith("tpde sweep: time-limit: 4 of 4 grid points")
    data = np.load(stem.with_suffix(".npz"))
    assert list(data["phase"]) == [PHASES.index("time-limit")] * 4
    assert (data["counts"][:, PHASES.index("time-limit")] == 2).all()   # K = 1, symmetrised: 2 per point


def test_gaussian_covariance_only_takes_the_cap_too(tmp_path, capsys):
    """``--covariance-only`` (softmax, ``V = I``: dΣ/dt free of α) runs through
    :func:`symbolic_tpde.analysis.clustering.integrate_covariance`, which must take the same cap.  A cap of
    1e-9 s has expired before the first right-hand side evaluation, whatever the run."""
    f = tmp_path / "vi.json"
    f.write_text(json.dumps({"attention": "softmax", "A": [[-1.0, 0.3], [0.2, -0.5]], "V": [[1.0, 0.0], [0.0, 1.0]],
                             "alpha0": [0.5, 0.0], "Sigma0": [[1.0, 0.0], [0.0, 1.0]], "T": 1e5}))
    rc = main(["gaussian", "--scenario", str(f), "--backend", "numpy", "--json", "--covariance-only",
               "--max-seconds", "1e-9"])
    obj = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-finite {c}"))
    assert rc == 5 and obj["status"] == "time-limit" and obj["t"] == 0.0
