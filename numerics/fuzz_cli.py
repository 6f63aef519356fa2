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

A second, independent stream (``--stream new``, :func:`generate_new`) covers the newer paths: ``tpde pde`` (1-D and
2-D grids from ``init`` blocks, the circle solver, ``--noise``, ``--save``), sphere scenarios through
``particles``/``classify``/``pde``, every ``init`` type (mixture, uniform box and ball, empirical ``.npy``,
``grid_density`` ``.npz``, Gaussian, uniform sphere, vMF, frame, points) with hostile blocks and hostile data
files, ``tpde fit`` with hostile data, ``tpde sweep --kind sphere_*`` and ``tpde derive --sphere``.  It leaves
the first stream's cases as they were (the slow test pins seed 12345's first 4000).

Run ``python numerics/fuzz_cli.py --cases 10000 --seed 0`` (or ``--stream new --cases 600 --seed 1``): prints
the table.  ``tests/test_fuzz_cli.py`` runs 250 cases of the first stream and 30 of the second in the fast suite, and 4000 of
the first under ``-m slow``.
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


# ------------------------------------------------------------------------ the newer paths (second stream)
# The cases above are the stream pinned by the slow test (seed 12345, 4000 cases); the newer commands and
# scenario forms (``tpde pde``, sphere scenarios, ``init`` blocks with data files, ``tpde fit``, sphere sweeps
# and derivations) come from :func:`generate_new`, an independent stream (``fuzz(..., stream="new")``), so
# that the first stream's cases stay exactly what they were.  Sizes are capped (grids <= 16 cells per axis,
# <= 8 tokens, T <= 2, d <= 4) so that each case takes about a second.

def _npy(arr) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


def _npz(**arrays) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _r_bases():
    """Scenarios on R^d with an ``init`` block: (scenario, data files)."""
    import numpy as np

    rng = np.random.default_rng(7)
    soft1 = {"attention": "softmax", "d": 1, "A": [[-0.5]], "V": [[1.0]], "T": 0.3}
    soft2 = {"attention": "softmax", "d": 2, "A": [[-0.6, 0.2], [0.1, -0.4]], "V": [[1.0, 0.3], [-0.2, 0.8]],
             "T": 0.3}
    e1 = np.linspace(-2, 2, 9)
    return [
        ({**soft1, "init": {"type": "mixture", "weights": [0.4, 0.6], "means": [[-1.0], [1.2]],
                            "covs": [[[0.15]], [[0.25]]]}}, {}),
        ({**soft2, "init": {"type": "mixture", "weights": [0.5, 0.5], "means": [[1.0, 0.0], [-0.5, 0.6]],
                            "covs": [[[0.2, 0.05], [0.05, 0.15]], [[0.15, -0.03], [-0.03, 0.25]]]}}, {}),
        ({**soft2, "init": {"type": "uniform_box", "low": [-1.0, -0.5], "high": [1.0, 0.5]}}, {}),
        ({**soft1, "attention": "l2", "A": None, "Q": [[1.0]], "K": [[0.5]], "tau": 1.0,
          "init": {"type": "uniform_ball", "center": [0.2], "radius": 1.0}}, {}),
        ({**soft2, "init": {"type": "uniform_ball", "center": [0.0, 0.1], "radius": 0.8}}, {}),
        ({**soft1, "init": {"type": "empirical", "path": "data.pts.npy"}},
         {"data.pts.npy": _npy(rng.normal(size=(12, 1)))}),
        ({**soft2, "init": {"type": "empirical", "path": "data.pts.npy"}},
         {"data.pts.npy": _npy(rng.normal(size=(10, 2)))}),
        ({**soft1, "init": {"type": "grid_density", "path": "data.dens.npz"}},
         {"data.dens.npz": _npz(density=np.exp(-((e1[1:] + e1[:-1]) / 2) ** 2), edges=e1)}),
        ({**soft2, "init": {"type": "grid_density", "path": "data.dens.npz"}},
         {"data.dens.npz": _npz(density=np.ones((4, 3)), edges_0=np.linspace(-1, 1, 5),
                                edges_1=np.linspace(0, 1, 4))}),
        ({**soft1, "init": {"type": "gaussian", "alpha": [0.1], "Sigma": [[0.5]]}}, {}),
    ]


