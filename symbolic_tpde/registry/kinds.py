"""The registry of attention kinds: one place that says what each kind is.

Every layer reads its part from here instead of switching on variant names (README, "Adding an attention
kind").  A :class:`KindSpec` is pure data, no numpy and no SymPy:

* ``params``: the parameters in layout order, each a :class:`ParamSpec` (name, shape in the symbolic
  dimensions ``d`` (token), ``m`` (ℓ2 head), ``k`` (structured head), ``v`` (value), constraint, default,
  LaTeX name, description, example range).  Scenario keys, :func:`symbolic_tpde.weights.make_head`, the flat
  parameter layout of derived systems, the SymPy symbol names, the printer's LaTeX names, the ``tpde derive``
  choices and the ``tpde verify`` rows' example parameters all come from this tuple.
* ``interaction``: the head whose kernel has the bilinear term ``<Ax, y>``, from ``A`` (``tpde sweep``).
* ``gaussian``: ``"affine"`` when the field is affine in ``x`` on Gaussians (the moment ODE is derived),
  ``"witness"`` when it is not (a symbolic witness is derived instead), see the paper (Castin, Ablin, Carrillo,
  Peyré, arXiv 2501.18322, §3 on Gaussian preservation).
* ``field``: the field ``Γ_μ(x)`` in words, for help texts and documents.
* ``quadratic``: ``params -> {"B": …, "R": …, "r": …}`` when the kernel is ``exp`` of a quadratic form,
  ``log k(x, y) = xᵀBy + yᵀRy + rᵀy + (terms in x alone)`` (``x`` the query, ``y`` the key; softmax is
  ``B = Aᵀ``); a missing key is a zero block.  Optional ``"P"``, ``"p"`` (``xᵀPx + pᵀx``) state the terms in x
  alone for the documents; they cancel in every normalised field.  Written with ``@``, ``.T`` and scalar
  products, so the one function serves numpy arrays (the particle field, the grid velocity, the closed forms,
  the theorems' hypotheses) and SymPy matrices (the derivations).  With ``normalised`` the field is
  ``V Σ_j k(x, x_j) x_j / Σ_j k(x, x_j)`` (the Gaussian tilt: the kind preserves Gaussians); without it
  ``V (1/n) Σ_j k(x, x_j) x_j``.  A kind with a form needs no symbolic or particle part of its own
  (:func:`part` builds them from the form); it may still register its own (e.g. its definition, shown and
  checked against the form).
* ``coupling``: the weights are a coupling of ``μ`` with itself (both marginals ``μ``: Sinkhorn), so
  ``Γ = V E_π[y|x]`` and ``‖Cov_π(x, y)‖ ≤ ‖Σ‖`` (the growth theorem's hypothesis).

The other parts of a kind live in the layer they belong to and are registered against this table with
:func:`register`:

==============  ==============================================  =========================================
part            what                                            registered in
==============  ==============================================  =========================================
``symbolic``    log-kernel (normalised kinds), affine field or  ``symbolic_tpde/symbolic/kind_parts.py``
                witness, from SymPy parameter symbols
``particle``    the particle field ``(X, params, ctx) -> V``    ``symbolic_tpde/numerics/particles/fields.py``
``oracle``      independent references: a pure-Python loop     ``symbolic_tpde/validate/oracles.py``
                field and, for affine kinds, numeric ``(b, J)``
``claim``       (optional) the paper's closed form of ``(b, J)``  ``symbolic_tpde/validate/oracles.py``
                exact (rational matrices) and in matrix form,
                the claims the ``tpde verify`` rows check
``affine``      (optional) numeric ``(b, J)`` on ``N(α, Σ)`` of   ``symbolic_tpde/gaussian/matrix_form.py``
                an affine kind without a normalised form
                (linear, Sinkhorn)
==============  ==============================================  =========================================

A kind registered with a ``quadratic`` form needs neither a ``symbolic`` nor a ``particle`` part: :func:`part`
builds them from the form (and the closed forms, the grid velocity and the theorems' hypotheses read the form
directly).  Adding a key-biased softmax is one :func:`add` with its form, plus its independent ``oracle`` (and
``claim``): ``docs/kind.md``.

:func:`part` imports the owning module on first use, so this module stays at the bottom of the layering
(spec ← symbolic ← codegen ← numerics ← model ← analysis ← validate ← cli) while every layer can find its
part.  ``tests/test_registry.py`` fails when a kind lacks a part.

Structured heads (every kind whose parameters include ``A`` or ``V``): ``A`` may be given as ``Q, K`` of shape
``(k, d)`` with ``A = KᵀQ/√k`` (MATH convention ``<Ax, y>``, ``A`` plays ``KᵀQ/√d_head``), and ``V`` may be
preceded by an output block ``WO`` of shape ``(d, v)``, ``V`` then of shape ``(v, d)`` and the effective value
matrix ``WO V``.  Symbolically the factors stay factors (a low-rank head stays low rank).

>>> from symbolic_tpde import kinds
>>> "softmax" in kinds.kind_names(), kinds.get("softmax").preserves_gaussians
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Callable

__all__ = ["ParamSpec", "KindSpec", "KINDS", "SPHERE_KINDS", "GEOMETRY_PARTS", "kind_names", "get", "add", "remove", "register", "part", "PARTS",
           "STRUCTURED_A", "OUTPUT_BLOCK", "head_param_specs", "CONSTRAINTS", "OPTIONAL_PARTS", "draw_example"]

#: constraint kinds of a scalar parameter: name -> (the test, the words of the message)
CONSTRAINTS: dict[str, tuple[Callable[[float], bool], str]] = {
    "positive": (lambda v: v > 0, "> 0"),
    "nonnegative": (lambda v: v >= 0, ">= 0"),
}


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a kind.  ``shape``: tuple of dimension names (``()`` for a scalar).

    ``default``: ``None`` = required; ``"zero"`` = optional, zeros of its shape when absent; a number =
    optional scalar with that default.  ``constraint`` (scalars): ``None`` or a key of :data:`CONSTRAINTS`
    (``"positive"``, ``"nonnegative"``), checked by ``make_head``.  ``latex``: its name in formulas (the
    printer reads it).

    ``example``: how example values are drawn (``tpde verify`` rows, tests; :func:`draw_example`), checked
    against the constraint when the spec is built:

    * scalars ``("interval", lo, hi)``: uniform on ``[lo, hi]`` (``lo == hi``: that value);
    * arrays ``("normal", scale, shift)``: entries ``scale · N(0, 1)``, plus ``shift · I`` (square only);
    * ``("nsd", scale)``: ``-scale · HHᵀ/n`` with ``H`` standard normal ``n×n``: symmetric negative
      semi-definite (a key-quadratic block for which the Gaussian tilt exists at every ``Σ``).
    """

    name: str
    shape: tuple[str, ...]
    default: Any = None
    constraint: str | None = None
    latex: str = ""
    description: str = ""
    example: tuple = ()

    def __post_init__(self):
        if self.constraint is not None and (self.constraint not in CONSTRAINTS or self.shape):
            raise ValueError(f"{self.name}: constraint {self.constraint!r} must be one of {sorted(CONSTRAINTS)} "
                             "and applies to scalars")
        if not self.example:
            neutral = 1.0 if self.constraint else 0.0
            default = self.default if isinstance(self.default, (int, float)) else neutral
            object.__setattr__(self, "example", ("interval", default, default) if not self.shape
                               else ("normal", 0.3, 0.0))
        form = self.example[0]
        if (form == "interval") != (not self.shape) or form not in ("interval", "normal", "nsd"):
            raise ValueError(f"{self.name}: example form {form!r} does not fit shape {self.shape}")
        if form == "interval" and not (self.example[1] <= self.example[2] and self.violation(self.example[1]) is None
                                       and self.violation(self.example[2]) is None):
            raise ValueError(f"{self.name}: example interval {self.example[1:]} violates its constraint")

    @property
    def required(self) -> bool:
        return self.default is None

    @property
    def block(self) -> str:
        """``"scalar"``, ``"vector"`` or ``"matrix"``."""
        return ("scalar", "vector", "matrix")[len(self.shape)]

    def violation(self, value: float) -> str | None:
        """The message when the scalar ``value`` breaks the constraint, else ``None``."""
        if self.constraint is None:
            return None
        ok, words = CONSTRAINTS[self.constraint]
        return None if ok(value) else f"must be {words}, got {value}"

    def neutral(self):
        """The value that switches the parameter off where possible: its default, else 0 (1 for a constrained
        scalar, the smallest round value allowed), ``"zero"`` for arrays."""
        if self.default is not None:
            return self.default
        return "zero" if self.shape else (1.0 if self.constraint else 0.0)


