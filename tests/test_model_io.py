"""Model weights and hidden states in: the safetensors reader against an independent writer (here), the
GPT-2 and LLaMA name mappings against hand-written attention, the low-rank particle field and matrix moment
ODE against the package's own particles and entrywise moment ODE, and the hidden-state report."""

from __future__ import annotations

import json
import resource
import struct
import time

import numpy as np
import pytest

from symbolic_tpde import InputError
from symbolic_tpde.analysis.hidden_states import compare_with_ode, hidden_state_report
from symbolic_tpde.analysis.model_io import LowRankModel, load_model, read_hidden_states, read_safetensors
from symbolic_tpde.gaussian import GaussianODE
from symbolic_tpde.numerics.particles.simulate import simulate
from symbolic_tpde.numerics.particles.lowrank import integrate_moments, particle_field, simulate_layers

CODES = {"<f4": "F32", "<f8": "F64", "<f2": "F16"}


def write_st(path, tensors, metadata=None, bf16=()):
    """Independent writer following the published format: u64 LE header length, JSON header, raw LE bytes."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        if name in bf16:
            raw = (np.asarray(a, "<f4").view("<u4") >> 16).astype("<u2").tobytes()
            code = "BF16"
        else:
            raw, code = a.tobytes(), CODES[a.dtype.str]
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_safetensors_reader_dtypes_and_bad_files(tmp_path):
    rng = np.random.default_rng(0)
    t = {"a": rng.normal(size=(3, 4)).astype("<f4"), "b": rng.normal(size=5), "c": np.array([1.5, -2.25], "<f2"),
         "e": np.array([1.0, -0.5, 3.0, 2.0 ** -7], "<f4")}          # exactly representable in bfloat16
    write_st(tmp_path / "m.safetensors", t, metadata={"format": "pt"}, bf16=("e",))
    got = read_safetensors(tmp_path / "m.safetensors")
    assert set(got) == set(t)
    for k in t:
        np.testing.assert_array_equal(got[k], t[k])
    good = (tmp_path / "m.safetensors").read_bytes()
    (tmp_path / "short.safetensors").write_bytes(good[:-3])                      # data cut off
    with pytest.raises(InputError, match="offsets"):
        read_safetensors(tmp_path / "short.safetensors")
    (tmp_path / "len.safetensors").write_bytes(struct.pack("<Q", 10 ** 9) + good[8:])
    with pytest.raises(InputError, match="header length"):
        read_safetensors(tmp_path / "len.safetensors")


def _softmax(S):
    S = S - S.max(-1, keepdims=True)
    P = np.exp(S)
    return P / P.sum(-1, keepdims=True)


def test_gpt2_mapping_matches_handwritten_attention(tmp_path):
    """GPT-2 attention (no mask, no biases) written the GPT-2 way: qkv = x @ c_attn, heads split, softmax(q kᵀ/√k) v,
    concatenated, @ c_proj.  The loaded model's particle field must equal it."""
    rng = np.random.default_rng(1)
    d, H, L, n = 8, 2, 2, 7
    t = {}
    for l in range(L):
        t[f"transformer.h.{l}.attn.c_attn.weight"] = rng.normal(size=(d, 3 * d)) / 3
        t[f"transformer.h.{l}.attn.c_attn.bias"] = rng.normal(size=3 * d)
        t[f"transformer.h.{l}.attn.c_proj.weight"] = rng.normal(size=(d, d)) / 3
    write_st(tmp_path / "g.safetensors", t)
    m = load_model(tmp_path / "g.safetensors", "gpt2", n_heads=H)
    assert m.n_layers == L and m.d == d and m.has_biases and "causal mask (modelled in analysis.surrogate)" in m.dropped
    with pytest.raises(InputError, match="biases"):     # never a silent drop
        m.layers()
    X = rng.normal(size=(n, d))
    k = d // H
    for l in range(L):
        qkv = X @ t[f"transformer.h.{l}.attn.c_attn.weight"]
        q, kk, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
        heads = [_softmax(q[:, h * k:(h + 1) * k] @ kk[:, h * k:(h + 1) * k].T / np.sqrt(k)) @ v[:, h * k:(h + 1) * k]
                 for h in range(H)]
        ref = np.concatenate(heads, axis=1) @ t[f"transformer.h.{l}.attn.c_proj.weight"]
        np.testing.assert_allclose(particle_field(X, m.layers(biases="drop")[l]), ref, rtol=1e-12, atol=1e-12)
        # and the A, V convention: <A x_i, x_j> is the logit of query i on key j
        A = m.A(l, 0)
        np.testing.assert_allclose(X @ A.T @ X.T, q[:, :k] @ kk[:, :k].T / np.sqrt(k), atol=1e-12)


