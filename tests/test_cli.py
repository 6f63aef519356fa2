"""The `tpde` command as a user meets it: help, one-line errors with exit status 2, no tracebacks."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from symbolic_tpde.cli import COMMANDS, build_parser


def tpde(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "symbolic_tpde.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_every_planned_command_is_registered():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    missing = [c for c in COMMANDS if c not in sub.choices]
    assert not missing, f"commands not implemented: {missing}"


@pytest.mark.parametrize("text, field", [
    ('{"attention": "softmax", "A": [[1]], "V": [[1]], "alpha0": [0], "Sigma0": [[-1]], "T": 1}', "Sigma0"),
    ('{"attention": "nope", "A": [[1]], "V": [[1]], "alpha0": [0], "Sigma0": [[1]], "T": 1}', "attention"),
    ('{"attention": "l2", "Q": [[1]], "K": [[1]], "V": [[1]], "tau": 0, "alpha0": [0], "Sigma0": [[1]], "T": 1}',
     "tau"),
    ('{"attention": "softmax", "A": [[1, 2]], "V": [[1]], "alpha0": [0], "Sigma0": [[1]], "T": 1}', "A"),
    ('{"attention": "softmax", "A": [[1]], "V": [[1]], "alpha0": [0], "Sigma0": [[1]], "T": 1', "scenario"),
])
@pytest.mark.parametrize("command", ["particles", "rhs"])
def test_bad_scenario_is_one_line_and_exit_2(tmp_path, text, field, command):
    path = tmp_path / "bad.json"
    path.write_text(text)
    args = [command, "--scenario", str(path), "--json"] + (["--n", "10", "--seed", "0"] if command == "particles" else [])
    proc = tpde(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert field in lines[0]


def test_missing_file_is_reported():
    proc = tpde("rhs", "--scenario", "/nonexistent/scenario.json", "--json")
    assert proc.returncode == 2 and "cannot read" in proc.stderr


def test_rhs_json_on_builtin_scenario():
    proc = tpde("rhs", "--scenario", "softmax_2d", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # independent route: the softmax Riccati formula of README Mathematics §3 evaluated by hand in numpy
    from symbolic_tpde.inputs.scenario import load_scenario

    scn = load_scenario("softmax_2d")
    A, V = scn.weights().heads[0].params["A"], scn.weights().heads[0].params["V"]
    a, S = scn.alpha0, scn.Sigma0
    np.testing.assert_allclose(out["alpha_dot"], V @ (a + S @ A @ a), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["Sigma_dot"], V @ S @ A @ S + S @ A.T @ S @ V.T, rtol=1e-12, atol=1e-14)


def test_library_errors_become_one_line_messages(monkeypatch, capsys):
    """Errors raised deep in the library reach the user as one line with the documented exit code."""
    from symbolic_tpde import cli
    from symbolic_tpde.errors import BlowupError, ConvergenceError
    from symbolic_tpde.symbolic.witness import NotGaussianPreserving

    cases = [(BlowupError(0.25, "rk4 step 3"), 3), (ConvergenceError("sinkhorn", "no convergence"), 4),
             (NotGaussianPreserving.__new__(NotGaussianPreserving), 2)]
    for exc, code in cases:
        def boom(args, exc=exc):
            raise exc
        parser = cli.build_parser()
        monkeypatch.setattr(cli, "build_parser", lambda parser=parser: parser)
        args = parser.parse_args(["verify"])
        monkeypatch.setattr(parser, "parse_args", lambda argv=None, args=args: args)
        args.func = boom
        assert cli.main([]) == code
        err = capsys.readouterr().err
        assert err.startswith("tpde verify: error:") and err.count("\n") == 1
    # anything else is a bug: one line and exit 1 for the user, the traceback only with TPDE_DEBUG=1
    args.func = lambda a: (_ for _ in ()).throw(KeyError("bug"))
    monkeypatch.delenv("TPDE_DEBUG", raising=False)
    assert cli.main([]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tpde verify: internal error (KeyError") and err.count("\n") == 1
    monkeypatch.setenv("TPDE_DEBUG", "1")
    with pytest.raises(KeyError):
        cli.main([])


# -- issue 11: exit-code policy and hostile arguments, in-process ---------------------------------------------
TILT = {"attention": "custom", "B": [[0.0, 0.0], [0.0, 0.0]], "R": [[0.5, 0.0], [0.0, 0.5]],
        "V": [[1.0, 0.0], [0.0, 1.0]], "alpha0": [0.0, 0.0], "Sigma0": [[2.0, 0.0], [0.0, 2.0]], "T": 1.0}


def _run(capsys, *argv):
    from symbolic_tpde.cli import main

    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.mark.parametrize("argv, field", [
    (["gaussian", "--scenario", "softmax_2d", "--T", "inf"], "T"),
    (["gaussian", "--scenario", "softmax_2d", "--T", "nan"], "T"),
    (["gaussian", "--scenario", "softmax_2d", "--T", "1e307"], "T"),
    (["particles", "--scenario", "softmax_2d", "--n", "1000000000000", "--seed", "0"], "n"),
    (["particles", "--scenario", "softmax_2d", "--n", "10", "--seed", "0", "--steps", "100000000"], "steps"),
    (["verify", "--only", "nosuch"], "only"),
])
def test_hostile_arguments_are_one_line_exit_2(capsys, argv, field):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and err.startswith(f"tpde {argv[0]}: error: {field}:") and err.count("\n") == 1, err


def test_a_key_with_a_newline_cannot_forge_a_second_line(tmp_path, capsys):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({**TILT, "x\nERROR: forged": 1}))
    rc, out, err = _run(capsys, "rhs", "--scenario", str(p))
    assert rc == 2 and err.count("\n") == 1 and "\\n" in err


def test_rhs_refuses_a_tilt_that_does_not_exist(tmp_path, capsys):
    """Σ₀⁻¹ - R - Rᵀ = 0.5 I - I = -0.5 I: the smallest eigenvalue of Σ - Σ(R+Rᵀ)Σ is 2 - 4 = -2."""
    p = tmp_path / "tilt.json"
    p.write_text(json.dumps(TILT))
    rc, out, err = _run(capsys, "rhs", "--scenario", str(p), "--json", "--backend", "numpy")
    assert rc == 2 and out == "" and "tilt does not exist" in err and "-2" in err


def test_gaussian_refuses_a_tilt_that_does_not_exist(tmp_path, capsys):
    p = tmp_path / "tilt.json"
    p.write_text(json.dumps(TILT))
    rc, out, err = _run(capsys, "gaussian", "--scenario", str(p), "--json", "--backend", "numpy")
    assert rc == 2 and "tilt does not exist" in err


def test_gaussian_reports_a_tilt_crossed_mid_run_as_a_result(tmp_path, capsys):
    """d = 1, B = 0.5 (softmax-like growth), R = 0.1: the tilt exists while Σ < 1/(2R) = 5.  The derived ODE
    is dΣ/dt = Σ²/(1 - Σ/5): Σ₀ = 1 reaches 5 at T* = ∫₁⁵ (1 - Σ/5)/Σ² dΣ = 0.8 - 0.2 ln 5, where dΣ/dt is
    infinite (5 - Σ ∝ (T* - t)^{1/2}).  Status tilt-ceased, exit 0; the time to 1e-8 (the square-root approach
    makes the time error quadratic in the distance to 5); Σ within 1e-5 of 5 (the step size collapses at
    ~1e-14 t, hence 5 - Σ ~ 16 (1e-14)^{1/2} ≈ 2e-6)."""
    p = tmp_path / "cross.json"
    p.write_text(json.dumps({"attention": "custom", "B": [[0.5]], "R": [[0.1]], "V": [[1.0]], "alpha0": [0.0],
                             "Sigma0": [[1.0]], "T": 5.0}))
    rc, out, err = _run(capsys, "gaussian", "--scenario", str(p), "--json", "--backend", "numpy")
    res = json.loads(out)
    assert rc == 0 and res["status"] == "tilt-ceased" and 0 < res["t"] < 5.0
    assert abs(res["t"] - (0.8 - 0.2 * math.log(5.0))) < 1e-8
    assert abs(res["Sigma"][0][0] - 5.0) < 1e-5


def test_interrupt_is_one_line_exit_130_and_leaves_no_file(tmp_path, capsys, monkeypatch):
    import symbolic_tpde.numerics.particles.simulate as integ

    calls = {"n": 0}
    real = integ.field

    def interrupted(*a, **k):
        calls["n"] += 1
        if calls["n"] > 5:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(integ, "field", interrupted)
    target = tmp_path / "traj.npz"
    rc, out, err = _run(capsys, "particles", "--scenario", "softmax_2d", "--n", "20", "--seed", "0", "--steps",
                        "10", "--save", str(target), "--json")
    assert rc == 130 and err.startswith("tpde particles: interrupted at t = ") and err.count("\n") == 1, err
    assert out == "" and list(tmp_path.iterdir()) == []


def test_library_bug_is_one_line_exit_1(capsys, monkeypatch):
    import symbolic_tpde.inputs.scenario as scenario

    monkeypatch.delenv("TPDE_DEBUG", raising=False)
    monkeypatch.setattr(scenario, "load_scenario", lambda *a, **k: 1 / 0)
    rc, out, err = _run(capsys, "rhs", "--scenario", "softmax_2d")
    assert rc == 1 and "internal error (ZeroDivisionError" in err and err.count("\n") == 1


@pytest.mark.parametrize("extra", [[], ["--preset", "castin2025"]])
def test_figures_refuses_an_unknown_figure_name_before_drawing(tmp_path, capsys, extra):
    from symbolic_tpde.cli import main

    assert main(["figures", "--out", str(tmp_path), *extra, "--only", "nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--only" in err and "'nosuch'" in err
    assert not any(tmp_path.iterdir())  # nothing was drawn


def test_a_scalar_parameter_gets_the_same_range_check_as_arrays(tmp_path, capsys):
    # found by the 10 000-case fuzz (seed 12345): "tau": 1e300 passed because only arrays were range-checked
    from symbolic_tpde.cli import main

    path = tmp_path / "tau.json"
    path.write_text('{"attention": "l2", "Q": [[1]], "K": [[1]], "V": [[1]], "tau": 1e300, "alpha0": [0], '
                    '"Sigma0": [[1]], "T": 1}')
    assert main(["rhs", "--scenario", str(path), "--json"]) == 2
    assert "tau: magnitude 1e+300 exceeds 1e+75" in capsys.readouterr().err
