"""`tpde gaussian --save/--times/--covariance-only`, strict JSON, exit codes (README Commands; issue 13 item 5)."""

import json

import numpy as np
import pytest

from symbolic_tpde.analysis.closed_forms import blowup_time_vi, sigma_vi
from symbolic_tpde.cli import main

A_RANK1 = [[-0.5, 0.3], [-0.3, 0.0]]          # A + Aᵀ = diag(-1, 0): rank-one limit on e₁ (README Math §4)
S0 = [[1.0, 0.2], [0.2, 0.5]]


def _scenario(tmp_path, A, T, attention="softmax", alpha0=(0.3, -0.2)):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"attention": attention, "A": A, "V": [[1, 0], [0, 1]], "alpha0": list(alpha0),
                             "Sigma0": S0, "T": T}))
    return str(p)


def _strict(text):
    def bad(c):
        raise ValueError(f"non-strict JSON constant {c}")
    return json.loads(text, parse_constant=bad)


def test_covariance_only_reaches_the_limit_where_the_full_system_overflows(tmp_path, capsys):
    scn = _scenario(tmp_path, A_RANK1, 1000.0)
    assert main(["gaussian", "--scenario", scn, "--json"]) == 0
    full = _strict(capsys.readouterr().out)
    # V = I: dα/dt = α + ΣAα grows like eᵗ, so the full state overflows long before T = 1000
    assert full["status"] == "overflow" and full["t"] < 500
    assert main(["gaussian", "--scenario", scn, "--json", "--covariance-only"]) == 0
    cov = _strict(capsys.readouterr().out)
    assert cov["status"] == "ok" and cov["t"] == 1000.0 and cov["alpha"] is None and cov["covariance_only"]
    # closed form Σ(t) = (Σ₀⁻¹ - t(A + Aᵀ))⁻¹; DOP853 at rtol 1e-12 over ~10³ steps: 1e-8 relative is generous
    ref = sigma_vi(1000.0, np.array(S0), np.array(A_RANK1))
    assert np.allclose(cov["Sigma"], ref, rtol=1e-8, atol=1e-12)


def test_covariance_only_refused_when_sigma_dot_involves_alpha(tmp_path, capsys):
    scn = _scenario(tmp_path, A_RANK1, 1.0, attention="linear")
    assert main(["gaussian", "--scenario", scn, "--covariance-only"]) == 2
    assert "involves the mean" in capsys.readouterr().err


@pytest.mark.parametrize("ext", ["npz", "csv"])
def test_save_trajectory_at_requested_times(tmp_path, capsys, ext):
    out = tmp_path / f"traj.{ext}"
    times = [0.0, 0.25, 0.5, 1.0]
    assert main(["gaussian", "--scenario", "softmax_2d", "--json", "--save", str(out), "--times",
                 *map(str, times)]) == 0
    res = _strict(capsys.readouterr().out)
    if ext == "npz":
        data = np.load(out)
        t, Sig, alpha = data["t"], data["Sigma"], data["alpha"]
    else:
        lines = out.read_text().splitlines()
        assert lines[0] == "t,alpha_0,alpha_1,Sigma_0_0,Sigma_0_1,Sigma_1_1,stop_row"
        rows = np.array([[float(x) for x in ln.split(",")] for ln in lines[1:]])
        assert not rows[:, -1].any()                                  # no early stop: every row was requested
        t, alpha = rows[:, 0], rows[:, 1:3]
        Sig = np.stack([[[r[3], r[4]], [r[4], r[5]]] for r in rows])
    assert np.array_equal(t, times)
    assert np.allclose(Sig[0], np.array([[1.0, 0.3], [0.3, 0.6]]), rtol=0, atol=0)  # the scenario's Σ₀, exactly
    # the last saved state is the end state printed (the same run; CSV written with 17 digits)
    assert np.allclose(Sig[-1], res["Sigma"], rtol=1e-15, atol=0) and np.allclose(alpha[-1], res["alpha"], rtol=1e-15)


