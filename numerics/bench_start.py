"""Benchmark: cold and warm starts, as ratios against ``python -c "import numpy, scipy, sympy"`` (issue 12).

Run:  python numerics/bench_start.py [--repeats R] [--d D]

Every figure is the wall time of a fresh interpreter (``subprocess``), measured in this run, medians over
``R`` repeats, interleaved with the baseline so a shared machine's load drifts cancel in the ratios:

* ``base``: ``python -c "import numpy, scipy, sympy"``;
* ``cold``: ``GaussianODE.from_weights(softmax, d = D).integrate(...)`` (default D = 8) with a fresh, empty
  ``TPDE_CACHE_DIR`` each repeat: derivation, code generation, C build, integration (target <= 25x base);
* ``warm API``: the same script again on the filled cache (loads the generated module by structure, no SymPy);
* ``warm rhs``: ``tpde rhs --scenario softmax_2d --json`` on a filled cache (target <= 0.5x base);
* ``warm gaussian``: ``tpde gaussian --scenario softmax_2d --json`` on a filled cache.

All subprocesses run with bytecode caching on, in a private ``PYTHONPYCACHEPREFIX`` (this sandbox sets
``PYTHONDONTWRITEBYTECODE=1``, which would make every start recompile the package's sources, a cost no
installed package pays), after one unmeasured warm-up run each.  Each script checks that SymPy was not
imported on the warm paths and the result says so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

COLD = """
import sys, numpy as np
from symbolic_tpde import make_head, make_weights
from symbolic_tpde.gaussian import GaussianODE
d = {d}
rng = np.random.default_rng(0)
A = -0.3 * np.eye(d) + 0.05 * rng.standard_normal((d, d)); V = np.eye(d) + 0.05 * rng.standard_normal((d, d))
ode = GaussianODE.from_weights(make_weights([make_head("softmax", A=A, V=V)]))
sol = ode.integrate(np.full(d, 0.1), np.eye(d), T=1.0)
assert sol.status == "ok", sol.status
print("sympy" in sys.modules)
"""

RHS = "import sys; from symbolic_tpde.cli import main; rc = main({argv!r}); print('sympy' in sys.modules, file=sys.stderr)"


def run(code: str, env: dict) -> tuple[float, str, str]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"failed: {code[:60]}...\n{p.stderr[-2000:]}")
    return dt, p.stdout, p.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--d", type=int, default=8)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tpde-bench-start-")
    env = dict(os.environ, PYTHONPYCACHEPREFIX=os.path.join(tmp, "pyc"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    warm_env = dict(env, TPDE_CACHE_DIR=os.path.join(tmp, "warm"))
    base_code = "import numpy, scipy, sympy"
    cold_code = COLD.format(d=a.d)
    rhs_code = RHS.format(argv=["rhs", "--scenario", "softmax_2d", "--json"])
    gau_code = RHS.format(argv=["gaussian", "--scenario", "softmax_2d", "--json"])
    for code in (base_code, cold_code, rhs_code, gau_code):  # warm-up: bytecode, the warm cache
        run(code, warm_env)
    res: dict[str, list[float]] = {k: [] for k in ("base", "cold", "warm API", "warm rhs", "warm gaussian")}
    sympy_warm = set()
    for r in range(a.repeats):
        res["base"].append(run(base_code, env)[0])
        cold_env = dict(env, TPDE_CACHE_DIR=os.path.join(tmp, f"cold{r}"))
        if r < max(1, min(a.repeats, 3)):   # the cold start is the long one: at most 3 repeats
            res["cold"].append(run(cold_code, cold_env)[0])
        t, out, _ = run(cold_code, warm_env)
        res["warm API"].append(t)
        sympy_warm.add(("API", out.strip()))
        t, _, err = run(rhs_code, warm_env)
        res["warm rhs"].append(t)
        sympy_warm.add(("rhs", err.strip().splitlines()[-1]))
        t, _, err = run(gau_code, warm_env)
        res["warm gaussian"].append(t)
        sympy_warm.add(("gaussian", err.strip().splitlines()[-1]))
    base = statistics.median(res["base"])
    print(f"load average at end: {os.getloadavg()[0]:.2f} (2 cores shared: ratios are the figures)")
    print(f"{'start':<16}{'median s':>10}{'x base':>9}   target")
    targets = {"cold": "<= 25x", "warm rhs": "<= 0.5x"}
    for k, v in res.items():
        m = statistics.median(v)
        print(f"{k:<16}{m:>10.3f}{m / base:>9.2f}   {targets.get(k, '')}  (n = {len(v)})")
    print("SymPy imported on warm paths:", sorted(sympy_warm))


if __name__ == "__main__":
    main()
