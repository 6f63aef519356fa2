"""The separable grid velocity (symbolic_tpde/numerics/grids/separable.py, issue 33) against the direct sum:
within the error bound the code computes, for softmax, ℓ2 and custom heads, at the tolerances that select
few and many nodes; the bound itself against the Chebyshev remainder formula; the node count following the
tolerance; the solver's hook (default separable, ``velocity_tol=None`` the direct sum) with a whole short run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from symbolic_tpde.errors import InputError
from symbolic_tpde.inputs.scenario import InitSpec
from symbolic_tpde.numerics.grids import separable
from symbolic_tpde.numerics.grids.euclidean import _dilate, _Rhs, initial_grid, solve_grid, weighted_field
from symbolic_tpde.numerics.measures.laws import cell_masses
from symbolic_tpde.weights import Schedule, make_head, make_weights

ALPHA, SIGMA = np.array([0.3, -0.2]), np.array([[0.8, 0.2], [0.2, 0.5]])
HEADS = {
    "softmax": dict(A=[[-0.6, 0.2], [0.1, -0.4]], V=[[1.0, 0.3], [-0.2, 0.8]]),
    "l2": dict(Q=[[1.0, 0.2], [0.0, 0.7]], K=[[0.9, 0.0], [0.3, 1.1]], tau=2.0, V=[[0.5, 0.0], [0.1, 0.7]]),
    "custom": dict(B=[[0.4, -0.1], [0.2, 0.3]], R=[[-0.2, 0.05], [0.05, -0.1]], r=[0.1, -0.3],
                   V=[[0.6, 0.2], [0.0, 0.9]]),
}


def setup(N, kind):
    init = InitSpec("gaussian", 2, {"alpha": ALPHA, "Sigma": SIGMA}, ALPHA, SIGMA, True)
    g = initial_grid(init, N)
    m = np.asarray(cell_masses(init, g.edges), dtype=float)
    return init, g, m, make_weights([make_head(kind, **HEADS[kind])])


@pytest.mark.parametrize("kind", list(HEADS))
@pytest.mark.parametrize("tol", [1e-6, 1e-12])
def test_separable_velocity_within_its_bound(kind, tol):
    _, g, m, w = setup(40, kind)
    C = g.centres
    keys, query = m.ravel() > 0, _dilate(m > 0).ravel()
    ref = weighted_field(C[query], C[keys], m.ravel()[keys], w, threads=1)
    got, bound = separable.weighted_field(C[query], g, m, w, tol)
    err = np.abs(got - ref).max(axis=0)
    # the direct sum has its own round-off (sums of 1600 terms: well below 1e-12 here), hence the additive slack
    assert (err <= bound + 1e-12).all(), (kind, tol, err, bound)
    assert bound.max() < 50 * tol   # the bound is tol times the key half-width (the box is ~10 wide)


def test_error_bound_and_node_count():
    # ε_n = ρ^n e^{2ρ} / (2^{n-1} n!) at ρ = 1: 8, 10, 12 nodes (the 4.8e-7 / 1.4e-9 / 2.6e-12 are
    # sharper estimates of the same remainder; this bound is the safe side of them)
    for n in (8, 10, 12):
        assert separable.error_bound(n) == pytest.approx(math.exp(2) / (2 ** (n - 1) * math.factorial(n)), rel=1e-3)
    assert separable.error_bound(8) < 2e-6 and separable.error_bound(12) < 1e-11
    ns = [separable.nodes_for(t, 256, 256) for t in (1e-4, 1e-8, 1e-12)]
    assert ns == sorted(ns) and ns[0] < ns[-1]
    assert separable.error_bound(separable.nodes_for(1e-9, 256, 256), 256, 256) <= 1e-9
    # below the rounding term (~1e-12 at 256²): the nodes that bring the remainder to it, bound within 2x of it
    n = separable.nodes_for(1e-20, 256, 256)
    assert n < separable.MAX_NODES and separable.error_bound(n, 256, 256) < 2 * separable.error_bound(40, 256, 256)
    with pytest.raises(InputError, match="velocity_tol"):
        separable.nodes_for(-1.0)


def test_interpolation_error_is_what_the_bound_covers():
    """One column of keys at distance R: the interpolated sum is e^{u R} interpolated; its measured relative
    error over the interval stays below ε_n and is not far below it (the bound is not vacuous)."""
    n, R = 8, 3.0
    h = separable.RHO / R
    k = np.arange(n)
    nodes = h * np.cos((2 * k + 1) * np.pi / (2 * n))
    u = np.linspace(-h, h, 2001)
    p = np.polynomial.chebyshev.Chebyshev.fit(nodes, np.exp(R * nodes), n - 1, domain=[-h, h])
    rel = np.abs(p(u) / np.exp(R * u) - 1).max()
    assert rel <= separable.error_bound(n) and rel > separable.error_bound(n) / 100


@pytest.mark.slow
def test_solver_hook_short_run_agrees_with_direct_sum():
    init, g, m, w = setup(32, "softmax")
    sched = Schedule.constant(w)
    fast = solve_grid(init, sched, 0.2, 32)
    slow = solve_grid(init, sched, 0.2, 32, velocity_tol=None)
    assert fast.velocity_bound > 0 and slow.velocity_bound == 0
    assert fast.steps == slow.steps
    assert np.abs(fast.masses - slow.masses).max() < 1e-10


def test_rhs_takes_the_separable_path_and_reports_its_bound():
    init, g, m, w = setup(32, "softmax")
    f_fast, f_slow = _Rhs(g, lambda t: w, True, 1, 1e-12), _Rhs(g, lambda t: w, True, 1, None)
    u_fast, u_slow = f_fast.velocity(0.0, m), f_slow.velocity(0.0, m)
    assert f_fast.velocity_bound > 0 and f_slow.velocity_bound == 0
    assert np.abs(u_fast - u_slow).max() <= f_fast.velocity_bound + 1e-12
