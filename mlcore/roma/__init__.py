"""RoMA: post-train only the routers of an MoE model so that each sample's routing follows its
successful neighbours in a task-embedding space (Li, Li and Zhou, ICLR 2026).

:mod:`mlcore.roma.tasks` generates the multi-task set (task identity only implicit),
:mod:`mlcore.roma.model` the tiny MoE classifier with routers that expose their live weights,
:mod:`mlcore.roma.hf` the same interface over a Hugging Face MoE LM through :mod:`mlcore.hf`,
:mod:`mlcore.roma.roma` the method, its baselines (CE-only, C3PO-lite, the oracle) and metrics.
"""
