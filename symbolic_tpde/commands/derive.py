"""``tpde derive``: print the derived Gaussian moment ODE of an attention variant.

Without ``--d`` the matrix form for general ``d``; with ``--d N`` the entrywise form (the system that code
generation compiles).  Sigmoid, unnormalised softmax and masked attention print a non-preservation witness
and exit 0.  Sinkhorn with ``--d >= 3`` has no exact entrywise form (matrix square root): message, exit 1.
``--no-cse`` is refused (exit 2, an ``--no-cse`` input error) when the written-out system is too large to print
(> ``printing.MAX_TREE`` tree nodes) or, in LaTeX, has unbreakable pieces wider than the page.
``--format latex --standalone`` output compiles with ``pdflatex`` (amsmath, amssymb, geometry).
``--steps`` prints the derivation as numbered steps, each checked by SymPy (:mod:`..symbolic.steps`;
exit 1 if any step could not be checked), ``--beamer`` as slides; ``--V identity`` / ``--A symmetric``
specialise it (softmax with ``V = I``: precision equation, closed-form ``Σ(t)``, blow-up time).
"""

from __future__ import annotations

import sys

from ..spec import kinds as _kinds

#: the registry's kinds, plus "multihead" (several softmax heads)
VARIANTS = _kinds.kind_names() + ("multihead",)


def register(sub) -> None:
    p = sub.add_parser("derive", help="derive and print the Gaussian moment ODE of an attention variant")
    p.add_argument("--attention", required=True, choices=VARIANTS, help="attention variant")
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
    p.add_argument("--no-cse", action="store_true", help="entrywise: print expressions without named "
                   "common sub-expressions")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..errors import InputError
    from ..symbolic import printing
    from ..symbolic.moments import canonical_form, derive_gaussian_system, matrix_form
    from ..symbolic.sinkhorn import MatrixSqrtRequired

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

    def emit(text: str) -> None:
        if args.format == "latex" and args.standalone:
            text = printing.latex_document(text)
        print(text)

    if not _kinds.get(kind).preserves_gaussians:
        emit(printing.render_witness(_kinds.part(kind, "symbolic").witness(sink=bool(args.sink)), args.format))
        return 0
    kinds = (kind,) * heads
    if args.steps or args.beamer or args.V_structure or args.A_structure:
        from ..symbolic import steps_render
        from ..symbolic.steps import kind_derivation

        if args.beamer and args.format != "latex":
            raise InputError("--beamer", "needs --format latex")
        dv = kind_derivation(kinds, ffn=args.ffn, V_identity=args.V_structure == "identity",
                             A_symmetric=args.A_structure == "symmetric")
        print(steps_render.render(dv, args.format, standalone_doc=args.standalone, slides=args.beamer))
        return 0 if dv.all_checked else 1
    if args.d is None:
        emit(printing.render_matrix_form(matrix_form(kinds, ffn=args.ffn), args.format))
        return 0
    m = args.m if args.m is not None else args.d
    structure = (args.d, tuple((k, canonical_form(k, args.d, m)) for k in kinds), bool(args.ffn), False)
    try:
        system = derive_gaussian_system(structure)
    except MatrixSqrtRequired as exc:
        print(f"tpde derive: {exc}", file=sys.stderr)
        return 1
    try:
        text = printing.render_system(system, args.format, cse=False if args.no_cse else None)
    except ValueError as exc:
        raise InputError("--no-cse", str(exc)) from None
    emit(text)
    return 0
