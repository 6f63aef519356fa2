"""Scenario ``init`` blocks: the strict schema (symbolic_tpde.inputs.scenario) and the samplers, densities and cell
masses (symbolic_tpde.numerics.measures.laws), each against an independent reference (exact moments, exact
integrals)."""

import json
import math

import numpy as np
import pytest

from symbolic_tpde.errors import InputError
from symbolic_tpde.numerics.measures.laws import cell_masses, density, sample
from symbolic_tpde.inputs.scenario import parse_init, parse_scenario

MIX = {"type": "mixture", "weights": [0.3, 0.7], "means": [[-1.0, 0.5], [1.0, 0.0]],
       "covs": [[[0.3, 0.1], [0.1, 0.2]], [[0.2, 0.0], [0.0, 0.4]]]}


def _scn(init, **extra):
    return {"attention": "softmax", "A": [[-0.5, 0.0], [0.0, -0.5]], "V": [[1.0, 0.0], [0.0, 1.0]], "T": 1.0,
            "init": init, **extra}


def _files(tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "pts.npy", rng.normal(size=(500, 2)))
    e0, e1 = np.linspace(-1, 1, 5), np.linspace(0, 3, 4)
    np.savez(tmp_path / "dens.npz", edges_0=e0, edges_1=e1, density=rng.random((4, 3)))
    return tmp_path


def _specs(tmp_path):
    _files(tmp_path)
    return [parse_init(b, tmp_path) for b in (
        {"type": "gaussian", "alpha": [0.5, -0.2], "Sigma": [[0.4, 0.1], [0.1, 0.3]]}, MIX,
        {"type": "uniform_box", "low": [-1.0, 0.0], "high": [2.0, 0.5]},
        {"type": "uniform_ball", "center": [0.3, -0.1], "radius": 1.5},
        {"type": "empirical", "path": "pts.npy"}, {"type": "grid_density", "path": "dens.npz"})]


@pytest.mark.parametrize("block, field", [
    ({"type": "mixture", "weights": [1.0], "means": [[0.0]], "covs": [[[1.0]]], "extra": 1}, "init.extra"),
    ({"type": "mixture", "weights": [0.5, 0.6], "means": [[0.0], [1.0]], "covs": [[[1.0]], [[1.0]]]},
     "init.weights"),
    ({"type": "mixture", "weights": [0.5, 0.5], "means": [[0.0], [1.0]], "covs": [[[1.0]], [[-1.0]]]},
     "init.covs[1]"),
    ({"type": "mixture", "weights": [1.0], "means": [[0.0]]}, "init.covs"),
    ({"type": "uniform_box", "low": [0.0, 1.0], "high": [1.0, 1.0]}, "init.high"),
    ({"type": "uniform_ball", "center": [0.0], "radius": 0}, "init.radius"),
    # positive but so small that the variance underflows to 0 (fuzz_cli --stream new --seed 31337, case 1032)
    ({"type": "uniform_ball", "center": [0.2], "radius": 1e-320}, "init.radius"),
    ({"type": "uniform_box", "low": [0.0], "high": [1e-300]}, "init.high"),
    ({"type": "nope"}, "init.type"),
    ({"type": "empirical", "path": "x.txt"}, "init.path"),
    ({"type": "empirical", "path": "missing.npy"}, "init.path"),
    ("mixture", "init"),
])
def test_bad_init_is_refused_naming_the_field(block, field, tmp_path):
    with pytest.raises(InputError) as e:
        parse_init(block, tmp_path)
    assert e.value.field == field


