"""The long-time theorems on the Gaussian moment ODE, each stated once with its hypotheses, its reason and
its source (README Mathematics §4; Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322).

The derivation documents (``tpde derive --steps``) print the theorems whose kinds cover the document's heads
as *known results*, labelled as such: they are proved in the source named, not re-checked by the document.
The formulas are LaTeX between ``$`` marks (``symbolic.printing.words_tex`` typesets them, ``words_text``
reads them as Unicode).  The long-time classifier (``analysis.theorems``) checks the same hypotheses on
numeric weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import kinds as registry

__all__ = ["Theorem", "THEOREMS", "for_kinds", "hypotheses_for", "key_quadratic", "bilinear_only", "coupling"]


# -------------------------------------------------------- predicates on a kind's registry entry (never its name)
def bilinear_only(spec) -> bool:
    """Normalised, with a quadratic form that has no key-quadratic block (``R = 0`` structurally): softmax, a
    key-biased softmax, ...  A kind whose ``R`` is a free parameter (custom) meets ``R = 0`` only on given
    weights (``analysis.theorems`` checks the values)."""
    return spec.tilt and spec.preserves_gaussians and "R" not in _blocks(spec)


def key_quadratic(spec) -> bool:
    """Normalised, with a quadratic form that has a key-quadratic block ``R`` (ℓ2, custom)."""
    return spec.tilt and spec.preserves_gaussians and "R" in _blocks(spec)


def coupling(spec) -> bool:
    """The weights are a self-coupling of ``μ`` (Sinkhorn)."""
    return spec.coupling and spec.preserves_gaussians


def _blocks(spec) -> set:
    """The block names the kind's form gives, read by evaluating it at the kind's example parameters
    (:func:`~.kinds.draw_example`, d = 2; which blocks a form has does not depend on the values)."""
    if spec.quadratic is None:
        return set()
    import numpy as np

    rng = np.random.default_rng(0)
    dims = {"d": 2, "m": 2, "k": 2, "v": 2}
    form = spec.quadratic({p.name: registry.draw_example(p, dims, rng) for p in spec.params})
    return {k for k, v in form.items() if v is not None}


@dataclass(frozen=True)
class Theorem:
    """``name`` (as ``analysis.theorems`` names its facts), ``covers`` (a predicate on a kind's registry entry:
    the theorem speaks of a layer all of whose heads are of covered kinds), ``hypotheses`` (``(predicate,
    words)`` pairs, stated when a head's kind meets the predicate; ``None``: always stated), ``statement``,
    ``reason`` (the proof in brief) and ``source``."""

    name: str
    covers: Callable
    hypotheses: tuple
    statement: str
    reason: str
    source: str

    @property
    def kinds(self) -> tuple:
        """The registered kinds the theorem covers (read from their entries)."""
        return tuple(k for k in registry.kind_names() if self.covers(registry.get(k)))


THEOREMS = (
    Theorem("riccati", bilinear_only,
            ((None, r"normalised heads with $\log k = x^{\top}B^{(h)}y + r^{(h)\top}y$ (no key-quadratic part, "
                    r"$R = 0$; softmax: $B = A^{\top}$) and $V^{(h)} = c_h I$, $c_h > 0$, constant weights, no "
                    r"feed-forward term"),),
            r"with $M = \sum_h c_h (B^{(h)} + B^{(h)\top})$ (softmax: $\sum_h c_h(A^{(h)} + A^{(h)\top})$) the "
            r"covariance is $\Sigma(t) = (\Sigma_0^{-1} - tM)^{-1}$; "
            r"it blows up in finite time iff $M$ has a positive eigenvalue, at $T^{*} = 1/\lambda_{\max}"
            r"(\Sigma_0^{1/2} M \Sigma_0^{1/2})$; otherwise $\Sigma(t) \to \Sigma^{*} = U(U^{\top}\Sigma_0^{-1}U)^{-1}"
            r"U^{\top}$ ($U$ an orthonormal basis of $\ker M$) at rate $O(1/t)$, so $\operatorname{rank}\Sigma^{*} = "
            r"\dim\ker M$",
            r"$d\Sigma/dt = \Sigma M \Sigma$, so the precision obeys $d\Sigma^{-1}/dt = "
            r"-\Sigma^{-1}d\Sigma/dt\Sigma^{-1} = -M$ and moves on a straight line",
            "README Mathematics §3-4 (closed form checked symbolically by the V = I steps)"),
    Theorem("lyapunov", bilinear_only,
            ((None, r"one normalised head with $\log k = x^{\top}By + r^{\top}y$ ($R = 0$; softmax: $B = A^{\top}$), "
                    r"$V$ symmetric positive definite, $B + B^{\top} \preceq 0$, constant weights"),),
            r"no finite-time blow-up: $\operatorname{tr}(V^{-1}\Sigma(t)) \leq \operatorname{tr}(V^{-1}\Sigma_0)$, "
            r"and every limit $\Sigma^{*}$ has $\operatorname{rank}\Sigma^{*} \leq \dim\ker(B + B^{\top})$",
            r"$(d/dt)\operatorname{tr}(V^{-1}\Sigma) = \operatorname{tr}(\Sigma(B + B^{\top})\Sigma) \leq 0$",
            "README Mathematics §4"),
    Theorem("growth", lambda s: key_quadratic(s) or coupling(s),
            ((key_quadratic, r"normalised heads with $\log k = x^{\top}By + y^{\top}Ry + r^{\top}y + c(x)$ and "
                             r"$N = -(R + R^{\top}) \succ 0$ ($L_h = \|V\|\min(\|B\|/\lambda_{\min}(N),\ "
                             r"\kappa(N)^{1/2}\|N^{-1}B^{\top}\|)$; $\ell_2$: $N = \tfrac{2}{\tau}K^{\top}K$, i.e. "
                             r"$K$ of full column rank, and $N^{-1}B^{\top} = K^{+}Q$)"),
             (coupling, r"Sinkhorn heads, whose plan is a coupling of $\mu$ with itself ($L_h = \|V\|$, for any "
                        r"$A$ and $\varepsilon$)"),
             (None, r"constant or layered weights (a feed-forward term adds $\|W\|$ to $L$)")),
            r"no finite-time blow-up: $\|\Sigma(t)\|_2 \leq \|\Sigma_0\|_2\, e^{2Lt}$ with $L = \sum_h L_h$",
            r"each head's covariance velocity obeys $\|d\Sigma_h/dt\|_2 \leq 2L_h\|\Sigma\|_2$ (coupling: "
            r"$d\Sigma/dt = VC^{\top} + CV^{\top}$ with $\|C\| \leq \|\Sigma\|$ by Cauchy-Schwarz, $C$ the "
            r"cross-covariance of a coupling of $\mathcal{N}(\alpha, \Sigma)$ with itself; quadratic form: "
            r"$J = V(\Sigma^{-1} + N)^{-1}B^{\top}$ with $\|(\Sigma^{-1} + N)^{-1}\| \leq 1/\lambda_{\min}(N)$, and "
            r"$J = V[(\Sigma^{-1} + N)^{-1}N]N^{-1}B^{\top}$ with $\|(\Sigma^{-1} + N)^{-1}N\| \leq "
            r"\kappa(N)^{1/2}$), then Gronwall's lemma",
            "README Mathematics §4 (the long-time classifier checks these hypotheses on given weights)"),
    Theorem("bures_wasserstein", coupling,
            ((None, r"one Sinkhorn head, $A$ symmetric, $V = A$, $\varepsilon = 1$"),),
            r"the covariance equation is the Bures-Wasserstein gradient flow $d\Sigma/dt = -2(\nabla F(\Sigma)"
            r"\Sigma + \Sigma\nabla F(\Sigma))$ of $F(\Sigma) = \tfrac{1}{2}\mathrm{OT}_{\varepsilon}(\mu, \mu)$ "
            r"restricted to $\mu = \mathcal{N}(\alpha, \Sigma)$",
            r"checked symbolically at $d = 1$ and at 50 digits for $d \geq 2$ (finite differences of $F$, the plan "
            r"recomputed at every perturbed $\Sigma$)",
            "README Mathematics §5"),
)


def for_kinds(kinds: tuple) -> tuple:
    """The theorems that cover every head of ``kinds`` (predicates on their registry entries)."""
    specs = [registry.get(k) for k in kinds]
    return tuple(t for t in THEOREMS if specs and all(t.covers(s) for s in specs))


def hypotheses_for(t: Theorem, kinds: tuple) -> str:
    """The hypotheses of ``t`` that concern ``kinds`` (and the general ones), as one phrase."""
    specs = [registry.get(k) for k in kinds]
    return "; ".join(w for pred, w in t.hypotheses if pred is None or any(pred(s) for s in specs))
