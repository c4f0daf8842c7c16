"""The zoo's MoE language-model recipes: architecture, data mixture and schedule, all fixed.

A recipe is data, not code: ``python -m mlcore.zoo train NAME`` trains it with
:func:`mlcore.zoo.lm.train` and the same seed always gives the same checkpoint on the same
machine. Both models are real Hugging Face architectures built from a config, so the code that
serves them serves real checkpoints too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mlcore.data.registry import TEXT_SOURCES


@dataclass(frozen=True, kw_only=True)
class LMRecipe:
    name: str
    title: str
    #: ``qwen3_moe`` (Qwen3MoeForCausalLM) or ``olmoe`` (OlmoeForCausalLM).
    architecture: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_experts: int
    top_k: int
    expert_ffn: int
    context: int = 128
    vocab_size: int = 2048
    steps: int = 1000
    batch_size: int = 30
    lr: float = 2e-3
    warmup: int = 50
    weight_decay: float = 0.1
    #: Switch-style balance loss computed per layer and averaged; transformers' own aux loss pools
    #: expert usage over layers, which lets single layers keep dead experts (method card, section 4).
    balance_coef: float = 0.01
    seed: int = 0
    checkpoint_every: int = 100
    sources: tuple[str, ...] = field(default=TEXT_SOURCES)

    def common_config(self) -> dict[str, Any]:
        """The config arguments every Hugging Face MoE family here shares."""
        return dict(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_heads,
            max_position_embeddings=self.context,
            num_experts=self.num_experts,
            num_experts_per_tok=self.top_k,
            norm_topk_prob=True,
            # The recipe adds its own per-layer balance loss; the pooled built-in one stays off.
            router_aux_loss_coef=0.0,
            tie_word_embeddings=True,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=0,
        )

    def hf_config(self) -> Any:
        """The transformers config this recipe builds its model from."""
        common = self.common_config()
        if self.architecture == "qwen3_moe":
            from transformers import Qwen3MoeConfig

            return Qwen3MoeConfig(
                **common,
                intermediate_size=self.expert_ffn,
                moe_intermediate_size=self.expert_ffn,
                decoder_sparse_step=1,
            )
        if self.architecture == "olmoe":
            from transformers import OlmoeConfig

            return OlmoeConfig(**common, intermediate_size=self.expert_ffn)
        raise ValueError(f"unknown architecture {self.architecture!r}; use qwen3_moe or olmoe")

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "sources": list(self.sources)}

    def with_seed(self, seed: int) -> LMRecipe:
        """The same recipe under another training seed (model init and batch order; data unchanged)."""
        return replace(self, seed=seed)

    @property
    def run_name(self) -> str:
        """``NAME`` for the seed the committed checkpoint was trained with, ``NAME-sSEED`` otherwise,
        so runs under different seeds never share (and resume) each other's work directory."""
        return self.name if self.seed == RECIPES[self.name].seed else f"{self.name}-s{self.seed}"


RECIPES: dict[str, LMRecipe] = {
    recipe.name: recipe
    for recipe in (
        LMRecipe(
            name="moe-lm-tiny",
            title="Tiny Qwen3-MoE language model (16 experts, top-2)",
            architecture="qwen3_moe",
            hidden_size=128,
            num_layers=4,
            num_heads=4,
            num_experts=16,
            top_k=2,
            expert_ffn=256,
        ),
        LMRecipe(
            name="moe-lm-olmoe",
            title="Tiny OLMoE language model (32 experts, top-4, narrower)",
            architecture="olmoe",
            hidden_size=96,
            num_layers=4,
            num_heads=4,
            num_experts=32,
            top_k=4,
            expert_ffn=128,
            # Fewer steps than moe-lm-tiny: it is the robustness study's second model, trained after it on
            # the same shared CPU budget.
            steps=800,
        ),
    )
}


def get_recipe(name: str) -> LMRecipe:
    if name not in RECIPES:
        raise KeyError(f"no zoo recipe named {name!r}; known: {', '.join(RECIPES)}")
    return RECIPES[name]
