"""The newer commands at the standard of the older ones (issue 29; issue 30 item 4): one input reader, outputs
checked before the work, projected and normalised grid initial laws, statuses that cannot say ok on a state
that breaks an invariant, plain CSV tables, and a regression test for each internal error the issue lists."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from symbolic_tpde.cli import main
from symbolic_tpde.errors import InputError

SPHERE_QK = {"geometry": "sphere", "attention": "sphere_usa", "d": 3, "Q": [[1, 0, 0], [0, 1, 0]],
             "K": [[1, 0, 0], [0, 1, 0]], "V": "identity", "init": {"type": "uniform_sphere"}, "T": 2}
CIRCLE = {"geometry": "sphere", "attention": "sphere_sa", "d": 2, "beta": 4.0, "A": "identity", "V": "identity",
          "init": {"type": "vmf", "mu": [1.0, 0.0], "kappa": 1000.0}, "T": 0.5}


def _file(tmp_path, obj, name="s.json"):
    p = tmp_path / name
    p.write_text(json.dumps(obj))
    return str(p)


def _json(capsys):
    out = capsys.readouterr()
    return json.loads(out.out, parse_constant=lambda c: pytest.fail(f"bare {c}")), out.err


def _pipe(data: bytes) -> str:
    """An anonymous pipe holding ``data`` with its writer closed, as ``<(cat f)`` gives: ``/dev/fd/N``."""
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    return f"/dev/fd/{r}"


# ------------------------------------------------------------------------------------------- input reader
@pytest.mark.skipif(not os.path.exists("/dev/fd"), reason="needs /dev/fd")
@pytest.mark.parametrize("argv", [["particles", "--n", "5", "--seed", "0", "--steps", "2", "--T", "0.1"],
                                  ["pde", "--grid", "12", "--T", "0.05"],
                                  ["classify", "--T", "1", "--backend", "numpy"]])
def test_a_scenario_from_a_pipe_is_read_once(argv, capsys):
    """``--scenario <(cat f.json)``: the commands look at the scenario twice (geometry, then the load); a pipe
    can be read once only, so the second read must come from the reader's memory (was "invalid JSON")."""
    from symbolic_tpde.inputs.scenario import _BUILTIN_DIR

    path = _pipe((_BUILTIN_DIR / "softmax_2d.json").read_bytes())
    rc = main(argv[:1] + ["--scenario", path] + argv[1:] + ["--json"])
    out, err = _json(capsys)
    assert rc == 0 and err == "" and isinstance(out, dict), (rc, err)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs mkfifo")
def test_fifos_and_devices_are_refused_by_name_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)        # no writer: opening it for reading would block forever
    for path, what in ((str(fifo), "named pipe"), ("/dev/null", "character device"), (str(tmp_path), "directory")):
        assert main(["pde", "--scenario", path, "--grid", "8"]) == 2
        err = capsys.readouterr().err
        assert what in err and err.count("\n") == 1, err
    fit_like = tmp_path / "x.npz"
    os.mkfifo(fit_like)
    from symbolic_tpde.inputs.checks import read_arrays

    with pytest.raises(InputError, match="named pipe"):
        read_arrays(fit_like, "data", ".npz")


def test_a_pipe_that_never_ends_is_refused_at_its_deadline(monkeypatch):
    from symbolic_tpde.inputs import checks

    monkeypatch.setattr(checks, "PIPE_WAIT_SECONDS", 0.2)
    r, w = os.pipe()
    try:
        os.write(w, b'{"d": 1')
        with pytest.raises(InputError, match="no end of data within 0.2 s"):
            checks.read_input(f"/dev/fd/{r}", "scenario")
    finally:
        os.close(w)
        os.close(r)


# ---------------------------------------------------------------------------------- outputs before the work
@pytest.mark.parametrize("argv", [["particles", "--scenario", "softmax_2d", "--n", "5", "--seed", "0", "--save", ""],
                                  ["pde", "--scenario", "softmax_2d", "--grid", "12", "--save", ""],
                                  ["pde", "--scenario", "softmax_2d", "--grid", "12", "--save", "{tmp}"],
                                  ["plot", "--scenario", "softmax_2d", "--out", "{tmp}/no/such/x.txt"],
                                  ["plot", "--scenario", "softmax_2d", "--out", "/proc/version.png"],
                                  ["figures", "--out", "{tmp}/file", "--only", "collapse"]])
