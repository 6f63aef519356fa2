"""Seeded fuzz of the `tpde` command line (README "Commands", "Scenario files"; issue 11).

Generates hostile scenario files and argument sets, runs each through ``symbolic_tpde.cli.main`` in-process
with stdout/stderr captured, and classifies the outcome:

* ``clean error``: exit 2/3/4 with exactly one line on stderr starting ``tpde <command>:`` (or argparse's
  usage message, exit 2);
* ``traceback``: an exception escaping ``main``, a ``Traceback`` on stderr, an ``internal error`` line, or an
  error message of more than one line;
* ``non-finite success``: exit 0 with output that is not strict JSON or holds NaN/Infinity;
* ``wrong success``: exit 0 for an input that is certainly invalid (the generator knows which);
* ``time-limit``: exit 5 from a run stopped by its ``--max-seconds`` cap (the generator sets tiny caps on some
  cases), with the status ``"time-limit"`` and a finite time ``t`` in strict JSON on stdout (``gaussian``,
  ``particles``) or one ``tpde sweep: time-limit`` line on stderr with the output files written (``sweep``);
* ``hang``: a case that took longer than ``--hang`` seconds (default 30).

``tpde sweep`` cases draw hostile values for every argument (grid sizes, ranges, kinds, ``d``, ``V``,
``--rest``, workers, scheduler, output stem, caps); each invalid one must be refused (exit 2, one line), a
valid one is a tiny grid whose files must exist.

Run ``python numerics/fuzz_cli.py --cases 10000 --seed 0``: prints the table.  ``tests/test_fuzz_cli.py``
runs a few hundred cases in the fast suite and 10 000 under ``-m slow``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter

#: integer literals of 5000 digits (above CPython's 4300-digit conversion limit) are written into the files as
#: text: this placeholder string is replaced by the digits after ``json.dumps``
BIG = "@@BIG@@"


def _dumps(obj) -> str:
    return json.dumps(obj).replace(json.dumps(BIG), "9" * 5000)


BASES = [
    {"attention": "softmax", "A": [[-0.5]], "V": [[1.0]], "alpha0": [0.2], "Sigma0": [[1.0]], "T": 0.5},
    {"attention": "softmax", "A": [[-0.6, 0.2], [0.1, -0.4]], "V": [[1.0, 0.3], [-0.2, 0.8]],
     "alpha0": [0.5, -0.3], "Sigma0": [[1.0, 0.3], [0.3, 0.6]], "T": 0.5},
    {"attention": "l2", "Q": [[1.0]], "K": [[0.5]], "V": [[1.0]], "tau": 1.0, "alpha0": [0.0], "Sigma0": [[1.0]],
     "T": 0.5},
    {"attention": "custom", "B": [[0.1, 0.0], [0.0, 0.1]], "R": [[0.1, 0.0], [0.0, 0.1]], "V": [[1.0, 0.0], [0.0, 1.0]],
     "alpha0": [0.0, 0.0], "Sigma0": [[1.0, 0.0], [0.0, 1.0]], "T": 0.5},
    {"attention": "softmax", "heads": [{"A": [[-0.5]], "V": [[1.0]]}, {"A": [[0.2]], "V": [[0.5]]}],
     "ffn": {"W": [[-0.1]], "c": [0.1]}, "alpha0": [0.1], "Sigma0": [[0.5]], "T": 0.5},
    # issue 20: the isotropic start with V = I + skew blows up at T* = 1.25 (the direct run stalls before it)
    {"attention": "softmax", "A": [[0.5, 0.0], [0.0, 0.5]], "V": [[1.0, -0.8], [0.8, 1.0]],
     "alpha0": [0.1, -0.2], "Sigma0": [[0.8, 0.0], [0.0, 0.8]], "T": 2.0},
    {"attention": "l2", "Q": [[1.0, 0.5], [-0.5, 1.0]], "K": [[1.0, 0.0], [0.0, 1.0]], "V": [[1.0, 0.0], [0.0, 1.0]],
     "tau": 2.0, "alpha0": [0.0, 0.1], "Sigma0": [[1.0, 0.2], [0.2, 0.5]], "T": 1.0},
]

HOSTILE = ["1", " 2 ", "1_000e-3", True, False, None, {}, [], "NaN", BIG, -10 ** 80, 1e300, -1e154,
           1e76, 0, -1, 1e-320, [[1, 2], [3]], [["x"]], [[True]], [[1e300]], 2 ** 1100]


def _mutate(rng: random.Random, scn: dict) -> tuple[dict | bytes | str, bool]:
    """A mutated scenario and whether it is certainly invalid."""
    s = json.loads(json.dumps(scn))
    kind = rng.randrange(14)
    if kind == 0:  # hostile value in an array entry
        keys = [k for k, v in s.items() if isinstance(v, list) and v and isinstance(v[0], (list, float, int))]
        key = rng.choice(keys)
        v = s[key]
        if isinstance(v[0], list):
            v[rng.randrange(len(v))][0] = rng.choice(HOSTILE[:9] + [BIG, 2 ** 1100, [1]])
        else:
            v[0] = rng.choice(HOSTILE[:9] + [[1]])
        return s, True
    if kind == 1:  # hostile value for a whole key
        key = rng.choice(sorted(s))
        value = rng.choice(HOSTILE)
        s[key] = value
        valid_T = key == "T" and type(value) in (int, float) and 0 <= value <= 1e6
        # null for an optional parameter of the custom kind means "not given" (model.make_head)
        optional_none = value is None and s.get("attention") == "custom" and key in ("P", "R", "p", "r")
        return s, not (key in ("name", "description") or valid_T or (key == "ffn" and value == {}) or optional_none)
    if kind == 2:  # reserved / unknown keys in a head or at top level
        bad = rng.choice(["d", "kind", "where", "params", "bad\nkey", "x\r\nERROR: forged", "\u2028", "__class__"])
        if "heads" in s:
            s["heads"][0][bad] = 1
        else:
            s[bad] = 1
        return s, bad != "d" or "heads" in s
    if kind == 3:  # ffn / sink not objects
        s[rng.choice(["ffn", "sink"])] = rng.choice([[1], 3, "x", None, True])
        return s, True
    if kind == 4:  # deep nesting
        depth = rng.choice([40, 1000, 100000])
        return '{"attention": "softmax", "A": ' + "[" * depth + "1" + "]" * depth + ', "V": [[1]], ' \
            '"alpha0": [0], "Sigma0": [[1]], "T": 1}', True
    if kind == 5:  # encodings
        text = _dumps(s)
        return rng.choice([text.encode("utf-16"), b"\xef\xbb\xbf" + text.encode(), text.encode()[:-3] + b"\xff",
                           text.encode("latin-1", "replace") + b"\xe9"]), True
    if kind == 6:  # huge / odd T
        s["T"] = rng.choice([1e307, 1e308, BIG, -1, "1", True, 1e7])
        return s, True
    if kind == 7:  # huge / small entries that stay valid in magnitude
        scale = rng.choice([1e-300, 1e-8, 1e3, 1e8, 1e20, 1e50, 1e75])
        key = "V" if "V" in s else "heads"
        if key == "V":
            s["V"] = [[x * scale for x in row] for row in s["V"]]
        return s, False
    if kind == 8:  # Sigma0 not SPD / not symmetric
        d = len(s["alpha0"])
        s["Sigma0"] = [[(-1.0 if i == j else 0.5) for j in range(d)] for i in range(d)]
        return s, True
    if kind == 9:  # tilt does not exist at Sigma0 (custom kind)
        d = len(s["alpha0"])
        s = {"attention": "custom", "B": [[0.0] * d for _ in range(d)],
             "R": [[0.5 if i == j else 0.0 for j in range(d)] for i in range(d)],
             "V": [[1.0 if i == j else 0.0 for j in range(d)] for i in range(d)], "alpha0": s["alpha0"],
             "Sigma0": [[2.0 if i == j else 0.0 for j in range(d)] for i in range(d)], "T": 0.5}
        return s, "tilt"
    if kind == 10:  # wrong shapes / dimensions
        s["d"] = rng.choice([0, 3, 10 ** 6, -2, 2.5])
        return s, s["d"] != len(s["alpha0"]) or True
    if kind == 11:  # unknown variant
        s["attention"] = rng.choice(["nope", "Softmax", "", 3, None, "x\ny"])
        return s, True
    if kind == 12:  # duplicated keys, NaN literals, truncated JSON
        text = _dumps(s)
        return rng.choice([text[:-1], re.sub(r'"T": [^,}]+', '"T": NaN', text), text[:-1] + ', "T": 0.5}',
                           text.replace("0.5", "Infinity", 1), "[]", "", "null"]), True
    return s, False  # unchanged: a valid scenario


#: ``tpde sweep`` arguments: (argv piece, certainly invalid); valid pieces keep the run tiny
SWEEP_BAD = [(["--n", "0"], True), (["--n", "201"], True), (["--n", "-3"], True), (["--K", "0"], True),
             (["--K", "10001"], True), (["--n", "200", "--K", "50"], True), (["--range", "1", "-1"], True),
             (["--n", "2", "--range", "0.5", "0.5"], True), (["--range", "nan", "1"], True),
             (["--range", "0", "1e999"], True),
             (["--range", "-1e300", "0"], True), (["--kind", "sigmoid"], True), (["--kind", "nope"], True),
             (["--kind", ""], True), (["--kind", "x\ny"], True), (["--d", "1"], True), (["--d", "9"], True),
             (["--d", "100000"], True), (["--rest", "0.5"], True), (["--V", "1", "2", "3"], True),
             (["--V", "inf", "1"], True), (["--V", "1e80", "1"], True), (["--skew", "nan"], True),
             (["--theta", "-inf"], True), (["--T", "0"], True), (["--T", "-1"], True), (["--T", "1e7"], True),
             (["--seed", "-1"], True), (["--workers", "0"], True), (["--workers", "100000"], True),
             (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], True), (["--scheduler", ""], True),
             (["--scheduler", "a b"], True), (["--out", "/proc/nope/x"], True), (["--out", ""], True),
             (["--out", "/"], True), (["--out", "/dev/null/x"], True), (["--max-seconds", "0"], True),
             (["--max-seconds", "-1"], True), (["--max-seconds", "nan"], True), (["--max-seconds", "1e9"], True),
             (["--n", "1.5"], True), (["--max-seconds", "0.01"], False), (["--d", "3", "--rest", "-0.5"], False),
             (["--kind", "l2"], False), (["--kind", "linear"], False), (["--V", "1", "0", "0", "1"], False),
             (["--no-symmetrise"], False), (["--skew", "0.3"], False)]


def _sweep_case(rng: random.Random):
    """A ``tpde sweep`` argv (tiny grid: ``--n 1 --K 1 --T 1``) with 1-2 argument pieces that set different
    options (a later piece must not override an earlier bad value), and its validity."""
    argv = ["sweep", "--n", "1", "--K", "1", "--T", "1", "--out", "{dir}/sw", "--max-seconds", "20"]
    invalid, used = False, set()
    for piece, bad in rng.sample(SWEEP_BAD, rng.choice([1, 1, 2])):
        opts = {a for a in piece if a.startswith("--")}
        if opts & used:
            continue
        used |= opts
        argv += piece
        invalid = invalid or bad
    return argv, invalid


def generate(seed: int, n: int):
    """``n`` cases ``(argv_template, scenario, invalid)``; ``argv_template`` has ``{path}`` for the scenario
    file and ``{dir}`` for the case's scratch directory."""
    rng = random.Random(seed)
    for _ in range(n):
        base = rng.choice(BASES)
        scn, invalid = _mutate(rng, base)
        if rng.random() < 0.08:
            argv, bad = _sweep_case(rng)
            yield argv, None, bad
            continue
        cmd = rng.choice(["rhs", "gaussian", "classify", "particles", "particles"])
        argv = [cmd, "--scenario", "{path}", "--json"]
        if cmd == "rhs":
            argv += ["--backend", "numpy"]
        elif cmd == "gaussian":
            argv += ["--backend", "numpy"]
        elif cmd == "classify":     # the one long-time classifier; short horizons keep a case quick
            argv += ["--backend", "numpy", "--T", rng.choice(["0.5", "5", "100"])]
        else:
            argv += ["--n", str(rng.choice([2, 10, 30])), "--seed", str(rng.randrange(5)), "--steps",
                     str(rng.choice([1, 2, 3])), "--dtype", rng.choice(["float32", "float64"])]
        if rng.random() < 0.2:  # hostile arguments
            extra = rng.choice([["--T", "inf"], ["--T", "nan"], ["--T", "1e307"], ["--T", "-1"],
                                ["--T", "1e999"], ["--T", "0.1"]])
            if cmd == "particles":
                extra = rng.choice([extra, ["--n", "1000000000000"], ["--steps", "0"], ["--steps", "100000000"],
                                    ["--save", "/dev/full"], ["--seed", "-1"], ["--n", "1"],
                                    ["--rtol", "nan", "--method", "adaptive"]])
            if cmd == "classify":
                extra = rng.choice([extra, ["--rtol", "0"], ["--rtol", "nan"], ["--rtol", "1"]])
            if cmd != "rhs" or extra[0] != "--T":
                argv += extra
                if extra != ["--T", "0.1"]:
                    invalid = True
        if cmd not in ("rhs", "classify") and rng.random() < 0.1:  # caps: hostile ones, tiny ones (time-limit)
            cap = rng.choice(["0", "-1", "nan", "1e9", "1e-6", "0.001", "0.02"])
            argv += ["--max-seconds", cap]
            invalid = invalid or cap in ("0", "-1", "nan", "1e9")
        if invalid == "tilt":
            invalid = cmd in ("rhs",)  # gaussian: issue 11 wants exit 2 too (see the report); particles: valid
        yield argv, scn, bool(invalid)


