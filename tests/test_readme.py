"""README examples run, and the README's test command is exactly what CI runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "README has no python example"
    for code in blocks:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
    # the first example's last line prints the particle-vs-ODE covariance gap: a Monte-Carlo error of order
    # n^-1/2 = 0.022 at n = 2000 (times the O(1) scale of Sigma); 0.2 would mean the two routes disagree
    gap = float(proc.stdout.split()[-1]) if len(blocks) == 1 else None
    if gap is not None:
        assert gap < 0.2


def test_console_example_is_real_output():
    m = re.search(r"```console\n\$ (tpde [^\n]*)\n(.*?)```", README, flags=re.S)
    assert m
    args = m.group(1).split()[1:]
    proc = subprocess.run([sys.executable, "-m", "symbolic_tpde.cli", *args], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0
    assert proc.stdout.strip() == m.group(2).strip()


def test_readme_test_command_is_what_ci_runs():
    m = re.search(r'pip install -e "\.\[all\]" && (python -m pytest[^\n`]*)', README)
    assert m, "README must give the test command"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(rf"^{re.escape(m.group(1))}$", ci, flags=re.M), "CI must run the README's test command"
    assert 'pip install -e ".[all]" && tpde verify' in README
