"""Certified non-convexity: mpmath.iv enclosures of the symbolic Hessian, and the `tpde convexity` command."""

import json
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import sympy as sp

from symbolic_tpde.cli import main
from symbolic_tpde.symbolic.hessian import particle_hessian
from symbolic_tpde.validate.convexity import certify_form, certify_particles, iv_eval


def test_iv_eval_encloses_and_refuses_unknown_nodes():
    x = sp.Symbol("x")
    old = mpmath.iv.dps
    mpmath.iv.dps = 40
    try:
        I = iv_eval(sp.exp(x) / 3 + sp.sqrt(x) * x ** -2, {x: mpmath.iv.mpf(2)})
        with mpmath.workdps(60):
            true = mpmath.exp(2) / 3 + mpmath.sqrt(2) / 4
        assert I.a <= true <= I.b and float(I.delta) < 1e-35
        with pytest.raises(TypeError):
            iv_eval(sp.sin(x), {x: mpmath.iv.mpf(1)})
    finally:
        mpmath.iv.dps = old


def test_certificate_at_critical_point_is_exact_value():
    ph = particle_hessian(2, 1, [[-1]], [[1]])
    c = certify_form(ph.H, ph.coords, [[Fraction(0)], [Fraction(0)]], [[Fraction(1)], [Fraction(1)]], dps=50)
    assert c["sign"] == -1  # E(δ_{sv}) = ½e^{-s²}: second derivative -1
    assert mpmath.mpf(c["interval"][0]) <= -1 <= mpmath.mpf(c["interval"][1])


def test_certified_negative_and_positive_n2_d1():
    neg = certify_particles(-np.eye(1), np.eye(1), n=2, dps=50, seed=0, want="negative")
    assert neg["certified_negative"] and neg["in_interval"] and neg["precisions_agree"]
    with mpmath.workdps(60):
        lo, hi = (mpmath.mpf(v) for v in neg["interval"])
        assert lo < hi < 0 and neg["width"] < 1e-45
    assert abs(float(neg["value"]) - neg["numeric_float64"]) < 1e-12  # float64 closed form agrees
    pos = certify_particles(-np.eye(1), np.eye(1), n=2, dps=50, seed=1, want="positive")
    assert pos["certified_positive"] and mpmath.mpf(pos["interval"][0]) > 0


def test_cli_convexity_json(capsys):
    rc = main(["convexity", "--d", "1", "--n", "2", "--json", "--dps", "30"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["certified_negative"] is True and out["dps"] == 30
    assert set(out) >= {"certified_negative", "interval", "point", "direction", "dps"}
    assert float(out["interval"][1]) < 0 and out["critical_point"]["certified_negative"]
    assert all(isinstance(v, str) for v in out["interval"])


@pytest.mark.parametrize("args,field", [
    (["--A", "[[1, 0], [0, NaN]]"], "A"),
    (["--A", "[[-1, 0.5], [0, -1]]"], "A"),
    (["--A", "[[1, 0], [0, 1]]"], "A/V"),
    (["--A", "[[-1, 0], [0, -1]]", "--V", "[[1, 0]]"], "V"),
    (["--A", "not json"], "A"),
    (["--A", "[[\"__import__('os')\"]]"], "A"),
])
def test_cli_convexity_bad_input(args, field, capsys):
    assert main(["convexity", *args]) == 2
    err = capsys.readouterr().err
    assert f"error: {field}:" in err


def test_cli_convexity_refuses_huge_integers_in_one_line(capsys):
    """A 500-digit integer entry is refused by name before any float conversion (was: an internal error)."""
    rc = main(["convexity", "--A", "[[" + "9" * 500 + ", 0], [0, -1]]", "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "A:" in err and "too large" in err


def test_cli_convexity_states_what_it_certified(capsys):
    """JSON and text name A, V, G, the energy normalisation, the metric, the layout, that U is not normalised
    and the binary rational a float like 0.3 was certified as."""
    q = "5404319552844595/18014398509481984"
    assert str(Fraction(0.3)) == q        # the exact value of the double nearest 0.3
    rc = main(["convexity", "--A", "[[-0.3]]", "--V", "[[1]]", "--n", "2", "--json", "--dps", "30"])
    out = json.loads(capsys.readouterr().out)
    cert = out["certifies"]
    assert rc == 0 and cert["A"] == [["-" + q]] and cert["G"] == [[q]] and cert["V"] == [["1"]]
    assert cert["binary_rationals"] == [{"entry": "A[0][0]", "float": "-0.3", "rational": "-" + q}]
    words = " ".join(cert["statement"])
    for phrase in ("G = -A V⁻¹", "E(δ₀) = ½", "g_X(U, W) = (1/n) Σ_i Z_i <u_i, G w_i>", "row i is particle i",
                   "U is not normalised", f"-0.3 was certified as -{q}", "for those exact values"):
        assert phrase in words, phrase
    rc = main(["convexity", "--A", "[[-0.5]]", "--n", "2", "--dps", "30"])
    text = capsys.readouterr().out
    assert rc == 0 and "What was certified:" in text and "U is not normalised" in text
    assert "A = [[-1/2]]" in text and "-0.5 was certified as" not in text   # 0.5 is exactly binary


def test_energy_document_sentence_states_what_convexity_certified():
    """The sentence the energy document carries (``tpde derive --energy``) is built from the command's own report:
    its point and direction are the report's, and its shortened interval, rounded outward, still encloses the
    Hessian computed by the independent numpy closed form (numerics.energy.hessian_form, float64: relative
    round-off ~1e-15, far inside the 12-digit interval's width ~1e-11)."""
    import re

    from symbolic_tpde.commands.convexity import certificate_words, convexity_report
    from symbolic_tpde.numerics.particles.energy import hessian_form

    A, V = -np.eye(2), np.eye(2)
    rep = convexity_report(A.tolist(), V.tolist())
    words = certificate_words(rep)
    lo, hi = (float(v) for v in re.search(r"U\) \\in \[([-\d.eE]+), ([-\d.eE]+)\]", words).groups())
    X = np.array([[float(Fraction(v)) for v in r] for r in rep["point"]])
    U = np.array([[float(Fraction(v)) for v in r] for r in rep["direction"]])
    assert lo <= hessian_form(X, A, V, U) <= hi < 0
    for i, r in enumerate(rep["point"]):
        assert f"x_{i + 1} = (" + ", ".join(sp.latex(sp.Rational(Fraction(v))) for v in r) + ")" in words
    assert "not geodesically convex" in words and "NOT" not in words
    assert "NOT certified negative" in certificate_words({**rep, "certified_negative": False})
