"""Architecture guard: layers import downwards only,
spec <- symbolic <- codegen <- numerics <- model <- analysis <- validate <- cli.

Each module is imported alone in a fresh interpreter and we check which modules it pulled in: the registry
(spec) imports neither SymPy nor any other layer; symbolic never imports codegen, numerics or analysis;
codegen never imports numerics, analysis or validate; numerics and analysis never import SymPy at module
level (they derive nothing: symbolic work is imported inside the functions that need it).
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import symbolic_tpde


def _modules(package: str) -> list[str]:
    mod = __import__(package, fromlist=["_"])
    return [f"{package}.{m.name}" for m in pkgutil.iter_modules(mod.__path__)]


def _loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("module", _modules("symbolic_tpde.numerics"))
def test_numerics_does_not_import_sympy(module):
    assert "sympy" not in _loaded_after_import(module), f"{module} imports sympy at module level"


@pytest.mark.parametrize("module", _modules("symbolic_tpde.symbolic"))
def test_symbolic_does_not_import_numerics(module):
    loaded = _loaded_after_import(module)
    bad = sorted(m for m in loaded if m.startswith(("symbolic_tpde.numerics", "symbolic_tpde.codegen",
                                                       "symbolic_tpde.analysis")))
    assert not bad, f"{module} imports {bad}"


@pytest.mark.parametrize("module", _modules("symbolic_tpde.spec"))
def test_spec_is_pure_data(module):
    loaded = _loaded_after_import(module) - _loaded_after_import("symbolic_tpde")   # beyond the light package
    bad = sorted(m for m in loaded if m in ("sympy", "scipy") or (m.startswith("symbolic_tpde.")
                 and not m.startswith("symbolic_tpde.spec")))
    assert not bad, f"{module} imports {bad}"


@pytest.mark.parametrize("module", _modules("symbolic_tpde.codegen"))
def test_codegen_does_not_import_numerics_or_analysis(module):
    loaded = _loaded_after_import(module)
    bad = sorted(m for m in loaded if m.startswith(("symbolic_tpde.numerics", "symbolic_tpde.analysis",
                                                       "symbolic_tpde.validate", "symbolic_tpde.gaussian")))
    assert not bad, f"{module} imports {bad}"


@pytest.mark.parametrize("module", _modules("symbolic_tpde.analysis"))
def test_analysis_does_not_import_sympy(module):
    loaded = _loaded_after_import(module)
    assert "sympy" not in loaded, f"{module} imports sympy at module level"
    assert not [m for m in loaded if m.startswith(("symbolic_tpde.validate", "symbolic_tpde.commands"))]


def test_package_import_is_light():
    loaded = _loaded_after_import("symbolic_tpde")
    assert "sympy" not in loaded and "scipy" not in loaded and "matplotlib" not in loaded
    assert symbolic_tpde.__all__  # the public API is explicit


def test_public_api_names_resolve():
    for name in symbolic_tpde.__all__:
        assert getattr(symbolic_tpde, name) is not None, name
