"""The README is short and true: its example runs, its command tour is real output, its test command is what CI
runs, and it links only to pages that exist.  (Everything else the README used to say lives in the documentation
site, docs/; tests/test_docs.py pins that.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_is_short():
    assert len(README.splitlines()) <= 150, "the README is a front page: move detail into docs/"


def test_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) == 1, "README has one python example"
    assert len(blocks[0].strip().splitlines()) <= 10
    proc = subprocess.run([sys.executable, "-c", blocks[0]], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    # the last line prints the particle-vs-ODE covariance gap: a Monte-Carlo error of order n^-1/2 = 0.022 at
    # n = 2000 (times the O(1) scale of Sigma); 0.2 would mean the two routes disagree
    assert float(proc.stdout.split()[-1]) < 0.2
    assert proc.stdout.split()[0] == "ok"


def test_console_tour_is_real_output():
    """Each `$ tpde ...` line of the README runs and exits 0; where output is shown, it is the real output."""
    blocks = re.findall(r"```console\n(.*?)```", README, flags=re.S)
    assert blocks
    commands = []
    for block in blocks:
        for chunk in re.split(r"(?m)^\$ ", block)[1:]:
            line, _, shown = chunk.partition("\n")
            commands.append((line.split(), shown.strip()))
    assert len(commands) == 3, "the README's tour has three commands"
    for argv, shown in commands:
        assert argv[0] == "tpde"
        proc = subprocess.run([sys.executable, "-m", "symbolic_tpde.cli", *argv[1:]], capture_output=True,
                              text=True, timeout=300, cwd=ROOT)
        assert proc.returncode == 0, (argv, proc.stderr)
        if shown:
            assert proc.stdout.strip() == shown, argv


def test_readme_test_command_is_what_ci_runs():
    m = re.search(r'pip install -e "\.\[all\]" && (python -m pytest[^\n`]*)', README)
    assert m, "README must give the test command"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(rf"^{re.escape(m.group(1))}$", ci, flags=re.M), "CI must run the README's test command"
    assert 'pip install -e ".[all]" && tpde verify' in README


def test_readme_links_and_pictures_exist():
    targets = re.findall(r"\]\(([^)#\s]+)", README) + re.findall(r'src="([^"]+)"', README)
    local = [t for t in targets if "://" not in t]
    assert local
    for target in local:
        assert (ROOT / target).exists(), f"README points at {target}, which does not exist"
    assert (ROOT / "LICENSE").is_file()
