"""Machine-checked derivation steps (README "`tpde derive` in more detail"; arXiv 2501.18322 §3-4).

Every derived step must carry ``checked`` from an actual SymPy check; a wrong step must be reported as not
checked (the checker is exercised on a deliberately false identity, not only on true ones)."""

import json
import os
import shutil
import subprocess

import pytest
import sympy as sp

import symbolic_tpde as st
from symbolic_tpde.cli import main
from symbolic_tpde.documents import render as steps_render
from symbolic_tpde.documents.steps import D, Derivation, recheck, step
from symbolic_tpde.documents.equation import Equation, Step


def _json(capsys, *argv):
    rc = main(["derive", *argv])
    return rc, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("kind", ["softmax", "sinkhorn", "linear"])
def test_cli_steps_json_all_checked(capsys, kind):
    rc, out = _json(capsys, "--attention", kind, "--steps", "--format", "json")
    assert rc == 0 and len(out["steps"]) >= 5
    assert all(s["checked"] and s["method"] and s["title"] and s["lhs"] and s["rhs"] for s in out["steps"])
    assert out["all_checked"] is True and out["assumptions"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["l2", "custom"])
def test_cli_steps_json_slow_kinds(capsys, kind):
    rc, out = _json(capsys, "--attention", kind, "--steps", "--format", "json")
    assert rc == 0 and len(out["steps"]) >= 5 and all(s["checked"] for s in out["steps"])


def test_wrong_step_is_reported_not_checked():
    A = sp.MatrixSymbol("A", D, D)
    Sigma = sp.MatrixSymbol("Sigma", D, D)
    wrong = recheck(Step("a wrong transpose", Equation(Sigma * A * Sigma, Sigma * A.T * Sigma)))
    right = recheck(Step("a right one", Equation(Sigma * (A + A.T) * Sigma, Sigma * A * Sigma + Sigma * A.T * Sigma)))
    assert right.checked and not wrong.checked and "does not cancel" in wrong.method
    dv = Derivation("test", (right, wrong))
    assert not dv.all_checked
    assert "NOT CHECKED" in steps_render.to_text(dv)
    assert "NOT checked" in steps_render.to_latex(dv)
    assert [s["checked"] for s in steps_render.to_json(dv)["steps"]] == [True, False]
    # a check that raises is not a pass
    assert not step("raises", A, A, how=lambda eq: 1 / 0).checked


def test_softmax_identity_specialisation_closed_form_and_blowup(derivation):
    dv = derivation(("softmax",), V_identity=True)
    titles = [s.title for s in dv.steps]
    assert dv.all_checked
    assert any("precision" in t and r"\Sigma^{-1}" in t for t in titles)
    assert any("closed-form" in t for t in titles) and any("blow-up" in t for t in titles)
    assert any(r"\lambda_{\max}" in c for c in dv.conclusions)


def test_user_kernel_and_entrywise_steps_checked():
    x, y = sp.Matrix(sp.symbols("x0:2", real=True)), sp.Matrix(sp.symbols("y0:2", real=True))
    lam = sp.Symbol("lam", positive=True)
    A = sp.Matrix(2, 2, lambda i, j: sp.Symbol(f"a{i}{j}", real=True))
    system = st.derive_kernel((y.T * A * x)[0, 0] - lam * (y.T * y)[0, 0], x, y)
    assert "on demand" in repr(system)
    assert len(system.steps) >= 4 and all(s.checked for s in system.steps)
    from symbolic_tpde.symbolic.moments import canonical_form, derive_gaussian_system
    from symbolic_tpde.documents.steps import entrywise_system_steps
    sy = entrywise_system_steps(derive_gaussian_system((2, (("softmax", canonical_form("softmax", 2, 2)),), True,
                                                        False)))
    assert all(s.checked for s in sy) and "entrywise" in sy[-1].title


@pytest.mark.skipif(shutil.which("pdflatex") is None and os.environ.get("CI") != "true", reason="pdflatex not installed")
@pytest.mark.parametrize("extra", [["--standalone"], ["--beamer"]])
def test_steps_latex_compiles_and_states_assumptions(capsys, tmp_path, extra):
    rc = main(["derive", "--attention", "softmax", "--steps", "--format", "latex", "--V", "identity", *extra])
    src = capsys.readouterr().out
    assert rc == 0 and "%" not in src.split("\\begin{document}")[1].split("Assumptions")[0]
    (tmp_path / "d.tex").write_text(src)
    r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "d.tex"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:]
    if "--standalone" in extra:
        assert "a4paper" in src and "\\begin{enumerate}" in src
        if shutil.which("pdftotext"):
            txt = subprocess.run(["pdftotext", "d.pdf", "-"], cwd=tmp_path, capture_output=True, text=True).stdout
            txt = " ".join(txt.split())                     # words wrapped across lines
            assert "positive definite" in txt and "Assumptions" in txt and "Checked by SymPy" in txt


