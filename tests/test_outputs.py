"""`tpde gaussian` outputs a researcher can load (issue 20 item 4): requested times printed, times past a
blow-up reported as not reached (never replaced), npz fields of one type each, a CSV that numpy's
``genfromtxt(names=True)`` and pandas read without options, and ``tpde plot``'s panels.

The references are written here, not taken from the package: for softmax with ``V = I`` the covariance is
``Σ(t) = (Σ₀⁻¹ - t(A + Aᵀ))⁻¹`` (README Mathematics §4), so with ``A = aI`` and ``Σ₀ = s₀ I`` it is
``s(t) I`` with ``s(t) = s₀ / (1 - 2 a s₀ t)`` and ``T* = 1/(2 a s₀)``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from symbolic_tpde.cli import main

A, S0, ALPHA0 = 0.5, 0.8, [0.1, 0.0]
T_STAR = 1.0 / (2 * A * S0)                       # 1.25


def _s(t):
    return S0 / (1.0 - 2 * A * S0 * t)


def _scenario(tmp_path, a=A, T=2.0):
    p = tmp_path / "iso.json"
    p.write_text(json.dumps({"attention": "softmax", "A": [[a, 0], [0, a]], "V": [[1, 0], [0, 1]],
                             "alpha0": ALPHA0, "Sigma0": [[S0, 0], [0, S0]], "T": T}))
    return str(p)


def _strict(text):
    def bad(c):
        raise ValueError(f"non-strict JSON constant {c}")
    return json.loads(text, parse_constant=bad)


# DOP853 at rtol 1e-12 over a few hundred steps: 1e-9 relative is a generous bound for the dense output
RTOL = 1e-9


def test_requested_times_are_printed_and_times_past_a_blowup_are_not_reached(tmp_path, capsys):
    scn = _scenario(tmp_path)
    assert main(["gaussian", "--scenario", scn, "--times", "0.5", "1.0", "1.5", "1.9", "--json"]) == 0
    res = _strict(capsys.readouterr().out)
    assert res["status"] == "blowup"
    assert abs(res["blowup_time"] - T_STAR) <= 1e-9 * T_STAR
    assert [r["t"] for r in res["times"]] == [0.5, 1.0]              # reached, exactly the requested times
    for r in res["times"]:
        assert np.allclose(r["Sigma"], _s(r["t"]) * np.eye(2), rtol=RTOL, atol=0)
    assert res["not_reached"] == [1.5, 1.9]                         # listed, never replaced by T*
    assert main(["gaussian", "--scenario", scn, "--times", "0.5", "1.5"]) == 0
    text = capsys.readouterr().out
    assert "t = 0.5:" in text and "not reached" in text and "1.5" in text.split("not reached")[1]


@pytest.mark.parametrize("blowup", [True, False])
def test_npz_fields_have_one_type_each(tmp_path, capsys, blowup):
    scn = _scenario(tmp_path, a=A if blowup else -A)
    out = tmp_path / "traj.npz"
    assert main(["gaussian", "--scenario", scn, "--times", "0.5", "1.0", "1.5", "--save", str(out), "--json"]) == 0
    res = _strict(capsys.readouterr().out)
    z = np.load(out)                                   # allow_pickle=False: no object arrays in the file
    assert z["t"].dtype == np.float64 and z["Sigma"].dtype == np.float64 and z["alpha"].dtype == np.float64
    assert z["stop_row"].dtype == np.bool_ and z["not_reached"].dtype == np.float64
    assert z["status"].dtype.kind == "U" and str(z["status"]) == res["status"]
    if blowup:
        assert str(z["status"]) == "blowup"
        assert z["blowup_time"].dtype == np.float64 and abs(float(z["blowup_time"]) - T_STAR) < 1e-9
        assert list(z["stop_row"]) == [False, False, True] and list(z["not_reached"]) == [1.5]
    else:
        assert str(z["status"]) == "ok" and "blowup_time" not in z.files and "blowup_time_error" not in z.files
        assert not z["stop_row"].any() and z["not_reached"].size == 0
        s_ref = S0 / (1.0 + 2 * A * S0 * z["t"])                    # A = -aI: s(t) = s₀/(1 + 2 a s₀ t)
        assert np.allclose(z["Sigma"][:, 0, 0], s_ref, rtol=RTOL, atol=0)


@pytest.mark.parametrize("blowup", [True, False])
def test_csv_loads_with_numpy_and_pandas_without_options(tmp_path, capsys, blowup):
    scn = _scenario(tmp_path, a=A if blowup else -A)
    out = tmp_path / "traj.csv"
    assert main(["gaussian", "--scenario", scn, "--times", "0.5", "1.0", "1.5", "--save", str(out), "--json"]) == 0
    res = _strict(capsys.readouterr().out)
    arr = np.genfromtxt(out, delimiter=",", names=True)
    assert arr.dtype.names == ("t", "alpha_0", "alpha_1", "Sigma_0_0", "Sigma_0_1", "Sigma_1_1", "stop_row")
    assert not np.isnan(arr.view((float, len(arr.dtype.names)))).any()
    pd = pytest.importorskip("pandas")
    df = pd.read_csv(out)
    assert list(df.columns) == list(arr.dtype.names) and len(df) == len(arr) == 3
    assert np.array_equal(df["t"].to_numpy(), arr["t"])
    meta = _strict((tmp_path / "traj.meta.json").read_text())
    assert meta["status"] == res["status"] == ("blowup" if blowup else "ok")
    assert ("blowup_time" in meta) == blowup
    if blowup:
        assert list(arr["stop_row"]) == [0, 0, 1] and meta["not_reached"] == [1.5]
        assert np.allclose(arr["Sigma_0_0"][:2], _s(arr["t"][:2]), rtol=RTOL)


def test_plot_panels_are_centred_on_the_sample_mean(tmp_path, capsys):
    """A rank-one clustering scenario whose mean runs off like eᵗ: every panel is centred at 0 in coordinates
    relative to the sample mean, equal-aspect, without an axis offset, and has its own legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from symbolic_tpde.experiments.figures_extra import cloud_and_ode, draw_cloud_row
    from symbolic_tpde.gaussian import GaussianODE
    from symbolic_tpde.weights import Schedule, make_head, make_weights

    w = make_weights([make_head("softmax", A=np.array([[-1.0, 0.3], [-0.3, 0.0]]), V=np.eye(2))])
    data = cloud_and_ode(Schedule.constant(w), np.array([1.0, 2.0]), np.array([[1.0, 0.3], [0.3, 0.6]]),
                         [0.0, 3.0, 6.0], 400, 0, ode=GaussianODE.from_weights(w))
    assert np.linalg.norm(data[-1][2]) > 100                      # the mean has run off (~e^6)
    fig, axes = plt.subplots(1, 3)
    draw_cloud_row(axes, data)
    fig.canvas.draw()
    for ax in axes:
        lo, hi = ax.get_xlim()
        assert lo == -hi and ax.get_ylim() == (lo, hi)          # centred on the sample mean, square
        assert ax.get_aspect() == 1.0
        assert ax.xaxis.get_offset_text().get_text() == "" and ax.yaxis.get_offset_text().get_text() == ""
        assert ax.get_legend() is not None and "86.5" in " ".join(t.get_text() for t in ax.get_legend().get_texts())
    plt.close(fig)
