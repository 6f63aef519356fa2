"""Attention weights of trained models in: ``.safetensors`` / ``.npz`` -> per-layer, per-head factors.

File formats.  ``.safetensors`` is read by :func:`read_safetensors` (no dependency): 8 bytes little-endian
header length ``N``, ``N`` bytes of JSON ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, …}``
(offsets relative to the end of the header; an optional ``"__metadata__"`` entry), then the raw little-endian
tensors.  dtypes ``F64, F32, F16, BF16`` (BF16 widened exactly to float32), integer types as stored.  The
header is parsed by the package's strict JSON reader; every offset, shape and dtype is checked against the
file size before a byte is used.  ``.npz`` through ``numpy.load(allow_pickle=False)``.

Layouts (:data:`PRESETS`; each is a *mapping*, the same form a user's JSON mapping file takes, read strictly by
:func:`read_mapping`): roles (:data:`LAYER_ROLES`, :data:`GLOBAL_ROLES`) → tensor names with ``{l}`` the layer,
prefixes tried in order, the norm (LayerNorm/RMSNorm/none) and its placement (post/pre), causal or not, rotary or
not, the MLP activation, and ``other``: the file's tensors knowingly left out, each with its reason.  Without a
preset, :func:`detect_preset` picks the one whose layer-0 query projection is in the file; when none matches the
error lists the file's layer-0 keys and names ``--mapping``.  With ``x`` a token as a column vector:

* ``bert`` (BERT-style encoders, MiniLM sentence encoders): ``encoder.layer.{l}.attention.self.{query,key,value}``,
  ``attention.output.dense``/``LayerNorm``, ``intermediate.dense``, ``output.dense``/``LayerNorm``, embeddings and
  their LayerNorm; ``nn.Linear`` layout; Post-LN, GELU, bidirectional; ``pooler.*`` and ``position_ids`` unused.
* ``gpt2``: ``h.{l}.attn.c_attn`` ``(d, 3d)`` in Conv1D layout (``y = x W + b``), columns ``[q | k | v]``;
  ``attn.c_proj``, ``ln_1``, ``ln_2``, ``mlp.c_fc``, ``mlp.c_proj``; ``wte``, ``wpe``, ``ln_f``; Pre-LN, tanh-GELU,
  causal (the ``attn.bias`` mask buffers are accounted as such).  A leading ``transformer.`` is accepted.
* ``llama``: ``model.layers.{l}.self_attn.{q,k,v,o}_proj`` (weights, and biases when the file has them: they are
  read, never dropped), ``input_layernorm``, ``post_attention_layernorm``, ``mlp.{gate,up,down}_proj``,
  ``model.norm``, ``model.embed_tokens``; RMSNorm, Pre-norm, gated SiLU, causal; grouped-query attention (query
  head ``h`` uses key/value head ``h // (H / H_kv)``).  Rotary positions are *refused* by name (not a tensor:
  the logit depends on ``j - i``, no single ``A`` per head).

Heads, ε and the activation come from the arguments, else the mapping, else a ``config.json`` beside the file.
:func:`load_checkpoint` gives a :class:`Checkpoint` (every block in ``nn.Linear`` layout and the account of
every tensor: ``used`` with its role, ``unused`` with its reason); the per-layer surrogate of the whole block is
:mod:`.surrogate`.  :meth:`Checkpoint.lowrank` gives a :class:`LowRankModel` with ``Q, K (L, H, k, d)``,
``Vv (L, H, k, d)``, ``WO (L, H, d, k)`` and the biases, so that ``A_{l,h} = K_hᵀ Q_h / √k`` (the convention
``A = W_Kᵀ W_Q / √d_head``), value ``V_{l,h} = WO_h Vv_h`` (``W_O W_V``), key-linear term ``r_{l,h} = K_hᵀ b_Q/√k``
and constant velocity ``c_l = Σ_h WO_h b_V + b_O``.  ``schedule()`` turns a small bias-free model into a
:class:`~symbolic_tpde.weights.Schedule` (refused above ``d =`` :data:`SYMBOLIC_MAX_D` unless asked: a Schedule
feeds the symbolic derivations); large models use :mod:`.surrogate` and
:mod:`symbolic_tpde.numerics.particles.lowrank` (no ``d × d`` matrix per head is formed).
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


# ---------------------------------------------------------------------------------------------------------------
# Checkpoint layouts: a preset is a mapping (the same strict form a user's JSON mapping file takes)
# ---------------------------------------------------------------------------------------------------------------

#: per-layer roles of a block (``nn.Linear`` layout ``(out, in)`` after reading; ``qkv`` a fused projection)
LAYER_ROLES = ("q.weight", "q.bias", "k.weight", "k.bias", "v.weight", "v.bias", "qkv.weight", "qkv.bias",
               "o.weight", "o.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias",
               "mlp_in.weight", "mlp_in.bias", "mlp_gate.weight", "mlp_gate.bias", "mlp_out.weight", "mlp_out.bias")
#: whole-model roles
GLOBAL_ROLES = ("embed.word", "embed.position", "embed.type", "embed_norm.weight", "embed_norm.bias",
                "final_norm.weight", "final_norm.bias")
MAPPING_FIELDS = ("name", "layout", "norm", "placement", "causal", "rotary", "activation", "prefixes", "layer",
                  "global", "other", "heads", "kv_heads", "eps")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu_gated")

_BERT_LAYER = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
               "o": "attention.output.dense", "norm1": "attention.output.LayerNorm", "norm2": "output.LayerNorm",
               "mlp_in": "intermediate.dense", "mlp_out": "output.dense"}
_LLAMA_LAYER = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
                "norm1": "input_layernorm", "norm2": "post_attention_layernorm", "mlp_in": "mlp.up_proj",
                "mlp_gate": "mlp.gate_proj", "mlp_out": "mlp.down_proj"}
_GPT2_LAYER = {"qkv": "attn.c_attn", "o": "attn.c_proj", "norm1": "ln_1", "norm2": "ln_2", "mlp_in": "mlp.c_fc",
               "mlp_out": "mlp.c_proj"}


def _expand(prefix: str, parts: dict) -> dict:
    return {f"{role}.{wb}": f"{prefix}{name}.{wb}" for role, name in parts.items() for wb in ("weight", "bias")}


PRESETS: dict[str, dict] = {
    "bert": {"name": "bert", "layout": "linear", "norm": "layernorm", "placement": "post", "causal": False,
             "rotary": False, "activation": "gelu", "prefixes": ["", "bert."],
             "layer": _expand("encoder.layer.{l}.", _BERT_LAYER),
             "global": {"embed.word": "embeddings.word_embeddings.weight",
                        "embed.position": "embeddings.position_embeddings.weight",
                        "embed.type": "embeddings.token_type_embeddings.weight",
                        "embed_norm.weight": "embeddings.LayerNorm.weight", "embed_norm.bias": "embeddings.LayerNorm.bias"},
             "other": {"embeddings.position_ids": "index buffer 0..n-1 (not a weight)",
                       "pooler.dense.weight": "sentence-level pooler after the last layer (outside the token dynamics)",
                       "pooler.dense.bias": "sentence-level pooler after the last layer (outside the token dynamics)"}},
    "gpt2": {"name": "gpt2", "layout": "conv1d", "norm": "layernorm", "placement": "pre", "causal": True,
             "rotary": False, "activation": "gelu_tanh", "prefixes": ["", "transformer."],
             "layer": _expand("h.{l}.", _GPT2_LAYER),
             "global": {"embed.word": "wte.weight", "embed.position": "wpe.weight", "final_norm.weight": "ln_f.weight",
                        "final_norm.bias": "ln_f.bias"},
             "other": {"h.{l}.attn.bias": "causal-mask buffer (the mask is modelled: causal = true)",
                       "h.{l}.attn.masked_bias": "causal-mask fill value buffer (the mask is modelled)",
                       "lm_head.weight": "output head after the final norm (outside the token dynamics)"}},
    "llama": {"name": "llama", "layout": "linear", "norm": "rmsnorm", "placement": "pre", "causal": True,
              "rotary": True, "activation": "silu_gated", "prefixes": [""],
              "layer": _expand("model.layers.{l}.", _LLAMA_LAYER),
              "global": {"embed.word": "model.embed_tokens.weight", "final_norm.weight": "model.norm.weight"},
              "other": {"model.layers.{l}.self_attn.rotary_emb.inv_freq": "rotary frequency buffer (rotary positions "
                        "are refused by the surrogate: no single A per head)",
                        "lm_head.weight": "output head after the final norm (outside the token dynamics)"}},
}

_CONFIG_KEYS = {"heads": ("num_attention_heads", "n_head"), "kv_heads": ("num_key_value_heads",),
                "eps": ("layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps"), "activation": ("hidden_act",)}
_DEFAULT_EPS = {"layernorm": 1e-5, "rmsnorm": 1e-6, "none": 0.0}
_ACT_FROM_CONFIG = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
                    "silu": "silu_gated"}


def read_mapping(path) -> dict:
    """A user's mapping file (strict JSON, the fields of :data:`MAPPING_FIELDS`; see :data:`PRESETS` for the form:
    ``layer`` maps roles of :data:`LAYER_ROLES` to names with ``{l}``, ``global`` roles of :data:`GLOBAL_ROLES`,
    ``other`` names the file's tensors the model knowingly leaves out, each with its reason)."""
    from ..inputs.checks import parse_json

    p = Path(path)
    if not p.is_file():
        raise InputError("mapping", f"{p}: not a readable file")
    m = parse_json(p.read_bytes(), field="mapping")
    return check_mapping(m)


