"""``tpde derive --scenario FILE``: the derivation specialised to a scenario's structure and numbers (issue 10,
item 3; README "`tpde derive`"; arXiv 2501.18322 §3-4).

The numeric steps are checked by independent routes inside the command (the entrywise system at the same
numbers; for softmax with V = I the numeric closed-form blow-up time of ``analysis.closed_forms``); these tests
check that the steps are there, checked, and that a wrong independent route makes the step NOT checked."""

import json
import os
import shutil
import subprocess
from fractions import Fraction

import numpy as np
import pytest

from symbolic_tpde.cli import main

VI = {"attention": "softmax", "A": [[0.5, 0.2], [0.1, -0.3]], "V": [[1, 0], [0, 1]],
      "alpha0": [0.5, -0.3], "Sigma0": [[1.0, 0.3], [0.3, 0.6]], "T": 2.0}


def _write(tmp_path, data, name="s.json"):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(p)


def _derive(capsys, *argv):
    rc = main(["derive", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_softmax_identity_scenario_closed_form_and_blowup(tmp_path, capsys):
    from symbolic_tpde.analysis.closed_forms import blowup_time_vi

    rc, out, _ = _derive(capsys, "--scenario", _write(tmp_path, VI), "--format", "json")
    dv = json.loads(out)
    assert rc == 0 and dv["all_checked"]
    titles = [s["title"] for s in dv["steps"]]
    assert any("precision" in t for t in titles)                       # structure detected: V = I
    assert any("V = I: yes" in a for a in dv["assumptions"]) and any("rationals" in a for a in dv["assumptions"])
    (tstar,) = [s for s in dv["steps"] if s["title"].endswith("the blow-up time")]
    assert "blow-up time in closed form with A = M/2" in tstar["method"] and "sqrt(13)" in tstar["rhs"]
    ref = blowup_time_vi(np.array(VI["Sigma0"]), np.array(VI["A"]))
    assert abs(float(tstar["note"].split("so T* ≈ ")[1]) - ref) <= 1e-12 * ref   # 15 printed digits
    free = [s for s in dv["steps"] if s["title"].startswith("with the scenario's weights")]
    assert len(free) == 2 and all(s["checked"] for s in free)
    assert "Sigma_11*alpha_1/2" in free[0]["rhs"] and "Sigma_0" not in free[0]["rhs"]   # 1-based, exact 0.5
    (v0,) = [s for s in dv["steps"] if s["title"].endswith("mean velocity at t = 0")]
    # alpha0 + Sigma0 A alpha0 for V = I, by numpy: the exact rationals printed agree with the doubles
    a0, S0, A = (np.array(VI[k], float) for k in ("alpha0", "Sigma0", "A"))
    want = a0 + S0 @ A @ a0
    entries = [Fraction(e.strip(" []")) for e in v0["rhs"].split(",")]
    assert np.allclose([float(e) for e in entries], want, rtol=0, atol=1e-15)
    assert any("before its horizon" in c for c in dv["conclusions"])


def test_wrong_independent_route_is_reported_not_checked(tmp_path, capsys, monkeypatch):
    import symbolic_tpde.analysis.closed_forms as cf

    monkeypatch.setattr(cf, "blowup_time_vi", lambda S0, A: 1.0)          # a wrong reference value
    rc, out, _ = _derive(capsys, "--scenario", _write(tmp_path, VI), "--format", "json")
    dv = json.loads(out)
    (tstar,) = [s for s in dv["steps"] if s["title"].endswith("the blow-up time")]
    assert rc == 1 and not dv["all_checked"] and not tstar["checked"] and "numeric route" in tstar["method"]


def test_rationals_are_the_decimals_as_written():
    import sympy as sp

    from symbolic_tpde.symbolic.metric import RATIONAL_RULES, _exact
    from symbolic_tpde.documents.for_scenario import RATIONAL_MODE, rational as _rational
    assert _rational(0.1) == sp.Rational(1, 10) and _rational(-2.5e-3) == sp.Rational(-1, 400)
    assert _rational(1 / 3) == sp.Rational(3333333333333333, 10 ** 16)
    # one helper, two documented rules: tpde convexity's binary rational is the same function's other mode
    assert _exact(0.1, "x") == sp.Rational(0.1) != _rational(0.1) and RATIONAL_MODE == "decimal"
    assert set(RATIONAL_RULES) == {"binary", "decimal"}


def test_rational_rule_is_stated_in_the_output(tmp_path, capsys):
    from symbolic_tpde.symbolic.metric import RATIONAL_RULES

    rc, out, _ = _derive(capsys, "--scenario", _write(tmp_path, VI), "--format", "json")
    assert rc == 0 and any(RATIONAL_RULES["decimal"] in a for a in json.loads(out)["assumptions"])


@pytest.mark.parametrize("data, argv, needle", [
    ("{not json", [], "scenario"),
    ({**VI, "A": [[0.5, "x"], [0.1, -0.3]]}, [], "A"),
    ({**VI, "Sigma0": [[1.0, 2.0], [2.0, 1.0]]}, [], "Sigma0"),
    ({**VI, "frobnicate": 1}, [], "frobnicate"),
    ({**VI, "layers": [{"t_end": 1.0, "A": [[0.1, 0], [0, 0.1]]}, {"t_end": 2.0}]}, [], "layers"),
    (VI, ["--attention", "softmax"], "--attention"),
    (VI, ["--V", "identity"], "--V"),
    (VI, ["--energy"], "--scenario"),
])
def test_bad_scenarios_one_line_errors(tmp_path, capsys, data, argv, needle):
    rc, out, err = _derive(capsys, "--scenario", _write(tmp_path, data), *argv)
    assert rc == 2 and not out and needle in err and len(err.strip().splitlines()) == 1, err


def test_missing_scenario_file(tmp_path, capsys):
    rc, _, err = _derive(capsys, "--scenario", str(tmp_path / "nope.json"))
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_non_preserving_scenario_prints_its_witness(capsys):
    rc, out, _ = _derive(capsys, "--scenario", "sigmoid_2d")
    assert rc == 0 and "not" in out.lower() and "gaussian" in out.lower()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["softmax_2d", "sinkhorn_2d", "l2_2d"])
def test_builtin_scenarios_all_checked(capsys, name):
    rc, out, _ = _derive(capsys, "--scenario", name, "--format", "json")
    dv = json.loads(out)
    assert rc == 0 and dv["all_checked"] and any("t = 0" in s["title"] for s in dv["steps"])


@pytest.mark.skipif(shutil.which("pdflatex") is None and os.environ.get("CI") != "true", reason="pdflatex not installed")
def test_scenario_document_shows_its_data_and_figure_and_compiles_without_overfull_lines(tmp_path, capsys,
                                                                                       monkeypatch):
    """The document displays the scenario's A, V, α₀, Σ₀, T (the JSON's decimals as exact fractions, computed here
    with Python's ``Fraction`` of the decimal string) and includes the ``tpde plot`` figure drawn next to it."""
    from fractions import Fraction

    import sympy as sp

    monkeypatch.chdir(tmp_path)
    rc, src, _ = _derive(capsys, "--scenario", _write(tmp_path, VI), "--format", "latex", "--standalone",
                         "--figure", "s-plot.pdf")
    assert rc == 0 and "a4paper" in src and (tmp_path / "s-plot.pdf").stat().st_size > 1000
    for name, key in (("A", "A"), ("V", "V"), (r"\alpha_{0}", "alpha0"), (r"\Sigma_{0}", "Sigma0"), ("T", "T")):
        v = sp.Matrix(VI[key]).applyfunc(lambda e: sp.Rational(Fraction(str(e)))) if key != "T" else \
            sp.Rational(Fraction(str(VI[key])))
        assert f"{name} = " + sp.latex(v, mat_str="pmatrix", mat_delim="") in src, name
    assert "\\includegraphics[width=\\linewidth]{s-plot.pdf}" in src
    (tmp_path / "d.tex").write_text(src)
    r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "d.tex"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:]
    log = (tmp_path / "d.log").read_text(errors="replace")
    assert "Overfull \\hbox" not in log and "<s-plot.pdf" in log.replace("\n", "")


@pytest.mark.parametrize("argv", [["--attention", "softmax", "--figure", "f.pdf"],
                                  ["--scenario", "softmax_2d", "--figure", "f.pdf"],
                                  ["--scenario", "softmax_2d", "--format", "latex", "--figure", "f.svg"]])
def test_figure_is_refused_outside_a_scenario_latex_document(capsys, argv):
    rc, out, err = _derive(capsys, *argv)
    assert rc == 2 and not out and "--figure" in err and len(err.strip().splitlines()) == 1, err
