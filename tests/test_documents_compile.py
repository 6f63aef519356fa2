"""Every document family x {article, Beamer} compiles with pdflatex, with 0 overfull boxes, and its extracted
text (pdftotext) shows no code (issue 31): no Python operators, ``sqrt(``, nested lists, module or function
names, ASCII Greek names or "package".  One document per family in the fast suite, the enumerated list under
``slow``.  In CI (CI=true) a missing pdflatex/pdftotext is a failure (``_tools``)."""

import json
import re
import subprocess

import pytest
import sympy as sp

from symbolic_tpde.cli import main
from symbolic_tpde.documents import render as R
from test_derive_documents import _pdf, _tools

#: code in the extracted text of a typeset document
CODE = re.compile(r"\*\*|(?<!T )\*(?!\))|==|!=|<=|>=|\bsqrt\(|\[\[|\bpackage\b|symbolic_tpde|\b[a-z]+_[a-z_]+\(|"
                  r"\b(?:closed_forms|blowup_time|besseli|lambdify|np\.|sp\.)|\b(?:alpha|beta|rho|Sigma|sigma|"
                  r"Gamma|lambda|epsilon|theta|kappa)\b|\bTrue\b|\bFalse\b|\bNone\b")

VI = {"name": "vi_2d", "description": "softmax, V = I, symmetric A with a positive eigenvalue",
      "attention": "softmax", "d": 2, "A": [[0.5, 0.1], [0.1, -0.3]], "V": [[1, 0], [0, 1]],
      "alpha0": [0.2, -0.1], "Sigma0": [[1.0, 0.2], [0.2, 0.5]], "T": 1.0}


def _cli(capsys, argv):
    rc = main(["derive", *argv, "--format", "latex"])
    return rc, capsys.readouterr().out


def _energy(cls):
    from symbolic_tpde.documents.gradient_flow import energy_derivation

    dv = energy_derivation(n=1, d=1)
    return 0, R.render(dv, "latex", standalone_doc=cls == "--standalone", slides=cls == "--beamer")


def _user_kernel(cls, with_time: bool):
    from test_documents_engine import _time_kernel

    import symbolic_tpde as st

    if with_time:
        system = _time_kernel()
    else:
        x, y = sp.Matrix(sp.symbols("x0:2", real=True)), sp.Matrix(sp.symbols("y0:2", real=True))
        A = sp.Matrix(2, 2, lambda i, j: sp.Symbol(f"a{i}{j}", real=True))
        lam = sp.Symbol("lambda", positive=True)
        system = st.derive_kernel((y.T * A * x)[0, 0] - lam * (y.T * y)[0, 0] + sp.cos(x[0]), x, y)
    assert system.steps
    dv = system._memo["document"]
    return 0, R.render(dv, "latex", standalone_doc=cls == "--standalone", slides=cls == "--beamer")


def _document(tmp_path, capsys, family, cls):
    """``(exit code, LaTeX source)`` of one document of ``family`` in the class ``cls``."""
    kind, *rest = family.split(":")
    if kind == "energy":
        return _energy(cls)
    if kind == "kernel":
        return _user_kernel(cls, rest == ["time"])
    if kind == "scenario":
        name = rest[0]
        if name == "vi":
            (tmp_path / "vi.json").write_text(json.dumps(VI))
            name = str(tmp_path / "vi.json")
        fig = ["--figure", str(tmp_path / "fig.pdf")] if cls == "--standalone" and rest[0] == "vi" else []
        return _cli(capsys, ["--scenario", name, *fig, cls])
    if kind == "sphere":
        return _cli(capsys, ["--sphere", rest[0], *rest[1:], cls])
    return _cli(capsys, [*rest, cls])


FAST = [("moment:--attention:softmax:--steps:--V:identity", "--beamer"), ("energy", "--standalone"),
        ("witness:--attention:sigmoid", "--beamer"), ("kernel:time", "--standalone"),
        ("scenario:vi", "--standalone"), ("sphere:two-tokens", "--standalone")]
FAMILIES = (["moment:--attention:softmax:--steps", "moment:--attention:softmax:--steps:--V:identity",
             "moment:--attention:linear:--steps", "moment:--attention:l2:--steps",
             "moment:--attention:softmax:--steps:--heads:2:--A:symmetric", "energy",
             "witness:--attention:sigmoid", "witness:--attention:masked", "witness:--attention:softmax_unnormalized",
             "kernel:plain", "kernel:time", "scenario:vi", "scenario:softmax_2d", "scenario:l2_2d",
             "scenario:sigmoid_2d", "scenario:masked_sink_2d"]
            + [f"sphere:{r}" for r in ("equiangular", "two-tokens", "circle", "causal")]
            + ["sphere:harmonics:--d:3", "sphere:equiangular:--norm:pre", "sphere:two-tokens:--sphere-kind:sphere_usa"])
#: a kind's witness article is printing.render_witness; its Beamer slides and every scenario document are the engine's
SLOW = [(f, c) for f in FAMILIES for c in ("--standalone", "--beamer") if (f, c) not in FAST]


def _check(tmp_path, capsys, family, cls):
    _tools()
    rc, src = _document(tmp_path, capsys, family, cls)
    assert rc == 0, src[-500:]
    prc, log, text = _pdf(tmp_path, src)
    assert prc == 0, log[-1500:]
    assert "Overfull" not in log, log[log.find("Overfull"):][:400]
    code = sorted({m.group(0) for m in CODE.finditer(text)})
    assert not code, (code, [ln for ln in text.splitlines() if CODE.search(ln)][:5])
    return text


@pytest.mark.parametrize("family,cls", FAST)
def test_one_document_per_family_compiles_without_code(tmp_path, capsys, family, cls):
    _check(tmp_path, capsys, family, cls)


@pytest.mark.slow
@pytest.mark.parametrize("family,cls", SLOW)
def test_every_document_compiles_without_code(tmp_path, capsys, family, cls):
    _check(tmp_path, capsys, family, cls)


def test_scenario_figure_prints_at_7pt_or_more(tmp_path, capsys):
    """Issue 31 item 5: the scenario figure's words (three letters or more, so that sub- and superscripts do not
    count) are at least 7 pt tall once the figure is scaled to the article's text width (16.6 cm = 470 pt); the
    height is pdftotext's word box, which is the font size of the word."""
    _tools()
    (tmp_path / "vi.json").write_text(json.dumps(VI))
    rc, _ = _cli(capsys, ["--scenario", str(tmp_path / "vi.json"), "--figure", str(tmp_path / "fig.pdf"),
                          "--standalone"])
    out = subprocess.run(["pdftotext", "-bbox", str(tmp_path / "fig.pdf"), "-"], capture_output=True, text=True).stdout
    width = float(re.search(r'<page width="([\d.]+)"', out).group(1))
    words = [(float(b) - float(a), t) for a, b, t in re.findall(r'yMin="([\d.]+)" xMax="[\d.]+" yMax="([\d.]+)">([^<]*)<',
                                                                out) if len(t) >= 3]
    assert rc == 0 and words
    smallest = min(h for h, _ in words) * 470 / width
    assert smallest >= 7, smallest
