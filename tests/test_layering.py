"""Architecture guard (STYLE.md): symbolic -> codegen -> numerics, imports flowing one way.

Each layer is imported alone in a fresh interpreter and we check which heavy modules it pulled in:
the symbolic layer never imports our numerics package, and the numerics layer never imports SymPy at
module level.
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


def test_package_import_is_light():
    loaded = _loaded_after_import("symbolic_tpde")
    assert "sympy" not in loaded and "scipy" not in loaded and "matplotlib" not in loaded
    assert symbolic_tpde.__all__  # the public API is explicit


def test_public_api_names_resolve():
    for name in symbolic_tpde.__all__:
        assert getattr(symbolic_tpde, name) is not None, name
