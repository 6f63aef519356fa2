"""Seeded fuzz of `tpde classify` and `tpde gaussian` on *valid* random scenarios (issue 20): softmax, ℓ2,
Sinkhorn and custom heads, d = 2, 3, random A (or Q, K, B), V with a skew part, horizons 1-1e3.  Every case must
exit 0 (or 5 at a wall-clock cap) with strict JSON; an exception, a traceback or an "internal error" is counted
with its case.  ``python numerics/fuzz_verdict.py --cases 100 --seed 0`` prints the counts, the slowest case and
its time (``numerics/fuzz_cli.py`` covers hostile input)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
import time

import numpy as np


def scenario(rng) -> dict:
    d = int(rng.choice([2, 3]))
    kind = str(rng.choice(["softmax", "l2", "sinkhorn", "custom"]))
    G = rng.normal(size=(d, d))
    V = np.eye(d) * rng.choice([1.0, 0.5]) + rng.uniform(0, 2) * (G - G.T) / max(np.linalg.norm(G - G.T, 2), 1e-12)
    A = rng.normal(scale=rng.choice([0.1, 0.5, 1.0]), size=(d, d))
    S = rng.normal(size=(d, d))
    scn = {"attention": kind, "V": V.tolist(), "alpha0": rng.normal(size=d).tolist(),
           "Sigma0": (S @ S.T / d + 0.1 * np.eye(d)).tolist(), "T": float(rng.choice([1.0, 10.0, 1e3]))}
    if kind in ("softmax", "sinkhorn"):
        scn["A"] = A.tolist()
    elif kind == "l2":
        scn.update(Q=A.tolist(), K=(np.eye(d) + 0.3 * rng.normal(size=(d, d))).tolist(), tau=2.0)
    else:
        scn.update(B=A.T.tolist(), R=(-0.05 * np.eye(d)).tolist())
    return scn


def main(argv=None) -> int:
    from symbolic_tpde.cli import main as tpde

    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "s.json")
    bad, slow, outcomes = [], (0.0, None), {}
    for k in range(a.cases):
        scn = scenario(rng)
        with open(path, "w") as fh:
            json.dump(scn, fh)
        cmd = ["classify", "--scenario", path, "--json"] if k % 2 else \
              ["gaussian", "--scenario", path, "--json", "--max-seconds", "60"]
        out, err = io.StringIO(), io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = tpde(cmd)
            except BaseException as exc:  # noqa: BLE001 - what the fuzz counts
                rc = f"{type(exc).__name__}: {exc}"
        dt = time.perf_counter() - t0
        print(f"case {k}: {cmd[0]} {scn['attention']} d = {len(scn['alpha0'])} T = {scn['T']:g}: exit {rc}, "
              f"{dt:.1f} s", flush=True)
        if dt > slow[0]:
            slow = (dt, (cmd[0], scn))
        e = err.getvalue()
        if rc not in (0, 5) or "Traceback" in e or "internal error" in e:
            bad.append((cmd[0], rc, e.strip()[-300:], json.dumps(scn)[:300]))
            continue
        obj = json.loads(out.getvalue())
        key = obj.get("outcome") or obj.get("verdict", {}).get("outcome") if cmd[0] == "classify" else obj["status"]
        outcomes[(cmd[0], str(key))] = outcomes.get((cmd[0], str(key)), 0) + 1
    print(f"{a.cases} cases, {len(bad)} failures; outcomes {dict(sorted(outcomes.items()))}")
    print(f"slowest: {slow[0]:.1f} s, {slow[1][0]} {json.dumps(slow[1][1])[:400]}")
    for b in bad[:10]:
        print("FAIL", b)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
