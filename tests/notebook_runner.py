"""Shared by the notebook tests: execute a notebook in a python3 kernel and collect what it printed, drew and
rendered as equations."""

from __future__ import annotations

from pathlib import Path

import pytest


def execute(path: Path, monkeypatch) -> tuple[str, int, list[str]]:
    """Run every cell (raising CellExecutionError if one fails, asserts included); return ``(text, PNG count,
    latex)``: the printed text, the number of figures and the ``text/latex`` outputs (rendered equations:
    ``IPython.display.Math`` or an object's ``_repr_latex_``)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # the kernel inherits our environment: an MPLBACKEND=Agg set for headless runs (as CI does) would replace
    # the notebook's inline backend, and the figures would not appear as outputs
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    images = sum(1 for o in outputs if "image/png" in o.get("data", {}))
    latex = [o["data"]["text/latex"] for o in outputs if "text/latex" in o.get("data", {})]
    return text, images, latex
