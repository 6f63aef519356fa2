"""The `tpde verify` runner: failures and crashing checks make it exit non-zero; the real run passes."""

from __future__ import annotations

import io
import subprocess
import sys
import types

import pytest

from symbolic_tpde.validate import verify


def test_failures_and_crashes_are_counted(monkeypatch):
    fake = types.ModuleType("symbolic_tpde.validate.checks_fake")

    def checks(quick):
        yield verify.result("passes", "softmax", 2, 1e-16, 1e-14, "float64 round-off")
        yield verify.result("fails", "softmax", 2, 1e-3, 1e-14, "float64 round-off")
        raise RuntimeError("boom")

    fake.checks = checks
    monkeypatch.setitem(sys.modules, "symbolic_tpde.validate.checks_fake", fake)
    monkeypatch.setattr(verify, "area_modules", lambda: ["checks_fake"])
    out = io.StringIO()
    assert verify.main(out=out) == 1
    text = out.getvalue()
    assert "1 passed, 2 failed" in text and "crashed" in text and "FAIL" in text


def test_nan_error_is_a_failure():
    assert not verify.result("x", "v", 1, float("nan"), 1.0, "basis").ok


@pytest.mark.slow
def test_tpde_verify_quick_passes():
    proc = subprocess.run([sys.executable, "-m", "symbolic_tpde.cli", "verify", "--quick"], capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " 0 failed" in proc.stdout


def test_json_is_strict_when_a_check_overflows(monkeypatch):
    """A crashed or overflowed check (error = inf) is written as null with its kind, never a bare Infinity."""
    import io
    import json as _json

    from symbolic_tpde.validate import verify as v

    monkeypatch.setattr(v, "run_checks", lambda quick=False, only=None: iter(
        [v.CheckResult("boom", "softmax", 2, float("inf"), 0.0, "test", False)]))
    buf = io.StringIO()
    assert v.main(as_json=True, out=buf) == 1
    data = _json.loads(buf.getvalue(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert data["rows"][0]["error"] is None and data["rows"][0]["error_nonfinite"] == "inf"


def test_unknown_area_is_bad_input_exit_2(capsys):
    from symbolic_tpde.cli import main

    assert main(["verify", "--only", "nosuch"]) == 2
    assert "only" in capsys.readouterr().err
