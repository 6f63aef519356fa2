"""The sphere through the command line: scenario files, ``tpde particles``, ``tpde derive --sphere``."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from symbolic_tpde.errors import InputError
from symbolic_tpde.numerics.particles.sphere import parse_sphere_scenario
from symbolic_tpde.inputs.scenario import builtin_scenarios, parse_scenario


def _tpde(*args):
    return subprocess.run([sys.executable, "-m", "symbolic_tpde.cli", *args], capture_output=True, text=True)


def test_builtin_sphere_scenarios_parse_and_stay_apart():
    names = builtin_scenarios("sphere")
    assert len(names) >= 4 and all(n.startswith("sphere_") for n in names)
    assert not set(names) & set(builtin_scenarios())
    with pytest.raises(InputError, match="geometry"):
        parse_scenario({"geometry": "sphere", "attention": "softmax"})


def test_geometry_key_may_be_omitted_for_sphere_kinds(tmp_path):
    """A scenario naming sphere kinds is a sphere scenario without ``"geometry"`` (before: "beta: unknown key").
    Mixed or ℝᵈ kinds stay ℝᵈ; an explicit key wins."""
    from symbolic_tpde.registry.kinds import scenario_geometry

    data = {"attention": "sphere_sa", "d": 2, "beta": 1.0, "A": "identity", "V": "identity", "T": 0.5,
            "init": {"type": "vmf", "kappa": 2.0, "mu": [1, 0]}}
    assert scenario_geometry(data) == "sphere" and scenario_geometry({"attention": "softmax"}) == "R^d"
    assert scenario_geometry({"heads": [{"attention": "sphere_sa"}, {"attention": "softmax"}]}) == "R^d"
    assert parse_sphere_scenario(data).d == 2
    with pytest.raises(InputError, match="geometry"):
        parse_scenario(data)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    r = _tpde("pde", "--scenario", str(path), "--grid", "32", "--json")
    assert r.returncode == 0, r.stderr
    assert abs(json.loads(r.stdout)["mass"] - 1) < 1e-12   # round-off of 32 spectral points


@pytest.mark.parametrize("change,field", [
    ({"norm": "layer"}, "norm"), ({"d": 1}, "d"), ({"attention": "softmax"}, "attention"),
    ({"A": "eye"}, "A"), ({"init": {"type": "vmf", "mu": [0, 0, 1]}}, "init"), ({"alpha": 2.0}, "alpha"),
    ({"bogus": 1}, "bogus"), ({"T": -1.0}, "T"), ({"beta": float("nan")}, "beta"), ({"r0": 2.0}, "r0"),
    ({"init": {"type": "gaussian"}}, "init.type"),
    # matrices go through the shared reader (before: ragged rows or a string were internal ValueErrors, true
    # was read as 1.0, 1e300 passed)
    ({"A": [[1, 2], [3]]}, "A"), ({"V": [["x"]]}, "V"), ({"A": [[True, 0, 0], [0, 1, 0], [0, 0, 1]]}, "A"),
    ({"V": [[1e300, 0, 0], [0, 1, 0], [0, 0, 1]]}, "V"),
    ({"norm": "ngpt", "alpha": 1e300}, "alpha")])   # as large matrix entries (its RuntimeWarnings leaked before)
def test_bad_sphere_scenarios_name_the_field(change, field):
    base = {"geometry": "sphere", "attention": "sphere_sa", "d": 3, "A": "identity", "V": "identity",
            "init": {"type": "uniform_sphere"}, "T": 1.0}
    data = {**base, **change}
    with pytest.raises(InputError) as e:
        scn = parse_sphere_scenario(data)
        scn.initial(4, np.random.default_rng(0))
    assert e.value.field.startswith(field)


def test_tpde_particles_on_a_sphere_scenario(tmp_path):
    """Causal mask from a vMF cap: one cluster at the first token; the saved trajectory is on the sphere."""
    out = tmp_path / "traj.npz"
    p = _tpde("particles", "--scenario", "sphere_causal_vmf", "--n", "12", "--seed", "3", "--json",
              "--save", str(out))
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["geometry"] == "sphere" and res["clusters"] == 1 and res["monitor"]["value"] <= 1e-6
    data = np.load(out)
    assert data["X"].shape == (101, 12, 3)
    assert np.max(np.abs(np.linalg.norm(data["X"], axis=-1) - 1)) <= 1e-12
    bad = _tpde("particles", "--scenario", "sphere_sa_s2", "--n", "4", "--seed", "0", "--steps", "10")
    assert bad.returncode == 2 and "steps" in bad.stderr


def test_tpde_derive_sphere_prints_checked_steps():
    p = _tpde("derive", "--sphere", "equiangular", "--sphere-kind", "sphere_usa", "--format", "json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["all_checked"] and res["consequences"]["lambda"] == "2*exp(beta)"
    assert any(s["check"] for s in res["steps"])


@pytest.mark.parametrize("argv", [["--sphere", "circle", "--attention", "softmax"], ["--sphere", "circle", "--d", "3"],
                                  ["--sphere", "equiangular", "--energy"], ["--attention", "softmax", "--norm", "pre"],
                                  ["--attention", "l2", "--sphere-kind", "sphere_usa"]])
def test_tpde_derive_refuses_options_of_the_other_mode(argv, capsys):
    """--sphere with an option of the R^d derivations (or --norm/--sphere-kind without --sphere) was silently
    ignored; now one error line naming the option."""
    from symbolic_tpde.cli import main

    assert main(["derive", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tpde derive: error: {argv[2]}"), err
