"""Output: text, LaTeX (structure; pdflatex if present) and JSON, and the ``tpde derive`` command."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import sympy as sp
from sympy.parsing.sympy_parser import parse_expr

from symbolic_tpde.cli import main
from symbolic_tpde.symbolic import printing
from symbolic_tpde.symbolic.moments import derive_gaussian_system, matrix_form


def _run(capsys, *argv):
    rc = main(["derive", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("variant", ["softmax", "l2", "sinkhorn", "linear", "custom", "multihead"])
@pytest.mark.parametrize("d", [None, 2])
def test_latex_structure(variant, d, capsys):
    argv = ["--attention", variant, "--format", "latex", "--standalone"] + (["--d", str(d)] if d else [])
    rc, out, _ = _run(capsys, *argv)
    assert rc == 0 and "\\begin{align*}" in out
    assert printing.check_latex_structure(out) == []


def test_latex_checker_catches_errors():
    assert printing.check_latex_structure("\\begin{align*} x = {1 \\end{align*}")
    assert printing.check_latex_structure("\\begin{align*} x \\end{equation}")


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed on this machine")
def test_latex_compiles(tmp_path, capsys):
    _, out, _ = _run(capsys, "--attention", "l2", "--d", "2", "--format", "latex", "--standalone")
    (tmp_path / "doc.tex").write_text(out)
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "doc.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:]


def test_json_entrywise_round_trip(capsys):
    rc, out, _ = _run(capsys, "--attention", "softmax", "--d", "2", "--format", "json", "--ffn")
    data = json.loads(out)
    assert rc == 0 and data["form"] == "entrywise" and data["d"] == 2 and data["expr_format"] == "sympy-str"
    assert set(data) >= {"variant", "d", "form", "alpha_dot", "Sigma_dot", "assumptions"}
    system = derive_gaussian_system((2, (("softmax", 2),), True, False))
    names = {s.name: s for s in (*system.states, *system.params)}
    defs: dict = {}
    for name, expr in data["definitions"]:                      # CSE temporaries, substituted in order
        names[name] = sp.Symbol(name)
        defs[names[name]] = parse_expr(expr, local_dict=names).xreplace(defs)
    back = [parse_expr(e, local_dict=names).xreplace(defs) for e in data["alpha_dot"]]
    assert [sp.expand(a - b) for a, b in zip(back, system.rhs[:2])] == [0, 0]
    S = data["Sigma_dot"]
    assert S[0][1] == S[1][0]
    assert sp.expand(parse_expr(S[1][1], local_dict=names).xreplace(defs) - system.rhs[4]) == 0


def test_json_matrix_form(capsys):
    rc, out, _ = _run(capsys, "--attention", "softmax", "--format", "json")
    data = json.loads(out)
    assert data["d"] is None and data["form"] == "matrix"
    assert data["alpha_dot"] == ["V*Sigma*A*alpha + V*alpha"]


def test_text_matrix_forms(capsys):
    rc, out, _ = _run(capsys, "--attention", "linear")
    assert rc == 0 and "dSigma/dt" in out and "alpha*alpha.T" in out
    rc, out, _ = _run(capsys, "--attention", "multihead", "--heads", "3")
    assert "V_2" in out
    rc, out, _ = _run(capsys, "--attention", "sinkhorn")
    assert "dalpha/dt = V*alpha" in out


@pytest.mark.parametrize("variant", ["sigmoid", "softmax_unnormalized", "masked"])
@pytest.mark.parametrize("fmt", ["text", "json", "latex"])
def test_non_preserving_prints_witness_and_exits_0(variant, fmt, capsys):
    rc, out, _ = _run(capsys, "--attention", variant, "--format", fmt, "--d", "2")
    assert rc == 0
    if fmt == "json":
        assert json.loads(out)["gaussian_preserving"] is False
    elif fmt == "text":
        assert "NOT Gaussian-preserving" in out
    else:
        assert printing.check_latex_structure(printing.latex_document(out)) == []


def test_errors(capsys):
    rc, _, err = _run(capsys, "--attention", "sinkhorn", "--d", "3")
    assert rc == 1 and "square root" in err
    rc, _, err = _run(capsys, "--attention", "softmax", "--d", "0")
    assert rc == 2 and "--d" in err
    rc, _, err = _run(capsys, "--attention", "softmax", "--m", "2")
    assert rc == 2
    rc, _, err = _run(capsys, "--attention", "softmax", "--sink")
    assert rc == 2 and "--sink" in err


def test_masked_with_sink(capsys):
    rc, out, _ = _run(capsys, "--attention", "masked", "--sink")
    assert rc == 0 and "attention sink" in out and "NOT Gaussian-preserving" in out


def test_cse_text_is_equivalent():
    system = derive_gaussian_system((2, (("l2", 2),), False, False))
    text = printing.render_system(system, "text", cse=True)
    assert "x_0 =" in text and text.count("/dt =") == system.n_states
    mf = matrix_form(("l2",))
    assert "dSigma/dt" in printing.render_matrix_form(mf, "text")


def test_json_with_definitions_evaluates_like_the_system(capsys):
    import numpy as np

    from symbolic_tpde.validate import checks_symbolic as cs

    rc, out, _ = _run(capsys, "--attention", "l2", "--d", "3", "--format", "json")
    data = json.loads(out)
    assert rc == 0 and data["definitions"]                      # large system: CSE temporaries
    system = derive_gaussian_system((3, (("l2", 3),), False, False))
    vals, _ = cs.random_point(system, np.random.default_rng(2))
    names = {s.name: s for s in (*system.states, *system.params)}
    env = {names[k]: v for k, v in ((s.name, vals[s]) for s in vals)}
    for name, expr in data["definitions"]:                      # substitute in order
        sym = sp.Symbol(name)
        names[name] = sym
        env[sym] = parse_expr(expr, local_dict=names).xreplace(env)
    got = [parse_expr(e, local_dict=names).xreplace(env) for e in data["alpha_dot"]]
    want = cs.dag_eval(system.rhs[:3], vals)
    assert [sp.nsimplify(a - b) for a, b in zip(got, want)] == [0, 0, 0]   # exact rationals
    assert data["Sigma_dot"][0][2] == data["Sigma_dot"][2][0]
