"""LD-MoLE: mixtures of LoRA experts on a frozen base model, with learnable dynamic routing.

Zhuang et al., "LD-MoLE: Learnable Dynamic Routing for Mixture of LoRA Experts" (ICLR 2026).
:mod:`mlcore.lora.tasks` generates the procedural data, :mod:`mlcore.lora.labelled` reads uploaded
labelled task files, :mod:`mlcore.lora.base` is the small frozen encoder, :mod:`mlcore.lora.hf` a
Hugging Face MoE LM as the frozen base, :mod:`mlcore.lora.mixture` the adapted projection and its
routings, :mod:`mlcore.lora.budget` the sizes that give every routing the same trainable parameters,
:mod:`mlcore.lora.pipeline` pre-training and fine-tuning. The router itself is
:mod:`mlcore.moe.sparsemax`.
"""
