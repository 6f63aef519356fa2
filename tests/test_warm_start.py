"""Warm path without SymPy, lazy Jacobians and an unusable cache (issue 12 items 3-4, issue 11).

A warm ``GaussianODE.from_scenario`` loads the generated module by structure (codegen/warm.py) and must not
import SymPy; ``ode.system`` is derived on first access; no Jacobian is generated unless a method calls it.
Each check that needs a clean ``sys.modules`` runs in a fresh interpreter with its own ``TPDE_CACHE_DIR``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

SCRIPT = """
import json, sys
import numpy as np
from symbolic_tpde.inputs.scenario import load_scenario
from symbolic_tpde.gaussian import GaussianODE, pack_state
scn = load_scenario({name!r})
ode = GaussianODE.from_scenario(scn)
y = pack_state(scn.alpha0, scn.Sigma0)
out = {{"rhs": ode.rhs(0.0, y).tolist(), "cond": ode.condition_values(0.0, y).tolist(),
       "batch": ode.rhs_batch(0.0, np.stack([y, 2 * y])).tolist(), "backend": ode.backend}}
sol = ode.integrate(scn.alpha0, scn.Sigma0, T=0.2)
out["Sigma"] = sol.Sigma[-1].tolist()
out["jac_built"] = ode.compiled.jac_built
out["sympy"] = "sympy" in sys.modules
if {touch_system}:
    out["n_states"] = ode.system.n_states
    out["sympy_after"] = "sympy" in sys.modules
print(json.dumps(out))
"""


def _run(name, cache, touch_system=False):
    env = dict(os.environ, TPDE_CACHE_DIR=str(cache))
    p = subprocess.run([sys.executable, "-c", SCRIPT.format(name=name, touch_system=touch_system)], env=env,
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["softmax_2d", "l2_2d"])
def test_warm_start_loads_without_sympy_and_agrees(tmp_path, name):
    cold = _run(name, tmp_path)
    warm = _run(name, tmp_path, touch_system=True)
    assert cold["sympy"] and not warm["sympy"], "the warm path must not import SymPy"
    # same generated module: results are bitwise equal (not merely close)
    for k in ("rhs", "cond", "batch", "Sigma", "backend"):
        assert warm[k] == cold[k], k
    assert name != "l2_2d" or len(warm["cond"]) == 1  # ℓ2 has a tilt condition, evaluated from the manifest
    assert not cold["jac_built"] and not warm["jac_built"]  # DOP853 (the default) needs no Jacobian
    assert warm["sympy_after"] and warm["n_states"] == 5     # ode.system derives lazily on first access


def test_structure_key_separates_backends_and_structures():
    from symbolic_tpde.codegen.warm import structure_key
    from symbolic_tpde.weights import Structure

    s2 = Structure(2, (("softmax", (("A", (2, 2)), ("V", (2, 2)))),))
    s3 = Structure(3, (("softmax", (("A", (3, 3)), ("V", (3, 3)))),))
    keys = {structure_key(s2, "c"), structure_key(s2, "numpy"), structure_key(s3, "c")}
    assert len(keys) == 3 and structure_key(s2, "c") == structure_key(s2, "c")


def test_jacobian_only_for_methods_that_use_it(tmp_path, monkeypatch):
    """LSODA and DOP853 never build the Jacobian; BDF does (it passes ``jac``)."""
    monkeypatch.setenv("TPDE_CACHE_DIR", str(tmp_path))
    from symbolic_tpde.gaussian import GaussianODE
    from symbolic_tpde.weights import make_head, make_weights

    w = make_weights([make_head("softmax", A=[[-0.5, 0.1], [0.0, -0.3]], V=[[1.0, 0.2], [0.1, 0.9]])])
    ode = GaussianODE.from_weights(w, backend="numpy")
    for method in ("DOP853", "LSODA", "dopri5"):
        assert ode.integrate([0.1, 0.2], np.eye(2), T=0.3, method=method).status == "ok"
        assert not ode.compiled.jac_built, method
    assert ode.integrate([0.1, 0.2], np.eye(2), T=0.3, method="BDF").status == "ok"
    assert ode.compiled.jac_built


def test_read_only_cache_computes_without_it_and_says_so_once(tmp_path, monkeypatch, capsys):
    from symbolic_tpde.codegen import cache as C

    monkeypatch.setattr(C, "_ANNOUNCED", set())
    real = C.atomic_write

    def read_only(path, data):
        if str(path).startswith(str(tmp_path)):
            raise OSError(30, "Read-only file system")
        return real(path, data)

    monkeypatch.setattr(C, "atomic_write", read_only)
    c = C.Cache(tmp_path / "ro")
    c.put_text("k1", ".txt", "one")
    c.put_text("k2", ".txt", "two")
    assert c.get_text("k1", ".txt") == "one" and not c.usable
    err = capsys.readouterr().err
    assert err.count("computing without the cache") == 1 and "Read-only file system" in err
    assert "TPDE_CACHE_DIR" in err


def test_cache_path_that_is_a_file_names_the_variable(tmp_path):
    f = tmp_path / "not_a_dir"
    f.write_text("x")
    code = ("from symbolic_tpde.codegen.cache import Cache; c = Cache(); c.put_text('k', '.t', 'v'); "
            "print(c.get_text('k', '.t'))")
    p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TPDE_CACHE_DIR=str(f)),
                       capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "v"
    assert "TPDE_CACHE_DIR" in p.stderr and "is a file" in p.stderr and "Errno" not in p.stderr
