"""The CLI under hostile input (issue 11; README "Commands"): a seeded fuzz of scenario files and argument
sets, run in-process through ``symbolic_tpde.cli.main``; zero tracebacks, non-finite or wrong successes and
hangs.  The generator is ``numerics/fuzz_cli.py`` (also a script printing the table)."""

from __future__ import annotations

import pytest
from support import load_script

def _fuzz_module():
    return load_script("fuzz_cli")


def _check(counts, examples, cases):
    assert sum(counts.values()) == cases
    bad = {k: examples.get(k, [])[:3] for k in ("traceback", "non-finite success", "wrong success", "hang")
           if counts[k]}
    assert not bad, bad
    assert counts["clean error"] > cases // 3  # the generator mostly produces invalid input: they are refused


def test_fuzz_cli_fast():
    mod = _fuzz_module()
    counts, examples = mod.fuzz(seed=0, cases=250, hang=30.0)
    _check(counts, examples, 250)


# 4000 cases (~4 min here; the full 10 000 took ~9 min and pushed the slow CI stage toward its 60-minute limit).
# Seed 12345's cases 3000 and 3503 found the regular form's ZeroDivisionError (V ~ 1e75); the longer run stays a
# script: python numerics/fuzz_cli.py --cases 10000 --seed 12345
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_fuzz_cli_4000_cases():
    mod = _fuzz_module()
    counts, examples = mod.fuzz(seed=12345, cases=4000, hang=30.0)
    _check(counts, examples, 4000)


def test_fuzz_cli_new_paths_fast():
    """The second stream (tpde pde, sphere scenarios through particles / classify / pde, init blocks with data
    files, tpde fit, sphere sweeps and derivations): 30 cases."""
    mod = _fuzz_module()
    counts, examples = mod.fuzz(seed=0, cases=30, hang=30.0, stream="new")
    _check(counts, examples, 30)


def test_new_stream_covers_the_newer_paths():
    """Which commands and init types the second stream reaches in its first 400 cases (generation only)."""
    mod = _fuzz_module()
    cases = list(mod.generate_new(0, 400))
    cmds = {a[0] for a, _, _, _ in cases}
    assert {"pde", "particles", "classify", "gaussian", "fit", "sweep", "derive"} <= cmds
    assert any(a[0] == "sweep" and any(x.startswith("sphere_") for x in a) for a, _, _, _ in cases)
    assert any(a[0] == "derive" and "--sphere" in a for a, _, _, _ in cases)
    assert any("--noise" in a for a, _, _, _ in cases) and any("--save" in a for a, _, _, _ in cases)
    types = {str(s["init"].get("type")) for _, s, _, _ in cases
             if isinstance(s, dict) and isinstance(s.get("init"), dict)}
    assert {"mixture", "uniform_box", "uniform_ball", "empirical", "grid_density", "uniform_sphere", "vmf", "frame",
            "points", "gaussian"} <= types
    assert any(f for _, _, _, f in cases) and any(bad for _, _, bad, _ in cases) and not all(b for *_, b, _ in cases)


def test_first_stream_is_unchanged():
    """The slow test pins seed 12345's first 4000 cases of the first stream: the second stream must not move
    them (a digest of the 4000 cases' argv, scenario text and validity, taken from the generator before the
    second stream was added: commit 1054293)."""
    import hashlib

    mod = _fuzz_module()
    h = hashlib.sha256()
    for argv, scn, bad in mod.generate(12345, 4000):
        h.update(repr((argv, scn if isinstance(scn, (bytes, str)) else mod._dumps(scn) if scn else None, bad)).encode())
    assert h.hexdigest() == FIRST_STREAM_DIGEST


FIRST_STREAM_DIGEST = "de1c6565cb4c93e3413dfcbdad4e3da13d5dba80c9390a78ba5d44f2d9384265"


LONG = {"attention": "softmax", "A": [[0.0, 1.0], [-1.0, 0.0]], "V": [[0.0, 1.0], [-1.0, 0.0]],
        "alpha0": [0.5, 0.0], "Sigma0": [[1.0, 0.0], [0.0, 1.0]], "T": 1e4}


@pytest.mark.parametrize("argv", [
    ["gaussian", "--scenario", "{path}", "--json", "--backend", "numpy", "--max-seconds", "0.02"],
    ["particles", "--scenario", "{path}", "--json", "--n", "30", "--seed", "0", "--steps", "900000",
     "--max-seconds", "0.02"],
    # an ℓ2 point with a skew part has no closed form: its numerics (T = 1e6) take seconds however warm the
    # derivation cache is (a softmax V = I point is decided by the closed form in well under 1 ms once warm)
    ["sweep", "--n", "1", "--K", "1", "--kind", "l2", "--skew", "0.5", "--T", "1e6", "--out", "{dir}/sw",
     "--max-seconds", "0.001"],
])
def test_fuzz_classifies_a_capped_run_as_time_limit(argv, tmp_path):
    """The fuzz's oracle for exit 5 (status time-limit, finite t; sweep: files + one stderr line); each run
    would take minutes without its cap.  The case runs twice: the second run has every cache warm, so the cap
    is reached by the integration itself whatever ran before in this process (issue 30, item 6)."""
    mod = _fuzz_module()
    mod.run_case(argv, LONG, False, str(tmp_path))                                    # warm every cache
    assert mod.run_case(argv, LONG, False, str(tmp_path)) == ("time-limit", "")
    assert mod.run_case(argv, LONG, True, str(tmp_path))[0] == "wrong success"   # the oracle can fail


