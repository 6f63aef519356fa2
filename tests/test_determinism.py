"""Same inputs and seed, same bits (issue 11; README "Dependencies": BLAS held at one thread, the particle
path's two worker threads write disjoint row blocks).  Each command runs twice, in-process; outputs are
compared byte for byte (the wall-clock field ``seconds`` removed)."""

from __future__ import annotations

import json

import pytest

from support import drop_seconds

from symbolic_tpde.cli import main


def _particles(capsys, dtype):
    assert main(["particles", "--scenario", "softmax_2d", "--n", "600", "--seed", "42", "--dtype", dtype,
                 "--steps", "5", "--T", "0.2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    out.pop("seconds")
    return json.dumps(out)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_particles_bitwise_repeatable(capsys, dtype):
    first = _particles(capsys, dtype)
    assert first == _particles(capsys, dtype) == _particles(capsys, dtype)


def test_particles_independent_of_thread_count(monkeypatch, capsys):
    """One BLAS/OpenMP thread vs the default: the same bits (a thread count changing the result was the
    reported bug)."""
    from threadpoolctl import threadpool_limits

    default = _particles(capsys, "float64")
    with threadpool_limits(1):
        single = _particles(capsys, "float64")
    assert default == single


def test_sweep_bitwise_repeatable(tmp_path, capsys):
    import numpy as np

    outs = []
    for k in range(2):
        stem = tmp_path / f"s{k}"
        assert main(["sweep", "--n", "2", "--K", "2", "--T", "5", "--seed", "3", "--out", str(stem)]) == 0
        capsys.readouterr()
        with np.load(f"{stem}.npz") as z:
            outs.append({key: z[key].tobytes() for key in z.files})
    assert outs[0] == outs[1]


@pytest.mark.slow
def test_meanfield_quick_bitwise_repeatable(tmp_path, capsys):
    """Two full ``--quick`` runs, the second with one BLAS and one kernel thread: same bits (the fast
    counterpart at tiny sizes is in tests/test_meanfield.py)."""
    import contextlib
    import json

    from threadpoolctl import threadpool_limits

    from symbolic_tpde.numerics.threads import limit_threads

    outs = []
    for k in range(2):
        d = tmp_path / f"m{k}"
        with (threadpool_limits(1) if k else contextlib.nullcontext()), \
                (limit_threads(1) if k else contextlib.nullcontext()):
            assert main(["meanfield", "--quick", "--out", str(d)]) == 0
        capsys.readouterr()
        out = {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.suffix == ".csv"}
        out.update({p.name: drop_seconds(json.loads(p.read_text())) for p in sorted(d.iterdir())
                    if p.suffix == ".json"})
        outs.append(out)
    assert outs[0] and outs[0] == outs[1]   # CSV bytes and JSON values (floats compared exactly) identical