def check_mapping(m) -> dict:
    """Every field of a mapping checked by name (unknown fields refused, roles and values validated)."""
    if not isinstance(m, dict):
        raise InputError("mapping", "must be a JSON object")
    for k in m:
        if k not in MAPPING_FIELDS:
            raise InputError(f"mapping.{k}", f"unknown field; allowed: {', '.join(MAPPING_FIELDS)}")
    choices = {"layout": ("linear", "conv1d"), "norm": ("layernorm", "rmsnorm", "none"),
               "placement": ("post", "pre"), "activation": ACTIVATIONS}
    out = {"name": "mapping", "layout": "linear", "norm": "layernorm", "placement": "pre", "causal": False,
           "rotary": False, "activation": "gelu", "prefixes": [""], "layer": {}, "global": {}, "other": {}}
    out.update(m)
    for k, allowed in choices.items():
        if out[k] not in allowed:
            raise InputError(f"mapping.{k}", f"must be one of {list(allowed)}, got {out[k]!r}")
    for k in ("causal", "rotary"):
        if not isinstance(out[k], bool):
            raise InputError(f"mapping.{k}", "must be true or false")
    for k, roles in (("layer", LAYER_ROLES), ("global", GLOBAL_ROLES), ("other", None)):
        if not isinstance(out[k], dict) or not all(isinstance(v, str) for v in out[k].values()):
            raise InputError(f"mapping.{k}", "must be an object of strings")
        for role in out[k]:
            if roles is not None and role not in roles:
                raise InputError(f"mapping.{k}.{role}", f"unknown role; allowed: {', '.join(roles)}")
    for role, t in out["layer"].items():
        if "{l}" not in t or t.replace("{l}", "").count("{") or t.count("}") != 1:
            raise InputError(f"mapping.layer.{role}", "the name must hold '{l}' (the layer index) and no other brace")
    if not isinstance(out["prefixes"], list) or not all(isinstance(p, str) for p in out["prefixes"]) or not out["prefixes"]:
        raise InputError("mapping.prefixes", "must be a non-empty list of strings")
    L = out["layer"]
    if "qkv.weight" not in L and not all(f"{r}.weight" in L for r in "qkv"):
        raise InputError("mapping.layer", "needs q.weight, k.weight, v.weight (or qkv.weight) and o.weight")
    if "o.weight" not in L:
        raise InputError("mapping.layer", "needs o.weight")
    for k in ("heads", "kv_heads"):
        if k in out and (not isinstance(out[k], int) or isinstance(out[k], bool) or out[k] < 1):
            raise InputError(f"mapping.{k}", "must be a positive integer")
    if "eps" in out and (not isinstance(out["eps"], (int, float)) or not 0 <= out["eps"] < 1):
        raise InputError("mapping.eps", "must be a number in [0, 1)")
    return out


