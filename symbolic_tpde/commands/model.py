"""``tpde model``: a trained Transformer's weights in, its tensors accounted for, and a per-layer report of the
theory's predictions against the network's hidden states.

``tpde model info WEIGHTS [--preset bert|gpt2|llama | --mapping MAP.json] [--heads H] [--kv-heads G] [--json]``
reads a ``.safetensors`` or ``.npz`` file (preset detected from the file's own keys when not given; a
``config.json`` beside the file supplies the heads, ε and the activation) and prints which tensors were used
(with their role) and which were not (with the reason), and the parts the surrogate refuses by name.

``tpde model report WEIGHTS [… as info] [--states S.npz | --text "a sentence" …] [--tau 1] [--steps 8]
[--out DIR] [--json]``: per layer, the hypotheses of the theorems and the predicted-vs-measured diagnostics
(:mod:`symbolic_tpde.analysis.model_report`).  Hidden states: ``--states S.npz`` with ``states``
``(L + 1, n, d)`` (the input of every layer and the last output) and ``seq`` ``(n,)`` (sequence id of each
token, tokens of a sequence consecutive); otherwise token ids from ``--text`` (or a few built-in sentences)
through the WordPiece vocabulary ``vocab.txt`` beside the weights, and the states from the surrogate's numpy
forward pass (the network's to round-off).  ``--out DIR``: ``report.csv`` (one row per layer and diagnostic:
measured, each model's prediction, its gap and status), ``hypotheses.csv``, ``report.json`` (both tables,
definitions, the tensor account) and one plot per diagnostic over depth (``<diagnostic>.png``).
Exit 0; 2 on bad input.
"""

from __future__ import annotations

import json
import sys

from ..errors import InputError

DEFAULT_TEXT = ("the cat sat on the mat", "a river bank is full of water", "she paid the money into the bank",
                "deep networks move tokens like particles")


def _common(p) -> None:
    p.add_argument("weights", help=".safetensors or .npz weight file")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--preset", choices=["bert", "gpt2", "llama"], default=None,
                   help="layout (default: detected from the file's keys)")
    g.add_argument("--mapping", default=None, help="JSON mapping of roles to tensor names for other layouts")
    p.add_argument("--heads", type=int, default=None, help="attention heads (default: config.json beside the file)")
    p.add_argument("--kv-heads", type=int, default=None, help="key/value heads (grouped-query attention)")
    p.add_argument("--json", action="store_true", help="print JSON")


def register(sub) -> None:
    p = sub.add_parser("model", help="trained-model weights: tensor account, per-layer theory-vs-network report")
    ms = p.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    info = ms.add_parser("info", help="which tensors of the file are used, which not (and why)")
    _common(info)
    info.set_defaults(func=run_info)
    rep = ms.add_parser("report", help="per-layer hypotheses and predicted-vs-measured diagnostics")
    _common(rep)
    src = rep.add_mutually_exclusive_group()
    src.add_argument("--states", default=None, help=".npz with states (L+1, n, d) and seq (n,)")
    src.add_argument("--text", action="append", default=None,
                     help="a sentence (repeatable), tokenised with vocab.txt beside the weights")
    rep.add_argument("--tau", type=float, default=1.0, help="time per layer (default 1: x + f(x) is one Euler step)")
    rep.add_argument("--steps", type=int, default=8, help="RK4 steps of the particle flow per layer (default 8)")
    rep.add_argument("--out", default=None, help="folder for report.csv, hypotheses.csv, report.json and plots")
    rep.set_defaults(func=run_report)
    ft = ms.add_parser("fit", help="per-layer effective attention (A, V, c) fitted to consecutive hidden states")
    _common(ft)
    src = ft.add_mutually_exclusive_group()
    src.add_argument("--states", default=None, help=".npz with states (L+1, n, d) and seq (n,)")
    src.add_argument("--text", action="append", default=None, help="a sentence (repeatable)")
    ft.add_argument("--rank", type=int, default=8, help="principal subspace dimension (default 8)")
    ft.add_argument("--ridge", type=float, default=1e-6, help="ridge penalty on V, relative (default 1e-6)")
    ft.add_argument("--starts", type=int, default=2, help="random starts of A (default 2)")
    ft.add_argument("--max-nfev", type=int, default=30, help="optimiser iterations per start (default 30)")
    ft.set_defaults(func=run_fit)


def _load(args):
    from ..analysis.model_io import load_checkpoint

    if args.heads is not None and args.heads < 1:
        raise InputError("heads", "must be a positive integer")
    return load_checkpoint(args.weights, args.preset, mapping=args.mapping, n_heads=args.heads,
                           n_kv_heads=args.kv_heads)


