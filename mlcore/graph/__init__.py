"""MoE for graph OOD generalisation: diverse experts over causal subgraphs, a sparse entmax gate.

Sun et al., ICLR 2026 (OpenReview 4XVczusV2K; "DiSCO" in third-party summaries). Each expert
extracts its own candidate causal subgraph with a learned edge mask, a diversity loss keeps the
experts' masks apart (the paper's *coverage* term), and a gate assigns sparse per-graph weights by
α-entmax without environment labels (the *selection* term).

- :mod:`mlcore.graph.layers`: the GIN layer with edge weights, pooling, the Gumbel-sigmoid.
- :mod:`mlcore.graph.losses`: diversity, edge budget, gate and GSAT information losses.
- :mod:`mlcore.graph.models`: ERM, GSAT-lite, and the mixture (softmax or entmax gate).
- :mod:`mlcore.graph.pipeline`: batching, training, evaluation (accuracy, mask AUC, usage).
"""
