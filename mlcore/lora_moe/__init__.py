"""LD-MoLE: mixtures of LoRA experts on a frozen base model, with learnable dynamic routing.

Zhuang et al., "LD-MoLE: Learnable Dynamic Routing for Mixture of LoRA Experts" (ICLR 2026).
:mod:`mlcore.lora_moe.tasks` generates the procedural data, :mod:`mlcore.lora_moe.labelled` reads uploaded
labelled task files, :mod:`mlcore.lora_moe.base` is the small frozen encoder, :mod:`mlcore.lora_moe.hf` a
Hugging Face MoE LM as the frozen base, :mod:`mlcore.lora_moe.mixture` the adapted projection and its
routings (with the HydraLoRA and MoLA baselines), :mod:`mlcore.lora_moe.budget` the sizes that give
every routing the same trainable parameters, :mod:`mlcore.lora_moe.pipeline` pre-training and
fine-tuning. The router itself is :mod:`mlcore.moe.sparsemax`.
"""
