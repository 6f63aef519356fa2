"""Errors and events shared by every layer.

`InputError` is raised for bad user input (shapes, symmetry, definiteness, NaN/Inf, unknown variant or key,
missing parameter).  It always names the offending field, so the CLI can print a one-line message and exit
with status 2.  `BlowupError` is raised when a numerical run overflows: it carries the time at which it
happened instead of letting NaNs through.

Every error pickles by its constructor's arguments (``__reduce__``) and compares equal to its copy, so one
raised in a process-pool worker arrives in the parent as that error, with its fields:

>>> import pickle
>>> e = pickle.loads(pickle.dumps(InputError("Sigma0", "not positive definite")))
>>> e == InputError("Sigma0", "not positive definite"), e.field
(True, 'Sigma0')
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input.  ``field`` names the offending field (e.g. ``"Sigma0"`` or ``"heads[1].tau"``).

    >>> err = InputError("Sigma0", "not positive definite")
    >>> err.field, str(err)
    ('Sigma0', 'Sigma0: not positive definite')
    """

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")

    def __reduce__(self):          # pickle by the constructor's arguments (a process pool re-raises it)
        return type(self), (self.field, self.problem)

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self.__reduce__()[1] == other.__reduce__()[1]

    __hash__ = Exception.__hash__


class BlowupError(ArithmeticError):
    """A numerical run left the finite floats.  ``t`` is the last time at which the state was finite.

    >>> err = BlowupError(1.25, "rk4 step 7")
    >>> err.t, str(err)
    (1.25, 'rk4 step 7: state became non-finite after t = 1.25')
    """

    def __init__(self, t: float, where: str, detail: str = ""):
        self.t = float(t)
        self.where = where
        self.detail = detail
        msg = f"{where}: state became non-finite after t = {self.t:.6g}"
        super().__init__(msg + (f" ({detail})" if detail else ""))

    def __reduce__(self):
        return type(self), (self.t, self.where, self.detail)

    __eq__, __hash__ = InputError.__eq__, Exception.__hash__


class ConvergenceError(RuntimeError):
    """An inner iteration (e.g. Sinkhorn) did not reach its tolerance within its iteration cap.

    >>> ConvergenceError("sinkhorn", "no convergence in 500 iterations").where
    'sinkhorn'
    """

    def __init__(self, where: str, detail: str):
        self.where = where
        self.detail = detail
        super().__init__(f"{where}: {detail}")

    def __reduce__(self):
        return type(self), (self.where, self.detail)

    __eq__, __hash__ = InputError.__eq__, Exception.__hash__


class NotGaussianPreserving(ValueError):
    """The attention (a built-in kind or a user kernel) does not preserve Gaussian measures.

    Raised instead of a (wrong) moment ODE.  ``witness`` carries the evidence: for the built-in kinds a
    :class:`symbolic_tpde.symbolic.witness.Witness` (a certified non-zero ``∂²Γ/∂x²`` at stated parameter
    values), for user kernels a :class:`symbolic_tpde.symbolic.user_kernel.KernelWitness`.

    >>> import numpy as np, symbolic_tpde as st
    >>> w = st.make_weights([st.make_head("sigmoid", A=np.eye(2), V=np.eye(2), b=0.0)])
    >>> try:
    ...     st.GaussianODE.from_weights(w)
    ... except NotGaussianPreserving as exc:
    ...     print(type(exc.witness).__name__)
    Witness
    """

    def __init__(self, witness):
        self.witness = witness
        super().__init__(witness.summary())

    def __reduce__(self):
        return type(self), (self.witness,)

    __eq__, __hash__ = InputError.__eq__, Exception.__hash__


class CompilerUnavailable(RuntimeError):
    """A C extension cannot be built here (no compiler, no cffi or no Python headers)."""
