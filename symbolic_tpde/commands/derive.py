"""``tpde derive``: print the derived Gaussian moment ODE of an attention variant.

Without ``--d`` the matrix form for general ``d``; with ``--d N`` the entrywise form (the system that code
generation compiles).  Sigmoid, unnormalised softmax and masked attention print a non-preservation witness
and exit 0.  Sinkhorn with ``--d >= 3`` has no exact entrywise form (matrix square root): message, exit 1.
``--no-cse`` is refused (exit 2, an ``--no-cse`` input error) when the written-out system is too large to print
(> ``printing.MAX_TREE`` tree nodes) or, in LaTeX, has unbreakable pieces wider than the page.
``--format latex --standalone`` output compiles with ``pdflatex`` (amsmath, amssymb, geometry).
Names: ``--format latex`` uses the paper's 1-based names (``\\alpha_{1}``, ``\\Sigma_{12}``, ``A_{12}``, several
heads ``A^{(1)}_{12}``; :func:`..symbolic.printing.paper_name`, shared with the steps); ``--format text`` and
``json`` keep the 0-based code names (``alpha_0``, ``Sigma_0_1``, ``h0_A_0_1``) that generated code and
``parse_expr`` use.  In LaTeX the entrywise form is printed only while readable (at most
``printing.ENTRYWISE_LATEX_MAX_TEMPS`` named sub-expressions: softmax and linear up to d = 3, not l2 or Sinkhorn
at d = 2); otherwise a one-line note (a comment; with ``--standalone`` also a sentence) and the matrix form,
unless ``--entrywise-anyway``.  Text and JSON always give the full entrywise system.
``--steps`` prints the derivation as numbered steps, each checked by SymPy (:mod:`..symbolic.steps`;
exit 1 if any step could not be checked), ``--beamer`` as slides; ``--V identity`` / ``--A symmetric``
specialise it (softmax with ``V = I``: precision equation, closed-form ``Σ(t)``, blow-up time); with
``--d N`` the steps add the entrywise equations in 1-based names (while readable, else a one-line note).
``--scenario FILE`` reads a scenario with the strict reader and prints
:func:`..symbolic.steps_scenario.scenario_derivation`: the steps specialised to its detected structure, then
its numbers (exact rationals by the rule stated in the output) and, when the precision equation is constant
(softmax heads with ``V = I``), ``Σ(t)`` and the blow-up time ``T*``, checked against
:func:`..analysis.closed_forms.blowup_time_vi`.  ``--energy``: the energy derivation
(:mod:`..symbolic.steps_energy`).
"""

from __future__ import annotations

import sys

from ..registry import kinds as _kinds

def variants() -> tuple[str, ...]:
    """The registry's kinds (read at call time: a kind registered later is a choice), plus "multihead"."""
    return _kinds.kind_names() + ("multihead",)


