"""Expert pruning and merging for Hugging Face MoE language models: MoNE and its baselines.

``calibrate`` streams calibration windows through the model once and keeps per-expert statistics
(:class:`mlcore.moe.ExpertStatistics`, fed by the adapter's ``capture_expert_outputs``); every
method then turns those statistics into a :class:`~mlcore.compress.plan.CompressionPlan`, which
``apply_plan`` carries out through the adapter (``remove_experts``, ``replace_with_novices``).
"""