def test_blowup_is_a_result_with_exit_0_and_strict_json(tmp_path, capsys):
    A = [[0.3, 0.1], [0.0, 0.2]]                     # A + Aᵀ ≻ 0: finite-time blow-up (README Math §4)
    scn = _scenario(tmp_path, A, 50.0, alpha0=(0.0, 0.0))
    assert main(["gaussian", "--scenario", scn, "--json", "--covariance-only"]) == 0
    res = _strict(capsys.readouterr().out)
    assert res["status"] == "blowup"
    T_star = blowup_time_vi(np.array(S0), np.array(A))
    assert abs(res["blowup_time"] - T_star) <= max(res["blowup_time_error"], 1e-12 * T_star)


def test_bad_times_is_input_error(capsys):
    assert main(["gaussian", "--scenario", "softmax_2d", "--times", "0.5", "0.2"]) == 2
    assert "times" in capsys.readouterr().err
    assert main(["gaussian", "--scenario", "softmax_2d", "--save", "x.txt"]) == 2


def _skew(d, size, seed):
    G = np.random.default_rng(seed).normal(size=(d, d))
    K = G - G.T
    return size * K / np.linalg.norm(K, 2)


@pytest.mark.parametrize("d,a,s0,skew", [(2, 0.5, 0.8, 0.8), pytest.param(2, 0.5, 0.8, 2.0, marks=pytest.mark.slow),
                                         (3, 0.7, 0.6, 0.5),
                                         (5, 0.4, 1.1, 1.0)])
def test_isotropic_blowup_with_a_skew_V_reaches_blowup(tmp_path, capsys, d, a, s0, skew):
    """Issue 20: softmax, A = aI, V = I + K (K skew, ‖K‖ = skew), Σ₀ = s₀I.  Reference by hand: for Σ = sI,
    dΣ/dt = VΣAΣ + ΣAᵀΣVᵀ = as²(V + Vᵀ) = 2as²I (K + Kᵀ = 0), so Σ stays isotropic with ds/dt = 2as²,
    s(t) = s₀/(1 - 2as₀t), T* = 1/(2as₀).  The direct run stalls near T* (the off-diagonal round-off
    eps·s² cannot pass the componentwise error test); the regular form must take over and report `blowup`."""
    V = np.eye(d) + _skew(d, skew, d)
    p = tmp_path / "iso.json"
    p.write_text(json.dumps({"attention": "softmax", "A": (a * np.eye(d)).tolist(), "V": V.tolist(),
                             "alpha0": [0.1] * d, "Sigma0": (s0 * np.eye(d)).tolist(), "T": 2.0 / (2 * a * s0)}))
    T_ref = 1.0 / (2 * a * s0)
    t_mid = 0.9 * T_ref
    assert main(["gaussian", "--scenario", str(p), "--json", "--times", str(t_mid), str(1.5 * T_ref)]) == 0
    out = _strict(capsys.readouterr().out)
    assert out["status"] == "blowup", out["message"]
    assert abs(out["blowup_time"] - T_ref) <= 1e-9 * T_ref
    assert abs(out["blowup_time"] - T_ref) <= out["blowup_time_error"] + 4e-16 * T_ref   # the stated bound holds
    # the requested time past T* is not reached (never replaced by T*); the one before is s(t)I to the
    # integration tolerance (rtol 1e-12 over a run where s grows 10x: 1e-9 relative is generous)
    assert out["not_reached"] == [1.5 * T_ref]
    [row] = out["times"]
    assert row["t"] == t_mid
    s_ref = s0 / (1 - 2 * a * s0 * t_mid)
    assert np.allclose(row["Sigma"], s_ref * np.eye(d), rtol=1e-9, atol=1e-9 * s_ref)
    assert main(["gaussian", "--scenario", str(p), "--times", str(1.5 * T_ref)]) == 0
    text = capsys.readouterr().out
    assert "status blowup" in text and "not reached" in text and f"{1.5 * T_ref:g}" in text
