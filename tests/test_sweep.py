"""Phase-diagram sweep: known phases on the grid, local pool = serial, Dask LocalCluster (loopback) = local."""

import numpy as np
import pytest

from symbolic_tpde.analysis.sweep import PHASES, SweepSpec, run_sweep, save_sweep


def expected_phase(s1, s2):
    """V = I (README Mathematics §4): any positive eigenvalue of A + Aᵀ -> blow-up; both negative -> collapse; one zero
    and one negative -> rank 1; both zero -> Σ constant (full rank)."""
    if max(s1, s2) > 0:
        return "blow-up"
    if s1 == 0 and s2 == 0:
        return "full rank"
    if s1 == 0 or s2 == 0:
        return "low rank"
    return "collapse"


def test_shared_sample_makes_the_vi_blowup_map_symmetric():
    """Softmax, V = I, with a skew part: dΣ/dt = Σ(A + Aᵀ)Σ does not see the skew part and the Σ₀ sample is
    closed under the swap P, so T*(s₁, s₂) = T*(s₂, s₁) (analysis/sweep.py docstring) up to the reported
    error bounds of the blow-up times."""
    from symbolic_tpde.analysis.sweep import initial_sample

    spec = SweepSpec(n=3, smin=-0.5, smax=1.0, K=2, T=50.0, seed=3, skew=0.4)
    assert initial_sample(spec).shape == (4, 2, 2)
    res = run_sweep(spec)
    B = res.blowup_time.reshape(3, 3)
    E = np.nan_to_num(res.blowup_time_error.reshape(3, 3))
    assert np.array_equal(np.isnan(B), np.isnan(B.T))
    ok = ~np.isnan(B)
    assert ok.sum() >= 5
    assert np.all(np.abs(B - B.T)[ok] <= (E + E.T)[ok] + 1e-12)


def test_head_for_l2_has_the_same_cross_term():
    from symbolic_tpde.analysis.sweep import head_for

    A = np.array([[0.2, -0.3], [0.5, -0.1]])
    h = head_for("l2", A, np.eye(2))
    p = h.params
    assert np.allclose(2 / p["tau"] * p["K"].T @ p["Q"], A, rtol=0, atol=1e-15)   # README Math §3


SPEC = SweepSpec(n=3, smin=-1.0, smax=1.0, K=3, T=1e2, seed=5)


def test_sweep_phases_and_outputs(tmp_path):
    res = run_sweep(SPEC)
    for (s1, s2), ph, c in zip(res.points, res.phase, res.counts):
        assert PHASES[ph] == expected_phase(s1, s2)
        assert c.sum() == 2 * SPEC.K   # the shared sample, closed under the swap (symmetrise)
    bt = res.blowup_time[res.phase == PHASES.index("blow-up")]
    assert np.all(np.isfinite(bt)) and np.all(bt > 0)
    paths = save_sweep(res, tmp_path / "sw")
    assert all(p.exists() for p in paths)
    data = np.load(paths[0])
    assert np.array_equal(data["phase"], res.phase)
    assert len([ln for ln in paths[1].read_text().splitlines() if not ln.startswith('#')]) == 1 + SPEC.n**2


@pytest.mark.slow
def test_local_pool_equals_serial():
    a = run_sweep(SPEC)
    b = run_sweep(SPEC, workers=2)
    assert np.array_equal(a.counts, b.counts)
    assert np.array_equal(np.isnan(a.blowup_time), np.isnan(b.blowup_time))
    assert np.allclose(a.blowup_time, b.blowup_time, equal_nan=True, rtol=0, atol=0)


@pytest.mark.slow
def test_dask_localcluster_equals_local():
    distributed = pytest.importorskip("dask.distributed")
    local = run_sweep(SPEC)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        dist = run_sweep(SPEC, scheduler=cluster.scheduler_address)
    assert np.array_equal(local.counts, dist.counts)
    assert np.allclose(local.blowup_time, dist.blowup_time, equal_nan=True, rtol=0, atol=0)