def _layer0_key(m: dict, tensors) -> str | None:
    first = m["layer"].get("qkv.weight") or m["layer"]["q.weight"]
    for pre in m["prefixes"]:
        if pre + first.format(l=0) in tensors:
            return pre
    return None


def detect_preset(tensors) -> str:
    """The preset whose layer-0 query (or fused) projection is in the file; else an InputError listing the
    file's layer-0 keys and naming ``--mapping``."""
    for name, m in PRESETS.items():
        if _layer0_key(m, tensors) is not None:
            return name
    import re

    keys = [k for k in sorted(tensors) if re.search(r"(^|\.)0\.", k)] or sorted(tensors)[:20]
    raise InputError("weights", f"no preset ({', '.join(PRESETS)}) matches the file's keys; layer-0 keys: "
                     f"{', '.join(keys[:40])}{' …' if len(keys) > 40 else ''}. Give a JSON mapping with --mapping "
                     f"(Python: mapping=...; form in docs/models.md)")


@dataclass
class Block:
    """One layer in ``nn.Linear`` layout (``y = W x + b``); a bias is ``None`` only when the file has none."""

    Wq: np.ndarray
    Wk: np.ndarray
    Wv: np.ndarray
    Wo: np.ndarray
    bq: np.ndarray | None = None
    bk: np.ndarray | None = None
    bv: np.ndarray | None = None
    bo: np.ndarray | None = None
    norm1: tuple | None = None       # (gamma, beta or None)
    norm2: tuple | None = None
    mlp: dict | None = None          # W_in, b_in, W_gate, b_gate, W_out, b_out


