"""``tpde derive``: print the derived Gaussian moment ODE of an attention variant.

Without ``--d`` the matrix form for general ``d``; with ``--d N`` the entrywise form (the system that code
generation compiles).  Sigmoid, unnormalised softmax and masked attention print a non-preservation witness
and exit 0.  Sinkhorn with ``--d >= 3`` has no exact entrywise form (matrix square root): message, exit 1.
``--no-cse`` is refused (exit 2, an ``--no-cse`` input error) when the written-out system is too large to print
(> ``printing.MAX_TREE`` tree nodes) or, in LaTeX, has unbreakable pieces wider than the page.
``--format latex --standalone`` output compiles with ``pdflatex`` (amsmath, amssymb, geometry).
``--steps`` prints the derivation as numbered steps, each checked by SymPy (:mod:`..symbolic.steps`;
exit 1 if any step could not be checked), ``--beamer`` as slides; ``--V identity`` / ``--A symmetric``
specialise it (softmax with ``V = I``: precision equation, closed-form ``Σ(t)``, blow-up time); with
``--d N`` the steps add the entrywise equations in 1-based names (while readable, else a one-line note).
``--scenario FILE`` reads a scenario with the strict reader, detects its structure (kinds, ``d``, ``V = I``,
symmetric ``A``, FFN, heads) and prints the steps specialised to it, then its numbers (exact rationals: the
JSON decimals rationalised) and, for softmax with ``V = I``, ``Σ(t)`` and the blow-up time ``T*``, checked
against :func:`..analysis.closed_forms.blowup_time_vi`.  ``--energy``: the energy derivation
(:mod:`..symbolic.steps_energy`).
"""

from __future__ import annotations

import sys

from ..spec import kinds as _kinds

#: the registry's kinds, plus "multihead" (several softmax heads)
VARIANTS = _kinds.kind_names() + ("multihead",)


