"""Non-preservation witnesses: non-zero, certified by two independent evaluations, and meaningful."""

from __future__ import annotations

import pytest
import sympy as sp

from symbolic_tpde.symbolic.witness import NotGaussianPreserving, witness_for


@pytest.mark.parametrize("kind,sink", [("sigmoid", False), ("softmax_unnormalized", False), ("masked", False),
                                       ("masked", True)])
def test_witness_is_certified_nonzero(kind, sink):
    w = witness_for(kind, sink=sink)
    assert w.certified and abs(w.value) > 1e-3
    assert w.discrepancy < 1e-20 * abs(w.value)   # 30-digit symbolic evaluation vs mpmath quadrature
    assert "NOT Gaussian-preserving" in NotGaussianPreserving(w).args[0]
    assert w.to_dict()["gaussian_preserving"] is False


def test_sigmoid_witness_vanishes_only_where_claimed():
    w = witness_for("sigmoid")
    b, alpha = sp.Symbol("b", real=True), sp.Symbol("alpha", real=True)
    assert sp.simplify(w.quantity.subs(b, 0)) == 0
    assert sp.simplify(w.quantity.subs(alpha, 0)) == 0


def test_softmax_unnormalized_field_is_the_gaussian_integral():
    w = witness_for("softmax_unnormalized")
    x, a, v, al = sp.symbols("x a v alpha", real=True)
    s, y = sp.Symbol("s", positive=True), sp.Symbol("y", real=True)
    pt = {x: sp.Rational(1, 3), a: sp.Rational(1, 2), v: 2, al: sp.Rational(-1, 2), s: sp.Rational(3, 2)}
    integrand = (v * y * sp.exp(a * x * y) * sp.exp(-(y - al) ** 2 / (2 * s)) / sp.sqrt(2 * sp.pi * s)).subs(pt)
    import mpmath as mp

    with mp.workdps(30):
        f = sp.lambdify(y, integrand, modules="mpmath")
        direct = mp.quad(f, [-mp.inf, 0, mp.inf])
        assert abs(direct - mp.mpf(str(w.field_expr.subs(pt).evalf(30)))) < 1e-25  # 30-digit quadrature


def test_masked_control_position_independent_is_affine():
    assert "checked symbolically" in witness_for("masked").notes     # masked_witness raises if the control fails


def test_masked_sink_witness_reduces_to_softmax_without_sink():
    w = witness_for("masked", sink=True)
    m0 = sp.Symbol("m0", real=True)
    x = sp.Symbol("x", real=True)
    assert sp.simplify(sp.diff(w.field_expr.subs(m0, 0), x, 2)) == 0   # m0 = 0: affine (softmax field)


def test_engine_picks_the_sink_witness():
    from symbolic_tpde.symbolic.moments import derive_gaussian_system

    with pytest.raises(NotGaussianPreserving) as info:
        derive_gaussian_system((1, (("masked", 1),), False, True))
    assert "sink" in info.value.witness.description


@pytest.mark.parametrize("kind", ["sigmoid", "softmax_unnormalized", "masked"])
def test_summary_in_math_notation_not_sympy_syntax(kind):
    w = witness_for(kind)
    text, tex, js = w.summary("text"), w.summary("latex"), w.summary("json")
    assert "**" not in text and "**" not in tex and "**" not in js and "α" in text
    assert "\\alpha" in tex and "$" in tex and "NOT Gaussian-preserving" in text


def test_cumulant_certificate_none_for_a_field_that_preserves_the_gaussian():
    """J x |x|^2 (J a quarter turn) is not affine, yet leaves N(0, I) invariant (div(N(0,I) J x |x|^2) = 0): no
    certificate; at N(e_1, I) it does move the law and a certificate is found."""
    from symbolic_tpde.symbolic.witness import cumulant_certificate

    x1, x2 = sp.symbols("x1 x2", real=True)
    X = sp.Matrix([x1, x2])
    field = sp.Matrix([[0, -1], [1, 0]]) * X * (x1 ** 2 + x2 ** 2)
    dens = sp.exp(-(x1 ** 2 + x2 ** 2) / 2)
    assert sp.simplify(sp.diff(dens * field[0], x1) + sp.diff(dens * field[1], x2)) == 0   # invariant
    assert cumulant_certificate(field, [x1, x2], sp.zeros(2, 1), sp.eye(2)) is None
    moved = cumulant_certificate(field, [x1, x2], sp.Matrix([1, 0]), sp.eye(2))
    assert moved is not None and moved["value"] != 0


def test_sigmoid_and_unnormalised_softmax_have_cumulant_certificates():
    from symbolic_tpde.symbolic.witness import sigmoid_certificate, softmax_unnormalized_certificate

    sg = sigmoid_certificate()
    lo, hi = sg["interval"]
    assert sg["certified"] and (hi < 0 or lo > 0)
    # independent: 3 E[Z^2 (Gamma(X) - E Gamma)] by tensor Gauss-Hermite quadrature (80 nodes per axis: the
    # integrands are smooth times a Gaussian, error far below the interval's width ~3e-3)
    import numpy as np
    z, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()
    X, Y = 1 + z[:, None], 1 + z[None, :]
    gam = (Y / (1 + np.exp(-(X * Y / 20 + 1))) * w[None, :]).sum(axis=1)      # Gamma(x) at the nodes x
    k3 = 3 * ((z ** 2) * (gam - (gam * w).sum()) * w).sum()
    assert lo <= k3 <= hi
    su = softmax_unnormalized_certificate()
    assert su["certified"] and sp.simplify(su["value"] - 8 * sp.sqrt(3) * sp.E) == 0
    import mpmath as mp     # independent 1-d quadrature of 3 E[Z^2 (Gamma(X) - E Gamma)] at a = 1/2, alpha = s = v = 1
    g = lambda x: (1 + x / 2) * mp.exp(x / 2 + x ** 2 / 8)                                  # noqa: E731
    EG = mp.quad(lambda x: g(x) * mp.npdf(x, 1, 1), [-mp.inf, 1, mp.inf])
    k3u = 3 * mp.quad(lambda x: (x - 1) ** 2 * (g(x) - EG) * mp.npdf(x, 1, 1), [-mp.inf, 1, mp.inf])
    assert abs(k3u - float(su["value"])) < 1e-10 * abs(k3u)
    w = witness_for("sigmoid")
    assert "Cumulant certificate" in w.summary("text") and "lemma" in w.summary("text")