def _sphere_bases():
    import numpy as np

    pts = np.random.default_rng(3).normal(size=(6, 3))
    return [
        ({"geometry": "sphere", "norm": "post", "attention": "sphere_sa", "d": 2, "beta": 2.0, "A": "identity",
          "V": "identity", "init": {"type": "vmf", "mu": [1.0, 0.0], "kappa": 1.0}, "T": 0.5}, {}),
        ({"geometry": "sphere", "norm": "post", "attention": "sphere_usa", "d": 2, "beta": 1.0, "A": "identity",
          "V": "identity", "init": {"type": "uniform_sphere"}, "T": 0.5}, {}),
        ({"geometry": "sphere", "norm": "post", "attention": "sphere_sa", "d": 3, "beta": 1.0, "A": "identity",
          "V": "identity", "init": {"type": "uniform_sphere"}, "T": 1.0}, {}),
        ({"geometry": "sphere", "norm": "ngpt", "alpha": 0.5, "d": 3,
          "heads": [{"attention": "sphere_sa", "beta": 4.0, "A": "identity", "V": "identity"},
                    {"attention": "sphere_sa", "beta": 1.0, "A": "identity",
                     "V": [[0.5, 0.2, 0], [-0.2, 0.5, 0], [0, 0, 0.5]]}],
          "init": {"type": "uniform_sphere"}, "T": 1.0}, {}),
        ({"geometry": "sphere", "norm": "post", "attention": "sphere_causal", "d": 3, "beta": 1.0,
          "A": "identity", "V": "identity", "init": {"type": "vmf", "mu": [0, 0, 1], "kappa": 2.0}, "T": 1.0}, {}),
        ({"geometry": "sphere", "norm": "pre", "attention": "sphere_usa", "d": 4, "beta": 1.0, "A": "identity",
          "V": "identity", "r0": 1.5, "init": {"type": "frame"}, "T": 1.0}, {}),
        ({"geometry": "sphere", "norm": "peri", "attention": "sphere_sa", "d": 3, "beta": 1.0, "A": "identity",
          "V": "identity", "init": {"type": "points", "path": "data.pts.npy"}, "T": 1.0},
         {"data.pts.npy": _npy(pts)}),
    ]


#: hostile contents of a data file (.npy / .npz), by what it breaks
HOSTILE_FILES = {
    "nan": lambda np: _npy(np.array([[np.nan, 1.0], [0.0, 1.0]])),
    "inf": lambda np: _npy(np.full((3, 2), np.inf)),
    "huge": lambda np: _npy(np.full((3, 2), 1e300)),
    "one point": lambda np: _npy(np.zeros((1, 2))),
    "zeros": lambda np: _npy(np.zeros((4, 3))),
    "3-D": lambda np: _npy(np.zeros((2, 2, 2))),
    "empty": lambda np: _npy(np.zeros((0, 2))),
    "object": lambda np: _npy(np.array([{"a": 1}, None], dtype=object)),
    "strings": lambda np: _npy(np.array(["a", "b"])),
    "complex": lambda np: _npy(np.ones((3, 2), dtype=complex)),
    "bool": lambda np: _npy(np.ones((3, 2), dtype=bool)),
    "wide": lambda np: _npy(np.ones((3, 5000))),
    "text": lambda np: b"not a numpy file",
    "truncated": lambda np: _npy(np.ones((30, 2)))[:-20],
    "npz no density": lambda np: _npz(x=np.ones(3)),
    "npz bad edges": lambda np: _npz(density=np.ones(3), edges=np.array([0.0, 2.0, 1.0, 3.0])),
    "npz negative": lambda np: _npz(density=-np.ones(3), edges=np.arange(4.0)),
    "npz zero mass": lambda np: _npz(density=np.zeros(3), edges=np.arange(4.0)),
    "npz 4 axes": lambda np: _npz(density=np.ones((2, 2, 2, 2)), **{f"edges_{k}": np.arange(3.0) for k in range(4)}),
    "npz tiny cells": lambda np: _npz(density=np.ones(3), edges=np.array([0.0, 1e-300, 2e-300, 3e-300])),
    "npz huge edges": lambda np: _npz(density=np.ones(2), edges=np.array([-1e300, 0.0, 1e300])),
    "npz extra": lambda np: _npz(density=np.ones(2), edges=np.arange(3.0), other=np.ones(1)),
    "npz object": lambda np: _npz(density=np.array([None, 1], dtype=object), edges=np.arange(3.0)),
}

HOSTILE_MATRICES = [[[1, 2], [3]], [["x"]], [[True]], [[1e300, 0], [0, 1]], [], [[]], "Identity", "identity ",
                    [[float("nan")]], [[1, 0], [0, 1], [0, 0]], {"a": 1}, 3]


