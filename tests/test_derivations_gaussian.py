"""Run the Gaussian-moment derivation scripts: each prints its steps and asserts its result (exit code 0)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINE = 200   # equations are printed by sympy.pretty wrapped at 110 columns (derivations/_show.py)


@pytest.mark.parametrize("name", ["gaussian_tilt.py", "sinkhorn_gaussian.py"])
def test_derivation_script_asserts_and_passes(name):
    proc = subprocess.run([sys.executable, str(ROOT / "derivations" / name)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "all checks passed" in proc.stdout
    longest = max(proc.stdout.splitlines(), key=len)
    assert len(longest) <= MAX_LINE, longest[:300]     # no multi-kilobyte SymPy str lines
    assert "Matrix([[" not in proc.stdout and "**" not in proc.stdout   # pretty, not str
