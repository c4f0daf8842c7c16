"""RoMA's subject interface over a Hugging Face MoE causal LM, through :mod:`mlcore.hf`'s adapter.

A labelled task is read as multiple choice (the way the paper scores MMLU or ARC): the prompt runs
through the LM and the class logits are the next-token logits of each class's first token at the
prompt's last position. The routing vector r is what RoMA needs (card, section 2): the **live**
router probabilities softmax(u) of that last token in the chosen MoE layers, taken from a forward
hook on each router module (transformers 5.x routers return ``(logits, weights, indices)``), so the
manifold regulariser has a gradient on the router weights. The same hook replaces the last
token's routing when C3PO-lite or the oracle sets it: its logits become log p, and the top-k
decision is recomputed with the architecture's own rule (:mod:`mlcore.hf.routing`).

Only softmax routers are supported (Mixtral, Qwen2/3-MoE, OLMoE, DeepSeek-V2): r is a probability
vector there. Hook state lives on the router modules, so a deep copy of the model carries it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from mlcore.hf import routing as hf_routing
from mlcore.hf.architectures import HFModelError
from mlcore.roma.tasks import TextTaskSet

_STATE = "moelab_roma"  # the router attribute holding {"probs", "rows", "override"}
_HOOKED = "moelab_roma_hook"


def _router_hook(router: nn.Module, args: Any, output: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, ...] | None:
    state = getattr(router, _STATE)
    logits, weights, indices = output
    changed = False
    if state.get("override") is not None and state.get("rows") is not None:
        replacement = state["override"].to(logits.device, torch.float32)
        logits = logits.float().index_put((state["rows"],), torch.log(replacement.clamp_min(1e-20)))
        masked = hf_routing.router_mask(router)
        masked = torch.zeros(logits.shape[-1], dtype=torch.bool) if masked is None else masked
        new_weights, indices = state["rule"](router, logits, masked.to(logits.device))
        logits, weights, changed = logits.to(output[0].dtype), new_weights.to(weights.dtype), True
    state["probs"] = torch.softmax(logits.float(), dim=-1)
    return (logits, weights, indices) if changed else None


class HFRoutedLM:
    """An adapted HF MoE causal LM that classifies ``TextTaskSet`` prompts and exposes live routing."""

    def __init__(self, model: nn.Module, tokenizer: Any, classes: tuple[str, ...]) -> None:
        from mlcore.hf import adapt

        self.model, self.tokenizer, self.classes = model, tokenizer, classes
        self.adapter = adapt(model)
        rule = hf_routing.SELECTION_RULES.get(self.adapter.spec.router_rule)
        if rule is None:
            raise HFModelError(
                f"router-align needs a softmax router (Mixtral, Qwen2/3-MoE, OLMoE, DeepSeek-V2); "
                f"{self.adapter.spec.title} routes with {self.adapter.spec.router_rule}."
            )
        self.answer_ids = self._answer_ids(classes)
        for info in self.adapter.layers:
            if getattr(info.router, _HOOKED, False):
                continue
            setattr(info.router, _STATE, {"rule": rule})
            info.router.register_forward_hook(_router_hook)
            setattr(info.router, _HOOKED, True)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids)

    def _answer_ids(self, classes: tuple[str, ...]) -> Tensor:
        first: dict[int, str] = {}
        for label in classes:
            ids = self._encode(label)
            if not ids:
                raise HFModelError(f"The label {label!r} encodes to no token; use a visible label.")
            if ids[0] in first:
                raise HFModelError(
                    f"The labels {first[ids[0]]!r} and {label!r} start with the same token, so the model cannot tell "
                    "them apart; use labels that start differently (e.g. A, B, C)."
                )
            first[ids[0]] = label
        return torch.tensor(list(first), dtype=torch.long)

    # -- the subject interface (see mlcore.roma.roma) ---------------------------------------
    @property
    def num_moe_layers(self) -> int:
        return len(self.adapter.layers)

    def num_experts(self, layer: int) -> int:
        return self.adapter.layers[layer].num_experts

    def _batch(self, data: TextTaskSet) -> tuple[Tensor, Tensor, Tensor]:
        """Right-padded ids, attention mask and each row's last real position (causal attention
        means the padding after it changes nothing before it)."""
        encoded = [self._encode(p) for p in data.prompts]
        limit = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)
        longest = max(len(e) for e in encoded)
        if min(len(e) for e in encoded) == 0:
            raise ValueError("a prompt encodes to no token")
        if limit and longest > limit:
            raise ValueError(f"a prompt has {longest} tokens, more than the model's context of {limit}")
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        device = next(self.model.parameters()).device
        ids = torch.full((len(encoded), longest), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, e in enumerate(encoded):
            ids[i, : len(e)] = torch.tensor(e)
            mask[i, : len(e)] = 1
        last = torch.tensor([len(e) - 1 for e in encoded])
        return ids.to(device), mask.to(device), last

    def classify(self, data: TextTaskSet, override: dict[int, Tensor] | None = None) -> Tensor:
        """Class logits [B, C]; ``override`` maps a MoE-layer position to last-token routing
        probabilities [B, E] that replace that layer's router output."""
        ids, mask, last = self._batch(data)
        rows = torch.arange(len(last)) * ids.shape[1] + last
        for position, info in enumerate(self.adapter.layers):
            state = getattr(info.router, _STATE)
            state["rows"] = rows.to(ids.device)
            state["override"] = override.get(position) if override else None
        try:
            logits = self.model(input_ids=ids, attention_mask=mask).logits
        finally:
            for info in self.adapter.layers:
                getattr(info.router, _STATE)["override"] = None
        picked = logits[torch.arange(len(last)), last.to(logits.device)]
        return picked[:, self.answer_ids.to(picked.device)].float()

    def last_token_probs(self, layers: list[int], batch: int) -> Tensor:
        parts = []
        for position in layers:
            state = getattr(self.adapter.layers[position].router, _STATE)
            assert state.get("probs") is not None, "run a forward pass first"
            parts.append(state["probs"][state["rows"]])
        return torch.cat(parts, dim=-1).cpu()

    def hidden_mean(self, data: TextTaskSet) -> Tensor:
        ids, mask, _ = self._batch(data)
        hidden = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1]
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return ((hidden * weights).sum(1) / weights.sum(1)).float().cpu()

    def router_parameters(self, layers: list[int]) -> list[nn.Parameter]:
        """Freeze everything, then unfreeze only the router weights of ``layers``."""
        self.model.requires_grad_(False)
        params = [self.adapter.layers[i].router.weight for i in layers]
        for p in params:
            p.requires_grad_(True)
        return params

    def router_probs(self) -> list[tuple[Tensor, int]]:
        """(probabilities [T, E] of the last forward, top-k) per MoE layer, live, for balance losses.
        Rows of right padding are included (a few per batch; harmless for a balance loss)."""
        return [(getattr(info.router, _STATE)["probs"], info.top_k) for info in self.adapter.layers]

    def parameters(self) -> Any:
        return self.model.parameters()

    def train(self) -> None:
        self.model.train()

    def eval(self) -> HFRoutedLM:
        self.model.eval()
        return self

    def clone(self) -> HFRoutedLM:
        for info in self.adapter.layers:
            state = getattr(info.router, _STATE)
            state["probs"] = state["rows"] = state["override"] = None
        return HFRoutedLM(copy.deepcopy(self.model), self.tokenizer, self.classes)

    def save(self, folder: Path) -> None:
        """A loadable checkpoint (``mlcore.hf.load_model``) with the tuned routers and the tokenizer."""
        self.adapter.save(folder)
        self.tokenizer.save_pretrained(folder)


def pretrain_lm(
    tokenizer: Any,
    *,
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    hidden: int = 64,
    layers: int = 4,
    experts: int = 8,
    on_step: Any = None,
) -> HFRoutedLM:
    """A small Qwen3-MoE causal LM (``layers`` MoE layers of ``experts`` experts, top-2) trained
    from scratch on the built-in multi-task prompts, answering with the digit tokens: the Hugging
    Face counterpart of :func:`mlcore.roma.roma.pretrain_moe`, for benchmarks and tests."""
    from transformers import AutoModelForCausalLM

    from mlcore.hf import tiny_config
    from mlcore.roma.roma import pretrain
    from mlcore.roma.tasks import DIGIT_CLASSES

    config = tiny_config(
        "qwen3_moe",
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        moe_intermediate_size=hidden,
        num_experts=experts,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id or 0,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    subject = HFRoutedLM(model, tokenizer, DIGIT_CLASSES)
    pretrain(
        subject,
        model.parameters(),
        text=True,
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        balance_weight=0.01,
        on_step=on_step,
    )
    return subject