def register(sub) -> None:
    p = sub.add_parser("derive", help="derive and print the Gaussian moment ODE of an attention variant")
    p.add_argument("--attention", default=None, choices=variants(), help="attention variant (required unless "
                   "--energy)")
    p.add_argument("--energy", action="store_true", help="with --steps: the derivation of the softmax "
                   "energy/Lyapunov statement (symbolic.steps_energy) instead of a kind's moment ODE")
    p.add_argument("--d", type=int, default=None, help="token dimension: entrywise form (default: matrix form)")
    p.add_argument("--format", default="text", choices=("text", "latex", "json"), help="output format")
    p.add_argument("--heads", type=int, default=None,
                   help="number of heads (of the given variant; multihead = softmax heads, default 2)")
    p.add_argument("--m", type=int, default=None, help="head dimension of l2 heads (default d)")
    p.add_argument("--ffn", action="store_true", help="add the affine feed-forward term W x + c")
    p.add_argument("--sink", action="store_true", help="masked: with an attention sink")
    p.add_argument("--standalone", action="store_true", help="LaTeX: a complete amsmath document")
    p.add_argument("--steps", action="store_true", help="the derivation as numbered, SymPy-checked steps "
                   "(matrix form, general d; JSON: {\"steps\": [{title, lhs, rhs, checked, method}, ...]})")
    p.add_argument("--beamer", action="store_true", help="with --steps --format latex: Beamer slides, one step "
                   "per frame")
    p.add_argument("--V", dest="V_structure", choices=("identity",), default=None,
                   help="with --steps: specialise to V = I (softmax: also the closed form and blow-up time)")
    p.add_argument("--A", dest="A_structure", choices=("symmetric",), default=None,
                   help="with --steps: specialise to a symmetric A")
    p.add_argument("--scenario", default=None, metavar="FILE",
                   help="the steps specialised to a scenario file (or built-in name): its structure, its numbers "
                   "(exact rationals) and, for softmax with V = I, Sigma(t) and the blow-up time")
    p.add_argument("--figure", default=None, metavar="FILE", help="with --scenario --format latex: draw the "
                   "`tpde plot` figure of the scenario to FILE (.pdf or .png, put it next to the .tex) and include it")
    p.add_argument("--exercises", action="store_true", help="with --steps (not --beamer): add exercises with "
                   "solutions (d = 1 Riccati solution of softmax, the l2 tilt), each solution checked by SymPy")
    p.add_argument("--entrywise-anyway", action="store_true", help="with --d N --format latex: print the "
                   "entrywise form even when it is too long to read (default: a note and the matrix form)")
    p.add_argument("--no-cse", action="store_true", help="entrywise: print expressions without named "
                   "common sub-expressions")
    p.add_argument("--sphere", choices=("equiangular", "two-tokens", "circle", "harmonics", "causal"), default=None,
                   help="a reduction of the sphere models as checked steps (commands/sphere.py)")
    p.add_argument("--norm", choices=("post", "pre", "peri", "ngpt"), default=None,
                   help="with --sphere (default post)")
    p.add_argument("--sphere-kind", choices=("sphere_sa", "sphere_usa"), default=None,
                   help="with --sphere (default sphere_sa)")
    p.add_argument("--beta", type=float, default=None,
                   help="with --sphere equiangular, circle or harmonics: also the numbers at this beta (equiangular "
                        "t*, approach rate, Pre-LN constant lim t^2 (1 - rho), growth rates and fastest mode)")
    p.add_argument("--tokens", type=int, default=None, help="with --sphere equiangular --beta: tokens (default 32)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..errors import InputError
    from ..documents import printing
    from ..symbolic.moments import canonical_form, derive_gaussian_system, matrix_form
    from ..symbolic.sinkhorn import MatrixSqrtRequired

    stepsish = args.steps or args.beamer or args.V_structure or args.A_structure or args.energy \
        or args.scenario is not None
    if args.standalone and args.format != "latex":
        raise InputError("--standalone", "needs --format latex (a LaTeX document)")
    if args.standalone and args.beamer:
        raise InputError("--standalone", "and --beamer are two document classes: give one")
    if args.no_cse and stepsish:
        raise InputError("--no-cse", "applies to the entrywise system, not to --steps/--beamer/--V/--A/--energy/"
                         "--scenario")
    if args.figure is not None and (args.scenario is None or args.format != "latex"):
        raise InputError("--figure", "needs --scenario and --format latex (the figure goes into the document)")
    if args.figure is not None and not args.figure.endswith((".pdf", ".png")):
        raise InputError("--figure", f"expected a .pdf or .png file name, got {args.figure!r}")
    if args.exercises and (not args.steps or args.beamer or args.energy or args.scenario is not None
                           or args.sphere is not None):
        raise InputError("--exercises", "goes with --steps for an attention kind (not --beamer, --energy, "
                         "--scenario or --sphere)")
    if args.sphere is not None:
        from .sphere import run_derive

        stray = [flag for flag, given in (
            ("--attention", args.attention is not None), ("--energy", args.energy), ("--heads", args.heads is not None),
            ("--m", args.m is not None), ("--ffn", args.ffn), ("--sink", args.sink), ("--beamer", args.beamer and args.format != "latex"),
            ("--V", args.V_structure is not None), ("--A", args.A_structure is not None),
            ("--scenario", args.scenario is not None), ("--entrywise-anyway", args.entrywise_anyway),
            ("--no-cse", args.no_cse), ("--d", args.d is not None and args.sphere != "harmonics"),
            ("--beta", args.beta is not None and args.sphere not in ("equiangular", "circle", "harmonics")),
            ("--tokens", args.tokens is not None and (args.sphere != "equiangular" or args.beta is None))) if given]
        if stray:
            raise InputError(stray[0], "does not apply with --sphere (a reduction of the sphere models; its options "
                             "are --norm, --sphere-kind, --format, --standalone/--beamer, and --d for harmonics)")
        args.norm = args.norm or "post"
        args.sphere_kind = args.sphere_kind or "sphere_sa"
        if args.format == "json":
            return run_derive(args)
        from ..documents import render as steps_render
        from ..documents.sphere_document import reduction, sphere_derivation

        if args.format == "latex" and args.beta is not None:
            raise InputError("--beta", "the numbers at a given beta print with --format text or json")
        title, steps, rhs, extra = reduction(args.sphere, args.norm, args.sphere_kind, args.d)
        dv = sphere_derivation(title, steps, rhs, {k: v for k, v in extra.items()})
        print(steps_render.render(dv, args.format, standalone_doc=args.standalone, slides=args.beamer))
        if args.beta is not None:
            from .sphere import _numbers, _print_numbers

            numbers = _numbers(args, args.sphere_kind, args.norm)
            if numbers is not None:
                _print_numbers(numbers)
        return 0 if dv.all_checked else 1
    for flag, given in (("--norm", args.norm), ("--sphere-kind", args.sphere_kind), ("--beta", args.beta),
                        ("--tokens", args.tokens)):
        if given is not None:
            raise InputError(flag, "only with --sphere")
    if args.energy and args.scenario is not None:
        raise InputError("--scenario", "does not apply with --energy")
    if args.energy:
        return _run_energy(args)
    if args.scenario is not None:
        return _run_scenario(args)
    if args.attention is None:
        raise InputError("--attention", "required (one of " + ", ".join(variants()) + "), unless --energy")
    if args.d is not None and not 1 <= args.d <= 16:
        raise InputError("--d", f"must be an integer in [1, 16], got {args.d}")
    heads = args.heads if args.heads is not None else (2 if args.attention == "multihead" else 1)
    if not 1 <= heads <= 8:
        raise InputError("--heads", f"must be an integer in [1, 8], got {heads}")
    if args.m is not None and (args.m < 1 or args.attention != "l2"):
        raise InputError("--m", "only for --attention l2, and must be >= 1")
    if args.sink and args.attention != "masked":
        raise InputError("--sink", "an attention sink only applies to masked attention")
    kind = "softmax" if args.attention == "multihead" else args.attention
    if args.entrywise_anyway and (args.d is None or args.format != "latex" or args.steps or args.beamer):
        raise InputError("--entrywise-anyway", "only with --d N --format latex (text and JSON always give the "
                         "full entrywise system; --steps has its own readability rule)")

    standalone = args.format == "latex" and args.standalone   # a document with the sentences in it
    if not _kinds.get(kind).preserves_gaussians and (args.beamer or standalone):   # documents: the engine
        from ..documents import render as steps_render
        from ..documents.witness_document import witness_derivation

        if args.format != "latex":
            raise InputError("--beamer", "needs --format latex")
        print(steps_render.render(witness_derivation(_kinds.part(kind, "symbolic").witness(sink=bool(args.sink))),
                                  "latex", standalone_doc=standalone, slides=args.beamer))
        return 0
    if not _kinds.get(kind).preserves_gaussians:
        print(printing.render_witness(_kinds.part(kind, "symbolic").witness(sink=bool(args.sink)), args.format,
                                      standalone=standalone))
        return 0
    kinds = (kind,) * heads
    if args.steps or args.beamer or args.V_structure or args.A_structure:
        from ..documents import render as steps_render
        from ..documents.steps import kind_derivation

        if args.beamer and args.format != "latex":
            raise InputError("--beamer", "needs --format latex")
        dv = kind_derivation(kinds, ffn=args.ffn, V_identity=args.V_structure == "identity",
                             A_symmetric=args.A_structure == "symmetric")
        if args.exercises:
            from dataclasses import replace

            from ..documents.exercises import exercises
            dv = replace(dv, exercises=exercises())
        if args.d is not None:
            m = args.m if args.m is not None else args.d
            dv = _with_entrywise(dv, (args.d, tuple((k, canonical_form(k, args.d, m)) for k in kinds),
                                      bool(args.ffn), False))
        print(steps_render.render(dv, args.format, standalone_doc=args.standalone, slides=args.beamer))
        return 0 if dv.all_checked else 1
    if args.d is None:
        print(printing.render_matrix_form(matrix_form(kinds, ffn=args.ffn), args.format, standalone=standalone))
        return 0
    m = args.m if args.m is not None else args.d
    structure = (args.d, tuple((k, canonical_form(k, args.d, m)) for k in kinds), bool(args.ffn), False)
    try:
        system = derive_gaussian_system(structure)
    except MatrixSqrtRequired as exc:
        print(f"tpde derive: {exc}", file=sys.stderr)
        return 1
    note = None if args.format != "latex" or args.entrywise_anyway else printing.entrywise_unreadable(system)
    if note is not None:                   # unreadable in LaTeX: the note and the matrix form instead
        print(printing.render_matrix_form(matrix_form(kinds, ffn=args.ffn), "latex", standalone=standalone,
                                          note=note))
        return 0
    try:
        text = printing.render_system(system, args.format, cse=False if args.no_cse else None,
                                      standalone=standalone)
    except ValueError as exc:
        raise InputError("--no-cse", str(exc)) from None
    print(text)
    return 0


def _refuse_structure_flags(args, why: str) -> None:
    """InputError naming the first kind/structure option given (they do not apply to ``--energy`` and are
    read from the file with ``--scenario``); ``--beamer`` needs LaTeX."""
    from ..errors import InputError

    for flag, given in (("--attention", args.attention is not None), ("--d", args.d is not None),
                        ("--heads", args.heads is not None), ("--m", args.m is not None), ("--ffn", args.ffn),
                        ("--sink", args.sink), ("--V", args.V_structure is not None),
                        ("--A", args.A_structure is not None), ("--no-cse", args.no_cse),
                        ("--entrywise-anyway", args.entrywise_anyway)):
        if given:
            raise InputError(flag, why)
    if args.beamer and args.format != "latex":
        raise InputError("--beamer", "needs --format latex")


def _run_energy(args) -> int:
    """``--energy``: the energy derivation (:func:`..symbolic.steps_energy.energy_derivation`), rendered as the
    moment steps are; the kind/structure options do not apply to it."""
    from ..documents import render as steps_render

    _refuse_structure_flags(args, "does not apply with --energy (the energy derivation has its own setting)")
    from ..documents.gradient_flow import energy_derivation

    dv = energy_derivation()
    import numpy as np                              # what tpde convexity certifies, from its own report
    from dataclasses import replace

    from .convexity import certificate_words, convexity_report

    rep = convexity_report((-np.eye(2)).tolist(), np.eye(2).tolist())
    dv = replace(dv, conclusions=dv.conclusions + (certificate_words(rep),))
    print(steps_render.render(dv, args.format, standalone_doc=args.standalone, slides=args.beamer))
    return 0 if dv.all_checked else 1


def _with_entrywise(dv, structure):
    """``dv`` followed by the entrywise equations of ``structure`` (1-based names, checked against the matrix
    form) or by a one-line note when they are unreadable or need a matrix square root."""
    from dataclasses import replace

    from ..symbolic.moments import derive_gaussian_system
    from ..symbolic.sinkhorn import MatrixSqrtRequired
    from ..documents.steps import entrywise_display_steps

    try:
        system = derive_gaussian_system(structure)
    except MatrixSqrtRequired as exc:
        return replace(dv, notes=dv.notes + (f"No entrywise form at d = {structure[0]}: {exc}",))
    st, notes = entrywise_display_steps(system)
    return replace(dv, steps=dv.steps + tuple(st), notes=dv.notes + tuple(notes))


def _run_scenario(args) -> int:
    """``--scenario FILE``: load it (strict reader), print the witness of a non-preserving kind, else the
    derivation of :func:`..symbolic.steps_scenario.scenario_derivation` with the numeric blow-up time of
    :func:`..analysis.closed_forms.blowup_time_vi` as its independent route."""
    from ..analysis import closed_forms
    from ..inputs.scenario import load_scenario
    from ..documents import printing, render as steps_render
    from ..documents.for_scenario import scenario_derivation

    _refuse_structure_flags(args, "is read from the scenario; do not give it with --scenario")
    scn = load_scenario(args.scenario, need_T=False)
    sink = getattr(scn.weights(0.0), "sink", None) is not None if scn.schedule.is_constant else False
    for h in scn.weights(0.0).heads if scn.schedule.is_constant else ():
        if not _kinds.get(h.kind).preserves_gaussians:
            from ..documents.witness_document import scenario_witness_derivation

            w = _kinds.part(h.kind, "symbolic").witness(sink=sink)
            dv = scenario_witness_derivation(w, h.kind, scn, _scn_name(args.scenario))
            print(steps_render.render(dv, args.format, standalone_doc=args.standalone, slides=args.beamer))
            return 0

    def reference(Sigma0, M):        # dSigma/dt = Sigma M Sigma is blowup_time_vi's ODE with A = M/2
        return closed_forms.blowup_time_vi(Sigma0, M / 2)
    reference.route = "the V = I blow-up time in closed form with A = M/2, in doubles"
    dv = scenario_derivation(scn, blowup_reference=reference, name=_scn_name(args.scenario))
    if args.figure is not None:                     # the tpde plot figure, drawn now and included
        import math
        from dataclasses import replace

        from ..errors import InputError
        from ..experiments.figures_extra import make_scenario_figure

        if not math.isfinite(scn.T):
            raise InputError("--figure", "needs the scenario's horizon T (the figure runs to T)")
        import matplotlib

        # two panels at 12 pt: the figure is set at the text width (~470 pt), its text then prints at >= 7 pt
        # (three or four panels at the default size printed at 3-4 pt)
        with matplotlib.rc_context({"font.size": FIGURE_FONT_PT}):
            make_scenario_figure(scn, args.figure, name=_scn_name(args.scenario), panels=FIGURE_PANELS)
        dv = replace(dv, figure=args.figure)
    print(steps_render.render(dv, args.format, standalone_doc=args.standalone, slides=args.beamer))
    return 0 if dv.all_checked else 1


#: the scenario figure of a document: panels and base font size (pt), so that its smallest text prints at
#: >= 7 pt once scaled to the text width (tests/test_documents_engine.py measures it)
FIGURE_PANELS, FIGURE_FONT_PT = 2, 12


def _scn_name(path) -> str:
    """The scenario's name for titles: the file's stem (or the built-in name)."""
    from pathlib import Path

    return Path(str(path)).stem
