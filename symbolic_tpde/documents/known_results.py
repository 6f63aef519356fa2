"""The known results a derivation document states (the long-time theorems of :mod:`..registry.theorems`), each
with its provenance as the document can honestly give it (issue 31 item 7)."""

from __future__ import annotations

__all__ = ["PROVENANCE", "GROWTH_REASONS", "known_result"]


#: how each known result is established, as the document can honestly say it (issue 31 item 7): a proof given
#: in brief under "Why" (not re-checked by the document), or numerical evidence only -- never "a theorem,
#: proved in its source" when the source is the project's own notes
PROVENANCE = {
    "riccati": "proved by the argument under Why (the precision equation integrated)",
    "lyapunov": "proved by the one-line argument under Why; not re-checked in this document",
    "growth": "proved by the argument under Why and Gronwall's lemma; not re-checked in this document",
    "bures_wasserstein": "numerical evidence, not a proof",
}
#: the growth bound's reason for each kind (the shared reason explained Sinkhorn in every document)
GROWTH_REASONS = {
    "sinkhorn": r"Sinkhorn: $d\Sigma/dt = VC^{\top} + CV^{\top}$ with $\|C\| \leq \|\Sigma\|$ by Cauchy-Schwarz, "
                r"$C$ the cross-covariance of a coupling of $\mathcal{N}(\alpha, \Sigma)$ with itself",
    "l2": r"$\ell_2$: $J = V[(\Sigma^{-1} + P)^{-1}P]K^{+}Q$ with $P = \tfrac{2}{\tau}K^{\top}K \succ 0$ and "
          r"$\|(\Sigma^{-1} + P)^{-1}P\| \leq \kappa(K)$",
    "custom": r"custom kernels: $J = V\Lambda^{-1}B^{\top}$ with $\Lambda = \Sigma^{-1} - R - R^{\top} \succeq "
              r"-R - R^{\top} \succ 0$, so $\|J\| \leq \|V\|\|B\|/\lambda_{\min}(-R - R^{\top})$",
}


def known_result(t, kinds_: tuple, hypotheses: str, V_identity: bool = False) -> str:
    """A known result as a sentence with its provenance (:data:`PROVENANCE`) and, for the growth bound, the
    reason of the document's own kinds (:data:`GROWTH_REASONS`)."""
    how = PROVENANCE.get(t.name, "not checked in this document")
    if t.name == "riccati" and V_identity:
        how += "; its closed form is also checked in the steps above"
    reason = t.reason
    if t.name == "growth":
        reason = (r"each head's covariance velocity obeys $\|d\Sigma_h/dt\|_2 \leq 2L_h\|\Sigma\|_2$ ("
                  + "; ".join(GROWTH_REASONS[k] for k in dict.fromkeys(kinds_) if k in GROWTH_REASONS)
                  + "), then Gronwall's lemma")
    what = "Evidence" if t.name == "bures_wasserstein" else "Why"
    return (f"Known result ({how}): if {hypotheses}, then {t.statement}. {what}: {reason}. Source: "
            f"{t.source.replace('README', 'the project notes, README')}.")
