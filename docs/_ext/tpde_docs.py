"""Sphinx extension of the symbolic_tpde site: what is generated or checked when the site builds.

* **CLI pages** (``builder-inited``): ``docs/cli/<command>.md`` for every command of
  :func:`symbolic_tpde.cli.build_parser`, and ``docs/cli/index.md``, written from the argparse parser itself
  (usage, description, every argument with its help), so a page cannot disagree with ``tpde X --help``.
* **Gallery** (``builder-inited``): the figures of ``docs/gallery_figures.py`` drawn by the real commands on
  quick settings into ``docs/_generated/gallery/`` (missing ones only; ``TPDE_DOCS_REDRAW=1`` redraws all), and
  ``docs/_generated/gallery.md`` included by ``docs/gallery.md``.
* **Executed examples** (``source-read``): every fenced ```` ```python ```` block of every page runs in a fresh
  interpreter with this tree first on the path; its standard output is shown under it.  A block that exits
  non-zero is reported with its page and line and fails the build (also without ``-W``).  A block preceded by
  the line ``<!-- no-run -->`` is shown, not run.
* **Claim roles**: ``{test}`tests/test_x.py::test_name``` and ``{verify}`area: words of a row```.  Each is
  checked when the page is read (the test file exists and defines that test; ``tpde verify`` has that area
  and the area's check module contains those words); a reference that does not resolve fails the build.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import time
from pathlib import Path

# Sphinx and docutils are imported where they are used, so that tests/test_docs.py can use the page helpers
# (examples, command pages, claim checks) in the test suite without the `docs` extra installed.


class _Log:
    """``sphinx.util.logging``'s logger, looked up on first use."""

    def __getattr__(self, name):
        from sphinx.util import logging

        return getattr(logging.getLogger(__name__), name)


logger = _Log()

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
GENERATED = DOCS / "_generated"
EXAMPLE_TIMEOUT = 300          # seconds per block; the slowest example of the site takes about 15 s here
NO_RUN = "<!-- no-run -->"
FENCE = re.compile(r"^(?P<indent>[ ]{0,3})(?P<fence>`{3,})python[ \t]*\n(?P<code>.*?)^(?P=indent)(?P=fence)[ \t]*$",
                   flags=re.S | re.M)


# ----------------------------------------------------------------------------------------------- environment
def example_env() -> dict:
    """Environment of an executed example: this tree first on the path, no display, a stable cache."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("MPLBACKEND", "Agg")
    return env


def _write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it already holds it (Sphinx re-reads a page whose file changed)."""
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


# ------------------------------------------------------------------------------------------------- examples
def _fenced(text: str):
    """Each fenced ```` ```python ```` block of a Markdown page: (match, line of the fence, code, run it?)."""
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        code = "\n".join(row[len(m.group("indent")):] for row in m.group("code").split("\n"))
        yield m, line, code, before != NO_RUN


def python_blocks(text: str) -> list[tuple[int, str, bool]]:
    """The fenced ```` ```python ```` blocks of a Markdown page: (line of the fence, code, run it?)."""
    return [(line, code, run) for _, line, code, run in _fenced(text)]


