"""The symbolic part of every built-in attention kind, registered against :mod:`symbolic_tpde.registry.kinds`.

A part is one of three things (Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322, §2-3):

* ``log_kernel(prm, x, y)``: a softmax-normalised kind *is* a user kernel with a name.  The moment ODE is
  derived from this expression by the same code path as :func:`symbolic_tpde.derive_kernel` (the tilt), and
  ``tests/test_registry.py`` checks that both routes give the same right-hand side.  A kind whose registry
  entry has a ``quadratic`` form needs no part here: :func:`part_from_form` builds it (log-kernel and matrix
  kernel from the form).  A built-in kind may give its *definition* instead (ℓ2: ``-|Qx - Ky|²/τ``; softmax:
  ``<Ax, y>``): the engine reads the blocks off it, and ``tests/test_quadratic_form.py`` checks that they are
  the registry's form;
* ``field(prm, alpha, Sigma)``: an affine kind that is not a normalised kernel (linear, Sinkhorn) derives its
  :class:`~.moments.HeadField` directly;
* ``witness(sink)``: a kind that does not preserve Gaussians returns its certified witness
  (:mod:`.witness`).

``prm`` holds the kind's canonical parameters as SymPy objects (structured heads already combined into
``A = KᵀQ/√k`` and ``V = WO V`` by :func:`~.moments.effective_params`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import sympy as sp

from ..registry.kinds import get, register
from . import sinkhorn as sk
from .kernels import ExpQuadKernel
from .tilt import sym_vector


@dataclass(frozen=True)
class SymbolicPart:
    """A kind's symbolic part.  Entrywise (concrete ``d``): ``log_kernel(prm, x, y)`` or
    ``field(prm, alpha, Sigma)``; general ``d`` (``MatrixSymbol``s): ``matrix_kernel(syms)`` (an
    :class:`~.kernels.ExpQuadKernel` of matrix expressions) or ``matrix_field(syms, alpha, Sigma, d) ->
    (b, J, Cᵀ or None, assumptions)``; or ``witness(sink)`` for a kind that does not preserve Gaussians.

    Derivation steps (:mod:`.steps`): ``steps(kind, syms, pre) -> (steps, b, J, (C, Cᵀ) or None)`` builds the
    kind's own checked chain up to the affine field ``Γ = b + Jx`` (a kind with a ``matrix_kernel`` and no
    ``steps`` gets the generic tilt chain :func:`.steps.kernel_head_steps`); ``matrix_definition(syms, x,
    y)``: the log-kernel as the README writes it (shown in step 1, checked against ``matrix_kernel``)."""

    log_kernel: Callable | None = None
    field: Callable | None = None
    witness: Callable | None = None
    matrix_kernel: Callable | None = None
    matrix_field: Callable | None = None
    entrywise_max_d: int | None = None   # above it the entrywise form needs a matrix square root
    steps: Callable | None = None
    matrix_definition: Callable | None = None
    system_steps: Callable | None = None

    def __post_init__(self):
        if self.system_steps is None:
            object.__setattr__(self, "system_steps", entrywise_system_steps)


def entrywise_system_steps(system) -> tuple:
    """The derivation of a built-in entrywise system (:func:`.steps.entrywise_system_steps`), reached by
    :mod:`.moments` through the registry (the steps module sits above moments); module-level, so that the
    system pickles."""
    from ..documents.steps import entrywise_system_steps as steps_of

    return steps_of(system)


def _kernel_steps(kind, syms, pre):
    """The generic chain of a softmax-normalised kernel (tilt, completed square, affine field)."""
    from ..documents.steps import kernel_head_steps

    return (*kernel_head_steps(kind, syms, pre), None)


def _linear_steps(kind, syms, pre):
    from ..documents.steps import linear_head_steps

    return (*linear_head_steps(syms, pre), None)


def _sinkhorn_steps(kind, syms, pre):
    from ..documents.steps import sinkhorn_head_steps

    return sinkhorn_head_steps(syms, pre)


def _bilinear(A, x, y):
    """``<A x, y> = yᵀ A x``."""
    return (y.T * A * x)[0, 0]


def kernel_part(spec, log_kernel: Callable | None = None, matrix_definition: Callable | None = None) -> SymbolicPart:
    """The symbolic part of a normalised kind with a quadratic form: the log-kernel (entrywise) and the matrix
    kernel (general ``d``) from the form, the generic tilt chain as its steps.  ``log_kernel`` /
    ``matrix_definition``: the kind's definition as written, used instead of the form's log-kernel entrywise
    (the blocks are then read off it) and shown in the documents' first step (checked against the form)."""
    def from_form(p, x, y):
        return ExpQuadKernel.from_form(spec.quadratic(p), spec.name).log_kernel(x, y)

    return SymbolicPart(log_kernel=log_kernel or from_form,
                        matrix_kernel=lambda s: ExpQuadKernel.from_form(spec.quadratic(s), spec.name),
                        steps=_kernel_steps, matrix_definition=matrix_definition)


