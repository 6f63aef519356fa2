"""The ``tpde`` command.

Each subcommand lives in ``symbolic_tpde/commands/<name>.py`` and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` to a ``run(args) -> int``.  Command modules import heavy dependencies (SymPy,
scipy, matplotlib) inside ``run`` so that ``tpde --help`` stays fast.  Bad input (:class:`InputError`) and
unreadable files end in a one-line message and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import InputError

COMMANDS = ("verify", "particles", "derive", "rhs", "gaussian", "classify", "plot", "figures", "sweep", "convexity",
            "meanfield", "kinds")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpde", description="Transformers as interacting particles: "
                                     "simulate, derive Gaussian moment ODEs, validate.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"symbolic_tpde.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"symbolic_tpde.commands.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InputError as exc:
        print(f"tpde {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (ArithmeticError, RuntimeError, ValueError) as exc:
        # Errors a user can meet with valid syntax but an impossible request: a variant that has no Gaussian
        # ODE, an unavailable compiler, a blow-up or a non-converged Sinkhorn.  Their classes live in heavy
        # modules, imported here only once such an error happened.
        from .errors import BlowupError, CompilerUnavailable, ConvergenceError, NotGaussianPreserving

        codes = ((NotGaussianPreserving, 2), (CompilerUnavailable, 2), (BlowupError, 3), (ConvergenceError, 4))
        for cls, code in codes:
            if isinstance(exc, cls):
                print(f"tpde {args.command}: error: {exc}", file=sys.stderr)
                return code
        raise
    except BrokenPipeError:  # e.g. `tpde derive ... | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except OSError as exc:
        print(f"tpde {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