def run_example(code: str, timeout: float = EXAMPLE_TIMEOUT) -> subprocess.CompletedProcess:
    """Run one example in a fresh interpreter from the repository root (relative paths as in the README)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=example_env())


def _output_block(stdout: str, max_lines: int = 40) -> str:
    lines = stdout.rstrip("\n").split("\n")
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"… ({len(lines) - max_lines} more lines)"]
    body = "\n".join(lines)
    fence = "````" if "```" in body else "```"
    return f"\n{fence}{{code-block}} text\n:class: tpde-output\n\n{body}\n{fence}\n"


def _execute_page(app, docname: str, source: list[str]) -> None:
    text = source[0]
    if "```python" not in text:
        return
    path = app.env.doc2path(docname)
    pieces, last = [], 0
    for m, line, code, run in _fenced(text):
        pieces.append(text[last:m.end()])
        last = m.end()
        if not run:
            continue
        start = time.perf_counter()
        try:
            proc = run_example(code)
        except subprocess.TimeoutExpired:
            _fail(app, f"{path}:{line}: example did not finish in {EXAMPLE_TIMEOUT} s")
            continue
        seconds = time.perf_counter() - start
        app.tpde_example_seconds = getattr(app, "tpde_example_seconds", 0.0) + seconds
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().split("\n")[-6:])
            _fail(app, f"{path}:{line}: example failed (exit {proc.returncode}):\n{tail}")
            continue
        logger.info(f"[tpde] {docname}:{line} example ran in {seconds:.1f} s")
        if proc.stdout.strip():
            pieces.append("\n" + _output_block(proc.stdout))
    pieces.append(text[last:])
    source[0] = "".join(pieces)


def _fail(app, message: str) -> None:
    logger.warning(message, type="tpde", subtype="example")
    app.tpde_failures.append(message)


# ------------------------------------------------------------------------------------------------ CLI pages
def _md_escape(text: str) -> str:
    return re.sub(r"([\\`*_\[\]<>|#$])", r"\\\1", text)


def _invocation(action) -> str:
    if not action.option_strings:
        return action.metavar or action.dest
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or action.dest.upper()
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    if action.nargs in ("+", "*"):
        metavar = f"{metavar} [{metavar} ...]"
    elif isinstance(action.nargs, int) and action.nargs > 1 and " " not in metavar:
        metavar = " ".join([metavar] * action.nargs)
    return f"{names} {metavar}"


def command_pages() -> dict[str, str]:
    """``{file name: Markdown}`` of the CLI pages, built from the parser of :mod:`symbolic_tpde.cli`."""
    import argparse

    from symbolic_tpde import cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: (a.help or "") for a in sub._choices_actions}
    pages, rows = {}, []
    for name in cli.COMMANDS:
        p = sub.choices[name]
        p.prog = f"tpde {name}"
        formatter = p._get_formatter()
        lines = [f"(cli-{name})=", f"# `tpde {name}`", "",
                 "*Generated from the command's argparse parser when the site is built: the same text as "
                 f"`tpde {name} --help`.*", ""]
        if helps.get(name) or p.description:
            lines += [_md_escape(p.description or helps[name]), ""]
        lines += ["```text", p.format_usage().strip(), "```", "", "## Arguments", ""]
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            text = _md_escape(formatter._expand_help(action)) if action.help else ""
            if action.choices and not isinstance(action, argparse._SubParsersAction):
                text += ("; " if text else "") + "one of " + ", ".join(f"`{c}`" for c in action.choices)
            lines += [f"`{_invocation(action)}`", f": {text or '(no help text)'}", ""]
        if p.epilog:
            lines += ["## Notes", "", _md_escape(p.epilog), ""]
        lines += ["See also: [all commands](index.md), [exit statuses and bounded work](../guide/commands.md).", ""]
        pages[f"{name}.md"] = "\n".join(lines)
        rows.append(f"| [`tpde {name}`]({name}.md) | {_md_escape(helps.get(name, '')).replace(chr(10), ' ')} |")
    index = ["(cli-index)=", "# Command reference", "",
             "One page per `tpde` command, generated from the argparse parser when the site is built (so they "
             "cannot drift from `tpde COMMAND --help`).  Exit statuses, output conventions and the caps on "
             "work are on [Commands](../guide/commands.md).", "",
             "| command | what it does |", "|---|---|", *rows, "",
             "```{toctree}", ":hidden:", "", *[n[:-3] for n in pages], "```", ""]
    pages["index.md"] = "\n".join(index)
    return pages


def _write_cli_pages(app) -> None:
    out = DOCS / "cli"
    pages = command_pages()
    for name, text in pages.items():
        _write_if_changed(out / name, text)
    for stale in out.glob("*.md"):
        if stale.name not in pages:
            stale.unlink()


# -------------------------------------------------------------------------------------------------- gallery
def _draw_gallery(app) -> None:
    sys.path.insert(0, str(DOCS))
    try:
        import gallery_figures
    finally:
        sys.path.remove(str(DOCS))
    out = GENERATED / "gallery"
    out.mkdir(parents=True, exist_ok=True)
    redraw = os.environ.get("TPDE_DOCS_REDRAW") == "1"
    for fig in gallery_figures.FIGURES:
        target = out / fig["file"]
        if target.exists() and not redraw:
            continue
        start = time.perf_counter()
        try:
            gallery_figures.draw(fig, out, env=example_env(), cwd=ROOT)
        except Exception as exc:  # a figure that cannot be drawn is a failed build, with the command
            _fail(app, f"gallery figure {fig['file']}: {exc}")
            continue
        logger.info(f"[tpde] gallery {fig['file']} drawn in {time.perf_counter() - start:.1f} s")
    _write_if_changed(GENERATED / "gallery.md", gallery_figures.page(prefix="../_generated/gallery/"))


# ------------------------------------------------------------------------------------------------ claim roles
_TEST_NAMES: dict[Path, set[str]] = {}


def _test_names(path: Path) -> set[str]:
    if path not in _TEST_NAMES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
        _TEST_NAMES[path] = names
    return _TEST_NAMES[path]


def test_reference_problem(text: str) -> str | None:
    """Why ``{test}`text``` does not resolve (``None`` when it does): the file exists under ``tests/`` and
    defines the test (a function or class of that name; a parametrisation ``[...]`` is ignored)."""
    file, _, test = text.partition("::")
    path = ROOT / file
    if not file.startswith("tests/") or not path.is_file():
        return f"no test file {file!r}"
    if test and test.split("[")[0] not in _test_names(path):
        return f"{file} defines no {test!r}"
    return None


def verify_reference_problem(text: str) -> str | None:
    """Why ``{verify}`area: words``` does not resolve (``None`` when it does): ``tpde verify`` has the area
    (``symbolic_tpde/validate/checks_<area>.py``) and that module's source mentions the words."""
    area, _, words = (part.strip() for part in text.partition(":"))
    module = ROOT / "symbolic_tpde" / "validate" / f"checks_{area}.py"
    if not module.is_file():
        return f"tpde verify has no area {area!r}"
    if words and words.lower() not in module.read_text(encoding="utf-8").lower():
        return f"no row of area {area!r} mentions {words!r} ({module.name})"
    return None


