"""The registry of attention kinds: one place that says what each kind is.

Every layer reads its part from here instead of switching on variant names (README, "Adding an attention
kind").  A :class:`KindSpec` is pure data, no numpy and no SymPy:

* ``params``: the parameters in layout order, each a :class:`ParamSpec` (name, shape in the symbolic
  dimensions ``d`` (token), ``m`` (ℓ2 head), ``k`` (structured head), ``v`` (value), constraint, default,
  LaTeX name, description).  Scenario keys, :func:`symbolic_tpde.weights.make_head`, the flat parameter layout of
  derived systems, the SymPy symbol names and the ``tpde derive`` choices all come from this tuple.
* ``gaussian``: ``"affine"`` when the field is affine in ``x`` on Gaussians (the moment ODE is derived),
  ``"witness"`` when it is not (a symbolic witness is derived instead), see the paper (Castin, Ablin, Carrillo,
  Peyré, arXiv 2501.18322, §3 on Gaussian preservation).
* ``field``: the field ``Γ_μ(x)`` in words, for help texts and documents.

The other parts of a kind live in the layer they belong to and are registered against this table with
:func:`register`:

==============  ==============================================  =========================================
part            what                                            registered in
==============  ==============================================  =========================================
``symbolic``    log-kernel (normalised kinds), affine field or  ``symbolic_tpde/symbolic/kind_parts.py``
                witness, from SymPy parameter symbols
``particle``    the particle field ``(X, params, ctx) -> V``    ``symbolic_tpde/numerics/fields.py``
``oracle``      independent references: a pure-Python loop     ``symbolic_tpde/validate/oracles.py``
                field and, for affine kinds, numeric ``(b, J)``
==============  ==============================================  =========================================

:func:`part` imports the owning module on first use, so this module stays at the bottom of the layering
(spec ← symbolic ← codegen ← numerics ← model ← analysis ← validate ← cli) while every layer can find its
part.  ``tests/test_registry.py`` fails when a kind lacks a part.

Structured heads (every kind whose parameters include ``A`` or ``V``): ``A`` may be given as ``Q, K`` of shape
``(k, d)`` with ``A = KᵀQ/√k`` (MATH convention ``<Ax, y>``, ``A`` plays ``KᵀQ/√d_head``), and ``V`` may be
preceded by an output block ``WO`` of shape ``(d, v)``, ``V`` then of shape ``(v, d)`` and the effective value
matrix ``WO V``.  Symbolically the factors stay factors (a low-rank head stays low rank).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Callable

__all__ = ["ParamSpec", "KindSpec", "KINDS", "SPHERE_KINDS", "GEOMETRY_PARTS", "kind_names", "get", "register",
           "part", "PARTS",
           "STRUCTURED_A", "OUTPUT_BLOCK", "head_param_specs"]


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a kind.  ``shape``: tuple of dimension names (``()`` for a scalar).

    ``default``: ``None`` = required; ``"zero"`` = optional, zeros of its shape when absent; a number =
    optional scalar with that default.  ``constraint``: ``None`` or ``"positive"`` (``> 0``).
    """

    name: str
    shape: tuple[str, ...]
    default: Any = None
    constraint: str | None = None
    latex: str = ""
    description: str = ""

    @property
    def required(self) -> bool:
        return self.default is None

    @property
    def block(self) -> str:
        """``"scalar"``, ``"vector"`` or ``"matrix"``."""
        return ("scalar", "vector", "matrix")[len(self.shape)]


@dataclass(frozen=True)
class KindSpec:
    name: str
    params: tuple[ParamSpec, ...]
    gaussian: str                      # "affine" | "witness"
    field: str
    normalised: bool = True            # softmax-type normalisation of the kernel weights
    notes: str = ""
    assumption: str = ""               # when its derivation holds, in words (printed with the derivation)
    geometry: str = "R^d"              # "R^d" (tokens in R^d) | "sphere" (normalised tokens, README "Sphere")
    parts: dict = field(default_factory=dict, compare=False, repr=False)

    def param(self, name: str) -> ParamSpec:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def preserves_gaussians(self) -> bool:
        return self.gaussian == "affine"


def _mat(name, latex, desc, default=None, shape=("d", "d")):
    return ParamSpec(name, shape, default, None, latex, desc)


