"""The ``tpde`` command.

Each subcommand lives in ``symbolic_tpde/commands/<name>.py`` and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` to a ``run(args) -> int``.  Command modules import heavy dependencies (SymPy,
scipy, matplotlib) inside ``run`` so that ``tpde --help`` stays fast.

Exit status (README "Commands"): 0 success (``tpde gaussian`` reports a blow-up or a ceased tilt as a result,
with its status and time); 1 a failed ``tpde verify`` check, or an internal error (a bug: one line, the
traceback only with ``TPDE_DEBUG=1``); 2 bad input (unreadable or invalid scenario or argument, not
Gaussian-preserving, tilt does not exist at ``Σ₀``, unknown variant); 3 a blow-up that prevents the
requested result; 4 Sinkhorn non-convergence; 5 a wall-clock cap (``--max-seconds``: ``tpde gaussian`` and
``tpde particles`` 600 s per run, ``tpde sweep`` 60 s per grid point) stopped the work before the requested
result: the output is still printed (``"status": "time-limit"`` with the time ``t`` reached; sweep: files
written, capped points in phase ``time-limit``), since it is neither bad input (2) nor a property of the
dynamics (3); 6 ``tpde pde``: the grid does not resolve the solution (status ``under-resolved``: the density
went negative, its peaks outgrew the points, or mass or finiteness was lost; the message says ``raise --grid to
…``), never reported as ok or as a blow-up; 130 interrupted (``interrupted at t = …``; no partial output files are left).  Every message is one line (control characters escaped).  Arguments common to all
commands are checked here before a command runs: every float argument must be finite, a horizon ``--T``
lies in ``[0, T_MAX]`` (:mod:`symbolic_tpde.inputs.checks`).
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys

from .errors import InputError

COMMANDS = ("verify", "particles", "derive", "rhs", "gaussian", "classify", "plot", "figures", "sweep", "convexity",
            "meanfield", "kinds", "pde", "fit", "model")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpde", description="Transformers as interacting particles: "
                                     "simulate, derive Gaussian moment ODEs, validate.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:   # a missing command module is an ImportError (a broken install), never skipped
        importlib.import_module(f"symbolic_tpde.commands.{name}").register(sub)
    return parser


def _check_common(args) -> None:
    """Float arguments finite (argparse's ``type=float`` accepts ``nan``, ``inf`` and ``1e999``); ``--T`` a
    supported horizon."""
    from .inputs.checks import horizon

    for name, value in vars(args).items():
        values = value if isinstance(value, (list, tuple)) else (value,)
        for v in values:
            if isinstance(v, float) and not math.isfinite(v):
                raise InputError(name.replace("_", "-"), f"must be a finite number, got {v}")
        if name == "T" and value is not None:
            horizon(value, "T")


def _time_reached(tb) -> str:
    """The simulated time ``t`` of the innermost numerics frame of a traceback (the time loops of
    :mod:`symbolic_tpde.numerics` keep it in a local ``t``), as text, or ``""``."""
    found = ""
    while tb is not None:
        frame = tb.tb_frame
        mod = frame.f_globals.get("__name__", "")
        t = frame.f_locals.get("t")
        if mod.startswith("symbolic_tpde.") and isinstance(t, (float, int)) and not isinstance(t, bool) \
                and math.isfinite(t):
            found = f"{float(t):.6g}"
        tb = tb.tb_next
    return found


def _say(command: str, text: str) -> None:
    from .inputs.checks import one_line

    print(f"tpde {command}: {one_line(text)}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _check_common(args)
        return int(args.func(args) or 0)
    except InputError as exc:
        _say(args.command, f"error: {exc}")
        return 2
    except KeyboardInterrupt as exc:
        t = _time_reached(exc.__traceback__)
        _say(args.command, f"interrupted at t = {t}" if t else "interrupted (before the time loop)")
        return 130
    except BrokenPipeError:  # e.g. `tpde derive ... | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except Exception as exc:
        # Errors a user can meet with valid syntax but an impossible request: a variant that has no Gaussian
        # ODE, an unavailable compiler, a blow-up or a non-converged Sinkhorn.  Their classes live in heavy
        # modules, imported here only once such an error happened.
        from .errors import BlowupError, CompilerUnavailable, ConvergenceError, NotGaussianPreserving

        codes = ((NotGaussianPreserving, 2), (CompilerUnavailable, 2), (BlowupError, 3), (ConvergenceError, 4))
        for cls, code in codes:
            if isinstance(exc, cls):
                _say(args.command, f"error: {exc}")
                return code
        if isinstance(exc, OSError):
            _say(args.command, f"error: {exc}")
            return 2
        if os.environ.get("TPDE_DEBUG"):
            raise
        what = "out of memory" if isinstance(exc, MemoryError) else f"{type(exc).__name__}: {exc}"
        _say(args.command, f"internal error ({what[:300]}); please report it (TPDE_DEBUG=1 shows the traceback)")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