def _claim_node(rawtext, shown, kind, problem, inliner, lineno):
    from docutils import nodes

    if problem is not None:
        msg = inliner.reporter.error(f"{{{kind}}}: {problem}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    node = nodes.literal(rawtext, shown, classes=["tpde-claim", f"tpde-{kind}"])
    return [node], []


def test_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{test}`tests/test_x.py::test_name``` (or a file alone): the test that checks a claim."""
    return _claim_node(rawtext, text, "test", test_reference_problem(text), inliner, lineno)


def verify_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{verify}`area: words``` : the ``tpde verify`` area (and words of its row) that checks a claim."""
    area, _, words = (part.strip() for part in text.partition(":"))
    shown = f"tpde verify --only {area}" + (f" ({words})" if words else "")
    return _claim_node(rawtext, shown, "verify", verify_reference_problem(text), inliner, lineno)


# ----------------------------------------------------------------------------------------------------- setup
def api_summary() -> str:
    """An autosummary table of ``symbolic_tpde.__all__`` (included by ``docs/reference/api.md``)."""
    import symbolic_tpde

    names = "\n".join(f"   {name}" for name in symbolic_tpde.__all__)
    return f"```{{eval-rst}}\n.. currentmodule:: symbolic_tpde\n\n.. autosummary::\n\n{names}\n```\n"


def _builder_inited(app) -> None:
    app.tpde_failures = []
    if Path(app.srcdir).resolve() != DOCS:      # another project using the extension (tests): roles and examples only
        return
    _write_if_changed(GENERATED / "api_summary.md", api_summary())
    _write_cli_pages(app)
    _draw_gallery(app)


def _build_finished(app, exc) -> None:
    seconds = getattr(app, "tpde_example_seconds", 0.0)
    logger.info(f"[tpde] examples ran for {seconds:.1f} s in this build (pages read again only)")
    if exc is None and getattr(app, "tpde_failures", None):
        from sphinx.errors import ExtensionError

        raise ExtensionError(f"{len(app.tpde_failures)} example(s) or figure(s) failed:\n"
                             + "\n".join(app.tpde_failures))


def setup(app):
    app.connect("builder-inited", _builder_inited)
    app.connect("source-read", _execute_page)
    app.connect("build-finished", _build_finished)
    app.add_role("test", test_role)
    app.add_role("verify", verify_role)
    return {"version": "1", "parallel_read_safe": False, "parallel_write_safe": True}
