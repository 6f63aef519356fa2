"""Architecture guard: one stated layer order, imports point downwards only, and no import circles.

Layer order (a module may import only from its own layer or the layers before it; README "Layout"):

    errors, values <- registry <- inputs, memo, weights <- symbolic, documents <- codegen <- numerics
    <- gaussian, api <- analysis <- experiments <- validate <- commands, cli

Two views are checked.  The static view reads every module's source with :mod:`ast` and collects *every*
import of the package, the ones inside functions included (a deferred import is still a dependency): no
import may climb the order and the module graph has no circle.  The dynamic view imports each module alone
in a fresh interpreter and looks at what it pulled in: numerics and analysis do not import SymPy at module
level (they derive nothing; symbolic work is imported inside the functions that need it), the registry imports
neither SymPy nor SciPy, and ``import symbolic_tpde`` stays light.
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import symbolic_tpde

PKG = Path(symbolic_tpde.__file__).parent
LAYERS = ["errors|values", "registry", "inputs|memo|weights", "symbolic|documents", "codegen", "numerics",
          "gaussian|api", "analysis", "experiments", "validate", "commands|cli"]


def _module_files() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _module_files()


def _imports(name: str, path: Path) -> set[str]:
    """Absolute names of the package's modules imported anywhere in ``path`` (function bodies included)."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "symbolic_tpde":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "symbolic_tpde")
    return {m for m in found if m in MODULES}


GRAPH = {name: _imports(name, path) - {name} for name, path in MODULES.items()}


def _layer(module: str) -> int | None:
    rel = module.split(".")[1:]
    if not rel:
        return None                                   # the package itself: the public API re-exports
    for i, names in enumerate(LAYERS):
        if rel[0] in names.split("|"):
            return i
    return None


def test_every_module_has_a_layer():
    missing = sorted(m for m in MODULES if m != "symbolic_tpde" and _layer(m) is None)
    assert not missing, f"modules outside the stated layer order: {missing}"


def test_no_import_climbs_the_layer_order():
    climbs = sorted(f"{src} -> {dst}" for src, dsts in GRAPH.items() for dst in dsts
                    if _layer(src) is not None and _layer(dst) is not None and _layer(dst) > _layer(src))
    assert not climbs, "imports that climb back up:\n" + "\n".join(climbs)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), deferred imports included.  A
    package's ``__init__`` importing its own submodules is not a circle (the submodule imports its parent
    package only to reach a sibling), so edges from a module to its enclosing package are left out."""
    edges = {m: {d for d in ds if not m.startswith(d + ".")} for m, ds in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    assert not _cycles(GRAPH), f"import circles: {_cycles(GRAPH)}"


def test_the_graph_checks_can_fail():
    """The two graph checks above on made-up graphs: a circle and a climb are found."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert _layer("symbolic_tpde.validate.oracles") > _layer("symbolic_tpde.gaussian.ode")
    # the parser sees an import inside a function body
    src = PKG / "gaussian" / "ode.py"
    assert "symbolic_tpde.gaussian.integrate" in _imports("symbolic_tpde.gaussian.ode", src)


def _modules(package: str) -> list[str]:
    mod = __import__(package, fromlist=["_"])
    return [m.name for m in pkgutil.walk_packages(mod.__path__, prefix=f"{package}.")]


def _loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("module", _modules("symbolic_tpde.numerics") + _modules("symbolic_tpde.analysis"))
def test_numerics_and_analysis_do_not_import_sympy(module):
    assert "sympy" not in _loaded_after_import(module), f"{module} imports sympy at module level"


@pytest.mark.parametrize("module", _modules("symbolic_tpde.registry"))
def test_registry_is_pure_data(module):
    loaded = _loaded_after_import(module) - _loaded_after_import("symbolic_tpde")   # beyond the light package
    bad = sorted(m for m in loaded if m in ("sympy", "scipy") or (m.startswith("symbolic_tpde.")
                 and not m.startswith(("symbolic_tpde.registry", "symbolic_tpde.errors"))))
    assert not bad, f"{module} imports {bad}"


def test_package_import_is_light():
    loaded = _loaded_after_import("symbolic_tpde")
    assert "sympy" not in loaded and "scipy" not in loaded and "matplotlib" not in loaded
    assert symbolic_tpde.__all__  # the public API is explicit


def test_public_api_names_resolve():
    for name in symbolic_tpde.__all__:
        assert getattr(symbolic_tpde, name) is not None, name