def draw_example(p: ParamSpec, dims: dict, rng):
    """One example value of ``p`` (its ``example`` form) with the dimension sizes ``dims`` and a numpy
    ``Generator`` ``rng``: a float or a numpy array."""
    import numpy as np

    form, *arg = p.example
    if form == "interval":
        return float(arg[0]) if arg[0] == arg[1] else float(rng.uniform(arg[0], arg[1]))
    shape = tuple(dims[s] for s in p.shape)
    if form == "nsd":
        H = rng.normal(size=(shape[0], shape[0]))
        return -arg[0] * H @ H.T / shape[0]
    out = arg[0] * rng.normal(size=shape)
    return out + arg[1] * np.eye(shape[0]) if arg[1] else out


@dataclass(frozen=True)
class KindSpec:
    name: str
    params: tuple[ParamSpec, ...]
    gaussian: str                      # "affine" | "witness"
    field: str
    normalised: bool = True            # softmax-type normalisation of the kernel weights
    notes: str = ""
    assumption: str = ""               # when its derivation holds, in words (printed with the derivation)
    #: the kind and its field as a sentence for the derivation documents, formulas in LaTeX between ``$``
    #: marks (``symbolic.printing.words_tex``); empty: the documents print :attr:`field`
    field_tex: str = ""
    geometry: str = "R^d"              # "R^d" (tokens in R^d) | "sphere" (normalised tokens, README "Sphere")
    #: ``(A, I) -> parameters`` of a head whose kernel has the bilinear term ``<Ax, y>`` (``I`` the identity of
    #: the same type), the rest at :meth:`ParamSpec.neutral`; ``None``: no such head (``tpde sweep`` refuses it)
    interaction: Callable | None = field(default=None, compare=False, repr=False)
    #: ``params -> {"B", "R", "r"[, "P", "p"]}`` (module docstring); ``None``: the kernel is not ``exp`` of a
    #: quadratic form in ``(x, y)``
    quadratic: Callable | None = field(default=None, compare=False, repr=False)
    coupling: bool = False             # the weights are a self-coupling of μ (Sinkhorn plan)
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

    @property
    def tilt(self) -> bool:
        """The field is the normalised exponential-quadratic one (a form and ``normalised``): on Gaussians it
        is the Gaussian tilt's mean, affine in ``x``."""
        return self.quadratic is not None and self.normalised

    def form(self, params) -> dict | None:
        """The quadratic form ``{"B", "R", "r"}`` at ``params`` (numpy arrays or SymPy matrices); ``None`` for a
        kind without one.  ``R`` and ``r`` are ``None`` when the kind has no such block; ``P``, ``p`` are dropped
        (terms in x alone)."""
        if self.quadratic is None:
            return None
        q = self.quadratic(params)
        unknown = set(q) - {"B", "R", "r", "P", "p"}
        if "B" not in q or unknown:
            raise ValueError(f"{self.name}: the quadratic form gives {sorted(q)}; expected B and any of R, r, P, p")
        return {"B": q["B"], "R": q.get("R"), "r": q.get("r")}


