"""The documentation site (docs/) stays whole without building it: every page is reachable, every example is
valid Python (and, under ``-m slow``, runs), every command has a page generated from the parser, every
"checked by" reference of the mathematics resolves.  The full Sphinx build, which also runs the examples and
fails on any broken link, is a step of ``.ci/run`` (see docs/conf.py); these checks need no Sphinx."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))
import tpde_docs  # noqa: E402  (the site's build extension: its page helpers need no Sphinx)

GENERATED = ("_build", "_generated", "cli")


def pages() -> list[Path]:
    """The hand-written pages (generated ones, the command pages, are written at build time)."""
    return sorted(p for p in DOCS.rglob("*.md") if not p.relative_to(DOCS).parts[0] in GENERATED)


def examples() -> list[tuple[str, int, str]]:
    out = []
    for page in pages():
        for line, code, run in tpde_docs.python_blocks(page.read_text(encoding="utf-8")):
            if run:
                out.append((str(page.relative_to(ROOT)), line, code))
    return out


def test_every_page_is_in_a_toctree():
    """Pages in sub-folders are listed in index.md's toctrees; top-level pages (helpers' docs/NAME.md) arrive
    through its glob."""
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"(?m)^((?:guide|tutorials|reference)/[\w-]+)$", index))
    assert re.search(r"(?ms)^:glob:\s*\n\s*\*\s*$", index), "index.md keeps its glob toctree for docs/*.md"
    for page in pages():
        rel = page.relative_to(DOCS).with_suffix("").as_posix()
        if "/" in rel:
            assert rel in listed, f"docs/{rel}.md is in no toctree of docs/index.md"


def test_every_tutorial_job_has_a_page():
    jobs = ["derive_moment_ode", "own_kernel", "particles_vs_ode", "long_time_verdicts", "sphere", "pde_grid",
            "sensitivities_fitting", "real_models", "sweeps_dask"]
    for job in jobs:
        assert (DOCS / "tutorials" / f"{job}.md").is_file(), job


def test_examples_are_valid_python():
    found = examples()
    assert len(found) >= 8
    for page, line, code in found:
        try:
            ast.parse(code)
        except SyntaxError as exc:
            pytest.fail(f"{page}:{line}: {exc}")


@pytest.mark.slow
@pytest.mark.parametrize("page,line,code", examples(), ids=lambda v: v if isinstance(v, (str, int)) else "")
def test_example_runs(page, line, code):
    """What the site build does for every block (about 50 s for all of them here)."""
    proc = tpde_docs.run_example(code)
    assert proc.returncode == 0, f"{page}:{line}\n{proc.stderr[-2000:]}"


def test_python_blocks_are_found_and_no_run_is_honoured():
    text = "a\n\n```python\nprint(1)\n```\n\n<!-- no-run -->\n```python\nraise SystemExit(1)\n```\n"
    assert [(run, code.strip()) for _, code, run in tpde_docs.python_blocks(text)] == \
        [(True, "print(1)"), (False, "raise SystemExit(1)")]


def test_a_failing_example_is_reported():
    assert tpde_docs.run_example("raise SystemExit(3)").returncode == 3


def test_every_command_has_a_generated_page():
    from symbolic_tpde.cli import COMMANDS, build_parser

    generated = tpde_docs.command_pages()
    assert set(generated) == {f"{c}.md" for c in COMMANDS} | {"index.md"}
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name in COMMANDS:
        text = generated[f"{name}.md"]
        for action in sub.choices[name]._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in text or f", {option}" in text, (name, option)
        assert f"[`tpde {name}`]({name}.md)" in generated["index.md"]


def test_claim_references_resolve_and_a_wrong_one_is_caught():
    refs = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        refs += [("test", r) for r in re.findall(r"\{test\}`([^`]+)`", text)]
        refs += [("verify", r) for r in re.findall(r"\{verify\}`([^`]+)`", text)]
    assert len(refs) >= 30
    for kind, ref in refs:
        check = tpde_docs.test_reference_problem if kind == "test" else tpde_docs.verify_reference_problem
        assert check(ref) is None, f"{{{kind}}}`{ref}`: {check(ref)}"
    assert tpde_docs.test_reference_problem("tests/test_fields.py::test_no_such_test") is not None
    assert tpde_docs.verify_reference_problem("analysis: words that no row has") is not None


def test_relative_links_and_images_exist():
    for page in pages():
        text = page.read_text(encoding="utf-8")
        text = re.sub(r"(?ms)^```.*?^```", "", text)          # code blocks are not links
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            resolved = (page.parent / target).resolve()
            generated = resolved.is_relative_to(DOCS / "cli") or resolved.is_relative_to(DOCS / "_generated")
            assert resolved.exists() or generated, f"{page.relative_to(ROOT)} links to missing {target}"


def test_gallery_figures_are_quick_real_commands():
    sys.path.insert(0, str(DOCS))
    try:
        import gallery_figures
    finally:
        sys.path.remove(str(DOCS))
    from symbolic_tpde.cli import COMMANDS

    assert len(gallery_figures.FIGURES) >= 5
    for fig in gallery_figures.FIGURES:
        assert fig["file"].endswith(".png")
        if "argv" in fig:
            assert fig["argv"][0] in COMMANDS
        else:
            ast.parse(fig["python"])


def test_console_output_shown_in_the_docs_is_real():
    """A ```console block of a page that shows output under a `$ tpde ...` line shows that command's real output
    (blocks that only list commands are a tour, not a transcript)."""
    import subprocess

    shown = []
    for page in pages():
        for block in re.findall(r"```console\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S):
            for chunk in re.split(r"(?m)^\$ ", block)[1:]:
                line, _, out = chunk.partition("\n")
                if out.strip() and line.startswith("tpde "):
                    shown.append((page, line.split(), out.strip()))
    assert shown
    for page, argv, out in shown:
        proc = subprocess.run([sys.executable, "-m", "symbolic_tpde.cli", *argv[1:]], capture_output=True, text=True,
                              timeout=300, cwd=ROOT, env=tpde_docs.example_env())
        assert proc.returncode == 0 and proc.stdout.strip() == out, f"{page.relative_to(ROOT)}: {' '.join(argv)}"


