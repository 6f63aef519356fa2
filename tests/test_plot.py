"""`tpde plot`: token cloud beside the ODE started from the cloud's sample moments (issue 13 items 4-5)."""

import numpy as np

from symbolic_tpde import make_head, make_weights
from symbolic_tpde.experiments.figures_extra import cloud_and_ode
from symbolic_tpde.cli import main
from symbolic_tpde.gaussian import GaussianODE
from symbolic_tpde.weights import Schedule


def test_ode_starts_from_the_sample_moments():
    w = make_weights([make_head("softmax", A=-np.eye(2) * 0.5, V=np.eye(2))])
    panels = cloud_and_ode(Schedule.constant(w), np.zeros(2), np.eye(2), [0.0, 0.5], 300, 1,
                           ode=GaussianODE.from_weights(w))
    t, X, me, Se, ao, So = panels[0]
    assert t == 0.0 and np.array_equal(Se, So) and np.array_equal(me, ao)   # same numbers, not just close
    assert panels[1][5] is not None


def test_plot_command_writes_png_for_preserving_and_non_preserving(tmp_path):
    for name in ("softmax_2d", "sigmoid_2d"):
        out = tmp_path / f"{name}.png"
        assert main(["plot", "--scenario", name, "--out", str(out), "--n", "200", "--panels", "2"]) == 0
        assert out.stat().st_size > 5_000
    assert main(["plot", "--scenario", "softmax_2d", "--out", str(tmp_path / "x.png"), "--dims", "0", "2"]) == 2
