"""Run the gradient-flow derivation scripts: each prints its steps and asserts its result (exit code 0).

Equations are printed with ``sympy.pretty`` (derivations/_show.py): no output line may exceed ``MAX_LINE``
characters (raw SymPy ``str`` of a derived expression runs to kilobytes on one line)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINE = 200   # the pretty printer wraps at 110 columns; 200 leaves room for long prose lines


def run(name: str, timeout: int = 300) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "derivations" / name)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    longest = max(proc.stdout.splitlines(), key=len)
    assert len(longest) <= MAX_LINE, longest[:300]
    return proc.stdout


def test_nonconvexity_certificate():
    out = run("nonconvexity_certificate.py")
    assert "d²/ds² E(δ_{sv}) at s = 0:" in out and "- v₀  - v₁" in out and "Hess E(U, U) ∈ [ -" in out


def test_sinkhorn_bures_wasserstein():
    out = run("sinkhorn_bures_wasserstein.py")
    assert "difference: 0" in out and "confirmed" in out


@pytest.mark.slow
def test_gradient_flow():  # ~12 s alone, more on a shared machine
    out = run("gradient_flow.py")
    assert "n=3, d=2" in out and "log-log slope" in out


@pytest.mark.slow
def test_second_variation():  # ~20 s alone
    out = run("second_variation.py")
    assert "geodesic FD" in out and "d²/ds² E(c(s)) = -5" in out


def test_show_prints_pretty_or_summarises():
    """derivations/_show.py: pretty unicode, a one-liner on the label's line, huge expressions summarised."""
    code = ("import sympy as sp; from _show import show; x = sp.Symbol('x'); show('a =', x**2 / 3); "
            "show('b =', sp.Matrix([[x, 1], [0, x]])); show('c =', sum(sp.Symbol(f'y{k}')**k for k in range(300)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=ROOT / "derivations")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "a =\n     2\n    x \n    ──\n    3 " in out and "⎡x  1⎤" in out and "Matrix(" not in out
    assert "c = <expression with" in out and "not printed>" in out