def test_files_are_read_without_pickles_and_checked(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(tmp_path / "nan.npy", np.array([[0.0, np.nan], [1.0, 2.0]]))
    np.savez(tmp_path / "bad.npz", edges=np.array([0.0, 1.0, 0.5]), density=np.ones(2))
    for name in ("obj.npy", "nan.npy"):
        with pytest.raises(InputError, match="init.path"):
            parse_init({"type": "empirical", "path": name}, tmp_path)
    with pytest.raises(InputError, match="increasing"):
        parse_init({"type": "grid_density", "path": "bad.npz"}, tmp_path)
    # edges at +-1e300 are finite and increasing, but their cell widths square to inf (Sheppard's correction
    # overflowed with a warning, and `tpde pde` then reported a "blow-up" at t = 0): refused, as empirical points are
    np.savez(tmp_path / "huge.npz", edges=np.array([-1e300, 0.0, 1e300]), density=np.ones(2))
    with pytest.raises(InputError, match="magnitude"):
        parse_init({"type": "grid_density", "path": "huge.npz"}, tmp_path)


def _bad_files(tmp_path):
    """Files that np.load reads as something else than their name says, or cannot read: each was an internal
    error (TypeError, EOFError, BadZipFile, a ValueError from a lazily read member) before read_arrays."""
    np.save(tmp_path / "one.npy", np.ones(3))
    np.savez(tmp_path / "two.npz", density=np.ones(2), edges=np.arange(3.0))
    whole = (tmp_path / "two.npz").read_bytes()
    files = {"npy_in.npz": (tmp_path / "one.npy").read_bytes(), "npz_in.npy": whole, "empty.npz": b"",
             "empty.npy": b"", "garbage.npz": b"PK\x03\x04garbage", "half.npz": whole[: len(whole) // 2]}
    np.savez(tmp_path / "obj.npz", density=np.array([None, 1.0], dtype=object), edges=np.arange(3.0))
    np.savez(tmp_path / "str.npz", density=np.array(["a", "b"]), edges=np.arange(3.0))
    np.savez(tmp_path / "cplx.npz", density=np.ones(2) * 1j, edges=np.arange(3.0))
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return sorted(files) + ["obj.npz", "str.npz", "cplx.npz"]


def test_unreadable_or_mislabelled_files_are_input_errors(tmp_path):
    for name in _bad_files(tmp_path):
        typ = "grid_density" if name.endswith(".npz") else "empirical"
        with pytest.raises(InputError) as e:
            parse_init({"type": typ, "path": name}, tmp_path)
        assert e.value.field == "init.path", name
    assert parse_init({"type": "grid_density", "path": "two.npz"}, tmp_path).d == 1   # the good file still reads


def test_scenario_init_rules(tmp_path):
    scn = parse_scenario(_scn(MIX), gaussian_data=False)
    assert scn.d == 2 and scn.init.type == "mixture"
    with pytest.raises(InputError, match="init.type"):     # Gaussian-only commands refuse it by name
        parse_scenario(_scn(MIX))
    with pytest.raises(InputError) as e:
        parse_scenario(_scn(MIX, alpha0=[0.0, 0.0]), gaussian_data=False)
    assert e.value.field == "alpha0"
    g = parse_scenario(_scn({"type": "gaussian", "alpha": [0.1, 0.2], "Sigma": [[1.0, 0.0], [0.0, 2.0]]}))
    assert g.alpha0.tolist() == [0.1, 0.2] and g.Sigma0[1, 1] == 2.0


def test_sample_moments_match_the_exact_moments(tmp_path):
    """Each sampler's mean and covariance against the schema's exact ones, within 5 Monte-Carlo standard
    errors (the standard error of a covariance entry estimated from the sample's fourth moments)."""
    rng = np.random.default_rng(1)
    n = 40_000
    for spec in _specs(tmp_path):
        X = sample(spec, n, rng)
        assert X.shape == (n, 2)
        Z = X - spec.mean
        se_mean = Z.std(axis=0) / math.sqrt(n)
        assert np.all(np.abs(Z.mean(axis=0)) < 5 * se_mean + 1e-15), spec.type
        prods = np.einsum("ni,nj->nij", Z, Z)
        se_cov = prods.std(axis=0) / math.sqrt(n)
        assert np.all(np.abs(prods.mean(axis=0) - spec.cov) < 5 * se_cov + 1e-15), spec.type


def test_cell_masses_are_integrals_of_the_density(tmp_path):
    gauss, mix, box, ball, emp, grid = _specs(tmp_path)
    e = [np.linspace(-6, 6, 97), np.linspace(-6, 6, 81)]
    for spec in (gauss, mix):   # Gauss-Legendre on cells: total mass 1 up to the tails beyond 6 (< 1e-12)
        assert abs(cell_masses(spec, e).sum() - 1) < 1e-12
    # uniform box: exact overlaps; against the closed-form fraction of a sub-box
    m = cell_masses(box, [np.array([-1.0, 0.5, 2.0]), np.array([0.0, 0.25, 0.5])])
    assert np.allclose(m, [[0.25, 0.25], [0.25, 0.25]], atol=1e-15)
    # ball: midpoint rule of the indicator, error O(h) at the boundary
    assert abs(cell_masses(ball, e).sum() - 1) < 0.02
    assert abs(cell_masses(emp, e).sum() - 1) < 1e-12
    # grid density remapped onto its own edges: the same masses; onto a finer grid: the same total
    src = grid.params["edges"]
    assert np.allclose(cell_masses(grid, src), grid.params["mass"], atol=1e-15)
    fine = [np.linspace(-2, 2, 33), np.linspace(-1, 4, 41)]
    assert abs(cell_masses(grid, fine).sum() - 1) < 1e-13
    # density: integrates to 1 (midpoint sums on a fine grid) and is 0 outside the support
    x = np.arange(600) * 0.02 - 6 + 0.01    # midpoints of 0.02-cells: never on a support edge
    P = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
    h = 0.02
    for spec in (gauss, mix, box, grid):
        assert abs(density(spec, P).sum() * h * h - 1) < 1e-3, spec.type
    with pytest.raises(InputError):
        density(emp, P)


def test_particles_cli_samples_the_init(tmp_path):
    from symbolic_tpde.cli import main

    f = tmp_path / "mix.json"
    f.write_text(json.dumps(_scn(MIX, T=0.0)))
    assert main(["particles", "--scenario", str(f), "--n", "4000", "--seed", "3", "--json"]) == 0


# ------------------------------------------------------------------------------ one schema, both geometries
def test_sphere_types_share_the_schema_and_stay_in_their_geometry(tmp_path):
    """The sphere laws are entries of the same schema and registry; a law of one geometry is refused by name
    in the other."""
    from symbolic_tpde.numerics.measures.laws import INIT_TYPES
    from symbolic_tpde.inputs.scenario import INIT_SCHEMAS, init_types

    sphere = set(init_types("sphere"))
    assert sphere == {"uniform_sphere", "vmf", "frame", "points", "circle_modes"} and sphere <= set(INIT_SCHEMAS)
    assert {INIT_TYPES[t].geometry for t in sphere} == {"sphere"}
    assert not sphere & set(init_types("R^d"))
    with pytest.raises(InputError) as e:
        parse_scenario(_scn({"type": "uniform_sphere"}), gaussian_data=False)
    assert e.value.field == "init.type" and "sphere" in str(e.value)
    with pytest.raises(InputError) as e:
        parse_init({"type": "gaussian", "alpha": [0.0], "Sigma": [[1.0]]}, d=3, geometry="sphere")
    assert e.value.field == "init.type"
    with pytest.raises(InputError) as e:
        parse_init({"type": "vmf", "mu": [0, 0, 1], "kappa": -1}, d=3, geometry="sphere")
    assert e.value.field == "init.kappa"
    np.save(tmp_path / "two.npy", np.array([[2.0, 0, 0], [0, 0, -3.0]]))
    spec = parse_init({"type": "points", "path": "two.npy"}, tmp_path, d=3, geometry="sphere")
    assert np.allclose(sample(spec, 2, np.random.default_rng(0)), [[1, 0, 0], [0, 0, -1]], atol=0)
    with pytest.raises(InputError, match="n = 3"):
        sample(spec, 3, np.random.default_rng(0))
    with pytest.raises(InputError, match="sphere"):
        cell_masses(spec, [np.linspace(-1, 1, 3)] * 3)


@pytest.mark.parametrize("kappa", [0.0, 0.7, 6.0])
def test_vmf_moments_and_density_against_quadrature(kappa):
    """vMF on the circle (d = 2): the schema's exact mean and covariance (Bessel ratios) and the density
    (normalised with I_{d/2-1}) against trapezoidal quadrature over the angle (spectrally accurate for a
    periodic analytic integrand: 2000 nodes give round-off), and the sampler's mean against the exact one
    within 5 Monte-Carlo standard errors."""
    spec = parse_init({"type": "vmf", "mu": [0.6, 0.8], "kappa": kappa}, d=2, geometry="sphere")
    phi = np.linspace(0, 2 * np.pi, 2000, endpoint=False)
    X = np.stack([np.cos(phi), np.sin(phi)], axis=1)
    f = density(spec, X) * (2 * np.pi / len(phi))
    assert abs(f.sum() - 1) <= 1e-12
    mean = f @ X
    second = np.einsum("k,ki,kj->ij", f, X, X)
    assert np.allclose(spec.mean, mean, atol=1e-12)
    assert np.allclose(spec.cov, second - np.outer(mean, mean), atol=1e-12)
    n = 20000
    Y = sample(spec, n, np.random.default_rng(1))
    assert np.allclose(np.linalg.norm(Y, axis=1), 1, atol=1e-14)
    se = np.sqrt(np.diag(spec.cov) / n)
    assert np.all(np.abs(Y.mean(axis=0) - spec.mean) <= 5 * se)


def test_uniform_sphere_moments_and_frame():
    """Uniform on S^4: mean 0, covariance I/d (exact, by symmetry) and the sample within 5 standard errors;
    the frame is orthonormal (n <= d) and refused beyond d."""
    d, n = 5, 20000
    spec = parse_init({"type": "uniform_sphere"}, d=d, geometry="sphere")
    assert np.allclose(spec.cov, np.eye(d) / d) and not np.any(spec.mean)
    Y = sample(spec, n, np.random.default_rng(2))
    assert np.all(np.abs(Y.mean(axis=0)) <= 5 * np.sqrt(1 / d / n))
    fr = parse_init({"type": "frame", "rotate": True}, d=d, geometry="sphere")
    E = sample(fr, 4, np.random.default_rng(3))
    assert np.allclose(E @ E.T, np.eye(4), atol=1e-14) and fr.mean is None
    with pytest.raises(InputError, match="at most d"):
        sample(fr, 6, np.random.default_rng(3))