def register(sub) -> None:
    p = sub.add_parser("derive", help="derive and print the Gaussian moment ODE of an attention variant")
    p.add_argument("--attention", default=None, choices=VARIANTS, help="attention variant (required unless "
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
    p.add_argument("--no-cse", action="store_true", help="entrywise: print expressions without named "
                   "common sub-expressions")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..errors import InputError
    from ..symbolic import printing
    from ..symbolic.moments import canonical_form, derive_gaussian_system, matrix_form
    from ..symbolic.sinkhorn import MatrixSqrtRequired

    if args.energy and args.scenario is not None:
        raise InputError("--scenario", "does not apply with --energy")
    if args.energy:
        return _run_energy(args)
    if args.scenario is not None:
        return _run_scenario(args)
    if args.attention is None:
        raise InputError("--attention", "required (one of " + ", ".join(VARIANTS) + "), unless --energy")
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
        if args.d is not None:
            m = args.m if args.m is not None else args.d
            dv = _with_entrywise(dv, (args.d, tuple((k, canonical_form(k, args.d, m)) for k in kinds),
                                      bool(args.ffn), False))
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


def _refuse_structure_flags(args, why: str) -> None:
    """InputError naming the first kind/structure option given (they do not apply to ``--energy`` and are
    read from the file with ``--scenario``); ``--beamer`` needs LaTeX."""
    from ..errors import InputError

    for flag, given in (("--attention", args.attention is not None), ("--d", args.d is not None),
                        ("--heads", args.heads is not None), ("--m", args.m is not None), ("--ffn", args.ffn),
                        ("--sink", args.sink), ("--V", args.V_structure is not None),
                        ("--A", args.A_structure is not None), ("--no-cse", args.no_cse)):
        if given:
            raise InputError(flag, why)
    if args.beamer and args.format != "latex":
        raise InputError("--beamer", "needs --format latex")


def _run_energy(args) -> int:
    """``--energy``: the energy derivation (:func:`..symbolic.steps_energy.energy_derivation`), rendered as the
    moment steps are; the kind/structure options do not apply to it."""
    from ..symbolic import steps_render

    _refuse_structure_flags(args, "does not apply with --energy (the energy derivation has its own setting)")
    from ..symbolic.steps_energy import energy_derivation

    dv = energy_derivation()
    print(steps_render.render(dv, args.format, standalone_doc=args.standalone, slides=args.beamer))
    return 0 if dv.all_checked else 1


def _with_entrywise(dv, structure):
    """``dv`` followed by the entrywise equations of ``structure`` (1-based names, checked against the matrix
    form) or by a one-line note when they are unreadable or need a matrix square root."""
    from dataclasses import replace

    from ..symbolic.moments import derive_gaussian_system
    from ..symbolic.sinkhorn import MatrixSqrtRequired
    from ..symbolic.steps import entrywise_display_steps

    try:
        system = derive_gaussian_system(structure)
    except MatrixSqrtRequired as exc:
        return replace(dv, notes=dv.notes + (f"No entrywise form at d = {structure[0]}: {exc}",))
    st, notes = entrywise_display_steps(system)
    return replace(dv, steps=dv.steps + tuple(st), notes=dv.notes + tuple(notes))


def _rational(x):
    """A JSON float as the exact rational of its shortest decimal (``0.1 -> 1/10``, not the double's binary
    value): ``repr`` of a float is the shortest decimal that reads back to it (no user string is parsed)."""
    from fractions import Fraction

    import sympy as sp

    f = Fraction(repr(float(x)))
    return sp.Rational(f.numerator, f.denominator)


def _exact(value):
    import numpy as np
    import sympy as sp

    a = np.asarray(value, dtype=float)
    if a.ndim == 0:
        return _rational(a)
    if a.ndim == 1:
        return sp.Matrix([[_rational(v)] for v in a])
    return sp.Matrix(a.shape[0], a.shape[1], lambda i, j: _rational(a[i, j]))


def _run_scenario(args) -> int:
    """``--scenario FILE``: the steps specialised to the scenario's structure and numbers."""
    import math
    from dataclasses import replace

    import numpy as np

    from ..analysis.closed_forms import blowup_time_vi
    from ..errors import InputError
    from ..scenario import load_scenario
    from ..symbolic import printing, steps_render
    from ..symbolic.moments import canonical_form, derive_gaussian_system, matrix_form
    from ..symbolic.sinkhorn import MatrixSqrtRequired
    from ..symbolic.steps import kind_derivation
    from ..symbolic.steps_special import scenario_steps

    _refuse_structure_flags(args, "is read from the scenario; do not give it with --scenario")
    scn = load_scenario(args.scenario, need_T=False)
    if not scn.schedule.is_constant:
        raise InputError("--scenario", "has piecewise-constant 'layers': the derivation is specialised to "
                         "constant weights only (give one layer's weights at top level)")
    w, d = scn.weights(0.0), scn.d
    kinds = tuple(h.kind for h in w.heads)
    for h in w.heads:
        if not _kinds.get(h.kind).preserves_gaussians:
            sink = w.sink is not None
            print(printing.render_witness(_kinds.part(h.kind, "symbolic").witness(sink=sink), args.format))
            return 0
    eye = np.eye(d)
    V_identity = all(np.array_equal(h.effective["V"], eye) for h in w.heads)
    A_symmetric = all("A" in h.effective and np.array_equal(h.effective["A"], h.effective["A"].T)
                      for h in w.heads)
    ffn = w.ffn is not None
    dv = kind_derivation(kinds, ffn=ffn, V_identity=V_identity, A_symmetric=A_symmetric)
    mf = matrix_form(kinds, ffn=ffn)
    env = {"alpha": _exact(scn.alpha0), "Sigma": _exact(scn.Sigma0)}
    m = d
    for head, hs in zip(w.heads, mf.heads):
        for name, sym in hs["symbols"].items():
            env[sym.name] = _exact(head.effective[name])
        if "Q" in head.effective:
            m = int(np.shape(head.effective["Q"])[0])
    if ffn:
        env["W"], env["c"] = _exact(w.ffn.W), _exact(w.ffn.c)
    structure = (d, tuple((k, canonical_form(k, d, m)) for k in kinds), ffn, False)
    words = (f"Read from the scenario {_scn_name(args.scenario)}: {len(kinds)} head(s) of kind "
             f"{' + '.join(kinds)}, d = {d}, V = I: {'yes' if V_identity else 'no'}, A symmetric: "
             f"{'yes' if A_symmetric else 'no'}, feed-forward term: {'yes' if ffn else 'no'}.")
    exact = ("The scenario's numbers are used as exact rationals: each JSON number's shortest decimal "
             "rationalised (the decimal as written, e.g. 0.1 -> 1/10, not the binary value of the double); "
             "weights formed from Q, K or WO are the rationalised decimals of the double products.")
    notes = list(dv.notes)
    try:
        system = derive_gaussian_system(structure)
    except MatrixSqrtRequired as exc:
        system = None
        notes.append(f"The scenario's numbers are not put in: no exact entrywise form at d = {d} ({exc}).")
    st, concl = [], []
    if system is not None:
        subs = {s.name: env["alpha"][i] for i, s in enumerate(system.states[:d])}
        k = d
        for i in range(d):
            for j in range(i, d):
                subs[system.states[k].name] = env["Sigma"][i, j]
                k += 1
        for blk in system.param_layout:
            val = w.heads[blk.key[1]].effective[blk.key[2]] if blk.key[0] == "heads" else getattr(w.ffn, blk.key[1])
            flat = np.asarray(val, dtype=float).reshape(-1)
            subs.update({system.params[blk.offset + n].name: _rational(v) for n, v in enumerate(flat)})
        A_float = w.heads[0].effective.get("A")
        st, concl, more = scenario_steps(
            mf, kinds, env, {"d": d, "m": m}, (system, subs), V_identity, A_symmetric,
            blowup_reference=(lambda S0, A: blowup_time_vi(scn.Sigma0, A_float)) if A_float is not None else None,
            horizon=scn.T if math.isfinite(scn.T) else None)
        notes += more
    dv = replace(dv, title=f"{dv.title}: scenario {_scn_name(args.scenario)}", steps=dv.steps + tuple(st),
                 assumptions=dv.assumptions + (words, exact), conclusions=dv.conclusions + tuple(concl),
                 notes=tuple(notes))
    print(steps_render.render(dv, args.format, standalone_doc=args.standalone, slides=args.beamer))
    return 0 if dv.all_checked else 1


def _scn_name(path) -> str:
    """The scenario's name for titles: the file's stem (or the built-in name)."""
    from pathlib import Path

    return Path(str(path)).stem
