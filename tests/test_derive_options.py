"""`tpde derive`: every option combination works or is refused up front with a one-line reason (issue 19, 6)."""

import pytest

from symbolic_tpde.cli import main


@pytest.mark.parametrize("argv,flag", [
    (["--attention", "softmax", "--standalone"], "--standalone"),                 # text output
    (["--attention", "softmax", "--steps", "--format", "latex", "--standalone", "--beamer"], "--standalone"),
    (["--attention", "softmax", "--steps", "--no-cse"], "--no-cse"),
    (["--energy", "--no-cse"], "--no-cse"),
    (["--attention", "softmax", "--beamer"], "--beamer"),
    (["--attention", "softmax", "--sink"], "--sink"),
    (["--attention", "softmax", "--m", "2"], "--m"),
    (["--attention", "softmax", "--d", "0"], "--d"),
    (["--energy", "--attention", "softmax"], "--attention"),
    (["--attention", "softmax", "--entrywise-anyway"], "--entrywise-anyway"),
])
def test_refused_up_front_with_one_line(capsys, argv, flag):
    rc = main(["derive", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and flag in err, err


@pytest.mark.parametrize("argv", [["--attention", "sigmoid", "--format", "latex", "--standalone"],
                                  ["--attention", "linear", "--d", "2", "--format", "json"],
                                  ["--attention", "softmax", "--format", "latex", "--standalone"]])
def test_combinations_that_work(capsys, argv):
    assert main(["derive", *argv]) == 0 and capsys.readouterr().out.strip()
