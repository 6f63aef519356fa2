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
    text, images = execute(NB, monkeypatch)
    assert images >= 1                                       # the covariance-ellipse figure was drawn
    assert "\\begin{align*}" in text and "NOT Gaussian-preserving" in text   # LaTeX and the sigmoid witness
    assert text.count("covariance moved") == 3               # particles vs ODE at three times
