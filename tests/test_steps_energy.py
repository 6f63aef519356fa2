"""The gradient-flow derivation as checked steps (symbolic.steps_energy; README Mathematics §5).

Every step must carry ``checked`` from an actual SymPy check; the checker is exercised on deliberately false
steps (wrong normalisation, Hessian without its Christoffel term), not only on true ones."""

import json
import os
import shutil
import subprocess

import pytest
import sympy as sp

from symbolic_tpde.cli import build_parser, main
from symbolic_tpde.errors import InputError
from symbolic_tpde.documents import render as steps_render
from symbolic_tpde.symbolic.energy import particle_energy
from symbolic_tpde.documents.printing import words_text
from symbolic_tpde.symbolic.hessian import particle_hessian
from symbolic_tpde.symbolic.metric import particle_symbols
from symbolic_tpde.documents.equation import Derivation
from symbolic_tpde.documents.equation import Notation as Shown
from symbolic_tpde.documents.gradient_flow import checked_step, energy_derivation

TOPICS = ["interaction energy", "Normalisation", "energy of a Gaussian", "point-mass limit", "First variation",
          "twisted matrix", "twisted Wasserstein metric",
          "Gradient identity", "dissipation", "Second variation at a point", "critical point"]


def _derive_has_energy() -> bool:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return any("--energy" in a.option_strings for a in sub.choices["derive"]._actions)


def test_energy_derivation_d1_all_checked_in_order():
    dv = energy_derivation(n=2, d=1)
    titles = [s.title for s in dv.steps]
    pos = [next(k for k, t in enumerate(titles) if topic in t) for topic in TOPICS]
    assert pos == sorted(pos), titles          # the chain is in the order of the module docstring
    finite = [s for s in dv.steps if "finite" in s.title]
    assert len(finite) == 1 and finite[0].eq.rel == "<=>" and "same interval" in finite[0].method
    rest = [s for s in dv.steps if s is not finite[0]]
    assert dv.all_checked and all("exact cancellation" in s.method for s in rest)
    assert all(("n = 2, d = 1" if "Gaussian" not in s.title else "d = 1, symbolic a") in words_text(s.method)
               for s in rest)
    assert any("rows x_i are the particles" in words_text(a) for a in dv.assumptions)
    assert any("symbolic entries" in a for a in dv.assumptions) and len(dv.conclusions) == 3


def test_wrong_steps_are_reported_not_checked():
    pe = particle_energy(2, 1, [[sp.Symbol("a", real=True)]], [[1]])
    shown = Shown("E_n(X)", "E_n(X)")
    wrong_norm = checked_step("wrong normalisation 1/n²", shown, shown, pe.E, 2 * pe.E)
    right = checked_step("right", shown, shown, pe.E, pe.E)
    assert right.checked and not wrong_norm.checked and "does not cancel" in wrong_norm.method
    # the Hessian without its Christoffel term differs from it at a non-critical point
    ph = particle_hessian(2, 1, [[-1]], [[1]])
    U = particle_symbols(2, 1, "u")
    at = {ph.coords[0]: sp.Rational(1, 2), ph.coords[1]: 1}
    d2 = (U.reshape(2, 1).T * ph.D2E * U.reshape(2, 1))[0, 0].subs(at)
    no_christoffel = checked_step("Hess = D²E at a non-critical point", shown, shown, ph.form(U).subs(at), d2)
    assert not no_christoffel.checked
    dv = Derivation("test", (right, wrong_norm, no_christoffel))
    assert not dv.all_checked and "NOT CHECKED" in steps_render.to_text(dv)
    assert [s["checked"] for s in steps_render.to_json(dv)["steps"]] == [True, False, False]
    assert not checked_step("raises", shown, shown, sp.Matrix([1, 2]), sp.Matrix([1, 2, 3])).checked


def test_energy_derivation_numeric_A_V_and_bad_input():
    dv = energy_derivation(n=2, d=1, A=[[-1.5]], V=[[0.5]])   # G = 3, floats taken as exact rationals
    assert dv.all_checked and "A = -3/2" in words_text(dv.steps[0].method)
    # issue 31 item 1: no matrix written as a Python nested list in the assumptions or the check lines
    assert not any("[[" in words_text(t) for t in dv.assumptions + tuple(s.method for s in dv.steps))
    with pytest.raises(InputError, match="n/d"):
        energy_derivation(n=5, d=1)
    with pytest.raises(InputError, match="symmetric"):
        energy_derivation(n=2, d=2, A=[[-1, 1], [0, -1]])
    with pytest.raises(InputError, match="A/V"):
        energy_derivation(n=2, d=1, A=[[1]], V=[[1]])     # G = -1 is not positive definite
    with pytest.raises(InputError, match="point"):
        energy_derivation(n=2, d=1, point=[[1, 2]])


def test_energy_latex_renders_general_formulas():
    tex = steps_render.render(energy_derivation(n=1, d=1), "latex")
    assert r"\frac{1}{2n^2}\sum_{i,j} e^{x_j^\top A x_i}" in tex and "NOT checked" not in tex
    assert r"g_X^{-1}\partial E_n" in tex


@pytest.mark.skipif(not _derive_has_energy(), reason="`tpde derive --energy` is not wired yet "
                    "(commands/derive.py, owned by another helper)")
def test_cli_derive_energy_steps_json(capsys):
    # default instance n = 2, d = 2, symbolic A: ~3 s alone, more on a loaded machine
    rc = main(["derive", "--energy", "--steps", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["all_checked"] is True and len(out["steps"]) >= 12
    assert all(s["checked"] and s["method"] and s["lhs"] and s["rhs"] for s in out["steps"])
    assert any("Gradient identity" in s["title"] for s in out["steps"])


@pytest.mark.skipif(shutil.which("pdflatex") is None and os.environ.get("CI") != "true", reason="pdflatex not installed")
def test_energy_standalone_latex_compiles(tmp_path):
    """The words are in the renderer's ASCII notation (pdflatex refuses undeclared unicode such as ᵀ, μ, ∬)."""
    src = steps_render.render(energy_derivation(n=1, d=1), "latex", standalone_doc=True)
    assert src.isascii()
    (tmp_path / "e.tex").write_text(src)
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "e.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and (tmp_path / "e.pdf").exists(), proc.stdout[-2000:]