def run_info(args) -> int:
    ck = _load(args)
    acc = ck.account()
    if args.json:
        print(json.dumps(acc, indent=1))
        return 0
    print(f"{acc['preset']}: d = {acc['d']}, {acc['layers']} layers, {acc['heads']} heads ({acc['kv_heads']} key/value) "
          f"of dimension {acc['head_dim']}; {acc['norm']} ({acc['placement']}-norm, ε = {acc['eps']:g}), "
          f"{'causal' if acc['causal'] else 'bidirectional'}, MLP {acc['activation']}")
    print(f"tensors in the file: {acc['tensors_in_file']} = {len(acc['used'])} used + {len(acc['unused'])} not used")
    for k, role in acc["used"].items():
        print(f"  used    {k}: {role}")
    for k, why in acc["unused"].items():
        print(f"  unused  {k}: {why}")
    for r in acc["refused"]:
        print(f"  refused {r}")
    for r in acc["missing_from_file"]:
        print(f"  absent  {r}")
    return 0


def wordpiece(text: str, vocab: dict) -> list[int]:
    """BERT's basic tokenisation (lower case, split on white space and punctuation) and greedy longest-match
    WordPiece (continuation pieces ``##…``); an unknown word is ``[UNK]``."""
    import re

    out = []
    for word in re.findall(r"\w+|[^\w\s]", text.lower()):
        start, pieces = 0, []
        while start < len(word):
            end = len(word)
            while end > start and (("##" if start else "") + word[start:end]) not in vocab:
                end -= 1
            if end == start:
                pieces = [vocab["[UNK]"]]
                break
            pieces.append(vocab[("##" if start else "") + word[start:end]])
            start = end
        out += pieces
    return out


def _states(args, sur):
    import numpy as np
    from pathlib import Path

    if args.states is not None:
        from ..inputs.checks import read_arrays

        data = read_arrays(args.states, "states", ".npz")
        if set(data) != {"states", "seq"}:
            raise InputError("states", f"expected arrays 'states' and 'seq', found {sorted(data)}")
        H = np.asarray(data["states"], float)
        seq = np.asarray(data["seq"])
        if seq.dtype.kind not in "iu":
            raise InputError("states.seq", "sequence ids must be integers")
        return H, seq, f"hidden states from {args.states}"
    vfile = Path(args.weights).parent / "vocab.txt"
    if not vfile.is_file():
        raise InputError("states", f"no vocab.txt beside {args.weights}: give hidden states with --states")
    vocab = {w: i for i, w in enumerate(vfile.read_text(encoding="utf-8").splitlines())}
    for tok in ("[CLS]", "[SEP]", "[UNK]"):
        if tok not in vocab:
            raise InputError("vocab.txt", f"no {tok} token: not a BERT WordPiece vocabulary; give --states")
    texts = args.text or list(DEFAULT_TEXT)
    ids, seq = [], []
    for s, t in enumerate(texts):
        toks = [vocab["[CLS]"]] + wordpiece(t, vocab) + [vocab["[SEP]"]]
        ids += toks
        seq += [s] * len(toks)
    ids, seq = np.array(ids), np.array(seq)
    return sur.forward(sur.embed(ids, seq), seq), seq, (f"{len(texts)} sentences ({len(ids)} tokens, vocab.txt), "
                                                          "states by the numpy forward pass")


def _plots(report, out) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ..analysis.model_report import DIAGNOSTICS, MODELS

    files = []
    for k in DIAGNOSTICS:
        rows = [r for r in report["rows"] if r["diagnostic"] == k]
        layers = [r["layer"] + 1 for r in rows]
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.plot([0] + layers, [rows[0]["measured_in"]] + [r["measured"] for r in rows], "k-o", label="network")
        for m, st in zip(MODELS, ("s--", "^--", "d:", "v-.", "x")):
            v = np.array([r[m] for r in rows], float)
            if np.isfinite(v).any():
                ax.plot(layers, v, st, label=f"{m} (from each layer's real input)")
        ax.set_xlabel("layer output")
        ax.set_ylabel(k)
        ax.legend(fontsize=6)
        fig.tight_layout()
        f = out / f"{k}.png"
        fig.savefig(f, dpi=110)
        plt.close(fig)
        files.append(str(f))
    return files