# ------------------------------------------------------------------------------ argument checks (issue 11)
SWEEP_BAD_ARGS = [
    (["--n", "0"], "n"), (["--n", "201"], "n"), (["--K", "0"], "K"), (["--K", "10001"], "K"),
    (["--n", "200", "--K", "100"], "K"), (["--range", "1", "-1"], "range"), (["--range", "0.5", "0.5"], "range"),
    (["--range", "0", "1e300"], "range"), (["--range", "nan", "1"], "range"), (["--kind", "sigmoid"], "kind"),
    (["--kind", "nope"], "kind"), (["--d", "1"], "d"), (["--d", "9"], "d"), (["--rest", "0.5"], "rest"),
    (["--d", "3", "--rest", "1e80"], "rest"), (["--V", "1", "2", "3"], "V"), (["--V", "1e80", "1"], "V"),
    (["--skew", "inf"], "skew"), (["--theta", "1e76"], "theta"), (["--T", "0"], "T"), (["--T", "1e7"], "T"),
    (["--seed", "-1"], "seed"), (["--workers", "0"], "workers"), (["--workers", "5000"], "workers"),
    (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "workers"), (["--scheduler", ""], "scheduler"),
    (["--scheduler", "tcp://a b"], "scheduler"), (["--out", ""], "out"), (["--out", "/"], "out"),
    (["--out", "/proc/no/such/dir/x"], "out"), (["--out", "/dev/null/x"], "out"),
    (["--max-seconds", "0"], "max-seconds"), (["--max-seconds", "1e9"], "max-seconds"),
]


@pytest.mark.parametrize("argv,field", SWEEP_BAD_ARGS)
def test_sweep_arguments_are_checked_naming_the_argument(argv, field, tmp_path, capsys):
    """Every bad argument: exit 2, one line ``tpde sweep: error: <argument>: ...``, and nothing written."""
    from symbolic_tpde.cli import main

    out = [] if "--out" in argv else ["--out", str(tmp_path / "sw")]
    assert main(["sweep", *argv, *out]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tpde sweep: error: {field}:"), err
    assert cap.out == "" and not list(tmp_path.iterdir())


def test_sweep_output_directory_is_created_and_rest_used_for_d3(tmp_path, capsys):
    """A valid tiny sweep (d = 3 with --rest) into a directory that does not exist yet: exit 0, files written,
    and the third eigenvalue of A + Aᵀ recorded in the npz example is --rest."""
    from symbolic_tpde.cli import main

    stem = tmp_path / "new" / "dir" / "sw"
    rc = main(["sweep", "--n", "1", "--range", "-0.5", "-0.5", "--K", "1", "--T", "2", "--d", "3", "--rest",
               "-0.25", "--out", str(stem)])
    assert rc == 0, capsys.readouterr().err
    data = np.load(stem.with_suffix(".npz"))
    A = data["A_example"]
    assert np.allclose(np.sort(np.linalg.eigvalsh(A + A.T)), [-0.5, -0.5, -0.25], atol=1e-14)


def test_sweep_reports_progress_warns_without_s0_and_leaves_a_loadable_partial_map(tmp_path, capsys,
                                                                                    monkeypatch):
    """`tpde sweep` (issue 20): progress `point k/N` on stderr, the warning when an even --n on [-1, 1] misses
    s = 0, and the npz/csv rewritten as points complete, so a sweep interrupted after two points leaves a
    loadable file whose pending points are marked (phase -1, done false) and whose done points equal a full run."""
    import symbolic_tpde.analysis.sweep as sw
    from symbolic_tpde.cli import main

    argv = ["sweep", "--n", "2", "--K", "1", "--T", "5", "--out"]
    assert main(argv + [str(tmp_path / "full")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any("misses s = 0" in ln for ln in err)
    assert [ln for ln in err if "point" in ln] == [f"tpde sweep: point {k}/4" for k in range(1, 5)]
    full = np.load(tmp_path / "full.npz")
    assert full["done"].all()

    real, calls = sw.sweep_chunk, []

    def interrupted(spec, indices):
        calls.append(indices)
        if len(calls) > 2:
            raise KeyboardInterrupt
        return real(spec, indices)

    monkeypatch.setattr(sw, "sweep_chunk", interrupted)
    assert main(argv + [str(tmp_path / "part")]) == 130          # Ctrl-C: the CLI says "interrupted"
    part = np.load(tmp_path / "part.npz")
    assert part["done"].tolist() == [True, True, False, False]
    assert part["phase"][2:].tolist() == [-1, -1]
    assert np.array_equal(part["phase"][:2], full["phase"][:2])
    assert np.array_equal(part["counts"][:2], full["counts"][:2])
    rows = (tmp_path / "part.csv").read_text().splitlines()[1:]
    assert [r.split(",")[-3] for r in rows][2:] == ["pending", "pending"]