def _mat(name, latex, desc, default=None, shape=("d", "d"), example=("normal", 0.3, 0.0)):
    return ParamSpec(name, shape, default, None, latex, desc, example)


# example scales: moderate interactions (the tilt strength κ = E[(Ax)ᵀΣ(Ax)] stays <= ~0.5 on [0, 1], so
# particle moments approach the ODE at the n^-1/2 rate, symbolic_tpde/validate/checks_moments.py)
_A = _mat("A", "A", "interaction matrix, kernel exp(<A x, y>) = exp(yᵀ A x)", example=("normal", 0.2, 0.0))
_V = _mat("V", "V", "value matrix, applied after averaging", example=("normal", 0.4, 0.3))

#: ``A`` may be given by its factors (structured head): name -> (shape, latex, description)
STRUCTURED_A = (ParamSpec("Q", ("k", "d"), None, None, "Q", "query block; A = Kᵀ Q / sqrt(k)"),
                ParamSpec("K", ("k", "d"), None, None, "K", "key block; A = Kᵀ Q / sqrt(k)"))
#: output block preceding ``V`` (then ``V`` has shape ``(v, d)`` and the value matrix is ``WO V``)
OUTPUT_BLOCK = ParamSpec("WO", ("d", "v"), None, None, "W^{O}", "output block; value matrix WO V")