def run_fit(args) -> int:
    from ..analysis.layer_fit import fit_layer
    from ..analysis.surrogate import Surrogate

    if not 1 <= args.starts <= 64:
        raise InputError("starts", "must lie in [1, 64]")
    if not 1 <= args.max_nfev <= 10000:
        raise InputError("max-nfev", "must lie in [1, 10000]")
    ck = _load(args)
    sur = Surrogate(ck)
    H, seq, source = _states(args, sur)
    if H.ndim != 3 or H.shape[0] != ck.n_layers + 1 or H.shape[2] != ck.d or seq.shape != (H.shape[1],):
        raise InputError("states", f"expected ({ck.n_layers + 1}, tokens, {ck.d}) states and one seq id per token")
    from threadpoolctl import threadpool_limits

    rows = []
    with threadpool_limits(1):       # small products: one BLAS thread (analysis.model_report)
        for l in range(ck.n_layers):
            f = fit_layer(H[l], H[l + 1], seq, rank=args.rank, ridge=args.ridge, causal=bool(ck.mapping["causal"]),
                          starts=args.starts, max_nfev=args.max_nfev)
            rows.append({"layer": l, **f.report()})
    if args.json:
        print(json.dumps({"states": source, "model": "v = V Σ_j S_ij z_j + c in the top-rank principal subspace of "
                          "the layer input, v = (output - input) read as one Euler step", "layers": rows}, indent=1))
        return 0
    print(f"states: {source}; per layer: one effective head in the top-{args.rank} principal subspace of the layer's "
          f"input, velocity = output - input (one Euler step), ridge {args.ridge:g}")
    print("layer | relative residual | constant only | A = 0 | A directions identifiable | status")
    for r in rows:
        st = "converged" if r["converged"] else "NOT converged (end point, not an estimate)"
        print(f"{r['layer']:5d} | {r['relative_residual']:.4g} | {r['relative_residual_constant_only']:.4g} | "
              f"{r['relative_residual_A_zero']:.4g} | {r['A_identifiable_directions']} of {r['A_parameters']} | {st}")
    return 0


def run_report(args) -> int:
    import csv
    from pathlib import Path

    from ..analysis.model_report import MODELS, model_report
    from ..analysis.surrogate import Surrogate
    from ..inputs.checks import strict_json

    out = None
    if args.out is not None:
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise InputError("out", f"{out} exists and is not a folder")
        out.mkdir(parents=True, exist_ok=True)
    if not 0 < args.tau <= 100:
        raise InputError("tau", "must lie in (0, 100]")
    if not 1 <= args.steps <= 1000:
        raise InputError("steps", "must lie in [1, 1000]")
    ck = _load(args)
    sur = Surrogate(ck)
    sur.check_modelled()
    H, seq, source = _states(args, sur)
    rep = model_report(sur, H, seq, tau=args.tau, steps=args.steps)
    rep["states"] = source
    rep["account"] = ck.account()
    if out is not None:
        with open(out / "report.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rep["rows"][0]))
            w.writeheader()
            w.writerows(rep["rows"])
        with open(out / "hypotheses.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rep["hypotheses"][0]))
            w.writeheader()
            w.writerows(rep["hypotheses"])
        rep["plots"] = _plots(rep, out)
        (out / "report.json").write_text(strict_json(rep, indent=1))
    if args.json:
        print(strict_json(rep, indent=1))
        return 0
    a = rep["account"]
    print(f"{a['preset']}: d = {a['d']}, {a['layers']} layers, {a['heads']} heads; tensors: {len(a['used'])} used, "
          f"{len(a['unused'])} not used ({', '.join(a['unused']) or 'none'}); states: {source}")
    print("layer | S=Σ(VA+AᵀVᵀ) eig max / min / #>0 | riccati | lyapunov | Gaussian of the input: blow-up")
    for h in rep["hypotheses"]:
        print(f"{h['layer']:5d} | {h['S_eig_max']:.4g} / {h['S_eig_min']:.4g} / {h['S_n_positive']} | "
              f"{h['riccati'].split(':')[0]} | {h['lyapunov'].split(':')[0]} | "
              f"{h['blowup_time']:.4g} ({h['blowup_status']})")
    print(f"definitions: " + "; ".join(f"{k}: {v}" for k, v in rep["definitions"].items()))
    print("layer diagnostic       in   measured | " + " | ".join(f"{m} (gap)" for m in MODELS))
    for r in rep["rows"]:
        cells = []
        for m in MODELS:
            st = r[f"{m}_status"]
            cells.append(f"{r[m]:.4g} ({r[m + '_gap']:+.3g})" if st.startswith("ok") and r[m] == r[m]
                         else ("n/a" if st.startswith("ok") else st))
        print(f"{r['layer']:5d} {r['diagnostic']:12s} {r['measured_in']:8.4g} {r['measured']:8.4g} | " + " | ".join(cells))
    if out is not None:
        print(f"written: {out}/report.csv, hypotheses.csv, report.json, {len(rep['plots'])} plots", file=sys.stderr)
    return 0
