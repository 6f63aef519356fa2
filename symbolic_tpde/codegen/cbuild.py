"""SymPy-free helpers to build and load cffi API-mode extension modules from C source.

Shared by the SymPy-printed right-hand sides (:mod:`.c_backend`) and the fused particle kernel
(:mod:`symbolic_tpde.numerics.particles.fused`), which must not pull SymPy in (tests/test_layering.py).

Build: ``cffi.FFI.emit_c_code`` writes the wrapper around the given source and ``cdef``, the compiler found
by :func:`find_compiler` builds it with the given flags in a temporary directory (relative file names,
``cwd`` = that directory, no ``chdir`` of this process: identical sources give identical bytes), and the
shared object's bytes are returned for the content-hash cache (:mod:`.cache`).  No compiler / no cffi / no
Python headers: :class:`CompilerUnavailable`.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import io
import os
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from ..errors import CompilerUnavailable  # noqa: F401  (defined with the other errors; re-exported)

__all__ = ["CompilerUnavailable", "find_compiler", "availability", "compile_extension", "load_extension",
           "cpu_signature"]


def find_compiler() -> list[str] | None:
    """The C compiler command: ``$CC`` if set (must exist), else ``gcc`` or ``cc`` on ``PATH``; else None."""
    cc = os.environ.get("CC")
    if cc:
        parts = shlex.split(cc)
        exe = shutil.which(parts[0]) if parts else None
        return [exe, *parts[1:]] if exe else None
    for name in ("gcc", "cc"):
        exe = shutil.which(name)
        if exe:
            return [exe]
    return None


def availability(finder: Callable[[], list[str] | None] = find_compiler) -> str | None:
    """``None`` when a cffi extension can be built, else the reason it cannot (``finder`` locates the compiler)."""
    try:
        import cffi  # noqa: F401
    except ImportError:
        return "cffi is not installed (pip install 'symbolic_tpde[c]')"
    if finder() is None:
        cc = os.environ.get("CC")
        return f"C compiler {cc!r} (from $CC) not found" if cc else "no C compiler (gcc/cc) on PATH"
    inc = sysconfig.get_paths().get("include")
    if not inc or not os.path.exists(os.path.join(inc, "Python.h")):
        return "Python development headers (Python.h) not found"
    return None


def compile_extension(csrc: str, modname: str, cdef: str, flags: Sequence[str], cc: Sequence[str],
                      libs: Sequence[str] = ("-lm",)) -> bytes:
    """Compile ``csrc`` (declarations ``cdef``) into the cffi extension ``modname``; returns the ``.so`` bytes.

    Raises ``RuntimeError`` with the compiler's stderr tail when compilation fails.
    """
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source(modname, csrc)
    with tempfile.TemporaryDirectory(prefix="tpde-cc-") as tmp:
        cfile = Path(tmp) / f"{modname}.c"
        sofile = Path(tmp) / f"{modname}.so"
        with contextlib.redirect_stdout(io.StringIO()):  # cffi prints 'generating ...' on stdout
            ffi.emit_c_code(str(cfile))
        cmd = [*cc, *flags, "-I" + sysconfig.get_paths()["include"], cfile.name, "-o", sofile.name, *libs]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0:
            raise RuntimeError(f"C compilation failed ({' '.join(cmd[:2])} ...):\n{proc.stderr[-4000:]}")
        return sofile.read_bytes()


def load_extension(so_path: Path, modname: str):
    """Import the extension module at ``so_path`` under ``modname`` (not registered in ``sys.modules``)."""
    loader = importlib.machinery.ExtensionFileLoader(modname, str(so_path))
    spec = importlib.util.spec_from_file_location(modname, str(so_path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def cpu_signature() -> str:
    """CPU vendor, model and feature flags (from ``/proc/cpuinfo`` where present, else ``platform``).

    Goes into the cache key of anything compiled with ``-march=native``, so a cache directory shared between
    machines never hands an object built for one CPU to another.
    """
    import platform

    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                name, sep, value = line.partition(":")
                name = name.strip()
                if sep and name in ("vendor_id", "model name", "cpu family", "model", "flags", "Features",
                                    "CPU implementer", "CPU part") and name not in fields:
                    fields[name] = " ".join(sorted(value.split())) if name in ("flags", "Features") \
                        else value.strip()
                if not line.strip() and fields:
                    break  # first processor block only
    except OSError:
        pass
    if not fields:
        fields = {"machine": platform.machine(), "processor": platform.processor()}
    return ";".join(f"{k}={v}" for k, v in sorted(fields.items()))