KINDS: dict[str, KindSpec] = {}


def add(spec: KindSpec) -> KindSpec:
    """Enter ``spec`` in the registry (its parts are registered by their layers with :func:`register`)."""
    if spec.name in KINDS:
        raise ValueError(f"attention kind {spec.name!r} is already registered")
    KINDS[spec.name] = spec
    return spec


def remove(name: str) -> None:
    """Take ``name`` out of the registry with its parts (for tests that register a kind of their own)."""
    del KINDS[name]


def _with_a(A, I):
    return {"A": A}


def _bilinear_form(p):
    """``<Ax, y> = yᵀAx = xᵀAᵀy``: ``B = Aᵀ``."""
    return {"B": p["A"].T}


def _l2_form(p):
    """``-|Qx - Ky|²/τ = (2/τ) xᵀQᵀK y - (1/τ) yᵀKᵀK y - (1/τ) xᵀQᵀQ x``."""
    c = 1 / p["tau"]
    return {"B": 2 * c * p["Q"].T @ p["K"], "R": -c * p["K"].T @ p["K"], "P": -c * p["Q"].T @ p["Q"]}


add(KindSpec("softmax", (_A, _V), "affine", "V ∫ y e^{<Ax,y>} dμ(y) / ∫ e^{<Ax,y>} dμ(y)",
             assumption=r"Softmax: the kernel $e^{\langle Ax, y\rangle}$ has no key-quadratic part ($R = 0$), so "
                        r"the tilt exists for every symmetric positive definite $\Sigma$: the tilted precision is "
                        r"$\Lambda = \Sigma^{-1}$ itself.",
             field_tex=r"Softmax attention: $\Gamma_{\mu}(x) = V\int y\, e^{\langle Ax, y\rangle}\, d\mu(y) \big/ "
                       r"\int e^{\langle Ax, y\rangle}\, d\mu(y)$", interaction=_with_a, quadratic=_bilinear_form))
add(KindSpec("l2", (
    _mat("Q", "Q", "query projection", shape=("m", "d")),
    _mat("K", "K", "key projection", shape=("m", "d")),
    _V,
    ParamSpec("tau", (), None, "positive", r"\tau", "temperature", ("interval", 1.0, 1.0))),
    "affine", "softmax with kernel exp(-|Qx - Ky|²/τ)",
    assumption=r"$\ell_2$: $R = -K^{\top}K/\tau$, so the tilted precision $\Lambda = \Sigma^{-1} + \tfrac{2}{\tau}"
               r"K^{\top}K$ is positive definite for every symmetric positive definite $\Sigma$: the tilt always "
               r"exists.",
    field_tex=r"$\ell_2$ attention: $\Gamma_{\mu}(x) = V\int y\, k(x, y)\, d\mu(y) \big/ \int k(x, y)\, d\mu(y)$ "
              r"with the "
              r"kernel $k(x, y) = e^{-|Qx - Ky|^{2}/\tau}$",
    interaction=lambda A, I: {"Q": A, "K": I, "tau": 2.0},       # cross term (2/τ) KᵀQ = A
    quadratic=_l2_form))
