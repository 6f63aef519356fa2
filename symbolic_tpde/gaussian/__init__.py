"""Gaussian moment ODEs: :mod:`.ode` (the model: structure → derived system → backend) and
:mod:`.integrate` (integration of a model to a :class:`~.integrate.GaussianSolution`, domain stops as events);
:mod:`.closure`: the Gaussian closure (an approximation) for kinds that do not preserve Gaussians.

``integrate`` knows only the model's interface (``rhs``, ``jac``, ``d``, ``schedule``), so it sits below ``ode``.
"""

from .closure import ClosureODE, closure_vs_particles
from .integrate import GaussianSolution, gaussian_rhs, integrate_gaussian
from .ode import (
    GaussianODE, backend_for, pack_params, pack_state, params_from_values, system_for_structure, unpack_state
)

__all__ = ["ClosureODE", "closure_vs_particles", "GaussianODE", "GaussianSolution", "backend_for", "gaussian_rhs", "integrate_gaussian", "pack_params",
           "pack_state", "params_from_values", "system_for_structure", "unpack_state"]
