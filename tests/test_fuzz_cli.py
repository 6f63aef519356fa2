"""The CLI under hostile input (issue 11; README "Commands"): a seeded fuzz of scenario files and argument
sets, run in-process through ``symbolic_tpde.cli.main``; zero tracebacks, non-finite or wrong successes and
hangs.  The generator is ``numerics/fuzz_cli.py`` (also a script printing the table)."""

from __future__ import annotations

import pytest
from support import load_script

def _fuzz_module():
    return load_script("fuzz_cli")


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


# 4000 cases (~4 min here; the full 10 000 took ~9 min and pushed the slow CI stage toward its 60-minute limit).
# Seed 12345's cases 3000 and 3503 found the regular form's ZeroDivisionError (V ~ 1e75); the longer run stays a
# script: python numerics/fuzz_cli.py --cases 10000 --seed 12345
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_fuzz_cli_4000_cases():
    mod = _fuzz_module()
    counts, examples = mod.fuzz(seed=12345, cases=4000, hang=30.0)
    _check(counts, examples, 4000)


def test_fuzz_cli_new_paths_fast():
    """The second stream (tpde pde, sphere scenarios through particles / classify / pde, init blocks with data
    files, tpde fit, sphere sweeps and derivations): 30 cases."""
    mod = _fuzz_module()
    counts, examples = mod.fuzz(seed=0, cases=30, hang=30.0, stream="new")
    _check(counts, examples, 30)


def test_new_stream_covers_the_newer_paths():
    """Which commands and init types the second stream reaches in its first 400 cases (generation only)."""
    mod = _fuzz_module()
    cases = list(mod.generate_new(0, 400))
    cmds = {a[0] for a, _, _, _ in cases}
    assert {"pde", "particles", "classify", "gaussian", "fit", "sweep", "derive"} <= cmds
    assert any(a[0] == "sweep" and any(x.startswith("sphere_") for x in a) for a, _, _, _ in cases)
    assert any(a[0] == "derive" and "--sphere" in a for a, _, _, _ in cases)
    assert any("--noise" in a for a, _, _, _ in cases) and any("--save" in a for a, _, _, _ in cases)
    types = {str(s["init"].get("type")) for _, s, _, _ in cases
             if isinstance(s, dict) and isinstance(s.get("init"), dict)}
    assert {"mixture", "uniform_box", "uniform_ball", "empirical", "grid_density", "uniform_sphere", "vmf", "frame",
            "points", "gaussian"} <= types
    assert any(f for _, _, _, f in cases) and any(bad for _, _, bad, _ in cases) and not all(b for *_, b, _ in cases)


def test_first_stream_is_unchanged():
    """The slow test pins seed 12345's first 4000 cases of the first stream: the second stream must not move
    them (a digest of the 4000 cases' argv, scenario text and validity, taken from the generator before the
    second stream was added: commit 1054293)."""
    import hashlib

    mod = _fuzz_module()
    h = hashlib.sha256()
    for argv, scn, bad in mod.generate(12345, 4000):
        h.update(repr((argv, scn if isinstance(scn, (bytes, str)) else mod._dumps(scn) if scn else None, bad)).encode())
    assert h.hexdigest() == FIRST_STREAM_DIGEST


FIRST_STREAM_DIGEST = "de1c6565cb4c93e3413dfcbdad4e3da13d5dba80c9390a78ba5d44f2d9384265"


LONG = {"attention": "softmax", "A": [[0.0, 1.0], [-1.0, 0.0]], "V": [[0.0, 1.0], [-1.0, 0.0]],
        "alpha0": [0.5, 0.0], "Sigma0": [[1.0, 0.0], [0.0, 1.0]], "T": 1e4}


@pytest.mark.parametrize("argv", [
    ["gaussian", "--scenario", "{path}", "--json", "--backend", "numpy", "--max-seconds", "0.02"],
    ["particles", "--scenario", "{path}", "--json", "--n", "30", "--seed", "0", "--steps", "900000",
     "--max-seconds", "0.02"],
    # an ℓ2 point with a skew part has no closed form: its numerics (T = 1e6) take seconds however warm the
    # derivation cache is (a softmax V = I point is decided by the closed form in well under 1 ms once warm)
    ["sweep", "--n", "1", "--K", "1", "--kind", "l2", "--skew", "0.5", "--T", "1e6", "--out", "{dir}/sw",
     "--max-seconds", "0.001"],
])
def test_fuzz_classifies_a_capped_run_as_time_limit(argv, tmp_path):
    """The fuzz's oracle for exit 5 (status time-limit, finite t; sweep: files + one stderr line); each run
    would take minutes without its cap.  The case runs twice: the second run has every cache warm, so the cap
    is reached by the integration itself whatever ran before in this process (issue 30, item 6)."""
    mod = _fuzz_module()
    mod.run_case(argv, LONG, False, str(tmp_path))                                    # warm every cache
    assert mod.run_case(argv, LONG, False, str(tmp_path)) == ("time-limit", "")
    assert mod.run_case(argv, LONG, True, str(tmp_path))[0] == "wrong success"   # the oracle can fail


def test_fuzz_generates_sweep_and_cap_cases():
    mod = _fuzz_module()
    cases = list(mod.generate(0, 400))
    sweeps = [a for a, _, _ in cases if a[0] == "sweep"]
    capped = [a for a, _, _ in cases if a[0] != "sweep" and "--max-seconds" in a]
    assert len(sweeps) > 10 and any(bad for a, _, bad in cases if a[0] == "sweep")
    assert len(capped) > 10