def test_outputs_are_checked_before_any_work(argv, tmp_path, monkeypatch, capsys):
    """A bad output path is refused first (exit 2, one line naming the option), not after minutes of work;
    ``--save ''`` is refused, not silently ignored."""
    from symbolic_tpde.experiments import figures_extra
    from symbolic_tpde.numerics.grids import euclidean
    from symbolic_tpde.numerics.particles import simulate

    (tmp_path / "file").write_text("x")

    def never(*a, **k):
        raise AssertionError("the work ran before the output path was checked")

    monkeypatch.setattr(euclidean, "solve_grid", never)
    monkeypatch.setattr(simulate, "simulate", never)
    monkeypatch.setattr(figures_extra, "make_scenario_figure", never)
    monkeypatch.setattr("symbolic_tpde.commands.figures.make", never)
    rc = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    opt = "save" if "--save" in argv else "out"
    assert rc == 2 and err.count("\n") == 1 and f"error: {opt}:" in err, err


# ----------------------------------------------------------------------------------------- CSV outputs
def _loads_plain(path):
    arr = np.atleast_1d(np.genfromtxt(path, delimiter=",", names=True))
    assert arr.dtype.names and len(arr) >= 1
    pd = pytest.importorskip("pandas")
    df = pd.read_csv(path)
    assert list(df.columns) == list(arr.dtype.names) and len(df) == len(arr)
    return df


def test_sweep_csvs_load_without_options(tmp_path, capsys):
    assert main(["sweep", "--n", "1", "--K", "1", "--T", "0.5", "--out", str(tmp_path / "r")]) == 0
    df = _loads_plain(tmp_path / "r.csv")
    assert {"s1", "s2", "phase"} <= set(df.columns)
    meta = json.loads((tmp_path / "r.meta.json").read_text())
    assert "spec" in meta and meta["columns"] == list(df.columns)
    assert main(["sweep", "--kind", "sphere_sa", "--d", "2", "--tokens", "3", "--n", "1", "--K", "1", "--T", "0.3",
                 "--out", str(tmp_path / "s")]) == 0
    df = _loads_plain(tmp_path / "s.csv")
    assert list(df.columns) == ["beta", "t", "prob_linked"]
    assert json.loads((tmp_path / "s.meta.json").read_text())["kind"] == "sphere_sa"


# --------------------------------------------------------------------------- internal errors of the issue
def test_sphere_classify_with_q_k_heads(tmp_path, capsys):
    """Was ``KeyError: 'A'``: the theorem check read ``params["A"]`` of a head given as Q/K."""
    rc = main(["classify", "--scenario", _file(tmp_path, SPHERE_QK), "--n", "4", "--T", "2", "--json"])
    out, _ = _json(capsys)
    assert rc == 0 and out["outcome"] in ("one-cluster", "clusters")
    assert any("A is not a multiple of the identity" in e for e in out["evidence"])   # KᵀQ/√2 = diag(.7, .7, 0)


def test_sphere_classify_at_a_tiny_horizon(tmp_path, capsys):
    """Was ``LinAlgError`` (the slopes fitted on times ~1e-300)."""
    scn = dict(SPHERE_QK, attention="sphere_sa")
    rc = main(["classify", "--scenario", _file(tmp_path, scn), "--n", "4", "--T", "1e-300", "--json"])
    out, _ = _json(capsys)
    assert rc == 0 and out["clusters"] == 4 and out["rate"] is None