@dataclass
class Checkpoint:
    """A trained model's blocks with everything the file holds, and the account of every tensor:
    ``used`` (file key → role) and ``unused`` (file key → reason); ``refused`` names parts of the architecture
    that the surrogate cannot model (LLaMA's rotary positions)."""

    mapping: dict
    blocks: list
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d: int
    eps: float
    globals: dict
    used: dict
    unused: dict
    source: str = ""
    config: dict = field(default_factory=dict)
    missing: tuple = ()

    @property
    def arch(self) -> str:
        return self.mapping["name"]

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    @property
    def refused(self) -> tuple:
        return ("rotary position embeddings (architecture, no tensor: the logit depends on j - i, so there is no "
                "single A per head)",) if self.mapping["rotary"] else ()

    def account(self) -> dict:
        """JSON-able account: every tensor of the file, used (with role) or not (with reason)."""
        return {"preset": self.arch, "source": self.source, "d": self.d, "layers": self.n_layers,
                "heads": self.n_heads, "kv_heads": self.n_kv_heads, "head_dim": self.head_dim,
                "norm": self.mapping["norm"], "placement": self.mapping["placement"],
                "causal": self.mapping["causal"], "activation": self.mapping["activation"], "eps": self.eps,
                "used": dict(sorted(self.used.items())), "unused": dict(sorted(self.unused.items())),
                "refused": list(self.refused), "missing_from_file": list(self.missing), "tensors_in_file": len(self.used) + len(self.unused)}

    def lowrank(self) -> "LowRankModel":
        """Per-head factors and biases (:class:`LowRankModel`), query heads expanded over grouped K/V heads."""
        H, Hkv, k, d = self.n_heads, self.n_kv_heads, self.head_dim, self.d
        g = H // Hkv
        idx = np.arange(H) // g
        Q, K, Vv, WO, bQ, bK, bV, bO = [], [], [], [], [], [], [], []
        z = np.zeros
        for b in self.blocks:
            Q.append(b.Wq.reshape(H, k, d))
            K.append(b.Wk.reshape(Hkv, k, d)[idx])
            Vv.append(b.Wv.reshape(Hkv, k, d)[idx])
            WO.append(b.Wo.reshape(d, H, k).transpose(1, 0, 2))
            bQ.append(z((H, k)) if b.bq is None else b.bq.reshape(H, k))
            bK.append(z((H, k)) if b.bk is None else b.bk.reshape(Hkv, k)[idx])
            bV.append(z((H, k)) if b.bv is None else b.bv.reshape(Hkv, k)[idx])
            bO.append(z(d) if b.bo is None else b.bo)
        dropped = tuple(p for p, present in (
            ("norms (LayerNorm/RMSNorm: modelled in analysis.surrogate)",
             any(b.norm1 is not None or b.norm2 is not None for b in self.blocks)),
            ("MLP blocks (modelled in analysis.surrogate)", any(b.mlp for b in self.blocks)),
            ("causal mask (modelled in analysis.surrogate)", self.mapping["causal"])) if present)
        return LowRankModel(*(np.stack(x) for x in (Q, K, Vv, WO)), self.arch, dropped,
                            *(np.stack(x) for x in (bQ, bK, bV, bO)), refused=self.refused)


