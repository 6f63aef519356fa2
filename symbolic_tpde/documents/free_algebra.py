"""Matrix identities proved for every ``d``: normal forms in the free algebra of non-commuting matrix symbols.

A matrix expression in ``MatrixSymbol``s (``A``, ``Σ``, ``x``, ...) is expanded into a non-commutative
polynomial: a sum of *words* (products of letters) with commutative SymPy coefficients (``τ``, ``ε``, numbers).
Letters are the symbols, their transposes and inverses; the rules applied are identities valid for every size
``d`` (wherever the inverses exist):

* ``(XY)ᵀ = YᵀXᵀ``, ``(X⁻¹)ᵀ = (Xᵀ)⁻¹``, ``Xᵀᵀ = X``; ``Σᵀ = Σ`` for the symbols declared symmetric;
* ``XX⁻¹ = X⁻¹X = I`` for a letter ``X``; for the inverse ``P⁻¹`` of a compound ``P = c·L + Σ c_w w`` (``L`` its
  first word) the rewritings ``P⁻¹L -> (I - Σ c_w P⁻¹w)/c`` and ``LP⁻¹ -> (I - Σ c_w wP⁻¹)/c`` (both from
  ``P⁻¹P = PP⁻¹ = I``); ``P⁻¹`` is symmetric when ``Pᵀ`` has the same normal form as ``P``;
* a ``1×1`` word equals its transpose (it is a scalar): the smaller of the two is kept.

``lhs - rhs`` with normal form 0 is a **proof for every d**: each rewriting is an identity of matrices of any
size.  A non-zero normal form proves nothing (the rewriting is not complete: a true identity may be missed;
the caller then checks at stated ``d``); e.g. Hall's identity ``(AB - BA)²C = C(AB - BA)²`` (true for ``2×2``
matrices, false for ``3×3``) has a non-zero normal form and is never accepted here.  A square root or any other
matrix function is a letter of its own (nothing is assumed about it).
"""

from __future__ import annotations

import sympy as sp

#: give up (prove nothing) beyond this many word products in one computation, or this many terms in one
#: product: nested inverses of sums (Sinkhorn's closed form) expand beyond any use; the derivations' identities
#: that are proved take a few thousand
MAX_WORK = 200_000
MAX_TERMS = 20_000


