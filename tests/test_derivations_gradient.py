"""Run the gradient-flow derivation scripts: each prints its steps and asserts its result (exit code 0)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(name: str, timeout: int = 300) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "derivations" / name)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_nonconvexity_certificate():
    out = run("nonconvexity_certificate.py")
    assert "d²/ds² E(δ_{sv}) at s = 0: -v0**2 - v1**2" in out and "Hess E(U, U) ∈ [ -" in out


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
