"""Execute notebooks/gaussian_moments.ipynb (kernel python3; its cells assert every claim they make) and check
that it is stored with outputs stripped.  Measured: ~10-15 s on the shared 2-core machine (< 60 s: not slow)."""

from pathlib import Path

import pytest

from notebook_runner import execute

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NB = Path(__file__).resolve().parents[1] / "notebooks" / "gaussian_moments.ipynb"


def test_notebook_outputs_stripped():
    nb = nbformat.read(NB, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


def test_notebook_executes(monkeypatch):
    text, images, latex = execute(NB, monkeypatch)
    assert images >= 1                                       # the covariance-ellipse figure was drawn
    assert "NOT Gaussian-preserving" in text                 # the sigmoid witness
    # equations are rendered (text/latex outputs), not printed as LaTeX source or SymPy str
    assert "\\frac" not in text and "\\begin{align" not in text
    assert len(latex) >= 8 and any("\\frac{d\\Sigma}{dt}" in t for t in latex)       # the matrix form
    assert any(t.startswith("$$\\begin{aligned}") and "\\frac{d\\alpha_{1}}{dt}" in t for t in latex)  # OdeSystem (1-based)
    assert any("\\int\\limits" in t for t in latex)                                # the sigmoid witness
    assert text.count("covariance moved") == 3               # particles vs ODE at three times
