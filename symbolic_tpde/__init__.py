"""symbolic_tpde: deep Transformers as interacting particles, symbolically and numerically.

Public API, re-exported explicitly.  Nothing is computed at import time, and the heavy layers (SymPy,
SciPy, code generation) are imported only when one of their names is first used (PEP 562 ``__getattr__``),
so ``import symbolic_tpde`` stays light.  ``dir(symbolic_tpde)`` lists them all.

The front door (:mod:`symbolic_tpde.api`): :func:`load_scenario` reads a scenario of either geometry, and three
verbs take a model (scenario, weights, schedule, GaussianODE or derived system), its initial data and the
horizon, with the same ``t_eval`` for output times: :func:`moments` (the Gaussian moment ODE),
:func:`particles` (the particle system) and :func:`compare` (both, with Monte-Carlo standard errors).

>>> import symbolic_tpde as st
>>> scn = st.load_scenario("softmax_2d")
>>> sol = st.moments(scn, t_eval=[0.0, 1.0])
>>> run = st.particles(scn, n=500, seed=0, t_eval=[0.0, 1.0])
>>> cmp = st.compare(scn, n=300, runs=4, t_eval=[1.0])
>>> sol.alpha.shape, run.trajectory.shape, cmp.deviation.shape
((2, 2), (2, 500, 2), (1, 5))
"""

from importlib import import_module

from .errors import BlowupError, ConvergenceError, InputError, NotGaussianPreserving
from .weights import FFN, Head, Scenario, Schedule, Sink, Weights, make_head, make_weights

#: public name -> module that defines it (imported on first use)
_LAZY = {
    "load_scenario": "symbolic_tpde.api",
    "moments": "symbolic_tpde.api",
    "particles": "symbolic_tpde.api",
    "compare": "symbolic_tpde.api",
    "Comparison": "symbolic_tpde.api",
    "sphere_numbers": "symbolic_tpde.analysis.sphere_numbers",
    "parse_scenario": "symbolic_tpde.inputs.scenario",
    "field": "symbolic_tpde.numerics.particles.fields",
    "velocity": "symbolic_tpde.numerics.particles.fields",
    "simulate": "symbolic_tpde.numerics.particles.simulate",
    "mean": "symbolic_tpde.numerics.measures.estimators",
    "covariance": "symbolic_tpde.numerics.measures.estimators",
    "gaussianity_witness": "symbolic_tpde.numerics.measures.estimators",
    "wasserstein": "symbolic_tpde.numerics.measures.distances",
    "bures_wasserstein": "symbolic_tpde.numerics.measures.distances",
    "derive_kernel": "symbolic_tpde.symbolic.user_kernel",
    "KernelWitness": "symbolic_tpde.symbolic.user_kernel",
    "OdeSystem": "symbolic_tpde.symbolic.system",
    "derive_gaussian_system": "symbolic_tpde.symbolic.moments",
    "derive_for_weights": "symbolic_tpde.symbolic.moments",
    "compile_system": "symbolic_tpde.codegen.compile",
    "GaussianODE": "symbolic_tpde.gaussian",
    "pack_state": "symbolic_tpde.gaussian",
    "unpack_state": "symbolic_tpde.gaussian",
    "integrate_blowup": "symbolic_tpde.analysis.blowup",
    "classify_long_time": "symbolic_tpde.analysis.verdict",
    "kinds": "symbolic_tpde.registry",
}

__all__ = [
    "BlowupError", "ConvergenceError", "InputError", "NotGaussianPreserving",
    "FFN", "Head", "Scenario", "Schedule", "Sink", "Weights", "make_head", "make_weights",
    *_LAZY,
]

__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'symbolic_tpde' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names with the lazily loaded ones (``dir(symbolic_tpde)`` shows the whole public API)."""
    return sorted(set(globals()) | set(__all__))