def part_from_form(spec, part_name: str) -> SymbolicPart | None:
    """The ``symbolic`` part of a kind registered with a quadratic form and no symbolic part of its own
    (:func:`symbolic_tpde.registry.kinds.part`): a normalised, Gaussian-preserving kind only (an unnormalised
    kernel has no tilt: its part is a witness, registered by the kind)."""
    if part_name != "symbolic" or not spec.tilt or not spec.preserves_gaussians:
        return None
    return kernel_part(spec)


register("softmax", "symbolic")(kernel_part(get("softmax"), log_kernel=lambda p, x, y: _bilinear(p["A"], x, y),
                                            matrix_definition=lambda s, x, y: y.T * s["A"] * x))


def _l2_log_kernel(p, x, y):
    """``-|Q x - K y|² / τ`` exactly as defined (no expansion)."""
    v = p["Q"] * x - p["K"] * y
    return -sum((v[i] ** 2 for i in range(v.shape[0])), sp.S.Zero) / p["tau"]


def _l2_definition(s, x, y):
    """``-(Qx - Ky)ᵀ(Qx - Ky)/τ`` in matrix form, unexpanded."""
    v = s["Q"] * x - s["K"] * y
    return -v.T * v / s["tau"]


register("l2", "symbolic")(kernel_part(get("l2"), log_kernel=_l2_log_kernel, matrix_definition=_l2_definition))


def _linear_field(p, alpha, Sigma):
    """``Γ = V ∫ <Ax, y> y dμ(y)``: the integrand is polynomial in ``y``; its Gaussian expectation is taken
    monomial by monomial from the moment generating function, and the result is checked to be affine in x."""
    from .moments import HeadField, gaussian_expectation

    d = Sigma.shape[0]
    x, y = sym_vector("_x", d), sym_vector("_y", d)
    kern = _bilinear(p["A"], x, y)
    field = p["V"] * sp.Matrix([gaussian_expectation(sp.expand(kern * y[i]), list(y), alpha, Sigma)
                                for i in range(d)])
    J = field.jacobian(list(x))
    if any(e.has(*x) for e in J):
        raise AssertionError("linear-attention field is not affine in x")
    b = field.xreplace({xi: 0 for xi in x})
    return HeadField("linear", b + J * alpha, J * Sigma, b, J, ())


def _linear_matrix(s, alpha, Sigma, d):
    """``Γ(x) = V ∫ <Ax,y> y dμ = V (∫ y yᵀ dμ) A x`` and ``∫ y yᵀ dμ = Σ + ααᵀ`` (definition of the covariance);
    the entrywise form derives the same moment from the Gaussian MGF and the verify rows compare the two."""
    return sp.ZeroMatrix(d, 1), s["V"] * (Sigma + alpha * alpha.T) * s["A"], None, ()


register("linear", "symbolic")(SymbolicPart(field=_linear_field, matrix_field=_linear_matrix,
                                                         steps=_linear_steps))


def _sinkhorn_field(p, alpha, Sigma):
    """``Γ = V(α + CᵀΣ⁻¹(x - α))``: contributes ``Vα`` to ``dα/dt`` and ``VCᵀ + CVᵀ`` to ``dΣ/dt``."""
    from .moments import HeadField

    Ct = sk.cross_covariance_explicit(Sigma, p["A"] / p["epsilon"])
    return HeadField("sinkhorn", p["V"] * alpha, p["V"] * Ct, None, None,
                     ("Sinkhorn plan: principal square root of I + 4 A^T Sigma A Sigma / epsilon^2 "
                      "(eigenvalues >= 1 for SPD Sigma)",))


def _sinkhorn_matrix(s, alpha, Sigma, d):
    """``E_π[y|x] = α + CᵀΣ⁻¹(x - α)`` with the closed-form ``Cᵀ`` (:mod:`.sinkhorn`), ``A -> A/ε``."""
    Ct = sk.closed_form_matrix(d).xreplace({sp.MatrixSymbol("A", d, d): s["A"] / s["epsilon"]})
    J = s["V"] * Ct * Sigma.I
    return s["V"] * (alpha - Ct * Sigma.I * alpha), J, Ct, ("Sinkhorn: principal square root",)


register("sinkhorn", "symbolic")(SymbolicPart(field=_sinkhorn_field, matrix_field=_sinkhorn_matrix,
                                              entrywise_max_d=2, steps=_sinkhorn_steps))


def _witness(kind: str):
    def make(sink: bool = False):
        from .witness import witness_for

        return witness_for(kind, sink=sink and kind == "masked")
    return make


for _kind in ("sigmoid", "softmax_unnormalized", "masked"):
    register(_kind, "symbolic")(SymbolicPart(witness=_witness(_kind)))