class _Algebra:
    """One normal-form computation: ``symmetric`` names, and the compound inverses met so far."""

    def __init__(self, symmetric: tuple):
        self.symmetric = set(symmetric)
        self.compounds: dict[tuple, dict] = {}      # key -> normal form of P (for P⁻¹ letters)
        self.shapes: dict[tuple, tuple] = {}        # letter -> (rows is 1, cols is 1)

    # ------------------------------------------------------------------------------ letters
    def letter(self, kind: str, key, t: bool, inv: bool, shape: tuple) -> tuple:
        L = (kind, key, t, inv)
        self.shapes[L] = shape
        return L

    def tletter(self, L: tuple) -> tuple:
        kind, key, t, inv = L
        r, c = self.shapes[L]
        if kind == "sym" and key in self.symmetric:
            return L
        if kind == "cinv":
            tp = self.transpose(self.compounds[key])
            tk = self._key(tp)
            self.compounds[tk] = tp
            return self._cinv(tk)
        out = (kind, key, not t, inv)
        self.shapes[out] = (c, r)
        return out

    # ------------------------------------------------------------------------------ polynomials
    @staticmethod
    def _key(p: dict) -> tuple:
        return tuple(sorted(((w, sp.srepr(c)) for w, c in p.items()), key=repr))

    def _cinv(self, key: tuple) -> tuple:
        L = ("cinv", key, False, True)
        self.shapes[L] = (False, False)
        return L

    def add(self, *ps: dict) -> dict:
        out: dict = {}
        for p in ps:
            for w, c in p.items():
                out[w] = out.get(w, 0) + c
        return {w: c for w, c in out.items() if sp.cancel(c) != 0}

    def mul(self, p: dict, q: dict) -> dict:
        self.work = getattr(self, "work", 0) + len(p) * len(q)
        if self.work > MAX_WORK or len(p) * len(q) > MAX_TERMS:
            raise RecursionError("free-algebra expansion too large")
        out: dict = {}
        for w1, c1 in p.items():
            for w2, c2 in q.items():
                for w, c in self.reduce_word(w1 + w2).items():
                    out[w] = out.get(w, 0) + c1 * c2 * c
        return {w: c for w, c in out.items() if sp.cancel(c) != 0}

    def scale(self, p: dict, s) -> dict:
        return {w: c * s for w, c in p.items()}

    def transpose(self, p: dict) -> dict:
        out: dict = {}
        for w, c in p.items():
            for u, k in self.reduce_word(tuple(self.tletter(L) for L in reversed(w))).items():
                out[u] = out.get(u, 0) + c * k
        return {w: c for w, c in out.items() if sp.cancel(c) != 0}

    # ------------------------------------------------------------------------------ rewriting
    def reduce_word(self, w: tuple) -> dict:
        """Normal form of one word: cancel ``XX⁻¹``, apply the compound-inverse rules; a ``{word: coeff}``."""
        for i in range(len(w) - 1):
            a, b = w[i], w[i + 1]
            if a[0] == b[0] == "sym" and a[1] == b[1] and a[2] == b[2] and a[3] != b[3]:
                return self._poly_word(w[:i] + w[i + 2:])
            for first, inv_left in ((a, True), (b, False)):
                if first[0] != "cinv" or not first[3]:
                    continue
                P = self.compounds[first[1]]
                lead = min(P, key=lambda v: (len(v) == 0, len(v), repr(v)))
                if not lead:
                    continue
                n = len(lead)
                if inv_left and w[i + 1:i + 1 + n] == lead:
                    rest = {v: -c / P[lead] for v, c in P.items() if v != lead}
                    new = self.add({(): 1 / P[lead]}, self.mul({(first,): 1}, rest)) if rest else {(): 1 / P[lead]}
                    return self._splice(w[:i], new, w[i + 1 + n:])
                if not inv_left and i + 1 - n >= 0 and w[i + 1 - n:i + 1] == lead:
                    rest = {v: -c / P[lead] for v, c in P.items() if v != lead}
                    new = self.add({(): 1 / P[lead]}, self.mul(rest, {(first,): 1})) if rest else {(): 1 / P[lead]}
                    return self._splice(w[:i + 1 - n], new, w[i + 2:])
        return {self._canon(w): sp.S.One}

    def _poly_word(self, w: tuple) -> dict:
        self.depth = getattr(self, "depth", 0) + 1
        if self.depth > 10_000:
            raise RecursionError("free-algebra rewriting does not terminate")
        return self.reduce_word(w)

    def _splice(self, left: tuple, mid: dict, right: tuple) -> dict:
        out: dict = {}
        for v, c in mid.items():
            for u, k in self._poly_word(left + v + right).items():
                out[u] = out.get(u, 0) + c * k
        return out

    def _canon(self, w: tuple) -> tuple:
        """A ``1×1`` word and its transpose are the same scalar: keep the smaller."""
        if not w or not (self.shapes[w[0]][0] and self.shapes[w[-1]][1]):
            return w
        tw = tuple(self.tletter(L) for L in reversed(w))
        return min(w, tw, key=repr)

    # ------------------------------------------------------------------------------ from SymPy
    def poly(self, e) -> dict:
        if isinstance(e, sp.MatrixSymbol):
            r, c = e.shape
            return {(self.letter("sym", e.name, False, False, (r == 1, c == 1)),): sp.S.One}
        if isinstance(e, sp.Identity):
            return {(): sp.S.One}
        if isinstance(e, sp.ZeroMatrix):
            return {}
        if isinstance(e, sp.MatAdd):
            return self.add(*[self.poly(a) for a in e.args])
        if isinstance(e, sp.MatMul):
            out = {(): sp.S.One}
            for a in e.args:
                out = self.mul(out, self.poly(a)) if getattr(a, "is_Matrix", False) else self.scale(out, a)
            return out
        if isinstance(e, sp.Transpose):
            return self.transpose(self.poly(e.arg))
        if isinstance(e, sp.Inverse) or (isinstance(e, sp.MatPow) and e.exp == -1):
            return self.inverse(self.poly(e.args[0]))
        if isinstance(e, sp.MatPow) and e.exp.is_Integer and e.exp > 0:
            out, base = {(): sp.S.One}, self.poly(e.base)
            for _ in range(int(e.exp)):
                out = self.mul(out, base)
            return out
        if getattr(e, "_free", None) is not None and e._free() is not None:
            return self.poly(e._free())       # a substitution (V = I): its result
        if getattr(e, "is_Matrix", False):
            if isinstance(e, sp.MatrixBase):
                raise TypeError("explicit matrices are not in the free algebra")
            key = sp.srepr(e)               # a matrix function (square root, ...): a letter of its own
            L = ("atom", key, False, False)
            self.shapes[L] = (e.shape[0] == 1, e.shape[1] == 1)
            return {(L,): sp.S.One}
        if isinstance(e, sp.Basic):
            return {(): e}
        raise TypeError(f"not a matrix expression: {type(e).__name__}")

    def inverse(self, p: dict) -> dict:
        if len(p) == 1:
            (w, c), = p.items()
            if all(L[0] == "sym" for L in w):     # (c X Y)⁻¹ = c⁻¹ Y⁻¹ X⁻¹
                inv = []
                for (k, n, t, i) in reversed(w):
                    inv.append(self.letter(k, n, t, not i, self.shapes[(k, n, t, i)]))
                return self.add({w2: c2 / c for w2, c2 in self.reduce_word(tuple(inv)).items()})
        key = self._key(p)
        self.compounds[key] = p
        return {(self._cinv(key),): sp.S.One}


def free_equal(lhs, rhs, symmetric: tuple = (), free_of: tuple = ()) -> bool:
    """True when ``lhs - rhs`` has normal form 0 (a proof for every ``d``); with ``free_of`` (names of matrix
    symbols, e.g. ``("y",)``), when every word of the difference that remains contains none of them (equal up
    to terms free of them).  False means *not proved*, never "false"."""
    alg = _Algebra(symmetric)
    try:
        diff = alg.add(alg.poly(lhs), alg.scale(alg.poly(rhs), -1))
    except (TypeError, RecursionError, AttributeError, ValueError):
        return False
    if free_of:
        diff = {w: c for w, c in diff.items() if any(L[0] == "sym" and L[1] in free_of for L in w)}
    return all(sp.cancel(c) == 0 for c in diff.values())