def run_case(argv, scn, invalid, tmpdir: str, hang: float = 30.0) -> tuple[str, str]:
    from symbolic_tpde.cli import main

    path = os.path.join(tmpdir, "case.json")
    if scn is not None:
        data = scn if isinstance(scn, bytes) else (scn if isinstance(scn, str) else _dumps(scn)).encode("utf-8")
        with open(path, "wb") as fh:
            fh.write(data)
    for old in ("sw.npz", "sw.csv", "sw.png"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(tmpdir, old))
    args = [a.replace("{path}", path).replace("{dir}", tmpdir) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(args)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
        except BaseException as exc:  # noqa: BLE001 - exactly what the fuzz counts
            return "traceback", f"{type(exc).__name__}: {exc}"[:200]
    seconds = time.perf_counter() - t0
    e = err.getvalue()
    # progress and warning lines of `tpde sweep` (stderr) are not error messages
    lines = [ln for ln in e.splitlines() if "Warning" not in ln and not ln.startswith("  ")
             and not ln.startswith(("tpde sweep: point ", "tpde sweep: warning:"))]
    if seconds > hang:
        return "hang", f"{seconds:.0f} s: {args}"
    if "Traceback" in e or "internal error" in e:
        return "traceback", e.strip().splitlines()[-1][:200] if e.strip() else ""
    if args[0] == "sweep" and rc in (0, 5):
        files = all(os.path.exists(os.path.join(tmpdir, "sw" + x)) for x in (".npz", ".csv", ".png"))
        if invalid:
            return "wrong success", " ".join(args)[:200]
        if not files:
            return "traceback", f"sweep exit {rc} without its files: {e[:150]!r}"
        if rc == 5:
            ok = len(lines) == 1 and lines[0].startswith("tpde sweep: time-limit")
            return ("time-limit", "") if ok else ("traceback", f"not one line: {e[:200]!r}")
        return "success", ""
    if rc == 5:  # gaussian / particles stopped by the wall-clock cap: strict JSON, status and finite time
        try:
            obj = json.loads(out.getvalue(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError:
            return "non-finite success", out.getvalue()[:200]
        if invalid:
            return "wrong success", " ".join(args)[:200]
        t = obj.get("t") if isinstance(obj, dict) else None
        if obj.get("status") == "time-limit" and isinstance(t, float) and t >= 0:
            return "time-limit", ""
        return "traceback", f"exit 5 without a time-limit status: {out.getvalue()[:150]!r}"
    if rc == 0:
        text = out.getvalue()
        try:
            obj = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError:
            return "non-finite success", text[:200]
        if invalid:
            shown = "" if scn is None else (_dumps(scn)[:150] if not isinstance(scn, bytes) else scn[:50])
            return "wrong success", f"{' '.join(args)[:120]} {shown}"
        if isinstance(obj, dict) and obj.get("status") not in (None, "ok", "blowup", "tilt-ceased", "overflow",
                                                                   "stalled"):
            return "wrong success", text[:200]
        return "success", ""
    if rc in (3, 4) and not e.strip():  # particles: blow-up / non-convergence reported as JSON on stdout
        try:
            obj = json.loads(out.getvalue(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError:
            return "non-finite success", out.getvalue()[:200]
        if isinstance(obj, dict) and obj.get("status") in ("blowup", "no_convergence"):
            return "clean error", ""
    if rc in (2, 3, 4):
        tpde_lines = [ln for ln in lines if ln.startswith("tpde ")]
        usage = any(ln.startswith("usage:") for ln in lines)
        if usage or len(tpde_lines) == 1 and len(lines) == 1:
            return "clean error", ""
        return "traceback", f"not one line: {e[:200]!r}"
    return "traceback", f"exit {rc}: {e[:200]!r}"


def fuzz(seed: int = 0, cases: int = 300, hang: float = 30.0, commands: Counter | None = None):
    """Outcome counts and the first examples of each bad outcome; ``commands`` (if given) counts
    ``(command, outcome)`` pairs."""
    counts: Counter = Counter()
    examples: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for argv, scn, invalid in generate(seed, cases):
            outcome, detail = run_case(argv, scn, invalid, tmp, hang)
            counts[outcome] += 1
            if commands is not None:
                commands[(argv[0], outcome)] += 1
            if outcome not in ("success", "clean error", "time-limit"):
                examples.setdefault(outcome, []).append(detail)
    return counts, examples


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hang", type=float, default=30.0)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    per: Counter = Counter()
    counts, examples = fuzz(a.seed, a.cases, a.hang, per)
    print(f"{'cases':>8} {'success':>8} {'clean errors':>13} {'time-limits':>12} {'tracebacks':>11} "
          f"{'non-finite succ.':>17} {'wrong succ.':>12} {'hangs':>6} {'seconds':>8}")
    print(f"{a.cases:>8} {counts['success']:>8} {counts['clean error']:>13} {counts['time-limit']:>12} "
          f"{counts['traceback']:>11} {counts['non-finite success']:>17} {counts['wrong success']:>12} "
          f"{counts['hang']:>6} {time.perf_counter() - t0:>8.0f}")
    for cmd in sorted({c for c, _ in per}):
        print(f"  {cmd:>10}: " + ", ".join(f"{o} {k}" for (c, o), k in sorted(per.items()) if c == cmd))
    for k, v in examples.items():
        print(f"\n{k} ({len(v)}), first examples:")
        for x in v[:5]:
            print("  ", x)
    bad = sum(counts[k] for k in ("traceback", "non-finite success", "wrong success", "hang"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