def _finite(key, arr):
    arr = np.asarray(arr, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise InputError(key, "non-finite weights")
    return arr


def _config_beside(path) -> dict:
    """``config.json`` in the weight file's folder (Hugging Face layout), strict JSON, or ``{}``."""
    from ..inputs.checks import parse_json

    if path is None:
        return {}
    c = Path(path).parent / "config.json"
    if not c.is_file():
        return {}
    cfg = parse_json(c.read_bytes(), field="config.json")
    return cfg if isinstance(cfg, dict) else {}


def load_checkpoint(path_or_tensors, preset: str | None = None, *, mapping=None, n_heads: int | None = None,
                    n_kv_heads: int | None = None, n_layers: int | None = None, config: dict | None = None) -> Checkpoint:
    """Read every block of a checkpoint.  ``preset``: ``bert``, ``gpt2``, ``llama`` or ``None`` (detected from
    the file's own keys); ``mapping``: a dict or JSON file path (:func:`read_mapping`) for other layouts.
    Heads, ε and the activation come from the arguments, else the mapping, else ``config.json`` beside the file."""
    from ..inputs.checks import MAX_DIM_NUMERIC

    path = None if isinstance(path_or_tensors, dict) else path_or_tensors
    tensors = path_or_tensors if path is None else read_tensors(path)
    if mapping is not None:
        m = check_mapping(mapping) if isinstance(mapping, dict) else read_mapping(mapping)
    else:
        if preset is None:
            preset = detect_preset(tensors)
        if preset not in PRESETS:
            raise InputError("preset", f"unknown preset {preset!r}; expected one of {sorted(PRESETS)} or a mapping")
        m = dict(PRESETS[preset])
    cfg = _config_beside(path) if config is None else config

    def from_cfg(what):
        for k in _CONFIG_KEYS[what]:
            if k in cfg:
                return cfg[k]
        return None

    H = n_heads if n_heads is not None else m.get("heads", from_cfg("heads"))
    if H is None:
        raise InputError("heads", "the number of attention heads is not in the file: give --heads (or n_heads=, "
                         "or a config.json beside the file)")
    Hkv = n_kv_heads if n_kv_heads is not None else m.get("kv_heads", from_cfg("kv_heads") or H)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (H, Hkv)) or H < 1 or Hkv < 1 or H % Hkv:
        raise InputError("n_kv_heads", f"key/value heads must divide n_heads = {H}, got {Hkv}")
    eps = m.get("eps", from_cfg("eps"))
    eps = _DEFAULT_EPS[m["norm"]] if eps is None else float(eps)
    act = from_cfg("activation")
    if mapping is None and act is not None and _ACT_FROM_CONFIG.get(act) not in (None, m["activation"]):
        if _ACT_FROM_CONFIG[act] == "silu_gated" or m["activation"] == "silu_gated":
            raise InputError("config.json", f"hidden_act {act!r} does not fit the {m['name']!r} preset")
        m["activation"] = _ACT_FROM_CONFIG[act]
    pre = _layer0_key(m, tensors)
    if pre is None:
        first = m["layer"].get("qkv.weight") or m["layer"]["q.weight"]
        raise InputError("weights", f"no layer 0 under the {m['name']!r} names ({first.format(l=0)}, prefixes "
                         f"{m['prefixes']})")
    used: dict = {}

    def get(template, l=None, role=""):
        key = pre + (template.format(l=l) if l is not None else template)
        if key not in tensors:
            return None
        used[key] = role if l is None else f"layer {l} {role}"
        return _finite(key, tensors[key])

    if n_layers is None:
        first = m["layer"].get("qkv.weight") or m["layer"]["q.weight"]
        n_layers = 0
        while pre + first.format(l=n_layers) in tensors:
            n_layers += 1
    blocks, missing = [], set()
    conv = m["layout"] == "conv1d"
    for l in range(n_layers):
        r = {role: get(t, l, role) for role, t in m["layer"].items()}
        if r.get("qkv.weight") is not None:
            W = r["qkv.weight"].T if conv else r["qkv.weight"]
            if W.shape[0] % 3:
                raise InputError(f"layer {l} qkv.weight", f"first dimension {W.shape} is not 3 blocks")
            r["q.weight"], r["k.weight"], r["v.weight"] = np.split(W, 3, axis=0)
            if r.get("qkv.bias") is not None:
                r["q.bias"], r["k.bias"], r["v.bias"] = np.split(r["qkv.bias"], 3)
        elif conv:
            for p in "qkv":
                if r.get(f"{p}.weight") is not None:
                    r[f"{p}.weight"] = r[f"{p}.weight"].T
        for p in "qkvo":
            if r.get(f"{p}.weight") is None:
                raise InputError("weights", f"layer {l}: the {p} projection "
                                 f"({pre + m['layer'].get(p + '.weight', '?').format(l=l)}) is missing")
        Wo = r["o.weight"].T if conv else r["o.weight"]
        Wq, Wk, Wv = r["q.weight"], r["k.weight"], r["v.weight"]
        d = Wq.shape[1]
        k = Wq.shape[0] // H
        if Wq.shape != (H * k, d) or Wk.shape != (Hkv * k, d) or Wv.shape != (Hkv * k, d) or Wo.shape != (d, H * k):
            raise InputError(f"layer {l}", f"projection shapes {Wq.shape}, {Wk.shape}, {Wv.shape}, {Wo.shape} do not "
                             f"fit {H} query / {Hkv} key-value heads of dimension {k}")
        if d > MAX_DIM_NUMERIC:
            raise InputError("d", f"{d} exceeds {MAX_DIM_NUMERIC}")
        for p, n in (("q", H * k), ("k", Hkv * k), ("v", Hkv * k), ("o", d)):
            b = r.get(f"{p}.bias")
            if b is not None and b.shape != (n,):
                raise InputError(f"layer {l} {p}.bias", f"shape {b.shape}, expected ({n},)")
        norms = []
        for nm in ("norm1", "norm2"):
            g, b = r.get(f"{nm}.weight"), r.get(f"{nm}.bias")
            if m["norm"] == "none" or g is None:
                if g is not None or b is not None:
                    raise InputError(f"layer {l} {nm}", "a norm tensor with norm = 'none'")
                if m["norm"] != "none":
                    missing.add(f"{nm} ({m['norm']}; the {m['name']!r} layout has it, the file does not: identity)")
                norms.append(None)
                continue
            if g.shape != (d,) or (b is not None and b.shape != (d,)):
                raise InputError(f"layer {l} {nm}", f"shapes {g.shape}, {None if b is None else b.shape}, expected ({d},)")
            if m["norm"] == "rmsnorm" and b is not None:
                raise InputError(f"layer {l} {nm}.bias", "RMSNorm has no shift")
            norms.append((g, b))
        mlp = None
        if r.get("mlp_in.weight") is None:
            missing.add(f"MLP (the {m['name']!r} layout has it, the file does not: left out)")
        else:
            tr = (lambda a: a.T) if conv else (lambda a: a)
            mlp = {"W_in": tr(r["mlp_in.weight"]), "b_in": r.get("mlp_in.bias"),
                   "W_gate": None if r.get("mlp_gate.weight") is None else tr(r["mlp_gate.weight"]),
                   "b_gate": r.get("mlp_gate.bias"),
                   "W_out": None if r.get("mlp_out.weight") is None else tr(r["mlp_out.weight"]),
                   "b_out": r.get("mlp_out.bias")}
            if mlp["W_out"] is None or mlp["W_in"].shape[1] != d or mlp["W_out"].shape != (d, mlp["W_in"].shape[0]):
                raise InputError(f"layer {l} mlp", "mlp_in (m, d) and mlp_out (d, m) weights needed with matching shapes")
            if (m["activation"] == "silu_gated") != (mlp["W_gate"] is not None):
                raise InputError(f"layer {l} mlp", "a gated MLP (mlp_gate) goes with activation 'silu_gated' only")
        blocks.append(Block(Wq, Wk, Wv, Wo, r.get("q.bias"), r.get("k.bias"), r.get("v.bias"), r.get("o.bias"),
                            norms[0], norms[1], mlp))
    if not blocks:
        raise InputError("weights", f"no layer found under the {m['name']!r} names")
    if len({b.Wq.shape for b in blocks}) != 1:
        raise InputError("weights", "layers have different shapes")
    gl = {role: get(t, None, role) for role, t in m["global"].items()}
    gl = {k: v for k, v in gl.items() if v is not None}
    unused = {}
    import re

    others = [(re.compile("^" + re.escape(pre + t).replace(re.escape("{l}"), r"\d+") + "$"), why)
              for t, why in m["other"].items()]
    for key in tensors:
        if key in used:
            continue
        why = next((w for rx, w in others if rx.match(key)), None)
        if why is None:
            lm = re.search(r"(?:^|\.)(\d+)\.", key)
            why = (f"not a role of the {m['name']!r} layout" if lm is None or int(lm.group(1)) < n_layers
                   else f"layer {lm.group(1)} beyond the {n_layers} layers read")
        unused[key] = why
    return Checkpoint(m, blocks, H, Hkv, blocks[0].Wq.shape[0] // H, blocks[0].Wq.shape[1], eps, gl, used, unused,
                      source="" if path is None else str(path), config=cfg, missing=tuple(sorted(missing)))


