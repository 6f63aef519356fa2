"""The `tpde` command as a user meets it: help, one-line errors with exit status 2, no tracebacks."""

from __future__ import annotations

import json
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
    from symbolic_tpde.scenario import load_scenario

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
    with pytest.raises(KeyError):  # anything else is a bug and keeps its traceback
        args.func = lambda a: (_ for _ in ()).throw(KeyError("bug"))
        cli.main([])
