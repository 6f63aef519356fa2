"""Small helpers shared by several test modules (imported as ``support``: pytest puts ``tests/`` on the path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

NUMERICS = Path(__file__).resolve().parents[1] / "numerics"


def load_script(name: str):
    """The script ``numerics/<name>.py`` as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, NUMERICS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def drop_seconds(obj):
    """A JSON report without its wall-clock ``seconds`` fields (measurements, not results), so that two runs
    can be compared bit for bit on everything else."""
    if isinstance(obj, dict):
        return {k: drop_seconds(v) for k, v in obj.items() if k != "seconds"}
    if isinstance(obj, list):
        return [drop_seconds(v) for v in obj]
    return obj
