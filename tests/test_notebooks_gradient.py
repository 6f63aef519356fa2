"""Execute notebooks/gradient_flow.ipynb (kernel python3) and check it is stored with outputs stripped."""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NB = Path(__file__).resolve().parents[1] / "notebooks" / "gradient_flow.ipynb"


def test_notebook_outputs_stripped():
    nb = nbformat.read(NB, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_notebook_executes(monkeypatch):
    # the kernel inherits our environment: an MPLBACKEND=Agg set for headless runs (as CI does) would replace
    # the notebook's inline backend, and the figures would not appear as outputs
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(NB, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(NB.parent)}})
    client.execute()  # raises CellExecutionError if any cell (with its asserts) fails
    images = sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs
                 if "image/png" in o.get("data", {}))
    assert images >= 2  # the energy-along-trajectories and Hessian-sign figures were drawn