add(KindSpec("sinkhorn", (_A, _V, ParamSpec("epsilon", (), 1.0, "positive", r"\varepsilon",
                                            "entropic regularisation")),
             "affine", "V ∫ y dπ_μ(y|x), π_μ the entropic self-transport plan for the cost -<Ax,y>",
             notes="closed form needs a matrix square root: entrywise for d <= 2, numeric-matrix backend above",
             assumption=r"Sinkhorn: $X^{1/2}$ is the principal square root of $X = I + 4(A/\varepsilon)^{\top}"
                        r"\Sigma (A/\varepsilon)\Sigma$, whose eigenvalues are $\geq 1$ for symmetric positive "
                        r"definite $\Sigma$; regularisation $\varepsilon > 0$.",
             field_tex=r"Sinkhorn attention: $\Gamma_{\mu}(x) = V\int y\, d\pi_{\mu}(y \mid x)$, where $\pi_{\mu}$ is the entropic "
                       r"optimal transport plan from $\mu$ to itself for the cost $-\langle Ax, y\rangle$ with "
                       r"regularisation $\varepsilon$", interaction=_with_a, coupling=True))
add(KindSpec("sigmoid", (  # examples strong enough to leave Gaussians visibly
    _mat("A", "A", _A.description, example=("normal", 0.0, 3.0)), _mat("V", "V", _V.description,
                                                                        example=("normal", 0.0, 1.0)),
    ParamSpec("b", (), None, None, "b", "bias inside the sigmoid")),
    "witness", "V ∫ σ(<Ax,y> + b) y dμ(y) (no normalisation)", normalised=False, interaction=_with_a))
add(KindSpec("linear", (_A, _V), "affine", "V ∫ <Ax,y> y dμ(y)", normalised=False,
             assumption=r"Linear attention is not normalised: $\Gamma(x) = V\,\mathbb{E}[\langle Ax, y\rangle y]$ "
                        r"(no tilt, no condition).",
             field_tex=r"Linear attention: $\Gamma_{\mu}(x) = V\int \langle Ax, y\rangle\, y\, d\mu(y)$ (no normalisation)",
             interaction=_with_a))
add(KindSpec("softmax_unnormalized", (_A, _V), "witness", "V ∫ y e^{<Ax,y>} dμ(y) (no normalisation)",
             normalised=False, interaction=_with_a, quadratic=_bilinear_form))
add(KindSpec("masked", (_A, _V), "witness",
             "causal softmax: a query at position s attends to keys at positions s' <= s",
             notes="Gaussian-preserving only without a sink on position-independent data (MATH §3)",
             interaction=_with_a))
add(KindSpec("custom", (
    _mat("B", "B", "bilinear block xᵀ B y", example=("normal", 0.2, 0.0)),
    _mat("P", "P", "query block xᵀ P x (cancels)", "zero", example=("normal", 1.0, 0.0)),
    _mat("R", "R", "key block yᵀ R y", "zero", example=("nsd", 0.02)),
    ParamSpec("p", ("d",), "zero", None, "p", "query linear term (cancels)", ("normal", 1.0, 0.0)),
    ParamSpec("r", ("d",), "zero", None, "r", "key linear term", ("normal", 0.2, 0.0)), _V),
    "affine", "softmax with log k(x, y) = xᵀBy + xᵀPx + yᵀRy + pᵀx + rᵀy",
    notes="xᵀBy with x the query: softmax is B = Aᵀ",
    assumption=r"Custom kernel: the tilt exists only while $\Lambda = \Sigma^{-1} - R - R^{\top} \succ 0$; the "
               r"derived ODE holds only there (the right-hand side refuses other states).",
    field_tex=r"Custom kernel: $\Gamma_{\mu}(x) = V\int y\, k(x, y)\, d\mu(y) \big/ \int k(x, y)\, d\mu(y)$ "
              r"with "
              r"$\log k(x, y) = x^{\top}By + x^{\top}Px + y^{\top}Ry + p^{\top}x + r^{\top}y$",
    interaction=lambda A, I: {"B": A.T},                        # xᵀ B y = yᵀ A x
    quadratic=lambda p: {k: p[k] for k in ("B", "R", "r", "P", "p")}))

#: parts every kind must have, and the module that registers each
PARTS = {"symbolic": "symbolic_tpde.symbolic.kind_parts", "particle": "symbolic_tpde.numerics.particles.fields",
         "oracle": "symbolic_tpde.validate.oracles"}
