"""Particle fields vs direct loop-based evaluation of the README Mathematics §2 formulas, invariances, blocking, dtypes.

Tolerances: float64 results agree with a pure-Python double loop up to round-off; sums of n <= 12 terms of
size O(1)-O(10) give errors of order 1e-15 relative, so 1e-11 (relative to the largest entry) leaves a
large margin while still catching any wrong sign, index or normalisation.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from symbolic_tpde.errors import ConvergenceError, InputError
from symbolic_tpde.weights import Sink, make_head, make_weights
from symbolic_tpde.numerics.particles import fields as F
from symbolic_tpde.numerics.particles.sinkhorn import sinkhorn_plan

RTOL = 1e-11  # float64 round-off bound (see module docstring)


from symbolic_tpde.validate.oracles import (ref_custom, ref_l2, ref_linear, ref_masked, ref_sigmoid,  # noqa: E402
                                            ref_sinkhorn, ref_softmax, ref_unnormalized)


# ---------------------------------------------------------------- helpers -------------------------------
def rel_err(a, b):
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


@pytest.fixture
def data():
    rng = np.random.default_rng(20260130)
    n, d = 11, 3
    X = rng.standard_normal((n, d))
    A = rng.standard_normal((d, d)) / math.sqrt(d)
    V = rng.standard_normal((d, d))
    return rng, X, A, V


# ---------------------------------------------------------------- variants vs loops ---------------------
def test_softmax_vs_loop(data):
    _, X, A, V = data
    assert rel_err(F.softmax_field(X, A, V), ref_softmax(X, A, V)) < RTOL


def test_l2_vs_loop(data):
    rng, X, _, V = data
    Q, K = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    for tau in (0.5, 3.0):
        assert rel_err(F.l2_field(X, Q, K, V, tau), ref_l2(X, Q, K, V, tau)) < RTOL


def test_sigmoid_linear_unnormalized_vs_loop(data):
    _, X, A, V = data
    assert rel_err(F.sigmoid_field(X, A, V, -0.7), ref_sigmoid(X, A, V, -0.7)) < RTOL
    assert rel_err(F.linear_field(X, A, V), ref_linear(X, A, V)) < RTOL
    assert rel_err(F.softmax_unnormalized_field(X, A, V), ref_unnormalized(X, A, V)) < RTOL


def test_custom_vs_loop(data):
    rng, X, _, V = data
    B, P, R = (rng.standard_normal((3, 3)) * 0.4 for _ in range(3))
    p, r = rng.standard_normal(3), rng.standard_normal(3)
    R = -(R @ R.T)  # keeps the weights moderate; any R is allowed
    assert rel_err(F.custom_field(X, B, P, R, p, r, V), ref_custom(X, B, P, R, p, r, V)) < RTOL
    # B = Aᵀ with P = R = p = r = 0 is softmax attention (weights.py convention)
    _, X, A, V = data
    assert rel_err(F.custom_field(X, A.T, V=V), ref_softmax(X, A, V)) < RTOL


def test_masked_vs_loop_and_token0(data):
    rng, X, A, V = data
    out = F.masked_field(X, A, V)
    assert rel_err(out, ref_masked(X, A, V)) < RTOL
    np.testing.assert_allclose(out[0], V @ X[0], rtol=1e-14, atol=1e-14)
    sink = Sink(mass=0.25, x=rng.standard_normal(3))
    assert rel_err(F.masked_field(X, A, V, sink=sink), ref_masked(X, A, V, sink=sink)) < RTOL
    pos = rng.integers(0, 4, size=len(X)) / 4.0  # ties: tokens at one position see each other
    assert rel_err(F.masked_field(X, A, V, positions=pos), ref_masked(X, A, V, positions=pos)) < RTOL
    assert rel_err(F.masked_field(X, A, V, sink=sink, positions=pos),
                   ref_masked(X, A, V, sink=sink, positions=pos)) < RTOL


def test_sinkhorn_vs_plain_scaling_and_marginals(data):
    _, X, A, V = data
    X = X[:8]
    for eps in (1.0, 0.5):
        out, info = F.sinkhorn_field(X, A, V, eps, tol=1e-13, return_info=True)
        assert info.converged and info.marginal_error < 1e-13
        ref, Pref = ref_sinkhorn(X, A, V, eps)
        # both plans are within 1e-13 of doubly stochastic; the field is a P-average of O(1) points
        assert rel_err(out, ref) < 1e-11
        P, info2 = sinkhorn_plan(X, A, eps, tol=1e-13)
        assert np.max(np.abs(P.sum(axis=1) - 1)) < 1e-13  # rows: exact up to round-off
        assert np.max(np.abs(P.sum(axis=0) - 1)) < 1e-13  # columns: the stopping criterion
        np.testing.assert_allclose(P, Pref, rtol=1e-10, atol=1e-14)


def test_sinkhorn_nonconvergence_is_reported(data):
    _, X, A, V = data
    with pytest.raises(ConvergenceError):
        F.sinkhorn_field(X, 3 * A, V, 0.05, max_iter=2)
    out, info = F.sinkhorn_field(X, 3 * A, V, 0.05, max_iter=2, return_info=True)
    assert not info.converged and info.marginal_error > info.tol and info.iterations == 2


# ---------------------------------------------------------------- invariances ---------------------------
def _all_unmasked(X, A, V, rng):
    Q, K = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    return {
        "softmax": F.softmax_field(X, A, V),
        "l2": F.l2_field(X, Q, K, V, 1.3),
        "sinkhorn": F.sinkhorn_field(X, A, V, 1.0, tol=1e-13),
        "sigmoid": F.sigmoid_field(X, A, V, 0.3),
        "linear": F.linear_field(X, A, V),
        "unnormalized": F.softmax_unnormalized_field(X, A, V),
        "custom": F.custom_field(X, A.T, A, -np.eye(3) * 0.1, np.ones(3), np.arange(3.0), V),
    }


def test_permutation_equivariance(data):
    rng, X, A, V = data
    perm = rng.permutation(len(X))
    base = _all_unmasked(X, A, V, np.random.default_rng(1))
    moved = _all_unmasked(X[perm], A, V, np.random.default_rng(1))
    for name in base:
        # Sinkhorn: both solves stop at marginal error < 1e-13, so their fields agree to ~1e-12
        tol = 1e-11 if name == "sinkhorn" else RTOL
        assert rel_err(moved[name], base[name][perm]) < tol, name


def test_linear_map_covariance(data):
    """x -> M x with A' = M^{-T} A M^{-1}, V' = M V M^{-1} (l2: Q M^{-1}, K M^{-1}) gives Γ'(MX) = M Γ(X).

    Exact because <A'Mx, My> = <Ax, y> and the weights multiply M x_j linearly.
    """
    rng, X, A, V = data
    M = rng.standard_normal((3, 3)) + 2 * np.eye(3)
    Mi = np.linalg.inv(M)
    A2, V2, Y = Mi.T @ A @ Mi, M @ V @ Mi, X @ M.T
    Q, K = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    sink = Sink(0.3, rng.standard_normal(3))
    pairs = [
        (F.softmax_field(Y, A2, V2), F.softmax_field(X, A, V)),
        (F.l2_field(Y, Q @ Mi, K @ Mi, V2, 0.9), F.l2_field(X, Q, K, V, 0.9)),
        (F.sinkhorn_field(Y, A2, V2, tol=1e-13), F.sinkhorn_field(X, A, V, tol=1e-13)),
        (F.sigmoid_field(Y, A2, V2, 0.4), F.sigmoid_field(X, A, V, 0.4)),
        (F.linear_field(Y, A2, V2), F.linear_field(X, A, V)),
        (F.masked_field(Y, A2, V2, sink=Sink(0.3, M @ sink.x)), F.masked_field(X, A, V, sink=sink)),
    ]
    for k, (lhs, rhs) in enumerate(pairs):
        # M has condition number ~10: round-off is amplified accordingly
        assert rel_err(lhs, rhs @ M.T) < 1e-9, k


def test_translation_covariance(data):
    """Exact translation laws Γ(X + c) = Γ(X) + V c (work-out in each case):

    * Sinkhorn, every c: the cost change <Ac, y> + <Ax, c> + <Ac, c> splits into x-only and y-only terms,
      which the potentials absorb, so the plan is unchanged;
    * ℓ2 with Q = K, every c: |Q(x + c) - Q(y + c)| = |Qx - Qy|;
    * softmax, c in ker A: the logit change cᵀ A x_i depends on the query only and cancels;
    * custom, every c, with r' = r - Bᵀc - (R + Rᵀ)c: removes the y-only terms created by the shift.
    """
    rng, X, A, V = data
    c = rng.standard_normal(3)
    assert rel_err(F.sinkhorn_field(X + c, A, V, tol=1e-13), F.sinkhorn_field(X, A, V, tol=1e-13) + V @ c) < 1e-10
    Q = rng.standard_normal((2, 3))
    assert rel_err(F.l2_field(X + c, Q, Q, V, 0.8), F.l2_field(X, Q, Q, V, 0.8) + V @ c) < 1e-10
    u = rng.standard_normal(3)
    A0 = A - np.outer(A @ u, u) / (u @ u)  # A0 u = 0
    assert rel_err(F.softmax_field(X + 2 * u, A0, V), F.softmax_field(X, A0, V) + 2 * V @ u) < 1e-10
    B, R, r = 0.5 * A, -0.2 * np.eye(3), rng.standard_normal(3)
    r2 = r - B.T @ c - (R + R.T) @ c
    assert rel_err(F.custom_field(X + c, B, None, R, None, r2, V), F.custom_field(X, B, None, R, None, r, V) + V @ c) < 1e-10
    # and it genuinely fails for softmax with c outside ker A (the test above is not vacuous)
    assert rel_err(F.softmax_field(X + c, A, V), F.softmax_field(X, A, V) + V @ c) > 1e-3


# ---------------------------------------------------------------- blocking, dtype, memory --------------
def test_blocked_vs_unblocked(data):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 4))
    A, V = rng.standard_normal((4, 4)) / 2, rng.standard_normal((4, 4))
    sink = Sink(0.2, np.zeros(4))
    for fn in (lambda b: F.softmax_field(X, A, V, block=b), lambda b: F.masked_field(X, A, V, sink=sink, block=b),
               lambda b: F.sigmoid_field(X, A, V, 0.1, block=b), lambda b: F.sinkhorn_field(X, A, V, block=b)):
        full = fn(300)
        for b in (1, 7, 64):
            # round-off only: different summation order inside BLAS, ~n eps
            assert rel_err(fn(b), full) < 1e-12


def test_threads_give_identical_rows():
    """Row blocks are independent: two Python threads must reproduce the serial result bit for bit."""
    rng = np.random.default_rng(9)
    X = rng.standard_normal((700, 3))
    A, V = rng.standard_normal((3, 3)) / 2, rng.standard_normal((3, 3))
    for fn in (F.softmax_field, F.masked_field):
        np.testing.assert_array_equal(fn(X, A, V, block=50, threads=2), fn(X, A, V, block=50, threads=1))


def test_float32_agrees_with_float64():
    rng = np.random.default_rng(6)
    X = rng.standard_normal((500, 3))
    A, V = rng.standard_normal((3, 3)) / 3, rng.standard_normal((3, 3))
    out64 = F.softmax_field(X, A, V)
    out32 = F.softmax_field(X, A, V, dtype=np.float32)
    assert out32.dtype == np.float32 and F.masked_field(X.astype(np.float32), A, V).dtype == np.float32
    # float32 round-off: each logit carries ~eps32·|logit| absolute error (|logit| <= ~10 here), which exp turns
    # into that relative error of the weights; 1e3·eps32 ~ 1.2e-4 bounds it with margin
    L = np.abs(X @ A.T @ X.T).max()
    tol = 20 * np.finfo(np.float32).eps * (1 + L)
    assert rel_err(out32.astype(float), out64) < tol
    o32, info = F.sinkhorn_field(X, A, V, dtype=np.float32, return_info=True)
    assert info.converged and info.tol >= 64 * np.finfo(np.float32).eps
    assert rel_err(o32.astype(float), F.sinkhorn_field(X, A, V)) < 50 * tol


def test_memory_is_blocked():
    """n = 6000: the full n x n float64 matrix would be 288 MB; blocked work must stay far below it."""
    rng = np.random.default_rng(7)
    X = rng.standard_normal((6000, 2))
    A, V = -np.eye(2), np.eye(2)
    tracemalloc.start()
    F.softmax_field(X, A, V)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 0.05 * 6000 ** 2 * 8, peak


@pytest.mark.slow
def test_fifty_thousand_tokens_one_step():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((50_000, 2))
    tracemalloc.start()
    out = F.softmax_field(X, -np.eye(2), np.eye(2))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert np.isfinite(out).all() and peak < 200e6  # the full matrix would be 20 GB


# ---------------------------------------------------------------- dispatcher ----------------------------
def test_dispatcher_sums_heads_and_ffn(data):
    rng, X, A, V = data
    Q, K = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    W, c = rng.standard_normal((3, 3)), rng.standard_normal(3)
    heads = [make_head("softmax", A=A, V=V), make_head("l2", Q=Q, K=K, V=V, tau=2.0),
             make_head("sinkhorn", A=A, V=V), make_head("sigmoid", A=A, V=V, b=0.2),
             make_head("linear", A=A, V=V), make_head("masked", A=A, V=V),
             make_head("softmax_unnormalized", A=A, V=V), make_head("custom", B=A.T, V=V)]
    sink = {"mass": 0.3, "x": [0.1, 0.2, 0.3]}
    w = make_weights(heads, ffn={"W": W, "c": c}, sink=sink)
    expected = (ref_softmax(X, A, V) + ref_l2(X, Q, K, V, 2.0) + F.sinkhorn_field(X, A, V)
                + ref_sigmoid(X, A, V, 0.2) + ref_linear(X, A, V) + ref_masked(X, A, V, sink=w.sink)
                + ref_unnormalized(X, A, V) + ref_softmax(X, A, V) + X @ W.T + c)
    assert rel_err(F.field(X, w), expected) < 1e-10
    assert rel_err(F.velocity(w, 0.3, X), expected) < 1e-10
    cache: dict = {}
    F.field(X, w, cache=cache)
    assert ("sinkhorn_g", 2) in cache


@pytest.mark.parametrize("bad", [
    lambda X, A, V: F.softmax_field(X[:, :2], A, V),
    lambda X, A, V: F.softmax_field(np.where(X > 1, np.nan, X), A, V),
    lambda X, A, V: F.l2_field(X, A[:2], A[:2], V, 0.0),
    lambda X, A, V: F.softmax_field(X, A, V, dtype=np.int64),
    lambda X, A, V: F.softmax_field(X, A, V, block=0),
    lambda X, A, V: F.masked_field(X, A, V, positions=[0.0, 1.0]),
])
def test_bad_input_names_the_field(data, bad):
    _, X, A, V = data
    with pytest.raises(InputError):
        bad(X, A, V)


def test_sinkhorn_overflow_is_a_blowup_not_a_convergence_failure():
    """A state whose logits leave the floats: the Sinkhorn field is non-finite at once (no 10 000 wasted
    iterations), and the particle integrator reports a blow-up with its time, not a Sinkhorn non-convergence."""
    from symbolic_tpde.errors import BlowupError
    from symbolic_tpde.numerics.particles.simulate import simulate

    X = np.array([[1e200, 1.0], [2.0, -1e200], [0.5, 0.5]])
    out, info = F.sinkhorn_field(X, np.eye(2), np.eye(2), return_info=True)
    assert info.overflow and not info.converged and info.iterations <= 1 and not np.isfinite(out).any()
    w = make_weights([make_head("sinkhorn", A=np.eye(2), V=np.eye(2))])
    with pytest.raises(BlowupError) as exc:
        simulate(X, w, 1.0, steps=4, progress=False)
    assert exc.value.t == 0.0