_A = _mat("A", "A", "interaction matrix, kernel exp(<A x, y>) = exp(yᵀ A x)")
_V = _mat("V", "V", "value matrix, applied after averaging")

#: ``A`` may be given by its factors (structured head): name -> (shape, latex, description)
STRUCTURED_A = (ParamSpec("Q", ("k", "d"), None, None, "Q", "query block; A = Kᵀ Q / sqrt(k)"),
                ParamSpec("K", ("k", "d"), None, None, "K", "key block; A = Kᵀ Q / sqrt(k)"))
#: output block preceding ``V`` (then ``V`` has shape ``(v, d)`` and the value matrix is ``WO V``)
OUTPUT_BLOCK = ParamSpec("WO", ("d", "v"), None, None, "W^{O}", "output block; value matrix WO V")

KINDS: dict[str, KindSpec] = {}


def _add(spec: KindSpec) -> None:
    KINDS[spec.name] = spec


_add(KindSpec("softmax", (_A, _V), "affine", "V ∫ y e^{<Ax,y>} dμ(y) / ∫ e^{<Ax,y>} dμ(y)",
              assumption="Softmax: the kernel exp(<Ax, y>) has no key-quadratic part (R = 0), so the tilt exists "
                         "for every SPD Sigma: the tilted precision is Sigma^-1 itself."))
_add(KindSpec("l2", (
    ParamSpec("Q", ("m", "d"), None, None, "Q", "query projection"),
    ParamSpec("K", ("m", "d"), None, None, "K", "key projection"),
    _V,
    ParamSpec("tau", (), None, "positive", r"\tau", "temperature")),
    "affine", "softmax with kernel exp(-|Qx - Ky|²/τ)",
    assumption="l2: R = -K^T K/tau, so the tilted precision Sigma^-1 + (2/tau) K^T K is positive definite for "
               "every SPD Sigma: the tilt always exists."))
_add(KindSpec("sinkhorn", (_A, _V, ParamSpec("epsilon", (), 1.0, "positive", r"\varepsilon",
                                             "entropic regularisation")),
              "affine", "V ∫ y dπ_μ(y|x), π_μ the entropic self-transport plan for the cost -<Ax,y>",
              notes="closed form needs a matrix square root: entrywise for d <= 2, numeric-matrix backend above",
              assumption="Sinkhorn: X^{1/2} is the principal square root of X = I + 4(A/eps)^T Sigma (A/eps) Sigma, "
                         "whose eigenvalues are >= 1 for SPD Sigma; regularisation eps > 0."))
_add(KindSpec("sigmoid", (_A, _V, ParamSpec("b", (), None, None, "b", "bias inside the sigmoid")),
              "witness", "V ∫ σ(<Ax,y> + b) y dμ(y) (no normalisation)", normalised=False))
_add(KindSpec("linear", (_A, _V), "affine", "V ∫ <Ax,y> y dμ(y)", normalised=False,
              assumption="Linear attention is not normalised: Gamma(x) = V E[<Ax, y> y] (no tilt, no condition)."))
_add(KindSpec("softmax_unnormalized", (_A, _V), "witness", "V ∫ y e^{<Ax,y>} dμ(y) (no normalisation)",
              normalised=False))
_add(KindSpec("masked", (_A, _V), "witness",
              "causal softmax: a query at position s attends to keys at positions s' <= s",
              notes="Gaussian-preserving only without a sink on position-independent data (MATH §3)"))
_add(KindSpec("custom", (
    _mat("B", "B", "bilinear block xᵀ B y"), _mat("P", "P", "query block xᵀ P x (cancels)", "zero"),
    _mat("R", "R", "key block yᵀ R y", "zero"),
    ParamSpec("p", ("d",), "zero", None, "p", "query linear term (cancels)"),
    ParamSpec("r", ("d",), "zero", None, "r", "key linear term"), _V),
    "affine", "softmax with log k(x, y) = xᵀBy + xᵀPx + yᵀRy + pᵀx + rᵀy",
    assumption="Custom kernel: the tilt exists only while Sigma^-1 - R - R^T is positive definite; the derived "
               "ODE holds only there (tpde rhs refuses other states)."))