def _mutate_new(rng: random.Random, scn: dict, files: dict):
    """A mutated newer-style scenario: (scenario, files, certainly invalid)."""
    import numpy as np

    s, files = json.loads(json.dumps(scn)), dict(files)
    s = {k: v for k, v in s.items() if v is not None}
    init = s["init"]
    kind = rng.randrange(12)
    if kind == 0:  # hostile value for one key of the init block
        key = rng.choice(sorted(init))
        init[key] = rng.choice(HOSTILE + HOSTILE_MATRICES + ["uniform_ball", "vmf", "frame", "../../etc/passwd",
                                                            "data.pts.npz", "/dev/zero.npy", "data.missing.npy"])
        v = init[key]
        kappa_ok = key == "kappa" and type(v) in (int, float) and 0 <= v <= 1e8   # vMF: 0 (uniform) up to MAX_KAPPA
        radius_ok = key == "radius" and type(v) in (int, float) and 0 < v <= 1e75   # a ball of radius 3 is valid
        return s, files, key != "type" and (key != "rotate" or not isinstance(v, bool)) and not kappa_ok \
            and not radius_ok
    if kind == 1:  # an entry of an init array
        keys = [k for k, v in init.items() if isinstance(v, list) and v]
        if keys:
            v = init[rng.choice(keys)]
            while isinstance(v[0], list) and v[0]:
                v = v[0]
            v[0] = rng.choice(["NaN", None, True, BIG, 1e300, -1e300, [1], "1"])
            return s, files, v[0] not in (1e300, -1e300)
        return s, files, False
    if kind == 2:  # unknown / missing keys in the init block
        if rng.random() < 0.5:
            init[rng.choice(["extra", "Type", "\u2028", "path"])] = 1
        else:
            init.pop(rng.choice(sorted(init)))
        return s, files, True
    if kind == 3:  # another init type (the keys of the first)
        init["type"] = rng.choice(["mixture", "uniform_box", "uniform_ball", "empirical", "grid_density",
                                   "uniform_sphere", "vmf", "frame", "points", "gaussian", "nope", "", None])
        return s, files, False
    if kind == 4:  # hostile data file
        name = rng.choice(sorted(HOSTILE_FILES))
        files = {k: HOSTILE_FILES[name](np) for k in files} or files
        if not files:
            init.clear()
            init.update({"type": rng.choice(["empirical", "grid_density", "points"]),
                         "path": "data.f." + ("npz" if name.startswith("npz") else "npy")})
            files = {init["path"]: HOSTILE_FILES[name](np)}
        return s, files, name not in ("zeros", "bool", "npz tiny cells", "npz huge edges", "wide")
    if kind == 5:  # hostile top-level value
        key = rng.choice(sorted(s))
        value = s[key] = rng.choice(HOSTILE + HOSTILE_MATRICES)
        number = type(value) in (int, float) or value == BIG
        return s, files, key not in ("name", "description", "A", "Q", "K", "WO") and not number
    if kind == 6:  # sphere-only keys, geometry and norms everywhere
        key = rng.choice(["geometry", "norm", "alpha", "r0", "beta", "d"])
        s[key] = rng.choice(["sphere", "R^d", "post", "pre", "peri", "ngpt", "nope", 0.5, 0, -1, 1e300, 2, 3,
                             1025, 10 ** 6, True, None])
        return s, files, False
    if kind == 7:  # hostile matrix in a head (sphere scenarios: "identity" strings allowed)
        holder = s["heads"][rng.randrange(len(s["heads"]))] if "heads" in s else s
        holder[rng.choice(["A", "V", "Q", "K", "WO"])] = rng.choice(HOSTILE_MATRICES)
        return s, files, False
    if kind == 8:  # huge / tiny magnitudes that stay valid in form
        scale = rng.choice([1e-300, 1e-8, 1e3, 1e20, 1e75])
        for key in ("beta", "T"):
            if key in s and rng.random() < 0.5:
                s[key] = s[key] * scale
        if isinstance(s.get("V"), list):
            s["V"] = [[x * scale for x in row] for row in s["V"]]
        return s, files, False
    if kind == 9:  # heads: empty, not objects, mixed kinds
        s["heads"] = rng.choice([[], [1], [{}], "x", [{"attention": "softmax", "V": "identity"}],
                                 [{"attention": "sphere_usa", "beta": 1.0, "V": "identity"},
                                  {"attention": "sphere_causal", "beta": -2.0, "V": "identity"}]])
        return s, files, False
    if kind == 10:  # truncated / NaN-literal JSON
        text = _dumps(s)
        return rng.choice([text[:-1], text.replace("1.0", "NaN", 1), "[]", "null"]), files, True
    return s, files, False


def _new_args(rng: random.Random, sphere: bool) -> tuple[list[str], bool]:
    """A command for a newer-style scenario and whether its options are certainly invalid."""
    if sphere:
        cmd = rng.choice(["particles", "particles", "classify", "pde", "gaussian"])
    else:
        cmd = rng.choice(["pde", "pde", "pde", "particles", "gaussian", "classify"])
    # a 20 s cap (as the sweep cases): a legitimately long run is a time-limit, a hang is one that ignores it
    argv, bad = [cmd, "--scenario", "{path}", "--json", "--max-seconds", "20"], False
    piece_bad_cap = False
    T = rng.choice(["0.1", "0.3", "1"])
    if cmd == "pde":
        argv += ["--grid", str(rng.choice([4, 6, 8, 12, 16])), "--T", T]
        if rng.random() < 0.3:
            argv += rng.choice([["--scheme", "upwind"], ["--method", "ssprk3"], ["--cfl", "0.5"], ["--pad", "0.5"],
                                ["--noise", "0.2"], ["--noise", "0"]])
        if rng.random() < 0.15:
            argv += ["--save", "{dir}/data.save.npz", "--save-every", rng.choice(["0.05", "0.1"])]
    elif cmd == "particles":
        argv += ["--n", str(rng.choice([2, 3, 5, 8])), "--seed", str(rng.randrange(5)), "--T", T]
        if not sphere:
            argv += ["--steps", str(rng.choice([1, 2, 3]))]
        if rng.random() < 0.15:
            argv += ["--save", "{dir}/data.save.npz"]
    elif cmd == "classify":
        argv += ["--backend", "numpy", "--T", rng.choice(["0.5", "2"])]
        if sphere:
            argv += ["--n", str(rng.choice([2, 3, 5])), "--seed", str(rng.randrange(3))]
    else:
        argv += ["--backend", "numpy"]
    if rng.random() < 0.25:  # hostile options
        extra = {"pde": [["--grid", "3"], ["--grid", "0"], ["--grid", "-4"], ["--grid", "100000000"],
                         ["--cfl", "0"], ["--cfl", "nan"], ["--cfl", "1e9"], ["--pad", "-1"], ["--pad", "inf"],
                         ["--noise", "-1"], ["--noise", "nan"], ["--noise", "1e300"], ["--T", "nan"],
                         ["--T", "-1"], ["--T", "1e999"], ["--save", "/dev/full"],
                         ["--save", "{dir}/data.s.npz", "--save-every", "0"],
                         ["--save", "{dir}/data.s.npz", "--save-every", "nan"], ["--save-every", "0.1"],
                         ["--max-seconds", "0"], ["--max-seconds", "nan"]],
                 "particles": [["--n", "1"], ["--n", "1000000000000"], ["--seed", "-1"], ["--T", "nan"],
                               ["--T", "-1"], ["--save", "/dev/full"], ["--rtol", "nan", "--method", "adaptive"],
                               ["--steps", "0"]],
                 "classify": [["--n", "0"], ["--n", "1"], ["--n", "100000000"], ["--seed", "-1"], ["--rtol", "nan"],
                              ["--T", "inf"], ["--T", "-1"]],
                 "gaussian": [["--T", "nan"], ["--T", "-1"]]}[cmd]
        piece = rng.choice(extra)
        argv += piece
        piece_bad_cap = piece[0] == "--max-seconds"
        # valid: --save-every without --save (ignored or refused) and --save-every 0 (documented: first and last
        # frames only)
        bad = piece not in (["--save-every", "0.1"], ["--save", "{dir}/data.s.npz", "--save-every", "0"])
    if cmd != "classify" and rng.random() < 0.1:
        argv += ["--max-seconds", rng.choice(["1e-6", "0.001", "0.05"])]
        bad = bad and "/dev/full" not in argv   # a stopped run writes no --save file (exit 5 is then right)
        if piece_bad_cap:       # the hostile --max-seconds is overridden by this one (the last occurrence wins)
            bad = False
    return argv, bad