#: parts a kind may have (``part(kind, name, None)`` when absent)
OPTIONAL_PARTS = {"claim": "symbolic_tpde.validate.oracles", "affine": "symbolic_tpde.gaussian.matrix_form"}
_MISSING = object()

# Normalised tokens (README "Sphere"): the attention vector A_i = Σ_j w_ij V θ_j at unit tokens θ_j, with
# w_ij = e^{β<Aθ_i, θ_j>}/Z_i.  Which normalisation layer acts on it (Post-LN, Pre-LN, Peri-LN, nGPT) is not a
# kind: it is the scenario's "norm" (symbolic_tpde.numerics.particles.sphere).  These kinds are kept apart from KINDS
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
                  "sphere": {"particle": "symbolic_tpde.numerics.particles.sphere",
                             "reduction": "symbolic_tpde.symbolic.sphere_reductions",
                             "diagnostic": "symbolic_tpde.analysis.sphere_clusters"}}


def _parts_of(geometry: str) -> dict:
    """The parts a kind of ``geometry`` may register (required and optional) -> the module registering each."""
    return {**GEOMETRY_PARTS[geometry], **(OPTIONAL_PARTS if geometry == "R^d" else {})}


def kind_names(geometry: str = "R^d") -> tuple[str, ...]:
    return tuple(KINDS) if geometry == "R^d" else tuple(k for k, s in SPHERE_KINDS.items() if s.geometry == geometry)


def scenario_geometry(data) -> str:
    """The geometry of a scenario dictionary: its ``"geometry"`` key, or else that of its attention kinds (a
    scenario whose ``attention`` (top level or in every head) names sphere kinds is a sphere scenario)."""
    if not isinstance(data, dict):
        return "R^d"
    if "geometry" in data:
        return data["geometry"]
    heads = data.get("heads")
    top = data.get("attention")        # a head without its own "attention" has the top level's
    names = [h.get("attention", top) for h in heads if isinstance(h, dict)] if isinstance(heads, list) else []
    names = names or [top]
    geoms = {SPHERE_KINDS[n].geometry if isinstance(n, str) and n in SPHERE_KINDS else "R^d" for n in names}
    return geoms.pop() if len(geoms) == 1 else "R^d"


def get(name: str) -> KindSpec:
    """The spec of ``name``; ``KeyError`` with the known names otherwise (callers turn it into InputError)."""
    try:
        return KINDS[name] if name in KINDS else SPHERE_KINDS[name]
    except KeyError:
        raise KeyError(f"unknown attention kind {name!r}; expected one of {sorted(KINDS)}") from None


def register(kind: str, part_name: str) -> Callable:
    """Decorator: ``@register("softmax", "particle")`` stores the function as that kind's part."""
    parts = _parts_of(get(kind).geometry)
    if part_name not in parts:
        raise ValueError(f"unknown part {part_name!r}; expected one of {sorted(parts)}")

    def deco(obj):
        get(kind).parts[part_name] = obj
        return obj

    return deco


def part(kind: str, part_name: str, default=_MISSING):
    """The registered ``part_name`` of ``kind`` (importing the module that registers it on first use);
    ``default`` when given and the kind has no such part.

    A kind with a quadratic form and no registered part of that name gets the one its layer builds from the
    form: the owning module's ``part_from_form(spec, part_name)`` (``None``: the layer builds none)."""
    spec = get(kind)
    if part_name not in spec.parts and part_name in _parts_of(spec.geometry):
        mod = import_module(_parts_of(spec.geometry)[part_name])
        from_form = getattr(mod, "part_from_form", None)
        if part_name not in spec.parts and spec.quadratic is not None and from_form is not None:
            built = from_form(spec, part_name)       # the layer's part read off the quadratic form
            if built is not None:
                spec.parts[part_name] = built
    try:
        return spec.parts[part_name]
    except KeyError:
        if default is not _MISSING:
            return default
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
            out.append(ParamSpec("V", ("v", "d"), None, None, p.latex, p.description + " (after WO: WO V)", p.example))
        else:
            out.append(p)
    return tuple(out)
