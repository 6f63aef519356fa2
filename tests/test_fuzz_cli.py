"""The CLI under hostile input (issue 11; README "Commands"): a seeded fuzz of scenario files and argument
sets, run in-process through ``symbolic_tpde.cli.main``; zero tracebacks, non-finite or wrong successes and
hangs.  The generator is ``numerics/fuzz_cli.py`` (also a script printing the table)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "numerics" / "fuzz_cli.py"


def _fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_cli", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check(counts, examples, cases):
    assert sum(counts.values()) == cases
    bad = {k: examples.get(k, [])[:3] for k in ("traceback", "non-finite success", "wrong success", "hang")
           if counts[k]}
    assert not bad, bad
    assert counts["clean error"] > cases // 3  # the generator mostly produces invalid input: they are refused


def test_fuzz_cli_fast():
    mod = _fuzz_module()
    counts, examples = mod.fuzz(seed=0, cases=250, hang=30.0)
    _check(counts, examples, 250)


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_fuzz_cli_10000_cases():
    mod = _fuzz_module()
    counts, examples = mod.fuzz(seed=12345, cases=10000, hang=30.0)
    _check(counts, examples, 10000)
