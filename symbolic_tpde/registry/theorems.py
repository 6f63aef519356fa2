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

__all__ = ["Theorem", "THEOREMS", "for_kinds", "hypotheses_for"]


@dataclass(frozen=True)
class Theorem:
    """``name`` (as ``analysis.theorems`` names its facts), the ``kinds`` whose heads it covers (a layer of
    heads all of these kinds), ``hypotheses`` (``(kind, words)`` pairs; kind ``""``: always stated),
    ``statement``, ``reason`` (the proof in brief) and ``source``."""

    name: str
    kinds: tuple
    hypotheses: tuple
    statement: str
    reason: str
    source: str


THEOREMS = (
    Theorem("riccati", ("softmax",),
            (("", r"softmax heads with $V^{(h)} = c_h I$, $c_h > 0$, constant weights, no feed-forward term"),),
            r"with $M = \sum_h c_h (A^{(h)} + A^{(h)\top})$ the covariance is $\Sigma(t) = (\Sigma_0^{-1} - tM)^{-1}$; "
            r"it blows up in finite time iff $M$ has a positive eigenvalue, at $T^{*} = 1/\lambda_{\max}"
            r"(\Sigma_0^{1/2} M \Sigma_0^{1/2})$; otherwise $\Sigma(t) \to \Sigma^{*} = U(U^{\top}\Sigma_0^{-1}U)^{-1}"
            r"U^{\top}$ ($U$ an orthonormal basis of $\ker M$) at rate $O(1/t)$, so $\operatorname{rank}\Sigma^{*} = "
            r"\dim\ker M$",
            r"$d\Sigma/dt = \Sigma M \Sigma$, so the precision obeys $d\Sigma^{-1}/dt = "
            r"-\Sigma^{-1}d\Sigma/dt\Sigma^{-1} = -M$ and moves on a straight line",
            "README Mathematics §3-4 (closed form checked symbolically by the V = I steps)"),
    Theorem("lyapunov", ("softmax",),
            (("", r"one softmax head, $V$ symmetric positive definite, $A + A^{\top} \preceq 0$, constant weights"),),
            r"no finite-time blow-up: $\operatorname{tr}(V^{-1}\Sigma(t)) \leq \operatorname{tr}(V^{-1}\Sigma_0)$, "
            r"and every limit $\Sigma^{*}$ has $\operatorname{rank}\Sigma^{*} \leq \dim\ker(A + A^{\top})$",
            r"$(d/dt)\operatorname{tr}(V^{-1}\Sigma) = \operatorname{tr}(\Sigma(A + A^{\top})\Sigma) \leq 0$",
            "README Mathematics §4"),
    Theorem("growth", ("l2", "sinkhorn", "custom"),
            (("l2", r"$\ell_2$ heads whose $K$ has full column rank ($L_h = \|V\|\,\kappa(K)\,\|K^{+}Q\|$, "
                    r"$\kappa$ the condition number, $K^{+}$ the pseudo-inverse)"),
             ("sinkhorn", r"Sinkhorn heads ($L_h = \|V\|$, for any $A$ and $\varepsilon$)"),
             ("custom", r"custom heads with $R + R^{\top} \prec 0$ ($L_h = \|V\|\|B\|/\lambda_{\min}(-R - "
                        r"R^{\top})$)"),
             ("", r"constant or layered weights (a feed-forward term adds $\|W\|$ to $L$)")),
            r"no finite-time blow-up: $\|\Sigma(t)\|_2 \leq \|\Sigma_0\|_2\, e^{2Lt}$ with $L = \sum_h L_h$",
            r"each head's covariance velocity obeys $\|d\Sigma_h/dt\|_2 \leq 2L_h\|\Sigma\|_2$ (Sinkhorn: "
            r"$d\Sigma/dt = VC^{\top} + CV^{\top}$ with $\|C\| \leq \|\Sigma\|$ by Cauchy-Schwarz, $C$ the "
            r"cross-covariance of a coupling of $\mathcal{N}(\alpha, \Sigma)$ with itself; $\ell_2$: $J = V[(\Sigma^{-1} "
            r"+ P)^{-1}P]K^{+}Q$ with $P = \tfrac{2}{\tau}K^{\top}K \succ 0$ and $\|(\Sigma^{-1} + P)^{-1}P\| \leq "
            r"\kappa(K)$), then Gronwall's lemma",
            "README Mathematics §4 (the long-time classifier checks these hypotheses on given weights)"),
    Theorem("bures_wasserstein", ("sinkhorn",),
            (("", r"one Sinkhorn head, $A$ symmetric, $V = A$, $\varepsilon = 1$"),),
            r"the covariance equation is the Bures-Wasserstein gradient flow $d\Sigma/dt = -2(\nabla F(\Sigma)"
            r"\Sigma + \Sigma\nabla F(\Sigma))$ of $F(\Sigma) = \tfrac{1}{2}\mathrm{OT}_{\varepsilon}(\mu, \mu)$ "
            r"restricted to $\mu = \mathcal{N}(\alpha, \Sigma)$",
            r"checked symbolically at $d = 1$ and at 50 digits for $d \geq 2$ (finite differences of $F$, the plan "
            r"recomputed at every perturbed $\Sigma$)",
            "README Mathematics §5"),
)


def for_kinds(kinds: tuple) -> tuple:
    """The theorems whose kinds cover every head of ``kinds``."""
    return tuple(t for t in THEOREMS if set(kinds) <= set(t.kinds))


def hypotheses_for(t: Theorem, kinds: tuple) -> str:
    """The hypotheses of ``t`` that concern ``kinds`` (and the general ones), as one phrase."""
    return "; ".join(w for k, w in t.hypotheses if not k or k in kinds)
