"""Output: text, LaTeX (structure; pdflatex if present) and JSON, and the ``tpde derive`` command."""

from __future__ import annotations

import json
import re
import os
import shutil
import subprocess

import pytest
import sympy as sp
from sympy.parsing.sympy_parser import parse_expr

from symbolic_tpde.cli import main
from symbolic_tpde.registry import kinds as _kinds
from symbolic_tpde.documents import printing
from symbolic_tpde.symbolic.moments import derive_gaussian_system, matrix_form


#: every kind of the registry: Gaussian-preserving ones (and "multihead") derive an ODE, the others a witness
VARIANTS = [k for k, s in _kinds.KINDS.items() if s.preserves_gaussians] + ["multihead"]
WITNESSES = [k for k, s in _kinds.KINDS.items() if not s.preserves_gaussians]


def _run(capsys, *argv):
    rc = main(["derive", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("d", [None, 2])
def test_latex_structure(variant, d, capsys):
    argv = ["--attention", variant, "--format", "latex", "--standalone"] + (["--d", str(d)] if d else [])
    rc, out, _ = _run(capsys, *argv)
    assert rc == 0 and "\\begin{align*}" in out
    assert printing.check_latex_structure(out) == []


def test_latex_checker_catches_errors():
    assert printing.check_latex_structure("\\begin{align*} x = {1 \\end{align*}")
    assert printing.check_latex_structure("\\begin{align*} x \\end{equation}")


def _pdflatex(tmp_path, name: str, document: str) -> str:
    """Compile ``document`` with pdflatex; fail with the log tail unless it compiles; return the log."""
    (tmp_path / f"{name}.tex").write_text(document)
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", f"{name}.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (tmp_path / f"{name}.pdf").stat().st_size > 1000
    return (tmp_path / f"{name}.log").read_text(errors="replace")


@pytest.mark.skipif(shutil.which("pdflatex") is None and os.environ.get("CI") != "true",
                    reason="pdflatex not installed (Debian: apt-get install --no-install-recommends "
                           "texlive-latex-base)")
@pytest.mark.slow   # ~30 s of pdflatex runs; one document per kind compiles in the fast suite (test_derive_documents)
def test_latex_compiles_for_every_variant(tmp_path, capsys):
    """Every ``tpde derive --format latex`` output (matrix form, entrywise d = 1, 2, 3, the witnesses, FFN and
    3 heads) typesets in ONE amsmath document (one pdflatex run keeps this fast), with no line running off
    the page (no ``Overfull \\hbox``: the row breaker keeps lines within the page)."""
    fragments = []
    cases = [[v] + ([] if d is None else ["--d", str(d)]) for v in VARIANTS for d in (None, 1, 2, 3)]
    cases += [[w] for w in WITNESSES] + [["masked", "--sink"], ["multihead", "--heads", "3", "--ffn", "--d", "3"],
                                         ["multihead", "--heads", "3", "--ffn", "--d", "3", "--entrywise-anyway"],
                                         ["l2", "--d", "2", "--entrywise-anyway"],
                                         ["sinkhorn", "--d", "2", "--entrywise-anyway"],
                                         ["softmax", "--d", "3", "--no-cse"]]
    for case in cases:
        rc, out, err = _run(capsys, "--attention", *case, "--format", "latex")
        if case == ["sinkhorn", "--d", "3"]:
            assert rc == 1 and "square root" in err      # no exact entrywise form: nothing to typeset
            continue
        assert rc == 0, (case, err)
        fragments.append(f"\\section*{{{' '.join(case).replace('_', ' ').replace('--', '')}}}\n{out}")
    doc = printing.latex_document("\n".join(fragments))
    assert "a4paper" in doc and "landscape" not in doc                 # A4 portrait
    log = _pdflatex(tmp_path, "all", doc)
    assert "Overfull \\hbox" not in log, log[log.index("Overfull"):][:800]


@pytest.mark.skipif(shutil.which("pdflatex") is None and os.environ.get("CI") != "true",
                    reason="pdflatex not installed (Debian: apt-get install --no-install-recommends "
                           "texlive-latex-base)")
@pytest.mark.parametrize("argv", [["l2", "--d", "2"], ["l2", "--d", "2", "--entrywise-anyway"],
                                  ["multihead", "--d", "2", "--ffn"], ["sinkhorn"], ["sigmoid"]])
def test_standalone_output_compiles_as_printed(argv, tmp_path, capsys):
    """Each document as printed compiles, with no line off the page (no ``Overfull \\hbox``); l2 at d = 2 is
    the readability fallback (note + matrix form) and, with --entrywise-anyway, its 41-temporary system."""
    rc, out, _ = _run(capsys, "--attention", *argv, "--format", "latex", "--standalone")
    assert rc == 0 and out.startswith("\\documentclass")
    log = _pdflatex(tmp_path, "doc", out)
    assert "Overfull \\hbox" not in log, log[log.index("Overfull"):][:800]


def test_long_rows_are_broken_within_the_page():
    """Without CSE, softmax at d = 3 has rows ~2000 glyphs wide: they must be split between terms into lines
    of at most LATEX_LINE_WIDTH glyphs, with \\left/\\right paired on every line."""
    system = derive_gaussian_system((3, (("softmax", 3),), False, False))
    tex = printing.render_system(system, "latex", cse=False)
    rows = tex.split("\\begin{align*}")[1].split("\\end{align*}")[0].split(" \\\\\n")
    assert len(rows) > 3 * system.n_states                      # several lines per equation
    assert max(printing.latex_width(r.split("&", 1)[1].lstrip("=")) for r in rows) <= printing.LATEX_LINE_WIDTH
    assert printing.check_latex_structure(printing.latex_document(tex)) == []
    # the broken rows contain every term: the same symbols with the same multiplicity as the unbroken LaTeX
    flat = sp.latex(system.rhs[3], symbol_names=printing.latex_symbol_names(system))
    for sym in ("\\Sigma_{11}", "V_{12}", "A_{33}"):                  # 1-based, as in the paper
        body = tex.split("\\frac{d\\Sigma_{11}}{dt} &= ")[1].split("\\frac{d")[0]
        assert body.count(sym) == flat.count(sym)


def test_broken_rows_are_the_same_expression():
    """The row breaker only inserts line breaks: run it with SymPy's str printer in place of LaTeX, remove the
    break markup, parse the text back and compare with the expression (signs and every term preserved)."""
    from sympy.parsing.sympy_parser import implicit_multiplication, standard_transformations

    def rejoin(row: str) -> str:
        body = "".join(line.split("&", 1)[1].lstrip("=").replace(r"\quad", "") for line in row.split("\\\\\n"))
        body = re.sub(r"\\right\)\^\{([^}]*)\}", r")**(\1)", body)      # a broken (sum)^p, e.g. 1/(sum)
        return (body.replace(r"\left.", "").replace(r"\right.", "").replace(r"\left(", "(")
                .replace(r"\right)", ")"))

    system = derive_gaussian_system((3, (("softmax", 3),), True, False))
    x, y, z = sp.symbols("x y z")
    exprs = list(system.rhs) + [x * (y - z) ** 2 - 3 * y * (x + z) - z, -(x - y) * (x - z) * (y + 2) * (x + 1) - 5]
    names = {str(s): s for e in exprs for s in e.free_symbols}
    broken = 0
    for e in exprs:
        row, _ = printing._latex_row("L", e, sp.sstr, budget=12)
        broken += row.count("\\quad")
        back = parse_expr(rejoin(row), local_dict=names,
                          transformations=standard_transformations + (implicit_multiplication,))
        assert sp.expand(back - e) == 0, row
    assert broken > 10 * len(exprs)


def test_no_cse_latex_refuses_unbreakable_rows(capsys):
    """An exponent cannot be broken across lines: forced --no-cse LaTeX refuses rows wider than the page
    (text has no page width and prints); the CLI maps the refusal to an --no-cse input error.  A long
    reciprocal ``1/(sum)`` is broken as ``(sum)^{-1}`` instead."""
    from symbolic_tpde.symbolic.system import OdeSystem

    xs = sp.symbols("Sigma_0_0 alpha_0 " + " ".join(f"p_{k}" for k in range(80)), real=True)
    long_sum = sp.Add(*[xs[0] * p for p in xs[2:]])                # ~250 glyphs
    recip = OdeSystem(states=xs[1:2], params=xs[2:], rhs=(1 / long_sum,), origin={"variant": "test", "d": 1})
    tex = printing.render_system(recip, "latex", cse=False)
    assert "\\right)^{-1}" in tex and tex.count("\\quad") >= 2 and printing.check_latex_structure(tex) == []
    wide = sp.exp(long_sum)                                         # ~250 glyphs in one superscript
    system = OdeSystem(states=xs[1:2], params=xs[2:], rhs=(wide,), origin={"variant": "test", "d": 1})
    with pytest.raises(ValueError, match="wider than the page"):
        printing.render_system(system, "latex", cse=False)
    assert "p_{80}" in printing.render_system(system, "latex")   # automatic choice: no error (1-based: p_79)
    assert "p_79" in printing.render_system(system, "text", cse=False)
    rc, _, err = _run(capsys, "--attention", "l2", "--d", "3", "--format", "latex", "--no-cse",
                      "--entrywise-anyway")
    assert rc == 2 and "--no-cse" in err
    rc, out, _ = _run(capsys, "--attention", "l2", "--d", "3", "--format", "latex", "--no-cse")
    assert rc == 0 and out.startswith("% The entrywise form at d = 3 is not shown")   # readability first


def test_latex_checker_catches_unpaired_left_right():
    assert printing.check_latex_structure(r"\begin{align*} a &= \left( b \\ &\quad c \right) \end{align*}")
    assert not printing.check_latex_structure(
        r"\begin{align*} a &= \left( b \right. \\ &\quad \left. c \right) \end{align*}")


def test_json_entrywise_round_trip(capsys):
    rc, out, _ = _run(capsys, "--attention", "softmax", "--d", "2", "--format", "json", "--ffn")
    data = json.loads(out)
    assert rc == 0 and data["form"] == "entrywise" and data["d"] == 2 and data["expr_format"] == "sympy-str"
    assert set(data) >= {"variant", "d", "form", "alpha_dot", "Sigma_dot", "assumptions"}
    system = derive_gaussian_system((2, (("softmax", 2),), True, False))
    names = {s.name: s for s in (*system.states, *system.params)}
    defs: dict = {}
    for name, expr in data["definitions"]:                      # CSE temporaries, substituted in order
        names[name] = sp.Symbol(name)
        defs[names[name]] = parse_expr(expr, local_dict=names).xreplace(defs)
    back = [parse_expr(e, local_dict=names).xreplace(defs) for e in data["alpha_dot"]]
    assert [sp.expand(a - b) for a, b in zip(back, system.rhs[:2])] == [0, 0]
    S = data["Sigma_dot"]
    assert S[0][1] == S[1][0]
    assert sp.expand(parse_expr(S[1][1], local_dict=names).xreplace(defs) - system.rhs[4]) == 0


def test_json_matrix_form(capsys):
    rc, out, _ = _run(capsys, "--attention", "softmax", "--format", "json")
    data = json.loads(out)
    assert data["d"] is None and data["form"] == "matrix"
    assert data["alpha_dot"] == ["V*Sigma*A*alpha + V*alpha"]


def test_text_matrix_forms(capsys):
    rc, out, _ = _run(capsys, "--attention", "linear")
    assert rc == 0 and "dSigma/dt" in out and "alpha*alpha.T" in out
    rc, out, _ = _run(capsys, "--attention", "multihead", "--heads", "3")
    assert "V_2" in out
    rc, out, _ = _run(capsys, "--attention", "sinkhorn")
    assert "dalpha/dt = V*alpha" in out


@pytest.mark.parametrize("variant", ["sigmoid", "softmax_unnormalized", "masked"])
@pytest.mark.parametrize("fmt", ["text", "json", "latex"])
def test_non_preserving_prints_witness_and_exits_0(variant, fmt, capsys):
    rc, out, _ = _run(capsys, "--attention", variant, "--format", fmt, "--d", "2")
    assert rc == 0
    if fmt == "json":
        assert json.loads(out)["gaussian_preserving"] is False
    elif fmt == "text":
        assert "NOT Gaussian-preserving" in out
    else:
        assert printing.check_latex_structure(printing.latex_document(out)) == []


def test_errors(capsys):
    rc, _, err = _run(capsys, "--attention", "sinkhorn", "--d", "3")
    assert rc == 1 and "square root" in err
    rc, _, err = _run(capsys, "--attention", "softmax", "--d", "0")
    assert rc == 2 and "--d" in err
    rc, _, err = _run(capsys, "--attention", "softmax", "--m", "2")
    assert rc == 2
    rc, _, err = _run(capsys, "--attention", "softmax", "--sink")
    assert rc == 2 and "--sink" in err


def test_masked_with_sink(capsys):
    rc, out, _ = _run(capsys, "--attention", "masked", "--sink")
    assert rc == 0 and "attention sink" in out and "NOT Gaussian-preserving" in out


def test_cse_text_is_equivalent():
    system = derive_gaussian_system((2, (("l2", 2),), False, False))
    text = printing.render_system(system, "text", cse=True)
    assert "u_1 =" in text and "x_0" not in text and text.count("/dt =") == system.n_states
    mf = matrix_form(("l2",))
    assert "dSigma/dt" in printing.render_matrix_form(mf, "text")


def test_json_with_definitions_evaluates_like_the_system(capsys):
    import numpy as np

    from symbolic_tpde.validate import checks_symbolic as cs

    rc, out, _ = _run(capsys, "--attention", "l2", "--d", "3", "--format", "json")
    data = json.loads(out)
    assert rc == 0 and data["definitions"]                      # large system: CSE temporaries
    system = derive_gaussian_system((3, (("l2", 3),), False, False))
    vals, _ = cs.random_point(system, np.random.default_rng(2))
    names = {s.name: s for s in (*system.states, *system.params)}
    env = {names[k]: v for k, v in ((s.name, vals[s]) for s in vals)}
    for name, expr in data["definitions"]:                      # substitute in order
        sym = sp.Symbol(name)
        names[name] = sym
        env[sym] = parse_expr(expr, local_dict=names).xreplace(env)
    got = [parse_expr(e, local_dict=names).xreplace(env) for e in data["alpha_dot"]]
    want = cs.dag_eval(system.rhs[:3], vals)
    assert [sp.nsimplify(a - b) for a, b in zip(got, want)] == [0, 0, 0]   # exact rationals
    assert data["Sigma_dot"][0][2] == data["Sigma_dot"][2][0]


def test_assumptions_are_sentences_in_math_notation(capsys):
    """Assumptions are words with formulas, never SymPy syntax: JSON readable ASCII (no ``**``), text with
    ``Σ⁻¹``, LaTeX with ``\\Sigma^{-1}``; a standalone document lists them in the body, not as comments."""
    for argv in (["l2"], ["l2", "--d", "2"], ["softmax"], ["sinkhorn", "--d", "2"]):
        rc, out, _ = _run(capsys, "--attention", *argv, "--format", "json")
        ass = json.loads(out)["assumptions"]
        assert rc == 0 and ass and not any("**" in a or ".T" in a for a in ass), ass
        rc, out, _ = _run(capsys, "--attention", *argv, "--format", "text")
        assert "**" not in "\n".join(line for line in out.splitlines() if line.startswith("# "))
    rc, out, _ = _run(capsys, "--attention", "softmax", "--format", "text")
    assert "Σ⁻¹ is positive definite" in out
    rc, out, _ = _run(capsys, "--attention", "l2", "--format", "latex", "--standalone")
    body = out.split("\\begin{document}")[1]
    assert "\\paragraph{Assumptions.}" in body and "\\Sigma^{-1}" in body and "% assumption" not in out
    assert "Conclusions" in body and "**" not in body


# ------------------------------------------------------------------ paper notation and readability (issue 10)
def test_paper_names_follow_the_paper():
    """The 1-based names asked for in issue 10 (the specification, written out by hand)."""
    pn = printing.paper_name
    assert pn("alpha_0", False, latex=True) == r"\alpha_{1}"
    assert pn("Sigma_0_1", False, latex=True) == r"\Sigma_{12}"
    assert pn("Sigma_0_9", False, latex=True) == r"\Sigma_{1,10}"          # comma once an index exceeds 9
    assert pn("h0_A_0_1", False, latex=True) == "A_{12}"
    assert pn("h1_A_0_1", True, latex=True) == "A^{(2)}_{12}"
    assert pn("h0_tau", True, latex=True) == r"\tau^{(1)}" and pn("h0_epsilon", False, latex=True) == r"\varepsilon"
    assert pn("ffn_W_1_0", True, latex=True) == "W_{21}" and pn("ffn_c_0", True, latex=True) == "c_{1}"
    assert pn("h1_A_0_1", True) == "A^(2)_12" and pn("Sigma_0_9", False) == "Sigma_1,10"
    assert pn("u_1x", False) is None


def test_latex_and_steps_share_the_names():
    """The steps' display symbols (steps.one_based) typeset by SymPy's own name splitting give exactly the
    LaTeX entrywise names (latex_symbol_names): one naming, two renderers that agree."""
    from symbolic_tpde.documents.steps import one_based

    for structure in [(2, (("softmax", 2), ("softmax", 2)), True, False), (1, (("l2", 1), ("l2", 1)), False, False),
                      (2, (("sinkhorn", 2),), False, False)]:
        system = derive_gaussian_system(structure)
        symbols = (*system.states, *system.params)
        shown = one_based(symbols, len(structure[1]) > 1)
        latex = printing.latex_symbol_names(system)
        assert {s: printing.tex(shown.get(s, s)) for s in symbols} == latex


@pytest.mark.parametrize("argv, present, absent", [
    (["softmax", "--d", "2"], [r"\alpha_{1}", r"\Sigma_{12}", "A_{12}", "V_{21}"], ["^{("]),
    (["multihead", "--d", "2", "--ffn"], ["A^{(1)}_{12}", "A^{(2)}_{12}", "V^{(2)}_{22}", "W_{12}", "c_{1}",
                                           "u_{1}", "head 1 (softmax)", "head 2 (softmax)"], ["head 0"]),
    (["linear", "--d", "3"], [r"\Sigma_{23}", "A_{33}", "u_{1}"], ["^{("]),
    (["l2", "--d", "1", "--heads", "2"], [r"\tau^{(1)}", "Q^{(2)}_{11}", "K^{(1)}_{11}"], []),
    (["sinkhorn", "--d", "1"], [r"\varepsilon"], [r"\epsilon"])])
def test_latex_entrywise_uses_one_based_paper_names(argv, present, absent, capsys):
    rc, out, _ = _run(capsys, "--attention", *argv, "--format", "latex")
    assert rc == 0 and "entrywise form" in out
    assert "_{0" not in out and "^{(0)" not in out and "x_" not in out     # 1-based; temporaries are u_k
    for s in present:
        assert s in out, s
    for s in absent:
        assert s not in out, s
    # text keeps the code names (what generated code and parse_expr use), and says so in its header
    rc, text, _ = _run(capsys, "--attention", *argv)
    assert rc == 0 and "alpha_0" in text and "code names, 0-based" in text.splitlines()[0]


def test_unreadable_entrywise_latex_falls_back_to_the_matrix_form(capsys):
    """l2 at d = 2 needs more temporaries than ENTRYWISE_LATEX_MAX_TEMPS: LaTeX gives a one-line note and the
    matrix form; --entrywise-anyway prints the system, whose number of temporaries is the one the note
    states; text and JSON always give the full system."""
    rc, out, _ = _run(capsys, "--attention", "l2", "--d", "2", "--format", "latex")
    first = out.splitlines()[0]
    assert rc == 0 and first.startswith("% The entrywise form at d = 2 is not shown")
    assert "matrix form" in out.splitlines()[1] and r"\frac{d\Sigma}{dt}" in out and "u_{1}" not in out
    n = int(re.search(r"needs (\d+) named", first).group(1))
    assert n > printing.ENTRYWISE_LATEX_MAX_TEMPS
    rc, full, _ = _run(capsys, "--attention", "l2", "--d", "2", "--format", "latex", "--entrywise-anyway")
    assert rc == 0 and "entrywise form" in full.splitlines()[0]
    assert len(re.findall(r"^u_\{\d+\} &=", full, re.MULTILINE)) == n and "_{0" not in full
    rc, doc, _ = _run(capsys, "--attention", "l2", "--d", "2", "--format", "latex", "--standalone")
    assert "\\paragraph{Note.} The entrywise form at d = 2 is not shown" in doc and "-{}-entrywise-anyway" in doc
    rc, text, _ = _run(capsys, "--attention", "l2", "--d", "2")
    assert text.count("/dt =") == 5 and len(re.findall(r"^u_\d+ =", text, re.MULTILINE)) == n
    rc, js, _ = _run(capsys, "--attention", "l2", "--d", "2", "--format", "json")
    assert json.loads(js)["form"] == "entrywise" and len(json.loads(js)["definitions"]) == n
    # the threshold's other side: softmax stays entrywise at d = 3 (21 temporaries), not at d = 4 (38)
    assert printing.entrywise_unreadable(derive_gaussian_system((3, (("softmax", 3),), False, False))) is None
    assert "38 named" in printing.entrywise_unreadable(derive_gaussian_system((4, (("softmax", 4),), False, False)))
    rc, _, err = _run(capsys, "--attention", "l2", "--d", "2", "--entrywise-anyway")
    assert rc == 2 and "--entrywise-anyway" in err


def test_several_heads_matrix_form_latex_uses_the_same_head_superscripts(capsys):
    """The matrix form (also the fallback of an unreadable entrywise form) names heads as the entrywise form
    does, V^{(1)}, \\tau^{(2)}; the text form keeps the code names V_0, tau_1."""
    rc, out, _ = _run(capsys, "--attention", "l2", "--heads", "2", "--format", "latex")
    assert rc == 0 and "V^{(1)}" in out and r"\tau^{(2)}" in out and "_{0}" not in out
    assert "% assumption: head 2: tilt exists" in out
    rc, out, _ = _run(capsys, "--attention", "multihead", "--heads", "3", "--ffn", "--d", "3", "--format", "latex")
    assert rc == 0 and "not shown" in out.splitlines()[0] and "A^{(3)}" in out and "_{0" not in out
    rc, out, _ = _run(capsys, "--attention", "l2", "--heads", "2")
    assert "V_0" in out and "tau_1" in out