def test_sphere_sweep_at_large_beta(tmp_path, capsys):
    """Was ``OverflowError`` in ``math.exp`` of the equiangular ODE at β = 710: softmax is a ratio, evaluated
    with an unbounded exponent where float64 overflows; sphere_usa (no ratio, speed e^β) is refused there."""
    from symbolic_tpde.analysis.sphere_verdict import _reduction

    _, f_rho, _ = _reduction("post", "softmax")
    # the equiangular softmax ODE at β = 800 against its closed form with e^{β(ρ-1)} (no overflow)
    rho, n, beta = 0.3, 4, 800.0
    e = math.exp(beta * (rho - 1))
    assert f_rho(rho, 1.0, n, beta, 1.0) == pytest.approx(-2 * (rho - 1) * (n * rho - rho + 1) * e
                                                          / (n * e + 1 - e), rel=1e-12)
    argv = ["sweep", "--d", "2", "--tokens", "4", "--n", "2", "--K", "1", "--range", "710", "720", "--T", "1"]
    assert main(argv + ["--kind", "sphere_sa", "--out", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    assert main(argv + ["--kind", "sphere_usa", "--out", str(tmp_path / "b")]) == 2
    assert "700" in capsys.readouterr().err


def test_plot_negative_seed_is_refused(capsys, tmp_path):
    assert main(["plot", "--scenario", "softmax_2d", "--out", str(tmp_path / "p.png"), "--seed", "-1"]) == 2
    assert "seed" in capsys.readouterr().err


def test_model_io_on_a_directory(tmp_path):
    from symbolic_tpde.analysis.model_io import read_tensors

    d = tmp_path / "w.safetensors"
    d.mkdir()
    with pytest.raises(InputError, match="directory"):
        read_tensors(d)


def test_energy_beyond_float64_is_reported_as_its_log(tmp_path, capsys):
    """β = 800: the energy e^{β}/β leaves float64; it was ``"value": null`` in a status-ok JSON."""
    import mpmath

    from symbolic_tpde.analysis.sphere_clusters import energy, monitor_report

    th = np.random.default_rng(0).normal(size=(5, 3))
    th /= np.linalg.norm(th, axis=1, keepdims=True)
    rep = monitor_report("energy", energy, th, 800.0)
    G = th @ th.T
    exact = mpmath.fsum(mpmath.expm1(800 * mpmath.mpf(float(g))) for g in G.ravel()) / (2 * 800 * 25)
    assert rep["name"] == "log|energy|" and rep["sign"] == 1
    assert rep["value"] == pytest.approx(float(mpmath.log(exact)), rel=1e-13)
    assert monitor_report("energy", energy, th, 5.0) == {"name": "energy", "value": energy(th, 5.0)}
    scn = {"geometry": "sphere", "attention": "sphere_sa", "d": 3, "beta": 800, "A": "identity", "V": "identity",
           "init": {"type": "uniform_sphere"}, "T": 0.5}
    assert main(["particles", "--scenario", _file(tmp_path, scn), "--n", "5", "--seed", "0", "--json"]) == 0
    out, err = _json(capsys)
    assert out["status"] == "ok" and math.isfinite(out["monitor"]["value"]) and "Warning" not in err


# ------------------------------------------------------------------------------------ grid initial laws
def test_circle_initial_law_is_projected_and_normalised(tmp_path, capsys):
    """κ = 1000 at 16 points: was status ok with mass 4.95 and |E e^{iθ}| > 1 (point samples of the density).
    Now: refused with the grid that suffices; at that grid mass 1 and the exact first moment I_1/I_0."""
    from scipy.special import ive

    from symbolic_tpde.numerics.grids.circle import grid_needed, project_initial

    path = _file(tmp_path, CIRCLE)
    assert main(["pde", "--scenario", path, "--grid", "16", "--json"]) == 2
    out, err = _json(capsys)
    M = grid_needed(CIRCLE["init"])
    assert out["status"] == "error" and out["field"] == "grid" and f"raise --grid to {M}" in err
    rho, truncated = project_initial(CIRCLE["init"], M)
    assert truncated <= 1e-6 and rho.sum() * 2 * math.pi / M == pytest.approx(1, abs=1e-13)
    m1 = np.fft.fft(rho)[1] * 2 * math.pi / M
    assert abs(m1) == pytest.approx(ive(1, 1000.0) / ive(0, 1000.0), abs=1e-12)
    assert main(["pde", "--scenario", path, "--grid", str(M), "--T", "0.05", "--json"]) == 0
    out, _ = _json(capsys)
    assert out["status"] == "ok" and abs(out["mass"] - 1) < 1e-12
    assert all(math.hypot(*m) <= 1 for m in out["moments"]) and out["min_density"] >= -1e-12


def test_circle_under_resolution_has_its_own_status(tmp_path, capsys):
    """SA, β = 6, a two-mode start run to T = 8 on 32 points: the clusters outgrow the grid.  Status
    under-resolved, exit 6, JSON on stdout, never ok and never blow-up; 4x the points resolve it."""
    scn = {"geometry": "sphere", "attention": "sphere_sa", "d": 2, "beta": 6.0, "A": "identity", "V": "identity",
           "init": {"type": "circle_modes", "modes": [[2, 0.2, 0.0], [5, 0.1, 1.0]]}, "T": 8}
    path = _file(tmp_path, scn)
    assert main(["pde", "--scenario", path, "--grid", "32", "--json"]) == 6
    out, _ = _json(capsys)
    assert out["status"] == "under-resolved" and out["t"] < 8 and out["grid_needed"] == 128
    assert "raise --grid to 128" in out["detail"]
    assert main(["pde", "--scenario", path, "--grid", "32"]) == 6            # text: one line, the same status
    assert capsys.readouterr().out.startswith("under-resolved at t =")


def test_circle_accepts_negative_beta(tmp_path, capsys):
    """β < 0 (repulsive) is valid in the schema and in tpde particles; the circle solver refused it."""
    from symbolic_tpde.numerics.grids.circle import circle_velocity, project_initial
    from symbolic_tpde.numerics.particles.sphere import parse_sphere_scenario

    scn = dict(CIRCLE, beta=-3.0, init={"type": "vmf", "mu": [1.0, 0.0], "kappa": 2.0})
    assert main(["pde", "--scenario", _file(tmp_path, scn), "--grid", "64", "--T", "0.5", "--json"]) == 0
    out, _ = _json(capsys)
    assert out["status"] == "ok" and abs(out["mass"] - 1) < 1e-12
    # the spectral velocity at β = -3 against the attention field summed directly over the points (the
    # trapezoid rule, exact to round-off for this band-limited density and the entire kernel)
    M = 64
    rho, _ = project_initial(scn["init"], M)
    th = 2 * np.pi * np.arange(M) / M
    w = np.exp(-3.0 * np.cos(th[:, None] - th[None, :])) * rho[None, :]
    direct = np.imag(np.exp(-1j * th) * (w @ np.exp(1j * th)) / w.sum(axis=1))
    v = circle_velocity(rho, parse_sphere_scenario(scn).weights)
    assert np.max(np.abs(v - direct)) <= 1e-12 * np.max(np.abs(direct))


def test_rd_grid_refuses_a_law_the_cells_miss(tmp_path, capsys):
    """``--pad 100``: was mass 2e-33 on the grid, status ok, covariance 4.6e6 for a law of variance 0.6."""
    assert main(["pde", "--scenario", "softmax_2d", "--grid", "16", "--pad", "100", "--T", "0.1", "--json"]) == 2
    out, err = _json(capsys)
    assert out["field"] == "grid" and "raise --grid" in err


def test_rd_grid_initial_mass_is_normalised(tmp_path, capsys):
    """A uniform ball on a coarse grid: the midpoint cell masses miss ~1 % (was reported only in truncated, with
    mass 0.99 carried along); now normalised to 1, the miss reported."""
    scn = {"attention": "softmax", "d": 2, "A": [[-0.5, 0], [0, -0.5]], "V": [[1, 0], [0, 1]], "T": 0.1,
           "init": {"type": "uniform_ball", "center": [0.0, 0.0], "radius": 1.0}}
    assert main(["pde", "--scenario", _file(tmp_path, scn), "--grid", "24", "--json"]) == 0
    out, _ = _json(capsys)
    assert abs(out["mass"] + out["lost"] - 1) < 1e-12 and 0 < abs(out["truncated"]) <= 1e-2


def test_rd_grid_work_budget(monkeypatch, capsys):
    """A run whose CFL step would grind stops at the work budget (derived from the cell count) with its own
    status and exit 5, JSON on stdout."""
    from symbolic_tpde.numerics.grids import euclidean

    budget = 144.0 ** 2     # one dense evaluation of the 12² cells (fewer since only cells next to mass are queried)
    monkeypatch.setattr(euclidean, "WORK_BUDGET", budget)
    assert main(["pde", "--scenario", "softmax_2d", "--grid", "12", "--json"]) == 5
    out, _ = _json(capsys)
    assert out["status"] == "step-budget" and 0 < out["t"] < 1 and "work budget" in out["detail"]
    assert out["nfev"] * float(np.prod(out["cells"])) ** 2 >= budget


def test_sphere_scenario_named_by_its_top_level_attention(tmp_path, capsys):
    """No "geometry" key, the sphere kind at the top level and a head without its own "attention": the head has
    the top level's kind, so the scenario is a sphere scenario (it was read as R^d and refused as an unknown
    R^d variant)."""
    from symbolic_tpde.registry.kinds import scenario_geometry

    scn = {"attention": "sphere_sa", "d": 3, "heads": [{"A": "identity", "V": "identity"}],
           "init": {"type": "uniform_sphere"}, "T": 0.5}
    assert scenario_geometry(scn) == "sphere"
    assert scenario_geometry({**scn, "attention": "softmax"}) == "R^d"
    assert main(["particles", "--scenario", _file(tmp_path, scn), "--n", "6", "--seed", "0", "--json"]) == 0
    out, _ = _json(capsys)
    assert out["geometry"] == "sphere" and out["status"] == "ok" and out["d"] == 3


def test_vmf_start_above_dimension_64_on_the_sphere(tmp_path):
    """A vMF start at sphere d = 100 (sphere scenarios allow d <= 1024): its mean direction has the scenario's
    d, not the R^d bound of 64."""
    from symbolic_tpde.numerics.particles.sphere import load_sphere_scenario

    d = 100
    scn = {"geometry": "sphere", "attention": "sphere_sa", "d": d, "A": "identity", "V": "identity",
           "init": {"type": "vmf", "mu": [1.0] + [0.0] * (d - 1), "kappa": 2.0}, "T": 0.5}
    assert load_sphere_scenario(_file(tmp_path, scn)).d == d
    with pytest.raises(InputError, match="init.mu"):      # a direction of the wrong length is still refused
        load_sphere_scenario(_file(tmp_path, {**scn, "init": {**scn["init"], "mu": [1.0, 0.0]}}))


def test_gaussian_save_checked_before_the_work(tmp_path, monkeypatch, capsys):
    """tpde gaussian --save: an empty name or a wrong suffix is refused before the ODE runs; a path in a new
    directory is written (the directory is created)."""
    import symbolic_tpde.commands.gaussian as g

    def no_work(*a, **k):
        raise AssertionError("the ODE ran before the output path was checked")

    with monkeypatch.context() as m:
        m.setattr(g, "load_ode", no_work)
        for bad in ("", "x.txt"):
            assert main(["gaussian", "--scenario", "softmax_2d", "--save", str(tmp_path / bad) if bad else ""]) == 2
            assert "save" in capsys.readouterr().err
    out = tmp_path / "new" / "sub" / "traj.npz"
    assert main(["gaussian", "--scenario", "softmax_2d", "--save", str(out)]) == 0
    assert sorted(np.load(out).files)[:2] == ["Sigma", "alpha"]


#: the issue's class: 2-D unnormalised softmax from a Gaussian mixture (T = 0.347, 24² cells)
USM = {"attention": "softmax_unnormalized", "d": 2, "A": [[-0.6, 0.2], [0.1, -0.4]], "V": [[1.0, 0.3], [-0.2, 0.8]],
       "init": {"type": "mixture", "weights": [0.5, 0.5], "means": [[1.0, 0.0], [-0.5, 0.6]],
                "covs": [[[0.2, 0.05], [0.05, 0.15]], [[0.15, -0.03], [-0.03, 0.25]]]}, "T": 0.347}


def test_unnormalised_grid_step_is_set_where_the_mass_is(tmp_path, capsys):
    """The CFL step was set by far cells holding 1e-91 of the mass (speed 2.5e3 there against ~40 where the mass
    is): 3 563 steps, t = 0.005 after 10 s under load. Cells below FLOW_TOL carry no flux out: 53 steps, mass
    conserved exactly, every cell >= 0, the frozen mass reported and within its bound."""
    from symbolic_tpde.numerics.grids.euclidean import FLOW_TOL

    assert main(["pde", "--scenario", _file(tmp_path, USM), "--grid", "24", "--json"]) == 0
    out, _ = _json(capsys)
    assert out["status"] == "ok" and out["t"] == 0.347 and out["steps"] <= 200, out["steps"]
    assert abs(out["mass"] + out["lost"] - 1) <= 1e-12 and out["min_mass"] >= 0
    assert 0 <= out["frozen"] <= FLOW_TOL * 24 ** 2


def test_frozen_cells_do_not_change_the_solution(monkeypatch):
    """Against the former rule (every cell with mass flows, FLOW_TOL = 0) on a short horizon it can afford: the
    moments agree to the time-discretisation error of the larger steps (SSPRK2 over 6 steps of ~3e-3 against 434:
    measured 6.7e-8 in the mean, 3.3e-7 in the covariance, 5.1e-7 in the L1 distance of the masses), with 70x
    fewer steps."""
    from symbolic_tpde.inputs.scenario import parse_scenario
    from symbolic_tpde.numerics.grids import euclidean

    scn = parse_scenario({**USM, "T": 0.02}, gaussian_data=False)
    new = euclidean.solve_grid(scn.init, scn.schedule, 0.02, 24)
    monkeypatch.setattr(euclidean, "FLOW_TOL", 0.0)
    old = euclidean.solve_grid(scn.init, scn.schedule, 0.02, 24)
    assert new.steps * 20 <= old.steps
    (m1, c1), (m0, c0) = (euclidean.grid_moments(r.grid, r.masses) for r in (new, old))
    assert np.max(np.abs(m1 - m0)) <= 1e-6 and np.max(np.abs(c1 - c0)) <= 1e-6
    assert np.sum(np.abs(new.masses - old.masses)) <= 1e-5


def test_sphere_sweep_work_is_bounded_by_its_size(tmp_path, capsys, monkeypatch):
    """A 200 x 1000-cloud sphere sweep was bounded only by the wall-clock cap (hours): the size counts each
    cloud evaluation at least CLOUD_OVERHEAD and is refused by name above MAX_SWEEP_SIZE; an accepted sweep gives
    each run the step budget SWEEP_WORK / (7 size), at most STEP_BUDGET (a run that uses it ends stalled)."""
    import symbolic_tpde.analysis.sphere_sweep as ss
    from symbolic_tpde.analysis.sphere_clusters import CLOUD_OVERHEAD
    from symbolic_tpde.commands.sphere import MAX_SWEEP_SIZE, SWEEP_WORK

    base = ["sweep", "--kind", "sphere_sa", "--d", "3", "--tokens", "8", "--T", "1", "--out", str(tmp_path / "sw")]
    assert main(base + ["--n", "200", "--K", "1000"]) == 2
    err = capsys.readouterr().err
    assert "K" in err and "exceeds the cap" in err and len(err.strip().splitlines()) == 1
    seen = []
    monkeypatch.setattr(ss, "_one_beta", lambda *a: seen.append(a[-1]) or a[0].status.append("ok")
                        or a[0].verdicts.append({"label": "x"}))
    monkeypatch.setattr(ss, "save_sphere_sweep", lambda res, out: [])
    assert main(base + ["--n", "2", "--K", "1000"]) == 0          # (the runs themselves stubbed out)
    size = 2 * 1000 * max(64 * 3, CLOUD_OVERHEAD)
    assert size <= MAX_SWEEP_SIZE and seen == [int(SWEEP_WORK / (7 * size))] * 2 == [1428, 1428]
    monkeypatch.undo()
    res = ss.run_sphere_sweep("sphere_sa", 3, 4, [1.0], 5.0, K=2, max_steps=3)
    assert res.status == ["stalled"]


def test_rd_grid_hopeless_pace_stops_at_once(capsys):
    """--cfl 1e-9 was bounded only by the work budget (minutes of grinding before saying so): the pace of the
    first step projects ~1e14 cell-pair evaluations for [t, T], over 100x the budget, so the run stops after one
    step with status step-budget (exit 5) and the projection."""
    from symbolic_tpde.numerics.grids.euclidean import PROJECTED_EXCESS, WORK_BUDGET

    assert main(["pde", "--scenario", "mixture_2d", "--grid", "16", "--cfl", "1e-9", "--json"]) == 5
    out, _ = _json(capsys)
    assert out["status"] == "step-budget" and out["steps"] == 1 and 0 < out["t"] < 1e-6
    need = float(out["detail"].split("needs about ")[1].split()[0])
    assert need > PROJECTED_EXCESS * WORK_BUDGET and "--cfl" in out["detail"]


def test_rd_grid_budget_counts_each_evaluation(capsys):
    """1-D, 16 cells, T = 1e6 ran for hours: its cell pairs alone (~500 per evaluation) never reached the budget.
    Each evaluation also counts EVAL_OVERHEAD pairs, so the pace projects past the budget at once: step-budget."""
    assert main(["pde", "--scenario", "mixture_1d", "--grid", "16", "--T", "1e6", "--json"]) == 5
    out, _ = _json(capsys)
    assert out["status"] == "step-budget" and out["t"] < 100 and "needs about" in out["detail"]


def test_grid_with_no_flowing_cell(tmp_path, capsys):
    """Fuzz --stream new --seed 2029 case 1497 (V scaled by 1e3, 16² cells, the mass leaves the grown grid): once
    every cell held less than FLOW_TOL, the separable velocity was asked for no query cell (internal error). Now
    such cells carry no flux and the run ends ok, mass + lost = 1, the residue reported as frozen."""
    from symbolic_tpde.numerics.grids import euclidean

    g = euclidean.Grid(np.array([0.0, 0.0]), np.array([0.1, 0.1]), (32, 32))
    f = euclidean._Rhs(g, lambda t: _W2, True, None, 1e-8)
    y = np.concatenate([np.full(32 * 32, 1e-16), [1.0 - 1024e-16]])
    assert np.all(f(0.0, y)[:-1] == 0) and f.amax.max() == 0
    np.savez(tmp_path / "data.dens.npz", density=np.ones((4, 3)), edges_0=np.linspace(-1, 1, 5),
             edges_1=np.linspace(0, 1, 4))
    scn = {"attention": "softmax", "d": 2, "A": [[-0.6, 0.2], [0.1, -0.4]], "V": [[1000.0, 300.0], [-200.0, 800.0]],
           "T": 0.1, "init": {"type": "grid_density", "path": "data.dens.npz"}}
    assert main(["pde", "--scenario", _file(tmp_path, scn), "--json", "--grid", "16", "--pad", "0.5"]) == 0
    out, _ = _json(capsys)
    assert abs(out["mass"] + out["lost"] - 1) < 1e-9 and 0 <= out["frozen"] <= euclidean.FLOW_TOL * np.prod(
        out["cells"])


def _weights_2d():
    from symbolic_tpde.weights import make_head, make_weights

    return make_weights([make_head("softmax", 2, A=np.array([[-0.6, 0.2], [0.1, -0.4]]), V=np.eye(2))])


_W2 = _weights_2d()


def test_circle_budget_is_a_budget_not_under_resolution(monkeypatch, capsys):
    """--noise 0.5 on 512 points to T = 1e6: explicit steps are bounded by the diffusion's stiffness (~1e-4), so
    the evaluation budget runs out on a resolved density; it was reported as under-resolved with 'raise --grid to
    2048' (which makes it stiffer). Now status step-budget, exit 5, with the stiffness bound (the budget lowered
    to 2 000 evaluations here to keep the test short)."""
    from symbolic_tpde.numerics.grids import circle

    monkeypatch.setattr(circle, "evaluation_budget", lambda M: 2000)
    assert main(["pde", "--scenario", "sphere_sa_circle", "--grid", "512", "--noise", "0.5", "--T", "1e6",
                 "--json"]) == 5
    out, _ = _json(capsys)
    assert out["status"] == "step-budget" and out["nfev"] >= 2000 and out["resolution"] <= circle.RESOLUTION_TOL
    assert "stiffness" in out["detail"] and "raise --grid" not in out["detail"]


@pytest.mark.parametrize("breach", ["negative", "mass", "nan"])
def test_rd_grid_status_cannot_say_ok_on_a_broken_invariant(monkeypatch, capsys, breach):
    """The ℝᵈ grid's gate: a run whose state breaks positivity, mass + lost = 1 or finiteness is reported as
    under-resolved (exit 6) with the invariant named, never ok (the solver's state is altered after a real run)."""
    from symbolic_tpde.numerics.grids import euclidean

    real = euclidean.solve_grid

    def broken(*a, **k):
        run = real(*a, **k)
        m = run.masses.copy()
        if breach == "negative":
            m.flat[0] = -1e-6
            run.min_mass = -1e-6
        elif breach == "mass":
            run.mass_error = 1e-6
        else:
            m.flat[0] = np.nan
        run.masses = m
        return run

    monkeypatch.setattr(euclidean, "solve_grid", broken)
    assert main(["pde", "--scenario", "mixture_1d", "--grid", "16", "--T", "0.05", "--json"]) == 6
    out, _ = _json(capsys)
    want = {"negative": "negative cell mass", "mass": "mass error", "nan": "non-finite"}[breach]
    assert out["status"] == "under-resolved" and want in out["detail"]


def test_save_into_a_creatable_directory(tmp_path, capsys):
    """writable_output accepts a directory that can be created; tpde particles then failed to write there after
    the run ('No such file or directory', fuzz --stream new --seed 5151 case 382). The saver creates it."""
    out = tmp_path / "no" / "such" / "dir" / "x"
    assert main(["particles", "--scenario", "softmax_2d", "--n", "3", "--seed", "0", "--T", "0.1", "--save",
                 str(out), "--json"]) == 0
    assert sorted(np.load(out).files) == ["X", "times"]
    (tmp_path / "f").write_text("x")        # a regular file where a directory is needed: refused first
    assert main(["particles", "--scenario", "softmax_2d", "--n", "3", "--seed", "0", "--save",
                 str(tmp_path / "f" / "x")]) == 2
    assert "save" in capsys.readouterr().err


def test_circle_noise_is_bounded_like_scenario_entries(capsys):
    """--noise 1e300 was accepted (a uniform start stays uniform, so it even said ok; sigma (M/2)^2 overflows at
    M = 65536): it is bounded like scenario entries, 1e75, and refused by name (fuzz --stream new --seed 7373
    case 815)."""
    assert main(["pde", "--scenario", "sphere_sa_circle", "--grid", "64", "--T", "1", "--noise", "1e300"]) == 2
    assert "noise" in capsys.readouterr().err
    assert main(["pde", "--scenario", "sphere_sa_circle", "--grid", "64", "--T", "0.01", "--noise", "1e-3"]) == 0


def test_sphere_run_step_budget_follows_its_size():
    """A sphere run's step budget: RUN_WORK / (7 heads max(n² d, CLOUD_OVERHEAD)), between MIN_STEPS and
    STEP_BUDGET: small clouds keep 50 000 steps, 2 000 tokens in d = 3 get 595, 10 000 the floor of 100 (they were
    bounded only by the wall-clock cap)."""
    from symbolic_tpde.analysis.sphere_clusters import MIN_STEPS, RUN_WORK, STEP_BUDGET, step_budget

    assert step_budget(32, 3) == STEP_BUDGET and step_budget(2000, 3) == int(RUN_WORK / (7 * 1.2e7)) == 595
    assert step_budget(10_000, 3) == step_budget(4096, 1024, heads=2) == MIN_STEPS
    assert step_budget(300, 16, heads=2) == int(RUN_WORK / (7 * 2 * 300 ** 2 * 16))


def test_ngpt_alpha_as_a_huge_json_integer(tmp_path, capsys):
    """nGPT's alpha written as the integer -10^80 reached np.isfinite (TypeError, an internal error: fuzz --stream
    new --seed 10606 case 48); it goes through the scenario reader's number check, refused by name."""
    scn = {"geometry": "sphere", "norm": "ngpt", "alpha": -10 ** 80, "d": 3, "attention": "sphere_sa", "beta": 1.0,
           "A": "identity", "V": "identity", "init": {"type": "uniform_sphere"}, "T": 1.0}
    assert main(["particles", "--scenario", _file(tmp_path, scn), "--n", "2", "--seed", "0", "--json"]) == 2
    err = capsys.readouterr().err
    assert "alpha" in err and "exceeds" in err and "internal error" not in err


def test_equiangular_reduction_has_a_budget_and_the_cap(tmp_path, capsys):
    """Two tokens (always equiangular) at beta = -800: the derived ODE's integration stalls near rho = 0.91 with
    every method; it spent 1e6 evaluations twice (58 s, over its --max-seconds 20: fuzz --stream new --seed 10606
    case 418). Now EQUIANGULAR_NFEV per run, no threshold run after a stop, and the cap is passed on."""
    from symbolic_tpde.analysis.sphere_verdict import EQUIANGULAR_NFEV

    scn = {"geometry": "sphere", "norm": "post", "attention": "sphere_sa", "d": 3, "beta": -800.0, "A": "identity",
           "V": "identity", "init": {"type": "uniform_sphere"}, "T": 1.0}
    assert main(["classify", "--scenario", _file(tmp_path, scn), "--json", "--T", "2", "--n", "2", "--seed", "1"]) == 0
    v, _ = _json(capsys)
    assert v["outcome"] == "undetermined" and f"after {EQUIANGULAR_NFEV} right-hand side" in v["label"]
