"""Execute notebooks/gradient_flow.ipynb (kernel python3) and check it is stored with outputs stripped."""

from pathlib import Path

import pytest

from notebook_runner import execute

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NB = Path(__file__).resolve().parents[1] / "notebooks" / "gradient_flow.ipynb"


def test_notebook_outputs_stripped():
    nb = nbformat.read(NB, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_notebook_executes(monkeypatch):
    text, images, latex = execute(NB, monkeypatch)
    assert images >= 2  # the energy-along-trajectories and Hessian-sign figures were drawn
    # the identities are rendered as equations (text/latex), not printed as SymPy str
    assert "**" not in text and "\\frac" not in text
    assert any("\\operatorname{grad}_g E_2 + \\Gamma" in t for t in latex)
    assert any("\\operatorname{Hess} E(\\delta_x)" in t for t in latex) and len(latex) >= 3