def test_fuzz_generates_sweep_and_cap_cases():
    mod = _fuzz_module()
    cases = list(mod.generate(0, 400))
    sweeps = [a for a, _, _ in cases if a[0] == "sweep"]
    capped = [a for a, _, _ in cases if a[0] != "sweep" and "--max-seconds" in a]
    assert len(sweeps) > 10 and any(bad for a, _, bad in cases if a[0] == "sweep")
    assert len(capped) > 10


def test_oracle_has_a_checker_for_each_invariant(tmp_path):
    """Issue 29: the new stream's oracle checks every invariant a success must meet; each checker is shown to fire
    on a state that violates it (and to pass the state that meets it): circle mass, |E e^{ikθ}| <= 1, positivity
    and resolution; ℝᵈ grid mass + lost = 1, positivity, truncation, frozen mass, covariance; sphere monitor and
    inner products; finiteness of every reported number; a result field that is null; CSVs loadable by pandas and
    numpy without options."""
    mod = _fuzz_module()
    circle = {"status": "ok", "geometry": "circle", "t": 1.0, "mass": 1.0, "moments": [[0.5, 0.1], [0.2, 0.0]],
              "min_density": 0.01, "resolution": 1e-5}
    grid = {"status": "ok", "t": 1.0, "cells": [8, 8], "mass": 0.9, "lost": 0.1, "min_mass": 0.0, "truncated": 1e-3,
            "frozen": 1e-14, "cov": [[1.0, 0.0], [0.0, 1.0]], "mean": [0.0, 0.0]}
    sphere = {"status": "ok", "geometry": "sphere", "t": 1.0, "monitor": {"value": 0.3}, "min_inner": 0.2}
    assert mod.check_invariants("pde", circle) == mod.check_invariants("pde", grid) == ""
    assert mod.check_invariants("particles", sphere) == ""
    broken = [("pde", {**circle, "mass": 1.001}, "circle mass"),
              ("pde", {**circle, "moments": [[0.9, 0.5]]}, "|E e^(ik theta)| > 1"),
              ("pde", {**circle, "min_density": -1e-3}, "negative density"),
              ("pde", {**circle, "resolution": 0.5}, "not resolved"),
              ("pde", {**grid, "lost": 0.2}, "grid mass"),
              ("pde", {**grid, "min_mass": -1e-6}, "grid min mass"),
              ("pde", {**grid, "truncated": 0.5}, "truncated"),
              ("pde", {**grid, "frozen": 1e-3}, "frozen"),
              ("pde", {**grid, "cov": [[-1.0, 0.0], [0.0, 1.0]]}, "covariance"),
              ("pde", {**grid, "t": None}, "t is null"),
              ("pde", {**grid, "mean": [float("nan"), 0.0]}, "non-finite"),
              ("particles", {**sphere, "monitor": {"value": None}}, "monitor value"),
              ("particles", {**sphere, "min_inner": 1.5}, "min_inner")]
    for cmd, obj, why in broken:
        assert why in mod.check_invariants(cmd, obj), (why, mod.check_invariants(cmd, obj))
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text("beta,t,blow_up\n1.0,0.5,0\n2.0,0.5,1\n")
    bad.write_text("# kind softmax\nbeta,t,blow-up\n1.0,0.5,0\n")
    assert mod.check_csv(good) == "" and mod.check_csv(bad) != ""


def test_fuzz_classifies_a_budget_stopped_fit_as_capped(tmp_path, monkeypatch):
    """tpde fit has no time axis: its exit 5 (step-budget with the evaluations and the budget) is a capped run
    for the oracle, and the same exit on an invalid case is a wrong success."""
    import numpy as np

    import symbolic_tpde.analysis.fit as fitmod

    mod = _fuzz_module()
    monkeypatch.setattr(fitmod, "FIT_RUN_NFEV", 1)
    scn = {"attention": "softmax", "A": [[-0.5]], "V": [[1.0]], "alpha0": [0.2], "Sigma0": [[1.0]], "T": 0.5}
    buf = __import__("io").BytesIO()
    np.savez(buf, times=np.array([0.1, 0.2, 0.3]), alpha=np.array([[0.2], [0.21], [0.22]]))
    argv = ["fit", "--scenario", "{path}", "--data", "{dir}/data.fit.npz", "--params", "h0_A,h0_V", "--json"]
    files = {"data.fit.npz": buf.getvalue()}
    assert mod.run_case(argv, scn, False, str(tmp_path), files=files) == ("time-limit", "")
    assert mod.run_case(argv, scn, True, str(tmp_path), files=files)[0] == "wrong success"
