"""A faithful per-layer surrogate of a trained Transformer (:class:`~.model_io.Checkpoint`), in the toolkit's terms.

Every part of a block is modelled, or refused by name (never dropped):

* **Attention heads** with their biases, in the form of arXiv 2501.18322 plus two exact terms: with ``k`` the head
  dimension, ``A_h = W_K,hᵀ W_Q,h/√k`` (query ``x_i``, key ``x_j``, logit ``<A_h x_i, x_j>``), the query bias
  as a **key-linear term** ``r_h = W_K,hᵀ b_Q,h/√k`` (logit ``+ r_h·x_j``), the key bias not at all (its logit term
  depends on ``i`` alone and cancels in the softmax over ``j``: exact), the value ``V_h = W_O,h W_V,h``, and the
  value and output biases as one **constant velocity** ``c = Σ_h W_O,h b_V,h + b_O`` (softmax weights sum to 1):

      f(x)_i = Σ_h V_h Σ_j P^h_ij x_j + c,    P^h_ij ∝ exp(<A_h x_i, x_j> + r_h·x_j)  over the allowed j.

  Allowed keys: the tokens of the same sequence (each sequence is its own particle system), and ``j ≤ i`` when
  the checkpoint is causal (GPT-2, LLaMA).  Rotary positions (LLaMA) are refused by name: the logit then
  depends on ``j - i`` and there is no single ``A_h``.
* **Norms** (LayerNorm ``γ ⊙ (h - mean h)/sqrt(var h + ε) + β``, RMSNorm ``γ ⊙ h/sqrt(mean h² + ε)``) in their
  placement: Post-LN (BERT: ``h ← N1(h + f(h))``, ``h ← N2(h + mlp(h))``, embeddings normalised before layer 0)
  or Pre-LN (GPT-2, LLaMA: ``h ← h + f(N1 h)``, ``h ← h + mlp(N2 h)``, a final norm).  :meth:`Surrogate.
  norm_coordinates` writes a layer's attention in the normalised coordinate ``u`` (LayerNorm: ``u`` the centred
  token scaled to ``|u|² = d·var/(var + ε)``, i.e. on the sphere of radius ``√d`` in ``1⊥`` up to ε; RMSNorm:
  on that sphere in ℝᵈ) where the input is ``x = γ⊙u + β``: ``A_u = Γ A Γ`` (``Γ = diag γ``), key-linear term
  ``r_u = Γ(A β + r)``, value ``V_u = V Γ``, constant velocity ``c_u = V β + c`` (the terms in ``u_i`` alone
  cancel).  So a sphere model of the layer has inverse temperature set by ``|u|² = d`` and these weights.
* **MLP** (GELU, tanh-GELU, ReLU, gated SiLU) as a token-wise field: the particle path applies it exactly
  (a per-token map has no interaction); :func:`mlp_gaussian_closure` gives an *approximate* Gaussian closure
  (mean and covariance of the MLP's output under the fitted Gaussian, by a fixed-seed Monte-Carlo sample).

Size: everything here is numeric (low-rank factors; no ``d × d`` matrix per head unless asked), so ``d`` up to
1024 runs; nothing symbolic is started.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError


def _gelu(z):
    from scipy.special import erf

    return 0.5 * z * (1.0 + erf(z / np.sqrt(2.0)))


def _gelu_tanh(z):
    return 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z ** 3)))


def _silu(z):
    return z / (1.0 + np.exp(-z))


def allowed_mask(seq: np.ndarray, causal: bool) -> np.ndarray:
    """``(n, n)`` boolean: key ``j`` visible to query ``i`` (same sequence; ``j ≤ i`` within it if causal).
    Tokens of a sequence are in order."""
    seq = np.asarray(seq)
    M = seq[:, None] == seq[None, :]
    if causal:
        M &= np.tril(np.ones((len(seq), len(seq)), bool))
    return M


class Surrogate:
    """The per-layer surrogate of a :class:`~.model_io.Checkpoint` (module docstring)."""

    def __init__(self, ckpt):
        self.ckpt = ckpt
        self.m = ckpt.lowrank()
        self.causal = bool(ckpt.mapping["causal"])
        self.placement = ckpt.mapping["placement"]
        self.norm_kind = ckpt.mapping["norm"]
        self.d = ckpt.d
        self.L = ckpt.n_layers

    # ------------------------------------------------------------------ pieces
    def check_modelled(self) -> None:
        """Refuse, by name, what the surrogate cannot model."""
        if self.ckpt.refused:
            raise InputError("model", "cannot model: " + "; ".join(self.ckpt.refused))

    def norm(self, h, gb):
        """LayerNorm or RMSNorm ``gb = (γ, β or None)`` of the rows of ``h``; identity when ``gb`` is None."""
        if gb is None:
            return h
        g, b = gb
        if self.norm_kind == "layernorm":
            c = h - h.mean(-1, keepdims=True)
            out = c / np.sqrt((c * c).mean(-1, keepdims=True) + self.ckpt.eps) * g
        else:
            out = h / np.sqrt((h * h).mean(-1, keepdims=True) + self.ckpt.eps) * g
        return out if b is None else out + b

    def heads(self, l: int):
        """``(Q, K, Vv, WO, r, c)`` of layer ``l``: factors ``(H, k, d)``, ``(H, d, k)``, key-linear terms
        ``r (H, d)`` and the constant velocity ``c (d,)``."""
        m = self.m
        r = np.stack([m.r(l, h) for h in range(m.Q.shape[1])])
        return m.Q[l], m.K[l], m.Vv[l], m.WO[l], r, m.c(l)

    def probs(self, l: int, X, seq, factors=None) -> np.ndarray:
        """Attention weights ``(H, n, n)`` of layer ``l`` on the attention input ``X``."""
        self.check_modelled()
        Q, K, _, _, r, _ = factors or self.heads(l)
        k = Q.shape[1]
        M = allowed_mask(seq, self.causal)
        out = np.empty((Q.shape[0], len(X), len(X)))
        for h in range(Q.shape[0]):
            S = (X @ Q[h].T) @ (X @ K[h].T).T / np.sqrt(k) + (X @ r[h])[None, :]
            S = np.where(M, S, -np.inf)
            S -= S.max(axis=1, keepdims=True)
            P = np.exp(S)
            out[h] = P / P.sum(axis=1, keepdims=True)
        return out

    def field(self, l: int, X, seq, factors=None) -> np.ndarray:
        """The attention sub-layer's output ``f(X)`` (module docstring), ``X`` the attention input."""
        f = factors or self.heads(l)
        _, _, Vv, WO, _, c = f
        P = self.probs(l, X, seq, f)
        out = np.zeros_like(X) + c
        for h in range(P.shape[0]):
            out += (P[h] @ (X @ Vv[h].T)) @ WO[h].T
        return out

    def mlp(self, l: int, X) -> np.ndarray:
        """The MLP of layer ``l`` (token-wise)."""
        p = self.ckpt.blocks[l].mlp
        if p is None:
            return np.zeros_like(X)
        z = X @ p["W_in"].T + (0 if p["b_in"] is None else p["b_in"])
        act = self.ckpt.mapping["activation"]
        if act == "silu_gated":
            gz = X @ p["W_gate"].T + (0 if p["b_gate"] is None else p["b_gate"])
            a = _silu(gz) * z
        else:
            a = {"gelu": _gelu, "gelu_tanh": _gelu_tanh, "relu": lambda t: np.maximum(t, 0)}[act](z)
        return a @ p["W_out"].T + (0 if p["b_out"] is None else p["b_out"])

    def attention_input(self, l: int, h) -> np.ndarray:
        """What layer ``l``'s attention sees, from the residual stream ``h`` (Pre-LN: ``N1(h)``; Post-LN: ``h``)."""
        return self.norm(h, self.ckpt.blocks[l].norm1) if self.placement == "pre" else h

    def residual_field(self, l: int, h, seq) -> np.ndarray:
        """The attention update of the residual stream, ``f(attention_input(h))``: ``h + residual_field(h)`` is the
        network's attention residual step (one Euler step of length 1 of ``dh/dt = residual_field(h)``)."""
        return self.field(l, self.attention_input(l, h), seq)

    def finish(self, l: int, y) -> tuple:
        """The rest of layer ``l`` after the attention residual ``y = h + f``: ``(mid, mlp_out, out)`` (Post-LN:
        ``mid = N1(y)``, ``out = N2(mid + mlp(mid))``; Pre-LN: ``mid = y``, ``out = mid + mlp(N2 mid)``)."""
        b = self.ckpt.blocks[l]
        if self.placement == "post":
            mid = self.norm(y, b.norm1)
            g = self.mlp(l, mid)
            return mid, g, self.norm(mid + g, b.norm2)
        g = self.mlp(l, self.norm(y, b.norm2))
        return y, g, y + g

    def block(self, l: int, h, seq) -> dict:
        """One layer from the residual stream ``h``: ``attn_in``, ``attn_out`` (f, incl. biases), ``mid``, ``mlp_out``,
        ``out`` (the next residual stream)."""
        x = self.attention_input(l, h)
        f = self.field(l, x, seq)
        mid, g, out = self.finish(l, h + f)
        return {"attn_in": x, "attn_out": f, "mid": mid, "mlp_out": g, "out": out}

    def embed(self, ids, seq=None, positions=None) -> np.ndarray:
        """The residual stream entering layer 0 from token ids (word + position [+ type 0] embeddings; BERT:
        then its embedding LayerNorm).  ``positions``: default the index within each sequence."""
        gl = self.ckpt.globals
        if "embed.word" not in gl:
            raise InputError("model", "the file has no word embeddings: give hidden states (--states) instead of ids")
        ids = np.asarray(ids)
        W = gl["embed.word"]
        if ids.ndim != 1 or ids.size == 0 or ids.min() < 0 or ids.max() >= W.shape[0]:
            raise InputError("ids", f"token ids must lie in [0, {W.shape[0]})")
        seq = np.zeros(len(ids), int) if seq is None else np.asarray(seq)
        if positions is None:
            positions = np.concatenate([np.arange(c) for c in np.unique(seq, return_counts=True)[1]]) \
                if np.all(np.diff(seq) >= 0) else None
            if positions is None:
                raise InputError("seq", "tokens of one sequence must be consecutive")
        h = W[ids]
        if "embed.position" in gl:
            h = h + gl["embed.position"][positions]
        if "embed.type" in gl:
            h = h + gl["embed.type"][0]
        if "embed_norm.weight" in gl:
            h = self.norm(h, (gl["embed_norm.weight"], gl.get("embed_norm.bias")))
        return h

    def forward(self, h0, seq) -> np.ndarray:
        """Residual streams ``(L + 1, n, d)``: the input of every layer and the last output (before any final
        norm, which is not a layer)."""
        hs = [np.asarray(h0, float)]
        for l in range(self.L):
            hs.append(self.block(l, hs[-1], seq)["out"])
        return np.stack(hs)

    # ------------------------------------------------------------------ the theory's coordinates
    def norm_coordinates(self, l: int):
        """Layer ``l``'s attention in the normalised coordinate ``u`` (module docstring): factors with
        ``Q_u = Q Γ``, ``K_u = K Γ``, ``Vv_u = Vv Γ``, ``r_u = Γ(A β + r)``, ``c_u = V β + c``, and the norm
        ``(γ, β)`` they come from (Post-LN: the previous layer's second norm, or the embedding norm for
        layer 0; Pre-LN: this layer's first norm)."""
        ck = self.ckpt
        if self.placement == "pre":
            gb = ck.blocks[l].norm1
        elif l > 0:
            gb = ck.blocks[l - 1].norm2
        else:
            gb = (ck.globals["embed_norm.weight"], ck.globals.get("embed_norm.bias")) \
                if "embed_norm.weight" in ck.globals else None
        if gb is None:
            raise InputError("model", f"layer {l}'s attention input is not a normalised vector")
        g, beta = gb
        beta = np.zeros(self.d) if beta is None else beta
        Q, K, Vv, WO, r, c = self.heads(l)
        k = Q.shape[1]
        Qu, Ku, Vu = Q * g, K * g, Vv * g
        Abeta = np.einsum("hkd,hk->hd", K, Q @ beta) / np.sqrt(k)           # A_h β = K_hᵀ Q_h β/√k
        ru = (Abeta + r) * g
        cu = c + np.einsum("hdk,hk->d", WO, Vv @ beta)
        return (Qu, Ku, Vu, WO, ru, cu), (g, beta)

    def normalised(self, l: int, x) -> np.ndarray:
        """``u`` with ``x = γ⊙u + β`` for layer ``l``'s attention input ``x``."""
        _, (g, beta) = self.norm_coordinates(l)
        return (x - beta) / g


def mlp_gaussian_closure(sur: Surrogate, l: int, alpha, Sigma, n_samples: int = 4000, seed: int = 0):
    """APPROXIMATE Gaussian closure of layer ``l``'s MLP: mean and covariance of ``mlp(x)`` and cross-covariance
    with ``x`` for ``x ~ N(α, Σ)`` by a fixed-seed Monte-Carlo sample (``n_samples``: relative error of a mean
    ~ ``n_samples^{-1/2}``).  An MLP does not preserve Gaussians: this is moment matching, not an exact closure."""
    rng = np.random.default_rng(seed)
    X = rng.multivariate_normal(np.asarray(alpha, float), np.asarray(Sigma, float), size=n_samples,
                                method="eigh")
    Y = sur.mlp(l, X)
    return {"mean": Y.mean(0), "cov": np.cov(Y, rowvar=False),
            "cross": (X - X.mean(0)).T @ (Y - Y.mean(0)) / (n_samples - 1), "approximate": True,
            "n_samples": n_samples}