#: parts every kind must have, and the module that registers each
PARTS = {"symbolic": "symbolic_tpde.symbolic.kind_parts", "particle": "symbolic_tpde.numerics.fields",
         "oracle": "symbolic_tpde.validate.oracles"}

# Normalised tokens (README "Sphere"): the attention vector A_i = Σ_j w_ij V θ_j at unit tokens θ_j, with
# w_ij = e^{β<Aθ_i, θ_j>}/Z_i.  Which normalisation layer acts on it (Post-LN, Pre-LN, Peri-LN, nGPT) is not a
# kind: it is the scenario's "norm" (symbolic_tpde.numerics.sphere).  These kinds are kept apart from KINDS
# (which every R^d layer iterates) and found by get(); they have no Gaussian part.
_BETA = ParamSpec("beta", (), 1.0, None, r"\beta", "inverse temperature: weights e^{beta <A theta_i, theta_j>}")
SPHERE_KINDS: dict[str, KindSpec] = {s.name: s for s in (
    KindSpec("sphere_sa", (_A, _V, _BETA), "none", "SA: Z_i = Σ_k e^{β<Aθ_i,θ_k>} (softmax)", geometry="sphere"),
    KindSpec("sphere_usa", (_A, _V, _BETA), "none", "USA: Z_i = n (unnormalised)", normalised=False,
             geometry="sphere"),
    KindSpec("sphere_causal", (_A, _V, _BETA), "none", "causal SA: token i sees j <= i, Z_i = Σ_{k<=i}",
             geometry="sphere"))}
#: the parts each geometry's kinds must have, and the module that registers each
GEOMETRY_PARTS = {"R^d": PARTS,
                  "sphere": {"particle": "symbolic_tpde.numerics.sphere",
                             "reduction": "symbolic_tpde.symbolic.sphere_reductions",
                             "diagnostic": "symbolic_tpde.analysis.sphere_clusters"}}


def kind_names(geometry: str = "R^d") -> tuple[str, ...]:
    return tuple(KINDS) if geometry == "R^d" else tuple(k for k, s in SPHERE_KINDS.items() if s.geometry == geometry)


def get(name: str) -> KindSpec:
    """The spec of ``name``; ``KeyError`` with the known names otherwise (callers turn it into InputError)."""
    try:
        return KINDS[name] if name in KINDS else SPHERE_KINDS[name]
    except KeyError:
        raise KeyError(f"unknown attention kind {name!r}; expected one of {sorted(KINDS)}") from None


def register(kind: str, part_name: str) -> Callable:
    """Decorator: ``@register("softmax", "particle")`` stores the function as that kind's part."""
    parts = GEOMETRY_PARTS[get(kind).geometry]
    if part_name not in parts:
        raise ValueError(f"unknown part {part_name!r}; expected one of {sorted(parts)}")

    def deco(obj):
        get(kind).parts[part_name] = obj
        return obj

    return deco


def part(kind: str, part_name: str):
    """The registered ``part_name`` of ``kind`` (importing the module that registers it on first use)."""
    spec = get(kind)
    if part_name not in spec.parts and part_name in GEOMETRY_PARTS[spec.geometry]:
        import_module(GEOMETRY_PARTS[spec.geometry][part_name])
    try:
        return spec.parts[part_name]
    except KeyError:
        raise LookupError(f"attention kind {kind!r} has no {part_name!r} part") from None


def head_param_specs(kind: str, given) -> tuple[ParamSpec, ...]:
    """The parameters a head of ``kind`` actually carries, in layout order, given the names supplied.

    ``A`` is replaced by ``Q, K`` (structured head) when those are given for a kind that has ``A``; ``WO`` is
    inserted before ``V`` when given (``V`` then has shape ``(v, d)``).
    """
    spec = get(kind)
    given = set(given)
    out: list[ParamSpec] = []
    structured = "A" in spec.names and "A" not in given and {"Q", "K"} & given
    for p in spec.params:
        if p.name == "A" and structured:
            out.extend(STRUCTURED_A)
        elif p.name == "V" and "WO" in given:
            out.append(OUTPUT_BLOCK)
            out.append(ParamSpec("V", ("v", "d"), None, None, p.latex, p.description + " (after WO: WO V)"))
        else:
            out.append(p)
    return tuple(out)