def test_every_public_name_has_an_executed_example():
    """Each name of symbolic_tpde.__all__ is used as ``st.NAME`` in a block the site runs (docs/reference/api.md)."""
    import symbolic_tpde

    code = "\n".join(c for _, c, run in tpde_docs.python_blocks((DOCS / "reference" / "api.md").read_text("utf-8"))
                     if run)
    missing = [n for n in symbolic_tpde.__all__ if not re.search(rf"\bst\.{n}\b", code)]
    assert not missing, f"public names without an example on the API page: {missing}"


@pytest.mark.slow
@pytest.mark.parametrize("page,fails", [
    ("```python\nprint('fine')\n```\n", False),
    ("```python\nraise SystemExit('broken example')\n```\n", True),
    ("Checked by {test}`tests/test_fields.py::test_that_does_not_exist`.\n", True),
    ("A [link](missing.md).\n", True),
], ids=["good", "failing-example", "dangling-test-reference", "broken-link"])
def test_the_site_build_fails_on_a_broken_page(tmp_path, page, fails):
    """The build command of .ci/run on a one-page project with this extension: a failing example, a dangling
    {test} reference or a broken link makes it exit non-zero (needs the `docs` extra)."""
    import subprocess

    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    (tmp_path / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(DOCS / '_ext')!r})\nextensions = ['myst_parser', 'tpde_docs']\n"
        "root_doc = 'index'\n")
    (tmp_path / "index.md").write_text("# Probe\n\n" + page)
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html",
                           str(tmp_path), str(tmp_path / "_build")], capture_output=True, text=True, timeout=300,
                          env=tpde_docs.example_env())
    assert (proc.returncode != 0) == fails, proc.stderr[-1500:]


def test_source_paths_named_in_the_docs_exist():
    """A page that names a module by path (``analysis/verdict.py``, ``symbolic_tpde/numerics/grids/circle.py``)
    names one that exists: files move (issue 28), pages must follow."""
    layers = "analysis|symbolic|numerics|gaussian|codegen|documents|experiments|validate|registry|inputs|commands"
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for path in re.findall(rf"(?:symbolic_tpde/)?((?:{layers})/[\w/]+\.py)", text):
            if path.endswith("/X.py"):                        # the layout's placeholder "commands/X.py"
                continue
            assert (ROOT / "symbolic_tpde" / path).exists() or (ROOT / path).exists(), \
                f"{page.relative_to(ROOT)} names {path}, which does not exist"
