"""The ``tpde verify`` runner: collects checks from every area and prints one table.

Each area contributes a module ``symbolic_tpde/validate/checks_<area>.py`` with a function
``checks(quick: bool) -> Iterable[CheckResult]`` (a generator, so rows appear as they are computed).  A row
records what was measured, the tolerance and *where the tolerance comes from*.  A check that raises is a
failed row, never a crash of the whole run.  A row that draws random data draws it from its own generator,
:func:`row_rng` of its name: adding, removing or reordering rows never changes another row's data.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import pkgutil
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Iterator


@dataclass(frozen=True)
class CheckResult:
    check: str
    variant: str
    d: int | None
    error: float
    tolerance: float
    basis: str  # where the tolerance comes from (round-off, Monte-Carlo n^-1/2, integrator order, ...)
    passed: bool | None = None  # None: decided as error <= tolerance
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        if self.passed is not None:
            return bool(self.passed)
        return math.isfinite(self.error) and self.error <= self.tolerance


def result(check: str, variant: str, d: int | None, error: float, tolerance: float, basis: str,
           passed: bool | None = None) -> CheckResult:
    """Convenience constructor used by the check modules."""
    return CheckResult(check, variant, d, float(error), float(tolerance), basis, passed)


def row_rng(*name) -> "np.random.Generator":
    """The generator of the row called ``name`` (e.g. ``check, variant, d``): seeded by the first 8 bytes of the
    BLAKE2b digest of the parts joined by ``"|"`` -- the same in every process and Python version (``hash()``
    of a string is salted per process), and unrelated for names that differ in one character (a sum of
    character codes is not)."""
    import numpy as np

    digest = hashlib.blake2b("|".join(map(str, name)).encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


def area_modules() -> list[str]:
    import symbolic_tpde.validate as pkg

    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name.startswith("checks_"))


def run_checks(quick: bool = False, only: str | None = None) -> Iterator[CheckResult]:
    for name in area_modules():
        if only and only not in name:
            continue
        module = importlib.import_module(f"symbolic_tpde.validate.{name}")
        gen: Callable[[bool], Iterable[CheckResult]] = module.checks
        it = iter(gen(quick))
        while True:
            t0 = time.perf_counter()
            try:
                row = next(it)
            except StopIteration:
                break
            except Exception as exc:  # a crashing check is a failed row, and the area stops there
                tb = traceback.format_exc(limit=3)
                print(tb, file=sys.stderr)
                yield CheckResult(f"{name}: crashed", type(exc).__name__, None, math.inf, 0.0, str(exc)[:80],
                                  False, time.perf_counter() - t0)
                break
            yield CheckResult(**{**asdict(row), "seconds": time.perf_counter() - t0})


def format_row(r: CheckResult) -> str:
    d = "-" if r.d is None else str(r.d)
    return (f"{r.check:<44.44} {r.variant:<16.16} {d:>3} {r.error:>10.3e} {r.tolerance:>10.3e} "
            f"{'PASS' if r.ok else 'FAIL':<5} {r.seconds:>6.1f}s  {r.basis}")


HEADER = (f"{'check':<44} {'variant':<16} {'d':>3} {'error':>10} {'tolerance':>10} {'':<5} {'time':>7}  "
          "tolerance basis")


def _row_json(r: CheckResult) -> dict:
    """A row as strict JSON: a non-finite error (a crashed or overflowed check) is ``null`` with
    ``"error_nonfinite"`` saying which (``"inf"``, ``"-inf"``, ``"nan"``)."""
    row = {**asdict(r), "ok": r.ok}
    for key in ("error", "tolerance", "seconds"):
        v = row[key]
        if isinstance(v, float) and not math.isfinite(v):
            row[key] = None
            row[f"{key}_nonfinite"] = str(v)
    return row


def main(quick: bool = False, only: str | None = None, as_json: bool = False, out=sys.stdout) -> int:
    """Run the checks and print the table (or strict JSON).  ``only`` must match an area: an unknown one is
    bad input (:class:`~symbolic_tpde.errors.InputError`, exit 2), not a failed check."""
    if only is not None and not any(only in name for name in area_modules()):
        from ..errors import InputError

        areas = [name[len("checks_"):] for name in area_modules()]
        raise InputError("only", f"no check area matches {only!r}; areas: {areas}")
    rows: list[CheckResult] = []
    if not as_json:
        print(HEADER, file=out)
        print("-" * len(HEADER), file=out)
    for r in run_checks(quick=quick, only=only):
        rows.append(r)
        if not as_json:
            print(format_row(r), file=out, flush=True)
    failed = [r for r in rows if not r.ok]
    if as_json:
        json.dump({"rows": [_row_json(r) for r in rows], "failed": len(failed)}, out, indent=1,
                  allow_nan=False, default=float)
        print(file=out)
    else:
        print(f"\n{len(rows) - len(failed)} passed, {len(failed)} failed", file=out)
    if not rows:
        print("tpde verify: no checks were found", file=sys.stderr)
        return 1
    return 1 if failed else 0
