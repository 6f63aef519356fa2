"""Gaussian moment ODEs: :mod:`.ode` (the model: structure → derived system → backend) and
:mod:`.integrate` (integration of a model to a :class:`~.integrate.GaussianSolution`, domain stops as events).

``integrate`` knows only the model's interface (``rhs``, ``jac``, ``d``, ``schedule``), so it sits below ``ode``.
"""

from .integrate import GaussianSolution, gaussian_rhs, integrate_gaussian
from .ode import (GaussianODE, backend_for, pack_params, pack_state, params_from_values, system_for_structure,
                  unpack_state)

__all__ = ["GaussianODE", "GaussianSolution", "backend_for", "gaussian_rhs", "integrate_gaussian", "pack_params",
           "pack_state", "params_from_values", "system_for_structure", "unpack_state"]
