"""Attention weights of trained models in: ``.safetensors`` / ``.npz`` -> per-layer, per-head factors.

File formats.  ``.safetensors`` is read by :func:`read_safetensors` (no dependency): 8 bytes little-endian
header length ``N``, ``N`` bytes of JSON ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, …}``
(offsets relative to the end of the header; an optional ``"__metadata__"`` entry), then the raw little-endian
tensors.  dtypes ``F64, F32, F16, BF16`` (BF16 widened exactly to float32), integer types as stored.  The
header is parsed by the package's strict JSON reader; every offset, shape and dtype is checked against the
file size before a byte is used.  ``.npz`` through ``numpy.load(allow_pickle=False)``.

Name mapping (:class:`NameMap`; presets :data:`PRESETS`), with ``x`` a token as a column vector and
``k = d / H`` the head dimension:

* ``gpt2``: ``h.{l}.attn.c_attn.weight`` ``(d, 3d)`` in Conv1D layout (``y = x W + b``), columns
  ``[q | k | v]``, head ``h`` the columns ``h k … (h+1) k - 1`` of each; ``h.{l}.attn.c_proj.weight`` ``(d, d)``
  (Conv1D), head ``h`` its rows ``h k …``.  So ``Q_h = W[:, hk:(h+1)k]ᵀ``, ``K_h``, ``Vv_h`` likewise from the
  next blocks, ``WO_h = c_proj[hk:(h+1)k, :]ᵀ``.  A leading ``transformer.`` is accepted.
* ``llama``: ``model.layers.{l}.self_attn.{q,k,v,o}_proj.weight`` in ``nn.Linear`` layout (``y = W x``):
  ``q_proj (H k, d)``, ``k_proj``/``v_proj`` ``(H_kv k, d)`` (grouped-query attention: query head ``h`` uses
  key/value head ``h // (H / H_kv)``), ``o_proj (d, H k)``, head ``h`` its columns.

Dropped, and stated in every :class:`LowRankModel`'s ``dropped``: biases (GPT-2's ``c_attn.bias`` and
``c_proj.bias``: a query bias is a key-independent shift of the logits plus a linear term, not of the
form ``<Ax, y>``), rotary position embeddings (LLaMA: position-dependent rotations of ``q``, ``k``; the
particle model has no positions), layer norms, the MLP blocks, the residual stream's discrete updates (the
continuous-depth model is ``dx/dt = attention(x)``, each layer acting for time ``τ``), causal masking.

Result: :class:`LowRankModel` with ``Q, K (L, H, k, d)``, ``Vv (L, H, k, d)``, ``WO (L, H, d, k)``, so that
``A_{l,h} = K_hᵀ Q_h / √k`` (the convention ``A = W_Kᵀ W_Q / √d_head``) and value ``V_{l,h} = WO_h Vv_h``
(``W_O W_V``).  ``schedule()`` turns it into a :class:`~symbolic_tpde.weights.Schedule` of structured softmax
heads (layers as time-dependent weights) for the rest of the package; large models use
:mod:`symbolic_tpde.numerics.particles.lowrank` directly (no ``d × d`` matrix per head is formed).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..inputs.checks import read_arrays

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U8": "u1"}
#: largest safetensors header accepted (bytes): a header lists names, shapes and offsets only
MAX_HEADER = 100 * 2 ** 20


def read_safetensors(path) -> dict[str, np.ndarray]:
    """All tensors of a ``.safetensors`` file as float/int numpy arrays (module docstring)."""
    from ..inputs.checks import parse_json

    p = Path(path)
    size = p.stat().st_size
    with open(p, "rb") as fh:
        head = fh.read(8)
        if len(head) != 8:
            raise InputError("safetensors", f"{p.name}: file shorter than its 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > min(MAX_HEADER, size - 8):
            raise InputError("safetensors", f"{p.name}: header length {n} exceeds the file or {MAX_HEADER} bytes")
        header = parse_json(fh.read(n), field="safetensors header", max_bytes=MAX_HEADER)
        data = np.memmap(p, dtype=np.uint8, mode="r", offset=8 + n) if size > 8 + n else np.zeros(0, np.uint8)
    if not isinstance(header, dict):
        raise InputError("safetensors", "header is not a JSON object")
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            dt, shape, (b, e) = meta["dtype"], tuple(int(s) for s in meta["shape"]), meta["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise InputError(f"safetensors.{name}", "entry needs dtype, shape and data_offsets [begin, end]") from None
        if dt not in _DTYPES:
            raise InputError(f"safetensors.{name}", f"unsupported dtype {dt!r}; supported {sorted(_DTYPES)}")
        item = np.dtype(_DTYPES[dt]).itemsize
        count = int(np.prod(shape)) if shape else 1
        if any(s < 0 for s in shape) or not (isinstance(b, int) and isinstance(e, int) and 0 <= b <= e <= data.size) \
                or e - b != count * item:
            raise InputError(f"safetensors.{name}", f"offsets {b}..{e} do not hold {shape} of {dt} inside the file")
        arr = np.frombuffer(data[b:e].tobytes(), dtype=_DTYPES[dt]).reshape(shape)
        if dt == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr
    return out


def read_tensors(path) -> dict[str, np.ndarray]:
    """``.safetensors``, ``.npz`` or ``.npy`` (the latter as ``{"": array}``)."""
    p = Path(path)
    if p.is_dir():
        raise InputError("file", f"{str(p)[-80:]!r} is a directory, not a tensor file")
    if p.suffix == ".safetensors":
        return read_safetensors(p)
    if p.suffix == ".npz":
        return read_arrays(p, "file", ".npz")
    if p.suffix == ".npy":
        return {"": read_arrays(p, "file", ".npy")}
    raise InputError("file", f"{p.name}: expected .safetensors, .npz or .npy")


@dataclass(frozen=True)
class NameMap:
    """Tensor names (``{l}`` the layer) and layout: ``fused`` (one ``(d, 3d)`` Conv1D ``qkv``) or separate
    ``nn.Linear`` projections ``q, k, v, o``; ``prefixes`` tried in order."""

    name: str
    q: str
    k: str = ""
    v: str = ""
    o: str = ""
    fused: bool = False
    prefixes: tuple[str, ...] = ("",)


PRESETS = {
    "gpt2": NameMap("gpt2", q="h.{l}.attn.c_attn.weight", o="h.{l}.attn.c_proj.weight", fused=True,
                    prefixes=("", "transformer.")),
    "llama": NameMap("llama", q="model.layers.{l}.self_attn.q_proj.weight", k="model.layers.{l}.self_attn.k_proj.weight",
                     v="model.layers.{l}.self_attn.v_proj.weight", o="model.layers.{l}.self_attn.o_proj.weight"),
}

DROPPED = {"gpt2": ("c_attn.bias and c_proj.bias (biases)", "layer norms", "MLP blocks", "causal mask",
                    "positional embeddings"),
           "llama": ("rotary position embeddings", "RMS norms", "MLP blocks", "causal mask")}


@dataclass(frozen=True)
class LowRankModel:
    """Per-layer, per-head factors (module docstring); ``dropped``: what the particle model leaves out."""

    Q: np.ndarray
    K: np.ndarray
    Vv: np.ndarray
    WO: np.ndarray
    preset: str
    dropped: tuple = field(default=())

    @property
    def n_layers(self) -> int:
        return self.Q.shape[0]

    @property
    def d(self) -> int:
        return self.Q.shape[-1]

    def layers(self) -> list[tuple]:
        return [(self.Q[l], self.K[l], self.Vv[l], self.WO[l]) for l in range(self.n_layers)]

    def A(self, l: int, h: int) -> np.ndarray:
        return self.K[l, h].T @ self.Q[l, h] / np.sqrt(self.Q.shape[2])

    def V(self, l: int, h: int) -> np.ndarray:
        return self.WO[l, h] @ self.Vv[l, h]

    def schedule(self, tau: float = 1.0):
        """Layers as time-dependent weights: a :class:`~symbolic_tpde.weights.Schedule` of structured softmax
        heads ``(Q, K, V, WO)``, layer ``l`` on ``[lτ, (l+1)τ)``."""
        from ..weights import Schedule, make_head, make_weights

        return Schedule.layers([(tau * (l + 1), make_weights([
            make_head("softmax", self.d, where=f"layer {l} head {h}", Q=self.Q[l, h], K=self.K[l, h],
                      V=self.Vv[l, h], WO=self.WO[l, h]) for h in range(self.Q.shape[1])]))
            for l in range(self.n_layers)])


def _get(tensors, nm: NameMap, template: str, l: int) -> np.ndarray:
    for pre in nm.prefixes:
        key = pre + template.format(l=l)
        if key in tensors:
            arr = np.asarray(tensors[key], dtype=np.float64)
            if not np.isfinite(arr).all():
                raise InputError(key, "non-finite weights")
            return arr
    raise InputError("weights", f"tensor {template.format(l=l)!r} not found (preset {nm.name!r}); names present "
                     f"start with {sorted(tensors)[:4]}")


def load_model(path_or_tensors, preset: str, n_heads: int, n_kv_heads: int | None = None,
               n_layers: int | None = None) -> LowRankModel:
    """Read ``W_Q, W_K, W_V, W_O`` of every layer and head (module docstring).  ``n_layers``: default all
    layers present (counted from 0 until a name is missing)."""
    from ..inputs.checks import MAX_DIM_NUMERIC

    if preset not in PRESETS:
        raise InputError("preset", f"unknown preset {preset!r}; expected one of {sorted(PRESETS)}")
    nm = PRESETS[preset]
    tensors = path_or_tensors if isinstance(path_or_tensors, dict) else read_tensors(path_or_tensors)
    if n_layers is None:
        n_layers = 0
        while any(p + nm.q.format(l=n_layers) in tensors for p in nm.prefixes):
            n_layers += 1
    if n_layers < 1:
        raise InputError("weights", f"no layer found under the {preset!r} names ({nm.q.format(l=0)})")
    H = int(n_heads)
    Hkv = H if n_kv_heads is None else int(n_kv_heads)
    if H < 1 or Hkv < 1 or H % Hkv:
        raise InputError("n_kv_heads", f"must divide n_heads = {H}, got {Hkv}")
    Qs, Ks, Vs, Os = [], [], [], []
    for l in range(n_layers):
        if nm.fused:
            W = _get(tensors, nm, nm.q, l)
            d = W.shape[0]
            if W.shape != (d, 3 * d) or d % H:
                raise InputError(nm.q.format(l=l), f"expected (d, 3d) with d divisible by {H} heads, got {W.shape}")
            Wq, Wk, Wv = W[:, :d].T, W[:, d:2 * d].T, W[:, 2 * d:].T          # nn.Linear layout (out, in)
            Wo = _get(tensors, nm, nm.o, l).T
        else:
            Wq, Wk, Wv, Wo = (_get(tensors, nm, t, l) for t in (nm.q, nm.k, nm.v, nm.o))
            d = Wq.shape[1]
        k = Wq.shape[0] // H
        if Wq.shape != (H * k, d) or Wk.shape != (Hkv * k, d) or Wv.shape != (Hkv * k, d) or Wo.shape != (d, H * k):
            raise InputError(f"layer {l}", f"projection shapes {Wq.shape}, {Wk.shape}, {Wv.shape}, {Wo.shape} do not "
                             f"fit {H} query / {Hkv} key-value heads of dimension {k}")
        if d > MAX_DIM_NUMERIC:
            raise InputError("d", f"{d} exceeds {MAX_DIM_NUMERIC}")
        g = H // Hkv
        Qs.append(Wq.reshape(H, k, d))
        Ks.append(Wk.reshape(Hkv, k, d)[np.arange(H) // g])
        Vs.append(Wv.reshape(Hkv, k, d)[np.arange(H) // g])
        Os.append(Wo.reshape(d, H, k).transpose(1, 0, 2))
    try:
        Q, K, V, O = (np.stack(x) for x in (Qs, Ks, Vs, Os))
    except ValueError:
        raise InputError("weights", "layers have different shapes") from None
    return LowRankModel(Q, K, V, O, preset, DROPPED[preset])


def read_hidden_states(path, name: str | None = None) -> np.ndarray:
    """Hidden states ``(layers, tokens, d)`` from ``.npy``, or the array ``name`` (default: the only one) of an
    ``.npz``/``.safetensors`` file."""
    t = read_tensors(path)
    if name is None:
        if len(t) != 1:
            raise InputError("name", f"the file holds {sorted(t)}; say which array")
        name = next(iter(t))
    if name not in t:
        raise InputError("name", f"no array {name!r}; the file holds {sorted(t)}")
    H = np.asarray(t[name], dtype=np.float64)
    if H.ndim != 3 or not np.isfinite(H).all():
        raise InputError(name, f"expected finite hidden states (layers, tokens, d), got shape {H.shape}")
    return H