def _fit_case(rng: random.Random):
    """``tpde fit`` on a small d = 1 softmax scenario with a generated (possibly hostile) data file."""
    import numpy as np

    scn = {"attention": "softmax", "A": [[-0.5]], "V": [[1.0]], "alpha0": [0.2], "Sigma0": [[1.0]], "T": 0.5}
    g = np.random.default_rng(rng.randrange(100))
    times = np.array([0.1, 0.2, 0.3])
    choice = rng.randrange(9)
    data, bad = {"times": times}, False
    if choice == 0:
        data["clouds"] = g.normal(size=(3, 6, 1))
    elif choice == 1:
        data["alpha"], data["Sigma"] = 0.2 + 0.01 * g.normal(size=(3, 1)), 1 + 0.05 * np.abs(g.normal(size=(3, 1, 1)))
        if rng.random() < 0.5:
            data["noise"] = np.full(6, 0.01)
    elif choice == 2:  # hostile arrays
        key = rng.choice(["times", "alpha", "Sigma", "clouds", "noise"])
        data["alpha"] = np.zeros((3, 1))
        data[key], bad = rng.choice([(np.full((3, 1), np.nan), True), (np.zeros(0), True),
                                     (np.ones((3, 1, 1, 1)), True), (np.array([1e308] * 3), False),
                                     (np.array([0.3, 0.2, 0.1]), False), (np.array(["a", "b", "c"]), True),
                                     (-np.ones(6), False), (np.zeros((6, 6)), False), (np.array([0.1] * 3), False)])
    elif choice == 3:
        data = {"alpha": np.zeros((3, 1))}
        bad = True
    elif choice == 4:
        data["clouds"] = g.normal(size=(3, 1, 1))
        bad = True
    elif choice == 5:
        data["alpha"] = np.zeros((3, 1))
        data["extra"] = np.ones(1)
        bad = True
    else:
        data["alpha"] = 0.2 + 0.01 * g.normal(size=(3, 1))
    blob = _npz(**data)
    if choice == 6 and rng.random() < 0.5:
        blob, bad = rng.choice([b"PK\x03\x04garbage", blob[:len(blob) // 2], b""]), True
    params = rng.choice(["h0_A", "h0_A,h0_V", "h0_V_0_0", "alpha0_0", "Sigma0_0_0", "h0_A,h0_A", "nope", "",
                         "h0_A_5_5", "h0_A,alpha0_0,Sigma0_0_0"])
    argv = ["fit", "--scenario", "{path}", "--data", "{dir}/data.fit.npz", "--params", params, "--json"]
    if params in ("nope", "", "h0_A_5_5"):
        bad = True
    if rng.random() < 0.2:
        level = rng.choice(["0", "1", "nan", "-0.5", "0.5"])
        argv += ["--level", level]
        bad = bad or level != "0.5"
    return argv, scn, bad, {"data.fit.npz": blob}


SPHERE_SWEEP = ["sphere_sa", "sphere_usa", "sphere_causal"]
SPHERE_SWEEP_BAD = [(["--tokens", "0"], True), (["--tokens", "1"], True), (["--tokens", "100000000"], True),
                    (["--tokens", "-3"], True), (["--d", "1"], True), (["--d", "100000"], True),
                    (["--range", "nan", "1"], True), (["--range", "-1e300", "1e300"], True),
                    (["--range", "1", "-1"], True), (["--V", "1", "2", "3"], True), (["--T", "0"], True),
                    (["--T", "1e7"], True), (["--max-seconds", "0"], True), (["--skew", "0.3"], False),
                    (["--rest", "0.5"], False), (["--d", "3"], False), (["--d", "2"], False),
                    (["--max-seconds", "0.01"], False), (["--range", "0", "0"], False), (["--no-symmetrise"], False)]


def _sphere_sweep_case(rng: random.Random):
    kind = ["--kind", rng.choice(SPHERE_SWEEP)]
    argv = ["sweep", "--n", rng.choice(["1", "2"]), "--K", "1", "--T", "0.5", "--tokens", "4"] + kind + \
        ["--out", "{dir}/sw", "--max-seconds", "20"]
    piece, bad = rng.choice(SPHERE_SWEEP_BAD)
    if piece[0] in ("--rest", "--skew", "--no-symmetrise", "--range", "--V"):
        bad = False   # whether Euclidean-only options are refused or ignored for sphere kinds is not the fuzz's call
    return argv + piece, bad


DERIVE_SPHERE = ["equiangular", "two-tokens", "circle", "harmonics", "causal", "nope", ""]


def _derive_case(rng: random.Random):
    red = rng.choice(DERIVE_SPHERE)
    argv = ["derive", "--sphere", red, "--format", rng.choice(["json", "json", "text", "latex"])]
    if rng.random() < 0.5:
        argv += ["--norm", rng.choice(["post", "pre", "peri", "ngpt", "nope"])]
    if rng.random() < 0.5:
        argv += ["--sphere-kind", rng.choice(["sphere_sa", "sphere_usa", "sphere_causal", "softmax"])]
    if rng.random() < 0.2:
        argv += rng.choice([["--attention", "softmax"], ["--d", "3"], ["--steps"], ["--energy"], ["--standalone"],
                            ["--scenario", "sphere_sa_circle"]])
    stray = ("--attention", "--energy", "--scenario") + (() if red == "harmonics" else ("--d",))
    bad = (red in ("nope", "") or "nope" in argv or argv[-1] == "sphere_causal"
           or argv[-2:] == ["--sphere-kind", "softmax"] or any(a in argv for a in stray))
    return argv, bad


# ------------------------------------------------------- issue 29 classes (input reader, outputs, invariants)
#: circle scenarios (d = 2 sphere kinds) that stress the projection of the initial law and the resolution
#: statuses: concentrated vMF starts, multi-mode starts run into clustering, negative β, large β
def _circle_case(rng: random.Random):
    init = rng.choice([{"type": "vmf", "mu": [1.0, 0.5], "kappa": rng.choice([0.5, 5.0, 50.0, 1000.0, 1e5])},
                       {"type": "circle_modes", "modes": [[rng.randint(1, 12), rng.choice([0.05, 0.3, 0.9]), 0.3],
                                                          [rng.randint(1, 6), 0.05, 1.0]]},
                       {"type": "uniform_sphere"}])
    scn = {"geometry": "sphere", "norm": rng.choice(["post", "post", "ngpt"]),
           "attention": rng.choice(["sphere_sa", "sphere_usa"]), "d": 2,
           "beta": rng.choice([-5.0, -0.5, 1.0, 4.0, 9.0, 60.0, 800.0]), "A": "identity", "V": "identity",
           "init": init, "T": rng.choice([0.5, 3.0, 8.0])}
    argv = ["pde", "--scenario", "{path}", "--json", "--max-seconds", "20",
            "--grid", str(rng.choice([8, 16, 32, 64, 128, 512]))]
    if rng.random() < 0.2:
        argv += ["--noise", rng.choice(["0.01", "0.5"])]
    return argv, scn, False


#: where the scenario comes from: a regular file, an anonymous pipe (``<(cat f)``), a named FIFO without a
#: writer, a device, a directory; the last three must be refused by name, never block
SOURCES = [("{path}", False), ("{pipe}", False), ("{pipe}", False), ("{fifo}", True), ("/dev/null", True),
           ("/dev/zero", True), ("{dir}", True)]
#: hostile output paths, each certainly invalid (must be refused before any work); a path in a directory that
#: can be created (``{dir}/no/such/dir/x``) is valid: it is created (docs/cli_statuses.md, Inputs and outputs)
BAD_OUTPUTS = ["", " ", "{dir}", "{dir}/data.f/x", "/proc/version", "{fifo}", "/dev/full"]


def _robust_case(rng: random.Random, r_bases, s_bases):
    """A valid (or slightly hostile) command whose scenario arrives through another kind of file, or whose
    output path is hostile, or a circle / sphere case that stresses an invariant (issue 29)."""
    u = rng.random()
    if u < 0.3:
        argv, scn, bad = _circle_case(rng)
    else:
        sphere = rng.random() < 0.45
        base, files = rng.choice(s_bases if sphere else r_bases)
        scn = {k: v for k, v in base.items() if v is not None}
        if sphere and rng.random() < 0.4:       # heads as Q/K, huge β, a tiny horizon
            scn = dict(scn)
            scn.update(rng.choice([{"Q": [[1.0] + [0.0] * (scn["d"] - 1)], "K": [[1.0] + [0.0] * (scn["d"] - 1)]},
                                   {"beta": 800.0}, {"beta": -800.0}, {"T": 1e-300}]))
            if "Q" in scn:
                scn.pop("A", None)
            if "heads" in scn and ("Q" in scn or "beta" in scn):
                scn.pop("Q", None), scn.pop("K", None), scn.pop("beta", None)
        argv, bad = _new_args(rng, sphere)
        if "/dev/full" in argv:
            bad = True
        yield_files = files
        argv = list(argv)
        if rng.random() < 0.5:
            src, src_bad = rng.choice(SOURCES)
            argv[argv.index("{path}")] = src
            bad = bad or src_bad
        if rng.random() < 0.3 and argv[0] in ("pde", "particles"):
            argv += ["--save", rng.choice(BAD_OUTPUTS)]
            bad = True
            yield_files = {**yield_files, "data.f": b"x"}     # a regular file where a directory is needed
        return argv, scn, bad, yield_files
    if rng.random() < 0.5:
        src, src_bad = rng.choice(SOURCES)
        argv[argv.index("{path}")] = src
        bad = bad or src_bad
    return argv, scn, bad, {}


def _plot_case(rng: random.Random):
    """``tpde plot`` / ``tpde figures`` with hostile outputs, seeds and sizes (small: a second each)."""
    if rng.random() < 0.3:
        out, bad = rng.choice([("{dir}/data.file", True), ("", True), ("/proc/x", True)])
        return ["figures", "--out", out, "--only", "nope" if rng.random() < 0.5 else "collapse"], None, True, \
            {"data.file": b"x"}
    out, bad = rng.choice([("{dir}/data.p.png", False), ("{dir}/data.p.txt", True), ("", True), ("{dir}", True),
                           ("{dir}/no/such/p.png", False), ("/proc/p.png", True), ("{fifo}.png", False)])
    seed, sbad = rng.choice([("0", False), ("3", False), ("-1", True)])
    argv = ["plot", "--scenario", rng.choice(["softmax_2d", "l2_2d", "{pipe}"]), "--out", out, "--n",
            rng.choice(["50", "1", "200"]), "--seed", seed, "--T", rng.choice(["0.3", "0", "nan"]), "--panels", "2"]
    bad = bad or sbad or "--n" in argv and argv[argv.index("--n") + 1] == "1" or argv[argv.index("--T") + 1] != "0.3"
    return argv, None, bad, {}


def generate_new(seed: int, n: int):
    """``n`` cases ``(argv_template, scenario, invalid, files)`` of the newer paths (an independent stream)."""
    rng = random.Random(seed)
    r_bases, s_bases = _r_bases(), _sphere_bases()
    for _ in range(n):
        if rng.random() < 0.3:     # the classes of issue 29 (input reader, outputs, invariants, plot)
            if rng.random() < 0.15:
                yield _plot_case(rng)
            else:
                yield _robust_case(rng, r_bases, s_bases)
            continue
        u = rng.random()
        if u < 0.07:
            argv, bad = _sphere_sweep_case(rng)
            yield argv, None, bad, {}
            continue
        if u < 0.13:
            argv, bad = _derive_case(rng)
            yield argv, None, bad, {}
            continue
        if u < 0.23:
            yield _fit_case(rng)
            continue
        sphere = rng.random() < 0.45
        base, files = rng.choice(s_bases if sphere else r_bases)
        if rng.random() < 0.75:
            scn, files, invalid = _mutate_new(rng, base, files)
        else:
            scn, invalid = {k: v for k, v in base.items() if v is not None}, False
        argv, bad = _new_args(rng, sphere)
        yield argv, scn, bool(invalid or bad), files


def run_case(argv, scn, invalid, tmpdir: str, hang: float = 30.0, files: dict | None = None) -> tuple[str, str]:
    """One case; ``files`` (name -> bytes) are written into ``tmpdir`` first (data files of ``init`` blocks and
    ``tpde fit``; stale ones from an earlier case are removed)."""
    from symbolic_tpde.cli import main

    import shutil

    for old in os.listdir(tmpdir):
        if old.startswith("data.") or old == "no":
            full = os.path.join(tmpdir, old)
            shutil.rmtree(full) if os.path.isdir(full) and not os.path.islink(full) else os.remove(full)
    for name, data in (files or {}).items():
        with open(os.path.join(tmpdir, name), "wb") as fh:
            fh.write(data)
    path = os.path.join(tmpdir, "case.json")
    if scn is not None:
        data = scn if isinstance(scn, bytes) else (scn if isinstance(scn, str) else _dumps(scn)).encode("utf-8")
        with open(path, "wb") as fh:
            fh.write(data)
    for old in ("sw.npz", "sw.csv", "sw.png", "sw.meta.json"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(tmpdir, old))
    fds = []
    if any("{pipe}" in a for a in argv):   # <(cat case.json): an anonymous pipe, its writer closed
        r, w = os.pipe()
        with open(path if scn is not None else _builtin("softmax_2d"), "rb") as fh:
            blob = fh.read()
        os.write(w, blob[:60000])
        os.close(w)
        fds.append(r)
    fifo = os.path.join(tmpdir, "data.fifo")
    if any("{fifo}" in a for a in argv) and hasattr(os, "mkfifo"):
        os.mkfifo(fifo)                      # a named pipe with no writer
    args = [a.replace("{path}", path).replace("{pipe}", f"/dev/fd/{fds[0]}" if fds else path)
            .replace("{fifo}", fifo).replace("{dir}", tmpdir) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(args)
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 2
            except BaseException as exc:  # noqa: BLE001 - exactly what the fuzz counts
                return "traceback", f"{type(exc).__name__}: {exc}"[:200]
    finally:
        for fd in fds:
            os.close(fd)
    seconds = time.perf_counter() - t0
    e = err.getvalue()
    # progress and warning lines of `tpde sweep` (stderr) are not error messages
    # (and matplotlib's one-off "building the font cache" notice on a fresh machine)
    lines = [ln for ln in e.splitlines() if "Warning" not in ln and not ln.startswith("  ")
             and not ln.startswith(("tpde sweep: point ", "tpde sweep: warning:", "Matplotlib is building"))]
    if seconds > hang:
        return "hang", f"{seconds:.0f} s: {args}"
    if "Traceback" in e or "internal error" in e:
        return "traceback", e.strip().splitlines()[-1][:200] if e.strip() else ""
    if rc == 2 and any(a in args for a in ("--save", "--out")) and seconds > 10 and "error: save" in e + "error: out":
        return "hang", f"output refused only after {seconds:.0f} s of work: {args}"[:200]
    if args[0] == "sweep" and rc in (0, 5):
        files = all(os.path.exists(os.path.join(tmpdir, "sw" + x)) for x in (".npz", ".csv", ".png"))
        if invalid:
            return "wrong success", " ".join(args)[:200]
        if not files:
            return "traceback", f"sweep exit {rc} without its files: {e[:150]!r}"
        bad_csv = check_csv(os.path.join(tmpdir, "sw.csv"))
        if bad_csv:
            return "wrong success", f"sweep CSV: {bad_csv}"
        if rc == 5:
            ok = len(lines) == 1 and lines[0].startswith("tpde sweep: time-limit")
            return ("time-limit", "") if ok else ("traceback", f"not one line: {e[:200]!r}")
        return "success", ""
    if rc == 6 and "--json" not in args:   # tpde pde, text: one line saying under-resolved
        ok = out.getvalue().startswith("under-resolved") and not invalid
        return ("under-resolved", "") if ok else ("traceback", f"exit 6: {out.getvalue()[:150]!r}")
    if rc in (5, 6):
        # 5: stopped by the wall-clock cap or a work budget (status time-limit / step-budget, finite time);
        # 6: tpde pde's grid does not resolve the solution (status under-resolved, never ok or blow-up)
        try:
            obj = json.loads(out.getvalue(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError:
            return "non-finite success", out.getvalue()[:200]
        if invalid:
            return "wrong success", " ".join(args)[:200]
        t = obj.get("t") if isinstance(obj, dict) else None
        if rc == 6 and obj.get("status") == "under-resolved" and "raise --grid" in str(obj.get("detail")):
            return "under-resolved", ""
        if rc == 5 and obj.get("status") in ("time-limit", "step-budget") and isinstance(t, float) and t >= 0:
            return "time-limit", ""
        if rc == 5 and args[0] == "fit" and (   # no time axis: the budget used (evaluations) or the cap
                obj.get("status") == "step-budget" and isinstance(obj.get("nfev"), int)
                and isinstance(obj.get("budget"), int) and obj["nfev"] >= obj["budget"]
                or obj.get("status") == "time-limit" and isinstance(obj.get("max_seconds"), float)):
            return "time-limit", ""
        return "traceback", f"exit {rc} without its status: {out.getvalue()[:150]!r}"
    if rc == 0 and args[0] == "plot":     # prints the image's path
        made = os.path.isfile(out.getvalue().strip()) and os.path.getsize(out.getvalue().strip()) > 0
        if invalid:
            return "wrong success", " ".join(args)[:200]
        return ("success", "") if made else ("wrong success", f"plot exit 0 without its image: {args}"[:200])
    if rc == 0 and args[0] == "derive" and "json" not in args:   # text / LaTeX by design
        return ("wrong success", " ".join(args)[:200]) if invalid else ("success", "")
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
                                                                   "stalled", "fixed-point"):
            return "wrong success", text[:200]
        broken = check_invariants(args[0], obj)
        if broken:
            return "wrong success", f"{broken}: {' '.join(args)[:120]}"
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
            return "clean error", (lines[-1] if lines else "")[:200]
        return "traceback", f"not one line: {e[:200]!r}"
    return "traceback", f"exit {rc}: {e[:200]!r}"


def _builtin(name):
    from symbolic_tpde.inputs.scenario import _BUILTIN_DIR

    return _BUILTIN_DIR / f"{name}.json"


def check_csv(path) -> str:
    """Why a CSV output does not load with ``pandas.read_csv(path)`` and ``numpy.genfromtxt(path,
    delimiter=",", names=True)`` without options, with the same columns (``""`` when it does)."""
    import warnings

    import numpy as np

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            arr = np.atleast_1d(np.genfromtxt(path, delimiter=",", names=True))
    except Exception as exc:  # noqa: BLE001 - the oracle reports any failure
        return f"genfromtxt: {type(exc).__name__}: {exc}"[:150]
    try:
        import pandas as pd
    except ImportError:
        return ""
    try:
        df = pd.read_csv(path)
    except Exception as exc:  # noqa: BLE001
        return f"read_csv: {type(exc).__name__}: {exc}"[:150]
    if list(df.columns) != list(arr.dtype.names or ()) or len(df) != len(arr):
        return f"columns differ: {list(df.columns)[:5]} vs {list(arr.dtype.names or ())[:5]}"
    return ""


def _finite_numbers(x) -> bool:
    import math

    if isinstance(x, bool) or x is None or isinstance(x, str):
        return True
    if isinstance(x, (int, float)):
        return math.isfinite(x)
    if isinstance(x, dict):
        return all(_finite_numbers(v) for v in x.values())
    if isinstance(x, list):
        return all(_finite_numbers(v) for v in x)
    return True


#: fields of a success that must hold a number (never null): what the result is
REQUIRED = {"pde": ("t", "mass"), "particles": ("t",)}


def check_invariants(cmd: str, obj) -> str:
    """The invariant a success (exit 0) violates, or ``""``: every reported number finite and the result fields
    present; circle ``pde``: mass 1, ``|E e^{ikθ}| <= 1``, density >= 0 to the solver's tolerance, resolved;
    ℝᵈ ``pde``: mass + lost = 1, masses >= 0, truncation within its bound, finite moments; sphere
    ``particles``: the monitor's value a finite number, ``min <θ_i, θ_j>`` in [-1, 1]."""
    import math

    if not isinstance(obj, dict) or obj.get("status") not in ("ok", None):
        return ""
    if not _finite_numbers(obj):
        return "a non-finite number"
    for key in REQUIRED.get(cmd, ()):
        if obj.get(key) is None and key in obj:
            return f"{key} is null"
    if cmd == "pde" and obj.get("geometry") == "circle":
        from symbolic_tpde.numerics.grids.circle import NEGATIVE_TOL, RESOLUTION_TOL

        if obj.get("moments") is None or obj.get("min_density") is None:
            return "circle: moments or min_density missing"
        if abs(obj["mass"] - 1) > 1e-9:
            return f"circle mass {obj['mass']}"
        if any(math.hypot(*m) > 1 + 1e-9 for m in obj["moments"]):
            return "circle |E e^(ik theta)| > 1"
        if obj["min_density"] < -NEGATIVE_TOL / (2 * math.pi):
            return f"circle negative density {obj['min_density']}"
        if obj.get("resolution") is None or obj["resolution"] > RESOLUTION_TOL:
            return f"circle peaks not resolved ({obj.get('resolution')})"
    elif cmd == "pde" and "cells" in obj:
        from symbolic_tpde.numerics.grids.euclidean import MAX_TRUNCATED

        if abs(obj["mass"] + obj["lost"] - 1) > 1e-9:
            return f"grid mass {obj['mass']} + lost {obj['lost']} != 1"
        if obj["min_mass"] < -1e-12 or abs(obj["truncated"]) > MAX_TRUNCATED:
            return f"grid min mass {obj['min_mass']} or truncated {obj['truncated']}"
        if obj.get("cov") is None or any(obj["cov"][i][i] < 0 for i in range(len(obj["cov"]))):
            return "grid covariance missing or negative"
        from symbolic_tpde.numerics.grids.euclidean import FLOW_TOL

        cells = math.prod(obj["cells"])
        if not 0 <= obj.get("frozen", 0.0) <= FLOW_TOL * cells:
            return f"grid frozen mass {obj.get('frozen')} outside [0, {FLOW_TOL * cells:.3g}]"
    elif cmd == "particles" and obj.get("geometry") == "sphere":
        mon = obj.get("monitor") or {}
        if not isinstance(mon.get("value"), (int, float)):
            return f"sphere monitor value {mon.get('value')!r}"
        if not -1 - 1e-9 <= obj["min_inner"] <= 1 + 1e-9:
            return f"sphere min_inner {obj['min_inner']}"
    return ""


def fuzz(seed: int = 0, cases: int = 300, hang: float = 30.0, commands: Counter | None = None,
         stream: str = "first"):
    """Outcome counts and the first examples of each bad outcome; ``commands`` (if given) counts
    ``(command, outcome)`` pairs; ``stream``: ``"first"`` (:func:`generate`) or ``"new"`` (:func:`generate_new`)."""
    counts: Counter = Counter()
    examples: dict[str, list[str]] = {}
    cases_of = generate_new(seed, cases) if stream == "new" else ((*c, None) for c in generate(seed, cases))
    with tempfile.TemporaryDirectory() as tmp:
        for i, (argv, scn, invalid, files) in enumerate(cases_of):
            outcome, detail = run_case(argv, scn, invalid, tmp, hang, files)
            counts[outcome] += 1
            if commands is not None:
                commands[(argv[0], outcome)] += 1
            if outcome not in ("success", "clean error", "time-limit", "under-resolved"):
                examples.setdefault(outcome, []).append(f"case {i}: {detail}")
    return counts, examples


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hang", type=float, default=30.0)
    ap.add_argument("--stream", choices=["first", "new"], default="first",
                    help="first: the original cases; new: pde, sphere, init blocks, fit, sphere sweeps/derivations")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    per: Counter = Counter()
    counts, examples = fuzz(a.seed, a.cases, a.hang, per, a.stream)
    print(f"{'cases':>8} {'success':>8} {'clean errors':>13} {'capped':>7} {'under-res.':>10} {'tracebacks':>11} "
          f"{'non-finite succ.':>17} {'wrong succ.':>12} {'hangs':>6} {'seconds':>8}")
    print(f"{a.cases:>8} {counts['success']:>8} {counts['clean error']:>13} {counts['time-limit']:>7} "
          f"{counts['under-resolved']:>10} "
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