def test_energy_flag_needs_no_attention_and_conflicts_are_errors(capsys):
    """``--energy`` replaces ``--attention``; neither, or both, is a one-line input error (exit 2)."""
    for argv in (["--steps"], ["--energy", "--attention", "softmax"], ["--energy", "--d", "2"],
                 ["--energy", "--format", "text", "--beamer"]):
        assert main(["derive", *argv]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "tpde derive" in err


@pytest.mark.slow
def test_energy_steps_rendered_like_the_moment_steps(capsys):
    rc, out = _json(capsys, "--energy", "--steps", "--format", "json")
    assert rc == 0 and out["all_checked"] and len(out["steps"]) >= 5


def test_step_chains_come_from_the_registry(monkeypatch):
    """steps.py switches on no kind name: each kind's SymbolicPart names its chain, and a new kind's own chain
    is the one used."""
    import inspect
    import re

    from symbolic_tpde.registry import kinds as spec_kinds
    from symbolic_tpde.documents import steps as steps_mod
    from symbolic_tpde.symbolic.kind_parts import SymbolicPart

    src = inspect.getsource(steps_mod)
    assert not re.search(r"kind\s*==\s*['\"]|k\s*==\s*['\"]", src)
    assert all(spec_kinds.part(k, "symbolic").steps is not None for k in ("softmax", "l2", "linear", "sinkhorn",
                                                                          "custom"))
    marker = step("own chain", sp.Integer(1), sp.Integer(1))
    toy = spec_kinds.KindSpec("toy", spec_kinds.get("softmax").params, "affine", "a toy kind")
    monkeypatch.setitem(spec_kinds.KINDS, "toy", toy)       # removed again after the test
    spec_kinds.register("toy", "symbolic")(SymbolicPart(steps=lambda kind, syms, pre: ([marker], None, None, None)))
    assert steps_mod._head_steps("toy", {}, "")[0] == [marker]


def test_entrywise_steps_one_based_and_size_threshold(capsys):
    rc, out = _json(capsys, "--attention", "softmax", "--steps", "--d", "2", "--format", "json")
    ent = [s for s in out["steps"] if s["title"].startswith("entrywise at d = 2")]
    assert rc == 0 and out["all_checked"] and len(ent) == 2 and all(s["checked"] for s in ent)
    text = " ".join(s["rhs"] for s in ent)
    assert "Sigma_11" in text and "alpha_2" in text and "A_22" in text
    assert "Sigma_0" not in text and "alpha_0" not in text and "x_" not in text
    rc, out = _json(capsys, "--attention", "softmax", "--steps", "--d", "3", "--format", "json")
    assert rc == 0 and not any(s["title"].startswith("entrywise") for s in out["steps"])
    assert len(out["notes"]) == 1 and "not shown" in out["notes"][0]


def test_closed_form_comes_from_the_precision_equation_not_a_kind_name(derivation):
    """The V = I closed form is offered exactly when d(Sigma^-1)/dt turns out constant (checked symbolically):
    two softmax heads get it too (M = sum of A_h + A_h^T), linear attention (alpha alpha^T terms) and an FFN
    (W Sigma terms) do not; steps_special.py names no kind."""
    import inspect
    import re

    from symbolic_tpde.documents import special_cases as steps_special
    from symbolic_tpde.symbolic.moments import matrix_form

    assert not re.search(r"['\"](softmax|l2|linear|sinkhorn|custom)['\"]", inspect.getsource(steps_special))
    rate = lambda ks, ffn=False: steps_special.constant_precision_rate(matrix_form(ks, ffn=ffn), True, False)[3]  # noqa: E731
    two = rate(("softmax", "softmax"))
    assert two is not None and {m.name for m in two.atoms(sp.MatrixSymbol)} == {"A_0", "A_1"}
    dv2 = derivation(("softmax", "softmax"), V_identity=True)    # the document: 1-based heads A^(1), A^(2)
    assert {"A^(1)", "A^(2)"} <= {m.name for s in dv2.steps if hasattr(s.rhs, "atoms") for m in s.rhs.atoms(sp.MatrixSymbol)}
    assert rate(("linear",)) is None and rate(("softmax",), ffn=True) is None and rate(("l2",)) is None
    assert dv2.all_checked and any("closed-form" in s.title for s in dv2.steps)
    assert not any("closed-form" in s.title for s in derivation(("linear",), V_identity=True).steps)


@pytest.mark.parametrize("kind", ["softmax", "linear", "sinkhorn"])
def test_no_step_restates_itself(kind, derivation):
    """No step shows the same thing on both sides ("X = X"): a restatement is merged into the step before."""
    dv = derivation((kind,), V_identity=True)
    same = [s.title for s in dv.steps if steps_render.text(s.lhs) == steps_render.text(s.rhs)]
    assert not same, same


@pytest.mark.skipif(shutil.which("pdflatex") is None and os.environ.get("CI") != "true", reason="pdflatex not installed")
@pytest.mark.parametrize("argv", [["softmax", "--d", "2"], ["sinkhorn"], ["multihead", "--d", "2"]])
def test_beamer_frames_fit(capsys, tmp_path, argv):
    """The slides have no overfull box: wide equations are broken or shrunk to the line, long steps continue on
    the next slide (``allowframebreaks``)."""
    rc = main(["derive", "--attention", *argv, "--steps", "--format", "latex", "--beamer"])
    (tmp_path / "b.tex").write_text(capsys.readouterr().out)
    r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "b.tex"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    log = (tmp_path / "b.log").read_text(errors="replace")
    assert rc == 0 and r.returncode == 0 and "Overfull" not in log, log[log.find("Overfull"):][:600]


def test_entrywise_steps_name_head_scalars_like_the_latex_form(capsys):
    """Head scalars get the same 1-based display as in `tpde derive --d N --format latex`
    (printing.paper_name, shared): two l2 heads at d = 1 show tau^(1), tau^(2), Q^(2)_11 and no code name h0_."""
    rc, out = _json(capsys, "--attention", "l2", "--heads", "2", "--steps", "--d", "1", "--format", "json")
    ent = [s for s in out["steps"] if s["title"].startswith("entrywise at d = 1")]
    assert rc == 0 and len(ent) == 2 and all(s["checked"] for s in ent)
    text = " ".join(s["rhs"] for s in ent)
    assert "tau^(1)" in text and "tau^(2)" in text and "Q^(2)_11" in text and "K^(1)_11" in text
    assert "h0_" not in text and "h1_" not in text


def test_exercises_solutions_checked_against_independent_references():
    """``--exercises``: the Riccati solution against the one written here by separating variables,
    ``Σ₀/(1 - 2avΣ₀t)``; the ℓ2 tilt's mean and variance against adaptive quadrature of the definition
    (scipy quad, absolute error ~1e-10, so 1e-7 relative is a wide margin); a wrong solution is NOT checked."""
    import numpy as np
    from scipy.integrate import quad

    from symbolic_tpde.documents.exercises import exercises

    ric, l2 = exercises()
    assert ric.checked and l2.checked
    a, v, t = sp.symbols("a v t", real=True)
    S0 = sp.Symbol("Sigma_0", positive=True)
    hand = S0 / (1 - 2 * a * v * S0 * t)
    assert sp.simplify(ric.eq.rhs - hand) == 0
    assert not ric.changed(eq=Equation(ric.eq.lhs, S0 / (1 - a * v * S0 * t))).check().checked
    syms = {s.name: s for s in l2.eq.rhs.free_symbols}
    rng = np.random.default_rng(5)
    for _ in range(3):
        q, k, tau, s, x, al = rng.uniform(0.3, 1.5, 6)
        vals = {syms["q"]: q, syms["k"]: k, syms["tau"]: tau, syms["s"]: s, syms["x"]: x, syms["alpha"]: al}
        m, S = (float(e.xreplace(vals)) for e in l2.eq.rhs)
        w = lambda y: np.exp(-(q * x - k * y) ** 2 / tau - (y - al) ** 2 / (2 * s))   # noqa: E731
        Z = quad(w, -np.inf, np.inf)[0]
        mq = quad(lambda y: y * w(y), -np.inf, np.inf)[0] / Z
        Sq = quad(lambda y: (y - mq) ** 2 * w(y), -np.inf, np.inf)[0] / Z
        assert abs(m - mq) <= 1e-7 * max(1, abs(mq)) and abs(S - Sq) <= 1e-7 * Sq
    wrong = sp.Matrix([l2.eq.rhs[0], 2 * l2.eq.rhs[1]])
    assert not l2.changed(eq=Equation(l2.eq.lhs, wrong)).check().checked


def test_exercises_flag_renders_and_is_refused_elsewhere(capsys):
    assert main(["derive", "--attention", "linear", "--steps", "--exercises", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["exercises"]) == 2 and all(e["checked"] for e in out["exercises"])
    for argv in (["--attention", "softmax", "--exercises"], ["--energy", "--steps", "--exercises"]):
        assert main(["derive", *argv]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "--exercises" in err