@dataclass(frozen=True)
class LowRankModel:
    """Per-layer, per-head factors (module docstring) and biases ``bQ, bK, bV (L, H, k)``, ``bO (L, d)``;
    ``dropped``: parts of the checkpoint the attention-only particle model leaves out (present in the file),
    each naming where it is modelled; ``refused``: parts of the architecture no particle model here can
    represent (LLaMA's rotary positions: not a tensor of the file).  :meth:`layers` gives the bias-free factors of
    :mod:`symbolic_tpde.numerics.particles.lowrank`; the biased field is :mod:`.surrogate`'s."""

    Q: np.ndarray
    K: np.ndarray
    Vv: np.ndarray
    WO: np.ndarray
    preset: str
    dropped: tuple = field(default=())
    bQ: np.ndarray | None = None
    bK: np.ndarray | None = None
    bV: np.ndarray | None = None
    bO: np.ndarray | None = None
    refused: tuple = ()
    refused: tuple = ()

    @property
    def n_layers(self) -> int:
        return self.Q.shape[0]

    @property
    def d(self) -> int:
        return self.Q.shape[-1]

    @property
    def has_biases(self) -> bool:
        return any(b is not None and np.any(b) for b in (self.bQ, self.bV, self.bO))

    def layers(self, biases: str = "refuse") -> list[tuple]:
        """Bias-free factors ``(Q, K, Vv, WO)`` per layer.  With nonzero query/value/output biases this refuses
        (the field would silently differ from the network's) unless ``biases="drop"`` says so explicitly."""
        if self.has_biases and biases != "drop":
            raise InputError("biases", "the model has query/value/output biases, which layers() leaves out: use "
                             "analysis.surrogate (exact with biases) or layers(biases='drop')")
        return [(self.Q[l], self.K[l], self.Vv[l], self.WO[l]) for l in range(self.n_layers)]

    def A(self, l: int, h: int) -> np.ndarray:
        return self.K[l, h].T @ self.Q[l, h] / np.sqrt(self.Q.shape[2])

    def V(self, l: int, h: int) -> np.ndarray:
        return self.WO[l, h] @ self.Vv[l, h]

    def r(self, l: int, h: int) -> np.ndarray:
        """Key-linear term of head ``h`` (``W_Kᵀ b_Q/√k``: the query bias, exact)."""
        return np.zeros(self.d) if self.bQ is None else self.K[l, h].T @ self.bQ[l, h] / np.sqrt(self.Q.shape[2])

    def c(self, l: int) -> np.ndarray:
        """Constant velocity of layer ``l`` (``Σ_h W_O^h b_V^h + b_O``: value and output biases, exact)."""
        out = np.zeros(self.d)
        if self.bV is not None:
            out += np.einsum("hdk,hk->d", self.WO[l], self.bV[l])
        if self.bO is not None:
            out += self.bO[l]
        return out

    def schedule(self, tau: float = 1.0, *, symbolic_ok: bool = False):
        """Layers as time-dependent weights: a :class:`~symbolic_tpde.weights.Schedule` of structured softmax
        heads ``(Q, K, V, WO)``, layer ``l`` on ``[lτ, (l+1)τ)``.  Size check: for ``d >`` :data:`SYMBOLIC_MAX_D`
        this refuses unless ``symbolic_ok=True`` (a Schedule feeds the symbolic derivations, which do not finish
        at trained-model sizes); the numeric paths are :mod:`.surrogate` and
        :func:`symbolic_tpde.numerics.particles.lowrank.integrate_moments`."""
        from ..weights import Schedule, make_head, make_weights

        if self.d > SYMBOLIC_MAX_D and not symbolic_ok:
            raise InputError("d", f"d = {self.d} > {SYMBOLIC_MAX_D}: a Schedule would start a symbolic derivation "
                             "that does not finish at this size; use analysis.surrogate / lowrank.integrate_moments "
                             "(numeric), or schedule(symbolic_ok=True) to ask for it")
        if self.has_biases:
            raise InputError("biases", "a Schedule of softmax heads has no query/value/output biases; this model has "
                             "them (use analysis.surrogate)")
        return Schedule.layers([(tau * (l + 1), make_weights([
            make_head("softmax", self.d, where=f"layer {l} head {h}", Q=self.Q[l, h], K=self.K[l, h],
                      V=self.Vv[l, h], WO=self.WO[l, h]) for h in range(self.Q.shape[1])]))
            for l in range(self.n_layers)])


#: largest d for which :meth:`LowRankModel.schedule` builds symbolic-capable heads without being asked
SYMBOLIC_MAX_D = 16


def load_model(path_or_tensors, preset: str | None = None, n_heads: int | None = None,
               n_kv_heads: int | None = None, n_layers: int | None = None, *, mapping=None) -> LowRankModel:
    """The attention factors and biases of every layer and head (:func:`load_checkpoint`, then
    :meth:`Checkpoint.lowrank`)."""
    return load_checkpoint(path_or_tensors, preset, mapping=mapping, n_heads=n_heads, n_kv_heads=n_kv_heads,
                           n_layers=n_layers).lowrank()


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