def test_llama_grouped_query_mapping(tmp_path):
    rng = np.random.default_rng(2)
    d, H, Hkv, k, n = 8, 4, 2, 3, 6
    t = {"model.layers.0.self_attn.q_proj.weight": rng.normal(size=(H * k, d)).astype("<f4"),
         "model.layers.0.self_attn.k_proj.weight": rng.normal(size=(Hkv * k, d)).astype("<f4"),
         "model.layers.0.self_attn.v_proj.weight": rng.normal(size=(Hkv * k, d)).astype("<f4"),
         "model.layers.0.self_attn.o_proj.weight": rng.normal(size=(d, H * k)).astype("<f4")}
    np.savez(tmp_path / "l.npz", **t)
    m = load_model(tmp_path / "l.npz", "llama", n_heads=H, n_kv_heads=Hkv)
    assert any("rotary" in s for s in m.refused) and m.dropped == ("causal mask (modelled in analysis.surrogate)",)
    X = rng.normal(size=(n, d)) / 3
    W = {kk.split(".")[-2]: v.astype(float) for kk, v in t.items()}
    q = (X @ W["q_proj"].T).reshape(n, H, k)
    kx = (X @ W["k_proj"].T).reshape(n, Hkv, k)
    vx = (X @ W["v_proj"].T).reshape(n, Hkv, k)
    g = H // Hkv
    heads = [_softmax(q[:, h] @ kx[:, h // g].T / np.sqrt(k)) @ vx[:, h // g] for h in range(H)]
    ref = np.concatenate(heads, axis=1) @ W["o_proj"].T
    np.testing.assert_allclose(particle_field(X, m.layers()[0]), ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(InputError, match="divide"):
        load_model(tmp_path / "l.npz", "llama", n_heads=4, n_kv_heads=3)
    with pytest.raises(InputError, match="no layer 0"):
        load_model(tmp_path / "l.npz", "gpt2", n_heads=4, n_layers=1)


def _small_model(rng, d=3, H=2, k=2, L=2):
    return LowRankModel(*(0.5 * rng.normal(size=s) for s in [(L, H, k, d), (L, H, k, d), (L, H, k, d),
                                                              (L, H, d, k)]), "test", ())


def test_lowrank_paths_agree_with_the_package():
    """Low-rank particles vs :func:`simulate` on the model's Schedule (same ODE, RK4 both: agreement to the
    RK4 error at h = 0.01, ~1e-9); matrix moment ODE vs the entrywise derived GaussianODE on the Schedule."""
    rng = np.random.default_rng(3)
    m = _small_model(rng)
    X0 = rng.normal(size=(20, 3))
    ours = simulate_layers(X0, m.layers(), tau=0.5, steps_per_layer=50)
    ref = simulate(X0, m.schedule(tau=0.5), 1.0, steps=100, method="rk4", progress=False)
    np.testing.assert_allclose(ours[-1], ref.X, atol=1e-8)
    a0, S0 = np.array([0.3, -0.2, 0.1]), np.diag([0.5, 0.4, 0.3])
    sol = integrate_moments(a0, S0, m.layers(), tau=0.5, steps_per_layer=100)
    g = GaussianODE.from_schedule(m.schedule(tau=0.5), backend="numpy").integrate(a0, S0, 1.0, t_eval=[0.5, 1.0])
    for row, (al, Sg) in zip(sol.y[1:], zip(g.alpha, g.Sigma)):
        np.testing.assert_allclose(row[:3], al, atol=1e-8)      # RK4 at h = 0.005: error ~1e-10
        np.testing.assert_allclose(row[3:].reshape(3, 3), Sg, atol=1e-8)


def test_hidden_state_report(tmp_path):
    rng = np.random.default_rng(4)
    n, d = 300, 4
    iso = rng.normal(size=(n, d))
    two = np.where(rng.random(n)[:, None] < 0.5, 1.0, -1.0) * np.eye(d)[0] + 1e-3 * rng.normal(size=(n, d))
    one = np.eye(d)[1] * 3 + 1e-3 * rng.normal(size=(n, d))
    write_st(tmp_path / "h.safetensors", {"hidden": np.stack([iso, two, one])})
    H = read_hidden_states(tmp_path / "h.safetensors")
    r0, r1, r2 = hidden_state_report(H)
    # isotropic Gaussian: effective rank near d (sampling: singular values within ~n^{-1/2} relative), mean
    # cosine near 0 (± a few / n), Gaussianity not rejected at level 1e-3
    assert r0["effective_rank"] > 3.8 and abs(r0["mean_cosine"]) < 0.02 and not r0["gaussianity"]["gaussian_rejected"]
    assert r1["clusters"] == 2 and r1["effective_rank"] < 1.05 and r1["gaussianity"]["gaussian_rejected"]
    assert r2["clusters"] == 1 and r2["mean_cosine"] > 0.999
    assert sum(r2["histogram"]) == n * (n - 1)


def test_compare_with_ode_on_particle_hidden_states():
    """Hidden states made by the low-rank particles from Gaussian tokens: the moment ODE from layer 0's fit
    follows them within Monte-Carlo error (n = 1000: relative error of a covariance ~ sqrt(2/n) = 0.045; 0.2)."""
    rng = np.random.default_rng(5)
    m = _small_model(rng)
    X0 = rng.multivariate_normal([0.3, -0.2, 0.1], np.diag([0.5, 0.4, 0.3]), size=1000)
    H = simulate_layers(X0, m.layers(), tau=0.5, steps_per_layer=10)
    cmp = compare_with_ode(m, H, tau=0.5)
    assert len(cmp) == 3 and cmp[0]["Sigma_rel_error"] < 1e-12
    assert all(c["Sigma_rel_error"] < 0.2 and c["alpha_error"] < 0.2 for c in cmp)


@pytest.mark.slow
def test_gpt2_sized_synthetic_model(tmp_path, capsys):
    """d = 768, 12 layers, 12 heads, GPT-2 names in float32 (113 MB file): import, particles and the matrix
    moment ODE; CPU time (the box is shared: wall time says little) and peak memory printed."""
    rng = np.random.default_rng(6)
    d, H, L = 768, 12, 12
    t = {}
    for l in range(L):
        t[f"h.{l}.attn.c_attn.weight"] = (0.02 * rng.standard_normal((d, 3 * d))).astype("<f4")
        t[f"h.{l}.attn.c_proj.weight"] = (0.02 * rng.standard_normal((d, d))).astype("<f4")
    write_st(tmp_path / "gpt.safetensors", t)
    del t
    t0 = time.process_time()
    m = load_model(tmp_path / "gpt.safetensors", "gpt2", n_heads=H)
    t1 = time.process_time()
    X0 = rng.normal(size=(256, d))
    Hs = simulate_layers(X0, m.layers(), tau=1.0, steps_per_layer=4)
    t2 = time.process_time()
    sol = integrate_moments(X0.mean(0), np.cov(X0, rowvar=False), m.layers(), tau=1.0, steps_per_layer=4)
    t3 = time.process_time()
    assert m.Q.shape == (L, H, 64, d) and Hs.shape == (L + 1, 256, d)
    assert sol.status == "ok" and np.isfinite(sol.y).all()
    rep = hidden_state_report(Hs[:: 4])
    assert all(np.isfinite(r["effective_rank"]) for r in rep)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with capsys.disabled():
        print(f"\nd=768 L=12 H=12 (CPU seconds): load {t1 - t0:.1f} s, particles (n=256, 4 RK4 steps/layer) {t2 - t1:.1f} s, "
              f"matrix moment ODE (4 RK4 steps/layer) {t3 - t2:.1f} s, peak RSS {peak:.0f} MB")
